// Fuzzes CreateVariable's validation: each record of the input is parsed as
// a CreateVariableRequest (wire bytes, as the service receives them) and
// passed to VariableStore::Create, so that repeated and conflicting names
// are reached too. Invariants: a created variable is found under its name,
// holds byte_size() bytes, creating it again reports "already exists,
// identical", and its own checkpoint entry rebuilds it.
#include <cstddef>
#include <cstdint>

#include "server/variable_store.h"
#include "strata/v1/parameter_server.pb.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/quiet_protobuf.h"
#include "tests/fuzz/ps_fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::QuietProtobuf();
  using namespace strata;
  fuzz::FuzzInput in(data, size);
  VariableStoreOptions options;
  options.max_variable_bytes = fuzz::kFuzzMaxVariableBytes;
  VariableStore store(options);
  while (!in.empty()) {
    v1::CreateVariableRequest req;
    if (!req.ParseFromString(in.Record())) continue;
    absl::StatusOr<bool> created = store.Create(req.spec());
    FUZZ_TRACE("create '%s': %s", req.spec().name().c_str(),
               created.ok() ? (*created ? "created" : "exists")
                            : created.status().ToString().c_str());
    if (!created.ok() || !*created) continue;
    const std::string& name = req.spec().name();
    absl::StatusOr<std::shared_ptr<Variable>> v = store.Get(name);
    FUZZ_CHECK(v.ok(), v.status().ToString());
    VariableSnapshot snap = (*v)->Snapshot();
    FUZZ_CHECK(snap.value != nullptr && snap.value->size() == (*v)->byte_size(),
               "snapshot size");
    absl::StatusOr<bool> again = store.Create(req.spec());
    FUZZ_CHECK(again.ok() && !*again, "re-create: " + again.status().ToString());
    absl::StatusOr<std::shared_ptr<Variable>> rebuilt = Variable::FromCheckpoint(
        (*v)->ToCheckpoint(), fuzz::kFuzzMaxVariableBytes);
    FUZZ_CHECK(rebuilt.ok(), "from its own checkpoint entry: " +
                                 rebuilt.status().ToString());
    FUZZ_CHECK((*rebuilt)->byte_size() == (*v)->byte_size(), "rebuilt size");
  }
  return 0;
}

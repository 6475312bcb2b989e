// Fuzzes the write handlers' validation and application (Push, Assign,
// PushVariables) over the fixture store, as ParameterServiceImpl runs them:
// parse the header from wire bytes, look the variable up, validate, refuse
// a payload above the server limit, then apply the payload. Each input is a
// sequence of operations, so sync accumulation, exactly-once windows and
// staleness clocks see many pushes:
//   op byte % 3: 0 Push, 1 Assign, 2 PushVariables;
//   then a record with the header, then a record with the payload.
// The stream framing (chunks, offsets, sizes) is the chunk_codec target's
// and the service tests'; here the payload record is cut or zero-padded to
// the size the validated header announced.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/requests.h"
#include "server/variable_store.h"
#include "strata/v1/parameter_server.pb.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/quiet_protobuf.h"
#include "tests/fuzz/ps_fixture.h"

namespace {

using namespace strata;

// The service's payload limit check, made before any payload is received.
bool WithinLimit(uint64_t payload_bytes, const VariableStore& store) {
  return payload_bytes <= store.options().max_variable_bytes;
}

void Push(VariableStore* store, const std::string& header_bytes,
          std::string payload) {
  v1::PushHeader header;
  if (!header.ParseFromString(header_bytes)) return;
  absl::StatusOr<std::shared_ptr<Variable>> v = store->Get(header.name());
  if (!v.ok()) return;
  absl::StatusOr<uint64_t> bytes = ValidatePushHeader(header, **v);
  FUZZ_TRACE("push '%s' header: %s", header.name().c_str(),
             bytes.status().ToString().c_str());
  if (!bytes.ok() || !WithinLimit(*bytes, *store)) return;
  payload.resize(*bytes);
  const int64_t before = (*v)->version();
  absl::StatusOr<PushOutcome> outcome =
      ApplyPush(header, v->get(), payload.data(), payload.size());
  FUZZ_TRACE("push '%s': %s", header.name().c_str(),
             outcome.status().ToString().c_str());
  if (!outcome.ok()) {
    FUZZ_CHECK((*v)->version() == before,
               "a refused push changed the version: " +
                   outcome.status().ToString());
    return;
  }
  store->RecordPush(*outcome, static_cast<int64_t>(payload.size()));
  FUZZ_CHECK(!(outcome->duplicate && outcome->applied),
             "a duplicate push was applied");
  FUZZ_CHECK(outcome->version >= before, "version went back");
}

void Assign(VariableStore* store, const std::string& header_bytes,
            std::string payload) {
  v1::AssignHeader header;
  if (!header.ParseFromString(header_bytes)) return;
  absl::StatusOr<std::shared_ptr<Variable>> v = store->Get(header.name());
  if (!v.ok()) return;
  absl::StatusOr<uint64_t> bytes = ValidateAssignHeader(header, **v);
  FUZZ_TRACE("assign '%s' header: %s", header.name().c_str(),
             bytes.status().ToString().c_str());
  if (!bytes.ok() || !WithinLimit(*bytes, *store)) return;
  payload.resize(*bytes);
  absl::StatusOr<int64_t> version = (*v)->Assign(payload.data(), payload.size());
  FUZZ_TRACE("assign '%s': %s", header.name().c_str(),
             version.status().ToString().c_str());
}

void PushVariables(VariableStore* store, const std::string& header_bytes,
                   std::string payload) {
  v1::PushVariablesHeader header;
  if (!header.ParseFromString(header_bytes)) return;
  uint64_t bytes = 0;
  auto variables = ValidatePushVariablesHeader(header, *store, &bytes);
  FUZZ_TRACE("push_variables header: %s",
             variables.status().ToString().c_str());
  if (!variables.ok() || !WithinLimit(bytes, *store)) return;
  payload.resize(bytes);
  absl::StatusOr<v1::PushVariablesResponse> resp = ApplyPushVariables(
      header, *variables, payload.data(), payload.size(), store);
  FUZZ_TRACE("push_variables: %s", resp.status().ToString().c_str());
  if (resp.ok()) {
    FUZZ_CHECK(resp->results_size() == header.variables_size(),
               "one result per variable");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::QuietProtobuf();
  fuzz::FuzzInput in(data, size);
  std::unique_ptr<VariableStore> store = fuzz::MakeFixtureStore();
  while (!in.empty()) {
    const uint8_t op = in.Byte() % 3;
    std::string header = in.Record();
    std::string payload = in.Record();
    switch (op) {
      case 0:
        Push(store.get(), header, std::move(payload));
        break;
      case 1:
        Assign(store.get(), header, std::move(payload));
        break;
      default:
        PushVariables(store.get(), header, std::move(payload));
        break;
    }
  }
  return 0;
}

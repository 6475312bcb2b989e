// Fuzzes Save and Restore requests: each record is parsed as a SaveRequest
// or RestoreRequest (wire bytes) and run against a fixture store whose
// --checkpoint-dir is in a scratch directory, after pushes that leave
// optimizer slots, exactly-once windows, staleness clocks and a pending
// sync step to save. A checkpoint "base" is saved first, so restores of
// real checkpoints are reached too.
//   op byte % 2: 0 Save, 1 Restore; then a record with the request.
// The harness runs only requests whose resolved path lies inside its
// scratch directory (the server accepts any absolute path; the fuzzer must
// not write over the machine). Invariants: a successful save restores,
// with the same number of variables, and values that read back equal.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "server/variable_store.h"
#include "strata/v1/parameter_server.pb.h"
#include "tests/fuzz/fuzz_sandbox.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/quiet_protobuf.h"
#include "tests/fuzz/ps_fixture.h"

namespace {

using namespace strata;

void Push(VariableStore* store, const std::string& name, int64_t worker,
          int64_t step) {
  std::shared_ptr<Variable> v = *store->Get(name);
  std::string grad(v->byte_size(), '\0');
  PushMeta meta{"fuzz", worker, step, 0};
  absl::StatusOr<PushOutcome> out = v->PushDense(meta, grad.data(), grad.size());
  FUZZ_CHECK(out.ok(), "fixture push to " + name + ": " + out.status().ToString());
}

void Save(VariableStore* store, const std::string& path) {
  const int64_t before = static_cast<int64_t>(store->List().size());
  absl::StatusOr<SaveResult> saved = store->Save(path);
  FUZZ_TRACE("save '%s': %s", path.c_str(), saved.status().ToString().c_str());
  if (!saved.ok()) return;
  FUZZ_CHECK(saved->num_variables == before, "saved variable count");
  std::shared_ptr<const Buffer> dense = (*store->Get("dense"))->Snapshot().value;
  absl::StatusOr<int64_t> restored = store->Restore(path);
  FUZZ_CHECK(restored.ok(), "restore of a checkpoint just saved at '" + path +
                                "': " + restored.status().ToString());
  FUZZ_CHECK(*restored == before, "restored variable count");
  std::shared_ptr<const Buffer> back = (*store->Get("dense"))->Snapshot().value;
  FUZZ_CHECK(back->size() == dense->size() &&
                 std::memcmp(back->data(), dense->data(), dense->size()) == 0,
             "restored value differs from the saved one");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::QuietProtobuf();
  const fuzz::Sandbox& sandbox = fuzz::GetSandbox();
  sandbox.Clear();
  const std::string dir = sandbox.path() + "/ckpt";
  std::unique_ptr<VariableStore> store = fuzz::MakeFixtureStore(dir);
  Push(store.get(), "dense", 0, 0);
  Push(store.get(), "adam", 0, 0);
  Push(store.get(), "stale", 1, 3);
  Push(store.get(), "sync", 0, 0);  // step 0 waits for replica 1
  absl::StatusOr<SaveResult> base = store->Save("base");
  FUZZ_CHECK(base.ok(), "save base: " + base.status().ToString());

  fuzz::FuzzInput in(data, size);
  while (!in.empty()) {
    const uint8_t op = in.Byte() % 2;
    std::string bytes = in.Record();
    std::string path;
    if (op == 0) {
      v1::SaveRequest req;
      if (!req.ParseFromString(bytes)) continue;
      path = req.path();
    } else {
      v1::RestoreRequest req;
      if (!req.ParseFromString(bytes)) continue;
      path = req.path();
    }
    absl::StatusOr<std::string> resolved = store->ResolvePath(path);
    if (resolved.ok() && !sandbox.Contains(*resolved)) continue;
    if (op == 0) {
      Save(store.get(), path);
    } else {
      absl::StatusOr<int64_t> restored = store->Restore(path);
      FUZZ_TRACE("restore '%s': %s", path.c_str(),
                 restored.status().ToString().c_str());
    }
  }
  return 0;
}

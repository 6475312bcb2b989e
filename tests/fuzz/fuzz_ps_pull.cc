// Fuzzes the read handlers' validation (Pull, PullVariables) over the
// fixture store after one push to each dense variable, as
// ParameterServiceImpl runs them: parse the request from wire bytes, look
// the variables up, check the wait conditions, then either read (whole
// value or rows) or register a waiter and expire it.
//   op byte % 2: 0 Pull, 1 PullVariables; then a record with the request.
// Invariants: the header describes exactly the bytes streamed; a pull's
// payload stays within the server's byte limit; a waiter fires once.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "server/requests.h"
#include "server/variable_store.h"
#include "strata/v1/parameter_server.pb.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/quiet_protobuf.h"
#include "tests/fuzz/ps_fixture.h"

namespace {

using namespace strata;

void PushOnce(VariableStore* store, const std::string& name) {
  std::shared_ptr<Variable> v = *store->Get(name);
  std::string grad(v->byte_size(), '\0');
  PushMeta meta{"fuzz", 0, 0, 0};
  absl::StatusOr<PushOutcome> out = v->PushDense(meta, grad.data(), grad.size());
  FUZZ_CHECK(out.ok(), "fixture push to " + name + ": " + out.status().ToString());
}

// Registers a waiter that is not ready and expires it: it must fire once,
// with the expiry's status.
void WaitAndExpire(Variable* v, int64_t min_version, int64_t clock) {
  (void)v->WaitDescription(min_version, clock);
  int calls = 0;
  absl::Status got;
  int64_t id = v->WaitForPull(min_version, clock, [&](absl::Status s) {
    ++calls;
    got = s;
  });
  if (id == 0) {
    FUZZ_CHECK(calls == 1 && got.ok(), "a ready waiter runs at once");
    return;
  }
  v->ExpireWaiter(id, absl::AbortedError("expired"));
  FUZZ_CHECK(calls == 1 && absl::IsAborted(got), "an expired waiter fires once");
  v->ExpireWaiter(id, absl::AbortedError("again"));
  FUZZ_CHECK(calls == 1, "a waiter fires only once");
}

void Pull(VariableStore* store, const std::string& bytes) {
  v1::PullRequest req;
  if (!req.ParseFromString(bytes)) return;
  absl::StatusOr<std::shared_ptr<Variable>> v = store->Get(req.name());
  if (!v.ok() || !ValidatePullRequest(req).ok()) return;
  FUZZ_TRACE("pull '%s' ready: %d", req.name().c_str(),
             (*v)->PullReady(req.min_version(), req.clock()));
  if (!(*v)->PullReady(req.min_version(), req.clock())) {
    WaitAndExpire(v->get(), req.min_version(), req.clock());
    return;
  }
  absl::StatusOr<VariableSnapshot> snap =
      ReadPull(req, **v, store->options().max_variable_bytes);
  FUZZ_TRACE("pull '%s': %s", req.name().c_str(),
             snap.status().ToString().c_str());
  if (!snap.ok()) return;
  v1::PullHeader header = MakePullHeader(*snap);
  const uint64_t expected = static_cast<uint64_t>(NumElements(snap->shape)) *
                            DTypeSize(snap->dtype);
  FUZZ_CHECK(static_cast<uint64_t>(header.payload_bytes()) == expected &&
                 snap->value->size() == expected,
             "pull header and payload disagree");
  FUZZ_CHECK(snap->value->size() <= store->options().max_variable_bytes,
             "pull payload of " + std::to_string(snap->value->size()) +
                 " bytes is above the server's limit");
  if (req.rows()) {
    FUZZ_CHECK(snap->shape.size() == 2 &&
                   snap->shape[0] == static_cast<int64_t>(req.row_ids_size()),
               "row pull shape");
  }
}

void PullVariables(VariableStore* store, const std::string& bytes) {
  v1::PullVariablesRequest req;
  if (!req.ParseFromString(bytes)) return;
  if (!ValidatePullVariablesRequest(req).ok()) return;
  std::vector<std::shared_ptr<Variable>> variables;
  for (const std::string& name : req.names()) {
    absl::StatusOr<std::shared_ptr<Variable>> v = store->Get(name);
    if (!v.ok()) return;
    variables.push_back(*v);
  }
  for (const auto& v : variables) {
    if (!v->PullReady(req.min_version(), req.clock())) {
      WaitAndExpire(v.get(), req.min_version(), req.clock());
      return;
    }
  }
  FUZZ_TRACE("pull_variables: %d variables ready", req.names_size());
  std::vector<std::shared_ptr<const Buffer>> buffers;
  v1::PullVariablesHeader header = MakePullVariablesPayload(variables, &buffers);
  FUZZ_CHECK(buffers.size() == variables.size() &&
                 header.variables_size() == req.names_size(),
             "one slot per variable");
  int64_t total = 0;
  for (const auto& b : buffers) total += static_cast<int64_t>(b->size());
  FUZZ_CHECK(header.payload_bytes() == total, "payload_bytes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::QuietProtobuf();
  fuzz::FuzzInput in(data, size);
  std::unique_ptr<VariableStore> store = fuzz::MakeFixtureStore();
  for (const char* name : {"dense", "adam", "emb", "stale"}) {
    PushOnce(store.get(), name);
  }
  while (!in.empty()) {
    const uint8_t op = in.Byte() % 2;
    std::string request = in.Record();
    if (op == 0) {
      Pull(store.get(), request);
    } else {
      PullVariables(store.get(), request);
    }
  }
  return 0;
}

// ParameterStore::StartPush and PushSession (server/push_session.h): the
// one entry point of a push. The checks run in the documented order (owner,
// header, payload limit), a push fed in pieces applies as one fed whole,
// a bad value in any piece changes nothing, and every applied gradient is
// counted with the bytes it took on the wire.
#include "server/push_session.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rpc/auth.h"
#include "server/variable_store.h"
#include "tests/test_util.h"

namespace strata {
namespace {

v1::VariableSpec SgdSpec(const std::string& name, int64_t n) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(n);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(1.0);
  spec.mutable_update_mode()->set_kind(v1::UpdateMode::ASYNC);
  return spec;
}

void AddSlot(v1::PushVariablesHeader* h, const std::string& name, int64_t n) {
  v1::VariableSlot* s = h->add_variables();
  s->set_name(name);
  s->set_dtype(v1::DT_FLOAT32);
  s->add_shape(n);
  s->set_bytes(n * 4);
  h->set_payload_bytes(h->payload_bytes() + n * 4);
}

std::vector<float> Value(const ParameterStore& store, const std::string& name) {
  absl::StatusOr<std::shared_ptr<Variable>> v = store.Get(name);
  EXPECT_TRUE(v.ok()) << v.status();
  VariableSnapshot snap = (*v)->Snapshot();
  std::vector<float> out(snap.value->size() / 4);
  std::memcpy(out.data(), snap.value->data(), snap.value->size());
  return out;
}

class PushSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VariableStoreOptions options;
    options.max_variable_bytes = 64;  // 16 floats
    store_ = std::make_unique<VariableStore>(options);
    const Caller a{"job-a", Role::kCoordinator};
    const Caller b{"job-b", Role::kCoordinator};
    STRATA_ASSERT_OK(store_->Create(SgdSpec("a0", 3), a));
    STRATA_ASSERT_OK(store_->Create(SgdSpec("a1", 5), a));
    STRATA_ASSERT_OK(store_->Create(SgdSpec("a_big", 16), a));
    STRATA_ASSERT_OK(store_->Create(SgdSpec("b0", 3), b));
  }
  std::unique_ptr<VariableStore> store_;
  const std::optional<Caller> worker_a_ = Caller{"job-a", Role::kWorker};
};

TEST_F(PushSessionTest, ChecksOwnerThenHeaderThenLimit) {
  // Another job's variable is refused before a later unknown one is found.
  v1::PushVariablesHeader h;
  AddSlot(&h, "b0", 3);
  AddSlot(&h, "nope", 3);
  auto s = store_->StartPush(h, worker_a_);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied)
      << s.status();
  // An unknown variable.
  v1::PushVariablesHeader unknown;
  AddSlot(&unknown, "a0", 3);
  AddSlot(&unknown, "nope", 3);
  s = store_->StartPush(unknown, worker_a_);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound) << s.status();
  // A shape that does not match names the variable.
  v1::PushVariablesHeader shape;
  AddSlot(&shape, "a1", 4);
  s = store_->StartPush(shape, worker_a_);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.status().message()).find("'a1'"), std::string::npos)
      << s.status();
  // Each variable fits, the two together are above the 64-byte limit.
  v1::PushVariablesHeader big;
  AddSlot(&big, "a_big", 16);
  AddSlot(&big, "a0", 3);
  s = store_->StartPush(big, worker_a_);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(s.status().message())
                .find("PushVariables of variable 'a_big': payload of 76 "
                      "bytes is above the server limit of 64"),
            std::string::npos)
      << s.status();
  // A server without credentials lets anyone push.
  v1::PushVariablesHeader ok;
  AddSlot(&ok, "b0", 3);
  s = store_->StartPush(ok, std::nullopt);
  STRATA_ASSERT_OK(s);
  EXPECT_EQ((*s)->payload_bytes(), 12u);
}

TEST_F(PushSessionTest, PiecesApplyAsTheWholeAndAreCounted) {
  v1::PushVariablesHeader h;
  AddSlot(&h, "a0", 3);
  AddSlot(&h, "a1", 5);
  std::vector<float> grads = {1, 2, 3, 4, 5, 6, 7, 8};
  auto push = store_->StartPush(h, worker_a_);
  STRATA_ASSERT_OK(push);
  std::vector<char> payload(32);
  (*push)->Attach(payload.data());
  // Bytes arrive 5 at a time (pieces that split floats).
  const char* src = reinterpret_cast<const char*>(grads.data());
  for (size_t at = 0; at < payload.size(); at += 5) {
    const size_t n = std::min<size_t>(5, payload.size() - at);
    std::memcpy(payload.data() + at, src + at, n);
    STRATA_ASSERT_OK((*push)->Receive(at + n));
  }
  absl::StatusOr<v1::PushVariablesResponse> r = (*push)->Finish();
  STRATA_ASSERT_OK(r);
  ASSERT_EQ(r->results_size(), 2);
  EXPECT_EQ(r->results(0).version(), 1);
  EXPECT_TRUE(r->results(1).applied());
  // SGD at learning rate 1 from zeros: the negated gradient.
  EXPECT_EQ(Value(*store_, "a0"), (std::vector<float>{-1, -2, -3}));
  EXPECT_EQ(Value(*store_, "a1"), (std::vector<float>{-4, -5, -6, -7, -8}));
  const StoreStats stats = store_->Stats();
  EXPECT_EQ(stats.pushes_applied, 2);
  EXPECT_EQ(stats.bytes_pushed, 32);
}

TEST_F(PushSessionTest, ANonFiniteValueInAnyPieceChangesNothing) {
  v1::PushVariablesHeader h;
  AddSlot(&h, "a0", 3);
  AddSlot(&h, "a1", 5);
  std::vector<float> grads = {1, 2, 3, 4, 5, 6,
                              std::numeric_limits<float>::quiet_NaN(), 8};
  auto push = store_->StartPush(h, worker_a_);
  STRATA_ASSERT_OK(push);
  (*push)->Attach(reinterpret_cast<const char*>(grads.data()));
  // The first variable's bytes are fine.
  STRATA_ASSERT_OK((*push)->Receive(12));
  absl::Status bad = (*push)->Receive(32);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.message()).find("'a1'"), std::string::npos) << bad;
  // Final: Finish gives the same error and applies nothing.
  absl::StatusOr<v1::PushVariablesResponse> r = (*push)->Finish();
  EXPECT_EQ(r.status(), bad);
  EXPECT_EQ(Value(*store_, "a0"), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(Value(*store_, "a1"), (std::vector<float>(5, 0)));
  EXPECT_EQ(store_->Stats().pushes_applied, 0);
}

}  // namespace
}  // namespace strata

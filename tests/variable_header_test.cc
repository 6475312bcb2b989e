// The contracts server/variable.h states for Variable: the exactly-once
// window (what is remembered, when, and for how long), the SYNC steps held
// out of a checkpoint, the spec a restored variable keeps, the version an
// assignment returns, and the waiter ids of WaitForPull.
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "server/variable.h"
#include "tests/test_util.h"

namespace strata {
namespace {

constexpr uint64_t kMaxBytes = uint64_t{1} << 20;

v1::VariableSpec Spec(v1::UpdateMode::Kind mode, int replicas,
                      int64_t n = 2) {
  v1::VariableSpec spec;
  spec.set_name("w");
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(n);
  spec.mutable_initializer()->set_type("constant");
  spec.mutable_initializer()->set_value(3);
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(1.0);
  spec.mutable_update_mode()->set_kind(mode);
  spec.mutable_update_mode()->set_num_replicas(replicas);
  return spec;
}

std::shared_ptr<Variable> Make(const v1::VariableSpec& spec) {
  absl::StatusOr<std::shared_ptr<Variable>> v =
      Variable::Create(spec, kMaxBytes);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : nullptr;
}

absl::StatusOr<PushOutcome> Push(Variable* v, int64_t worker, int64_t step,
                                 bool tagged = true) {
  const float grad[2] = {1, 1};
  PushMeta meta{"job", worker, step, 0};
  meta.tagged = tagged;
  return v->PushDense(meta, reinterpret_cast<const char*>(grad), sizeof grad);
}

float First(const Variable& v) {
  float out;
  std::memcpy(&out, v.Snapshot().value->data(), sizeof out);
  return out;
}

TEST(VariableHeaderTest, DuplicateTaggedPushIsAcknowledgedNotApplied) {
  auto v = Make(Spec(v1::UpdateMode::ASYNC, 0));
  ASSERT_NE(v, nullptr);
  absl::StatusOr<PushOutcome> first = Push(v.get(), 0, 5);
  STRATA_ASSERT_OK(first);
  EXPECT_TRUE(first->applied);
  EXPECT_FALSE(first->duplicate);
  absl::StatusOr<PushOutcome> again = Push(v.get(), 0, 5);
  STRATA_ASSERT_OK(again);
  EXPECT_TRUE(again->duplicate);
  EXPECT_FALSE(again->applied);
  EXPECT_EQ(again->version, 1);
  EXPECT_EQ(First(*v), 2.0f);
  EXPECT_EQ(v->iterations(), 1);
}

TEST(VariableHeaderTest, UntaggedPushIsAppliedEveryTime) {
  auto v = Make(Spec(v1::UpdateMode::ASYNC, 0));
  ASSERT_NE(v, nullptr);
  STRATA_ASSERT_OK(Push(v.get(), 0, 5, /*tagged=*/false));
  absl::StatusOr<PushOutcome> again = Push(v.get(), 0, 5, /*tagged=*/false);
  STRATA_ASSERT_OK(again);
  EXPECT_FALSE(again->duplicate);
  EXPECT_EQ(again->version, 2);
  EXPECT_EQ(First(*v), 1.0f);
}

// The exactly-once check records nothing: a push refused after it (a SYNC
// step too far ahead) is taken once the variable catches up.
TEST(VariableHeaderTest, RefusedPushIsNotRemembered) {
  auto v = Make(Spec(v1::UpdateMode::SYNC, 1));
  ASSERT_NE(v, nullptr);
  EXPECT_THAT(Push(v.get(), 0, kMaxStepsAhead),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  for (int64_t step = 0; step < kMaxStepsAhead; ++step) {
    STRATA_ASSERT_OK(Push(v.get(), 0, step));
  }
  absl::StatusOr<PushOutcome> out = Push(v.get(), 0, kMaxStepsAhead);
  STRATA_ASSERT_OK(out);
  EXPECT_FALSE(out->duplicate);
  EXPECT_TRUE(out->applied);
  EXPECT_EQ(out->version, kMaxStepsAhead + 1);
}

TEST(VariableHeaderTest, WindowForgetsTheOldestStepBeyondItsSize) {
  auto v = Make(Spec(v1::UpdateMode::ASYNC, 0));
  ASSERT_NE(v, nullptr);
  for (int64_t step = 0; step <= kDedupWindow; ++step) {
    ASSERT_TRUE(Push(v.get(), 0, step).ok()) << step;
  }
  EXPECT_THAT(Push(v.get(), 0, 0),
              StatusIsWithMessage(absl::StatusCode::kAborted,
                                  "older than the exactly-once window"));
  absl::StatusOr<PushOutcome> kept = Push(v.get(), 0, 1);
  STRATA_ASSERT_OK(kept);
  EXPECT_TRUE(kept->duplicate);
  // Each (job, worker) has its own window.
  absl::StatusOr<PushOutcome> other = Push(v.get(), 1, 0);
  STRATA_ASSERT_OK(other);
  EXPECT_FALSE(other->duplicate);
}

TEST(VariableHeaderTest, CheckpointKeepsTakenPushesButNotHeldSyncOnes) {
  auto v = Make(Spec(v1::UpdateMode::SYNC, 2));
  ASSERT_NE(v, nullptr);
  STRATA_ASSERT_OK(Push(v.get(), 0, 0));
  STRATA_ASSERT_OK(Push(v.get(), 1, 0));  // step 0 applied
  STRATA_ASSERT_OK(Push(v.get(), 0, 1));  // step 1 held
  absl::StatusOr<PushOutcome> held = Push(v.get(), 0, 1);
  STRATA_ASSERT_OK(held);
  EXPECT_TRUE(held->duplicate);

  absl::StatusOr<std::shared_ptr<Variable>> restored =
      Variable::FromCheckpoint(v->ToCheckpoint(), kMaxBytes);
  STRATA_ASSERT_OK(restored);
  EXPECT_EQ((*restored)->version(), 1);
  // Step 1 of worker 0 is not in the saved value: it is taken again.
  absl::StatusOr<PushOutcome> again = Push(restored->get(), 0, 1);
  STRATA_ASSERT_OK(again);
  EXPECT_FALSE(again->duplicate);
  EXPECT_FALSE(again->applied);
  // Step 0 was applied before the checkpoint: still a duplicate.
  for (int64_t worker : {0, 1}) {
    absl::StatusOr<PushOutcome> old = Push(restored->get(), worker, 0);
    STRATA_ASSERT_OK(old);
    EXPECT_TRUE(old->duplicate) << worker;
  }
}

TEST(VariableHeaderTest, RestoredVariableKeepsTheSavedSpec) {
  const v1::VariableSpec spec = Spec(v1::UpdateMode::ASYNC, 0);
  auto v = Make(spec);
  ASSERT_NE(v, nullptr);
  STRATA_ASSERT_OK(Push(v.get(), 0, 0));
  absl::StatusOr<std::shared_ptr<Variable>> restored =
      Variable::FromCheckpoint(v->ToCheckpoint(), kMaxBytes);
  STRATA_ASSERT_OK(restored);
  EXPECT_EQ((*restored)->spec().SerializeAsString(),
            spec.SerializeAsString());
  // The saved value, not the initializer's.
  EXPECT_EQ(First(**restored), 2.0f);
  EXPECT_EQ((*restored)->version(), 1);
  EXPECT_EQ((*restored)->iterations(), 1);
}

// The saved initializer is neither checked nor run on a restore.
TEST(VariableHeaderTest, RestoreIgnoresTheSavedInitializer) {
  auto v = Make(Spec(v1::UpdateMode::ASYNC, 0));
  ASSERT_NE(v, nullptr);
  CheckpointVariable entry = v->ToCheckpoint();
  v1::VariableSpec bad = v->spec();
  bad.mutable_initializer()->set_type("no_such_initializer");
  EXPECT_THAT(Variable::Create(bad, kMaxBytes),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(bad, &json).ok());
  entry.meta["spec"] = json;
  absl::StatusOr<std::shared_ptr<Variable>> restored =
      Variable::FromCheckpoint(entry, kMaxBytes);
  STRATA_ASSERT_OK(restored);
  EXPECT_EQ((*restored)->spec().initializer().type(), "no_such_initializer");
  EXPECT_EQ(First(**restored), 3.0f);
}

TEST(VariableHeaderTest, AssignReturnsTheVersionAfterIt) {
  const float value[2] = {7, 7};
  auto async = Make(Spec(v1::UpdateMode::ASYNC, 0));
  ASSERT_NE(async, nullptr);
  absl::StatusOr<int64_t> a =
      async->Assign(reinterpret_cast<const char*>(value), sizeof value);
  STRATA_ASSERT_OK(a);
  EXPECT_EQ(*a, 1);
  auto sync = Make(Spec(v1::UpdateMode::SYNC, 1));
  ASSERT_NE(sync, nullptr);
  absl::StatusOr<int64_t> s =
      sync->Assign(reinterpret_cast<const char*>(value), sizeof value);
  STRATA_ASSERT_OK(s);
  EXPECT_EQ(*s, 0);
  EXPECT_EQ(First(*sync), 7.0f);
}

TEST(VariableHeaderTest, WaitForPullRunsAtOnceOrReturnsAnId) {
  auto v = Make(Spec(v1::UpdateMode::ASYNC, 0));
  ASSERT_NE(v, nullptr);
  std::vector<absl::Status> seen;
  auto record = [&seen](absl::Status s) { seen.push_back(std::move(s)); };
  EXPECT_EQ(v->WaitForPull(0, 0, record), 0);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(seen[0].ok());

  const int64_t expired = v->WaitForPull(5, 0, record);
  const int64_t cancelled = v->WaitForPull(5, 0, record);
  EXPECT_GE(expired, 1);
  EXPECT_NE(expired, cancelled);
  EXPECT_EQ(seen.size(), 1u);
  v->ExpireWaiter(expired, absl::DeadlineExceededError("late"));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].code(), absl::StatusCode::kDeadlineExceeded);
  v->ExpireWaiter(expired, absl::DeadlineExceededError("late"));
  EXPECT_EQ(seen.size(), 2u);  // no longer waiting
  v->CancelWaiters(absl::UnavailableError("shutdown"));
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2].code(), absl::StatusCode::kUnavailable);

  // An update that makes the condition hold fires the waiter.
  const int64_t id = v->WaitForPull(1, 0, record);
  EXPECT_GE(id, 1);
  STRATA_ASSERT_OK(Push(v.get(), 0, 0));
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_TRUE(seen[3].ok());
}

TEST(VariableHeaderTest, RowCallsNeedA2DVariable) {
  auto v = Make(Spec(v1::UpdateMode::ASYNC, 0));
  ASSERT_NE(v, nullptr);
  const int64_t ids[] = {0};
  EXPECT_THAT(v->ReadRows(ids),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "row pull needs a 2-D variable"));
  const float row[1] = {1};
  EXPECT_THAT(v->PushRows(PushMeta{"job", 0, 0, 0}, ids,
                          reinterpret_cast<const char*>(row), sizeof row),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "row push needs a 2-D variable"));
}

}  // namespace
}  // namespace strata

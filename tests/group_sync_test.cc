// SYNC variables trained by a group (central_storage): a step is averaged
// over the pushing group's size; a newer group replaces an older group's
// partial step; an older group's push is refused.
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/variable_store.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

v1::VariableSpec SyncSpec() {
  v1::VariableSpec spec;
  spec.set_name("w");
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(2);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(1.0);
  spec.mutable_update_mode()->set_kind(v1::UpdateMode::SYNC);
  spec.mutable_update_mode()->set_num_replicas(1);
  return spec;
}

std::vector<float> Value(Variable* v) {
  std::vector<float> out(2);
  auto snap = v->Snapshot();
  std::memcpy(out.data(), snap.value->data(), 8);
  return out;
}

absl::StatusOr<PushOutcome> Push(Variable* v, int64_t group, int size,
                                 int64_t worker, int64_t step, float g) {
  const float grad[2] = {g, g};
  PushMeta meta;
  meta.job = "job/g" + std::to_string(group);
  meta.worker = worker;
  meta.step = step;
  meta.group = group;
  meta.group_size = size;
  return v->PushDense(meta, reinterpret_cast<const char*>(grad), sizeof grad);
}

TEST(GroupSyncTest, AveragesOverTheGroupSize) {
  VariableStore store({});
  ASSERT_TRUE(store.Create(SyncSpec()).ok());
  auto v = *store.Get("w");
  auto a = Push(v.get(), 1, 3, 0, 0, 3);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->applied);
  ASSERT_TRUE(Push(v.get(), 1, 3, 1, 0, 6).ok());
  auto c = Push(v.get(), 1, 3, 2, 0, 9);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->applied);
  EXPECT_EQ(c->version, 1);
  EXPECT_EQ(Value(v.get()), (std::vector<float>{-6, -6}));  // mean 6, lr 1
  // A retried push of the same (group, worker, step): acknowledged once.
  auto again = Push(v.get(), 1, 3, 2, 0, 9);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(Value(v.get()), (std::vector<float>{-6, -6}));
}

// A SYNC variable re-created mid-run (a restarted ps task) starts at the
// group's step: its version is the next step it applies.
TEST(GroupSyncTest, FirstStepSetsTheStartingVersion) {
  VariableStore store({});
  v1::VariableSpec spec = SyncSpec();
  spec.mutable_update_mode()->set_first_step(300);
  ASSERT_TRUE(store.Create(spec).ok());
  auto v = *store.Get("w");
  EXPECT_EQ(v->version(), 300);
  EXPECT_EQ(Push(v.get(), 4, 1, 0, 299, 1).status().code(),
            absl::StatusCode::kAborted);  // already "applied"
  auto a = Push(v.get(), 4, 1, 0, 300, 2);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->applied);
  EXPECT_EQ(a->version, 301);
  EXPECT_EQ(Value(v.get()), (std::vector<float>{-2, -2}));
  // Asked for again at another first step, the existing one is kept.
  spec.mutable_update_mode()->set_first_step(0);
  absl::StatusOr<bool> again = store.Create(spec);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
  EXPECT_EQ(v->version(), 301);
  // Only SYNC variables have a first step, and it is not negative.
  spec.set_name("async");
  spec.mutable_update_mode()->set_kind(v1::UpdateMode::ASYNC);
  spec.mutable_update_mode()->set_first_step(300);
  EXPECT_THAT(store.Create(spec).status().message(),
              HasSubstr("update_mode.first_step is for SYNC variables only"));
  spec.set_name("negative");
  spec.mutable_update_mode()->set_kind(v1::UpdateMode::SYNC);
  spec.mutable_update_mode()->set_first_step(-1);
  EXPECT_EQ(store.Create(spec).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GroupSyncTest, NewerGroupReplacesAPartialStep) {
  VariableStore store({});
  ASSERT_TRUE(store.Create(SyncSpec()).ok());
  auto v = *store.Get("w");
  // Group 1 (3 members): two push step 0, the third dies.
  ASSERT_TRUE(Push(v.get(), 1, 3, 0, 0, 100).ok());
  ASSERT_TRUE(Push(v.get(), 1, 3, 1, 0, 100).ok());
  // Group 2 (the 2 survivors) re-runs step 0: group 1's partial sum goes.
  ASSERT_TRUE(Push(v.get(), 2, 2, 0, 0, 2).ok());
  auto done = Push(v.get(), 2, 2, 1, 0, 4);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->applied);
  EXPECT_EQ(Value(v.get()), (std::vector<float>{-3, -3}));
  // The dead member's late push for step 1 from group 1 is refused.
  ASSERT_TRUE(Push(v.get(), 2, 2, 0, 1, 1).ok());
  auto late = Push(v.get(), 1, 3, 2, 1, 50);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(late.status().message()), HasSubstr("older than group 2"));
  // And a push for an applied step is stale.
  auto stale = Push(v.get(), 2, 2, 1, 0, 4);
  EXPECT_TRUE(stale.ok() && stale->duplicate);
  auto stale_new = Push(v.get(), 3, 2, 1, 0, 4);
  EXPECT_EQ(stale_new.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Value(v.get()), (std::vector<float>{-3, -3}));
}

TEST(GroupSyncTest, WorkerOutsideTheGroupIsRefused) {
  VariableStore store({});
  ASSERT_TRUE(store.Create(SyncSpec()).ok());
  auto v = *store.Get("w");
  auto bad = Push(v.get(), 1, 2, 2, 0, 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("worker 2 is outside [0, 2) for group 1"));
  auto negative = Push(v.get(), 1, -1, 0, 0, 1);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Value(v.get()), (std::vector<float>{0, 0}));
}

}  // namespace
}  // namespace strata

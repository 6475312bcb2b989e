// CoordinatorState groups (synchronous strategies): formation once every
// live trainer joined, ranks, start step and state source, regrouping after
// a failure, a rejoin, and a member asking for a new group. Fake clock.
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "coordinator/coordinator_state.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

v1::TaskId Task(const std::string& role, int index) {
  v1::TaskId t;
  t.set_role(role);
  t.set_index(index);
  return t;
}

class CoordinatorGroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.clock = [this] { return now_; };
    auto s = CoordinatorState::Create(std::move(o), &logger_);
    ASSERT_TRUE(s.ok()) << s.status();
    state_ = *std::move(s);
  }

  void Reg(const std::string& role, int index, const std::string& inc = "a") {
    ASSERT_TRUE(state_->Register(Task(role, index), "", inc).ok());
  }

  void Submit(const std::string& strategy, int64_t examples = 100,
              const std::string& collective = "ring") {
    nlohmann::json j = {
        {"epochs", 2},
        {"batch_size", 10},
        {"strategy", {{"type", strategy}, {"collective", collective}}},
        {"evaluation", {{"every_epochs", 0}}}};
    auto id = state_->SubmitJob(j.dump(), examples);
    ASSERT_TRUE(id.ok()) << id.status();
  }

  v1::GroupAssignment Join(int worker, int64_t after, int64_t next_step,
                           const std::string& inc = "a",
                           std::map<int, int64_t> epoch_ends_ago_ms = {}) {
    v1::JoinGroupRequest r;
    *r.mutable_task() = Task("worker", worker);
    r.set_incarnation(inc);
    r.set_after_group(after);
    r.set_next_step(next_step);
    r.set_address("w" + std::to_string(worker) + ":1");
    for (const auto& [epoch, ago] : epoch_ends_ago_ms) {
      v1::EpochEnd* e = r.add_epoch_ends();
      e->set_epoch(epoch);
      e->set_ago_ms(ago);
    }
    auto a = state_->JoinGroup(r);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : v1::GroupAssignment();
  }

  void Report(int worker, int64_t step, double loss = 0,
              double accuracy = 0, int64_t generation = 0) {
    v1::ReportWorkRequest r;
    *r.mutable_task() = Task("worker", worker);
    r.set_incarnation("a");
    r.mutable_item()->set_kind(v1::WorkItem::TRAIN);
    r.mutable_item()->set_step(step);
    r.mutable_item()->set_generation(generation);
    r.set_examples(10);
    r.set_loss(loss);
    r.set_accuracy(accuracy);
    ASSERT_TRUE(state_->ApplyReport(r).ok());
  }

  // central_storage (2 epochs of 10 steps) with a checkpoint every 4 steps.
  void SubmitCentralStorageCheckpointingEvery4() {
    nlohmann::json j = {{"epochs", 2},
                        {"batch_size", 10},
                        {"strategy", {{"type", "central_storage"}}},
                        {"checkpoint", {{"every_steps", 4}}},
                        {"evaluation", {{"every_epochs", 0}}}};
    ASSERT_TRUE(state_->SubmitJob(j.dump(), 100).ok());
  }

  // Workers 0-2 registered and grouped under multi_worker_mirrored;
  // returns the group.
  int64_t ThreeWorkerGroup() {
    Reg("worker", 0);
    Reg("worker", 1);
    Reg("worker", 2);
    Submit("multi_worker_mirrored");
    Join(0, 0, -1);
    Join(1, 0, -1);
    return Join(2, 0, -1).group();
  }

  // Worker 2 stops heartbeating; the others keep their leases fresh until
  // its lease expires.
  void Worker2Fails() {
    now_ += absl::Seconds(3);
    state_->Heartbeat(Task("worker", 0), "a").IgnoreError();
    state_->Heartbeat(Task("worker", 1), "a").IgnoreError();
    now_ += absl::Seconds(3);
    state_->CheckLeases();
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::ostringstream log_;
  Logger logger_{"coordinator", &log_, [this] { return now_; }};
  std::unique_ptr<CoordinatorState> state_;
};

TEST_F(CoordinatorGroupsTest, FormsWhenEveryTrainerJoinedAndBroadcastsRankZero) {
  Reg("worker", 0);
  Reg("worker", 1);
  Submit("multi_worker_mirrored");
  v1::GroupAssignment a0 = Join(0, 0, -1);
  EXPECT_EQ(a0.state(), v1::GroupAssignment::WAIT);
  v1::GroupAssignment a1 = Join(1, 0, -1);
  ASSERT_EQ(a1.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(a1.rank(), 1);
  EXPECT_EQ(a1.size(), 2);
  EXPECT_EQ(a1.start_step(), 0);
  EXPECT_EQ(a1.source_rank(), 0);  // nobody has state: rank 0's is copied
  ASSERT_EQ(a1.members_size(), 2);
  EXPECT_EQ(a1.members(1).address(), "w1:1");
  // Worker 0 asks again (its WAIT retry): the formed group.
  a0 = Join(0, 0, -1);
  ASSERT_EQ(a0.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(a0.group(), a1.group());
  EXPECT_EQ(a0.rank(), 0);
  EXPECT_EQ(state_->NewestGroup(), a1.group());
}

TEST_F(CoordinatorGroupsTest, FailureRegroupsSurvivorsFromTheMostAdvancedState) {
  const int64_t g1 = ThreeWorkerGroup();
  ASSERT_GT(g1, 0);
  for (int64_t s = 0; s < 4; ++s) Report(0, s);
  Worker2Fails();
  const int64_t g2 = state_->NewestGroup();
  EXPECT_GT(g2, g1);
  // Worker 1 applied step 5 already (its all-reduce finished), worker 0 not.
  EXPECT_EQ(Join(0, g1, 5).state(), v1::GroupAssignment::WAIT);
  v1::GroupAssignment a = Join(1, g1, 6);
  ASSERT_EQ(a.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(a.group(), g2);
  EXPECT_EQ(a.size(), 2);
  EXPECT_EQ(a.start_step(), 6);
  EXPECT_EQ(a.source_rank(), 1);
  // Steps below the start are in the survivors' state: counted applied.
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.steps_completed(), 6);
}

TEST_F(CoordinatorGroupsTest, StepsResumedPastDoNotDiluteTheEpochsFigures) {
  // Steps 4 and 5 ran but their reports were lost (the group resumes past
  // them from a survivor's state): the epoch's loss and accuracy are the
  // means of the 8 reported steps, not sums over 10, and its examples/s
  // counts the 10 steps.
  const int64_t g1 = ThreeWorkerGroup();
  for (int64_t s = 0; s < 4; ++s) Report(0, s, 0.5, 0.75);
  Worker2Fails();
  Join(0, g1, 6);
  ASSERT_EQ(Join(1, g1, 6).start_step(), 6);
  now_ += absl::Seconds(4);
  for (int64_t s = 6; s < 10; ++s) Report(0, s, 0.5, 0.75);
  const v1::JobStatus job = state_->GetJob();
  ASSERT_GE(job.epochs_size(), 1);
  const v1::EpochResult& e = job.epochs(0);
  EXPECT_EQ(e.steps(), 10);
  EXPECT_DOUBLE_EQ(e.loss(), 0.5);
  EXPECT_DOUBLE_EQ(e.accuracy(), 0.75);
  EXPECT_DOUBLE_EQ(e.elapsed_seconds(), 10.0);
  EXPECT_DOUBLE_EQ(e.examples_per_second(), 100 / 10.0);
}

TEST_F(CoordinatorGroupsTest, AnEpochCompletedByARegroupEndsWhenItsStateDid) {
  // Worker 1 finished epoch 0 (10 steps) 2 s after the start, but only
  // steps 0-3 were reported (the rest were lost with a coordinator
  // restart); the group re-forms 5 s later from worker 1's state. Epoch 0
  // ended when worker 1's state finished it (2 s), not when the group
  // formed (7 s): the epoch line's elapsed time used to include the
  // outage.
  const int64_t g1 = ThreeWorkerGroup();
  for (int64_t s = 0; s < 4; ++s) Report(0, s, 0.5, 0.75);
  now_ += absl::Seconds(1);
  Worker2Fails();  // 6 s more: 7 s after the start
  Join(0, g1, 4);
  const v1::GroupAssignment a =
      Join(1, g1, 12, "a", {{0, 5000}});  // epoch 0 ended 5 s ago
  ASSERT_EQ(a.state(), v1::GroupAssignment::READY);
  ASSERT_EQ(a.start_step(), 12);
  const v1::JobStatus job = state_->GetJob();
  ASSERT_GE(job.epochs_size(), 1);
  EXPECT_EQ(job.epochs(0).steps(), 10);
  EXPECT_DOUBLE_EQ(job.epochs(0).elapsed_seconds(), 2.0);
  // Bad input is refused naming the field; nothing changes.
  v1::JoinGroupRequest bad;
  *bad.mutable_task() = Task("worker", 0);
  bad.set_incarnation("a");
  bad.add_epoch_ends()->set_ago_ms(-1);
  absl::StatusOr<v1::GroupAssignment> refused = state_->JoinGroup(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("epoch_ends"));
}

TEST_F(CoordinatorGroupsTest, ReportsCarryTheGroupsGenerationAcrossAPsRestore) {
  // central_storage: ps:0 restarts and the run rewinds. The group formed
  // after it hands its generation to its members, whose reports count at
  // once (they used to carry the heartbeat's generation, up to a second
  // old, and were dropped as from before the restore); the old group's
  // reports are dropped.
  Reg("ps", 0);
  Reg("worker", 0);
  Reg("worker", 1);
  Submit("central_storage");
  Join(0, 0, -1);
  const v1::GroupAssignment a = Join(1, 0, -1);
  ASSERT_EQ(a.state(), v1::GroupAssignment::READY);
  EXPECT_GT(a.generation(), 0);
  Report(0, 0, 0, 0, a.generation());
  EXPECT_EQ(state_->GetJob().steps_completed(), 1);
  Reg("ps", 0, "b");  // restarted: rewinds to step 0, regroups
  Report(0, 1, 0, 0, a.generation());
  EXPECT_EQ(state_->GetJob().steps_completed(), 0);
  EXPECT_THAT(log_.str(), ::testing::HasSubstr("\"event\":\"report_stale\""));
  Join(0, a.group(), -1);
  const v1::GroupAssignment b = Join(1, a.group(), -1);
  ASSERT_EQ(b.state(), v1::GroupAssignment::READY);
  EXPECT_GT(b.group(), a.group());
  EXPECT_GT(b.generation(), a.generation());
  EXPECT_EQ(b.start_step(), 0);
  Report(0, 0, 0, 0, b.generation());
  EXPECT_EQ(state_->GetJob().steps_completed(), 1);
}

TEST_F(CoordinatorGroupsTest, CentralStorageSavesAtAGroupBarrierAndRestoresIt) {
  // central_storage checkpoints every 4 steps: when one is due the group
  // re-forms; the store saves once every replica waits at the barrier (not
  // before), the group forms after the save at the first unreported step,
  // and a ps:0 restart restores that checkpoint, not step 0.
  Reg("ps", 0);
  Reg("worker", 0);
  Reg("worker", 1);
  SubmitCentralStorageCheckpointingEvery4();
  Join(0, 0, -1);
  const v1::GroupAssignment a = Join(1, 0, -1);
  ASSERT_EQ(a.state(), v1::GroupAssignment::READY);
  for (int64_t s = 0; s < 3; ++s) Report(0, s, 0, 0, a.generation());
  EXPECT_FALSE(state_->NextPsAction().has_value());  // not due yet
  EXPECT_EQ(state_->NewestGroup(), a.group());
  Report(0, 3, 0, 0, a.generation());
  // Due: a newer group is announced, and nothing saves while it trains.
  const int64_t forming = state_->NewestGroup();
  EXPECT_GT(forming, a.group());
  EXPECT_FALSE(state_->NextPsAction().has_value());
  EXPECT_EQ(Join(0, a.group(), 4).state(), v1::GroupAssignment::WAIT);
  EXPECT_FALSE(state_->NextPsAction().has_value());  // worker 1 still trains
  // Both at the barrier: the save, and the group waits for it.
  EXPECT_EQ(Join(1, a.group(), 4).state(), v1::GroupAssignment::WAIT);
  std::optional<PsAction> save = state_->NextPsAction();
  ASSERT_TRUE(save.has_value());
  EXPECT_EQ(save->kind, PsAction::Kind::kSave);
  EXPECT_EQ(save->checkpoint, "ckpt-4");
  EXPECT_EQ(Join(0, a.group(), 4).state(), v1::GroupAssignment::WAIT);
  state_->FinishPsAction(*save, absl::OkStatus());
  const v1::GroupAssignment b = Join(1, a.group(), 4);
  ASSERT_EQ(b.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(b.start_step(), 4);
  EXPECT_EQ(state_->GetJob().last_checkpoint(), "ckpt-4");
  for (int64_t s = 4; s < 6; ++s) Report(0, s, 0, 0, b.generation());
  EXPECT_EQ(state_->GetJob().steps_completed(), 6);
  // ps:0 restarts: restored from ckpt-4 (steps 4 and 5 are redone).
  Reg("ps", 0, "b");
  std::optional<PsAction> restore = state_->NextPsAction();
  ASSERT_TRUE(restore.has_value());
  EXPECT_EQ(restore->kind, PsAction::Kind::kRestore);
  EXPECT_EQ(restore->checkpoint, "ckpt-4");
  state_->FinishPsAction(*restore, absl::OkStatus());
  const v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.steps_completed(), 4);
  EXPECT_EQ(job.lost_steps(), 2);
  Join(0, b.group(), -1);
  const v1::GroupAssignment c = Join(1, b.group(), -1);
  ASSERT_EQ(c.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(c.start_step(), 4);
}

TEST_F(CoordinatorGroupsTest, CentralStorageCheckpointBarrierAfterACoordinatorRestart) {
  // A restarted coordinator has formed no group, but its members train on
  // in the one they had and report: a checkpoint due then still announces
  // a barrier (it used to wait for one that nobody started).
  Reg("ps", 0);
  Reg("worker", 0);
  Reg("worker", 1);
  SubmitCentralStorageCheckpointingEvery4();
  EXPECT_EQ(state_->NewestGroup(), 0);
  for (int64_t s = 0; s < 4; ++s) Report(0, s);
  const int64_t barrier = state_->NewestGroup();
  EXPECT_GT(barrier, 0);
  // The group they had is older than any this coordinator numbers (the
  // group counter is persisted).
  const int64_t had = barrier - 1;
  Join(0, had, 4);
  EXPECT_EQ(Join(1, had, 4).state(), v1::GroupAssignment::WAIT);
  std::optional<PsAction> save = state_->NextPsAction();
  ASSERT_TRUE(save.has_value());
  EXPECT_EQ(save->kind, PsAction::Kind::kSave);
  state_->FinishPsAction(*save, absl::OkStatus());
  const v1::GroupAssignment a = Join(1, had, 4);
  EXPECT_EQ(a.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(a.group(), barrier);
}

TEST_F(CoordinatorGroupsTest, CentralStorageCheckpointWaitsForADownPsTask) {
  // ps:1 (holding nothing) is down: no barrier is started for a save that
  // could not run, and a barrier it went down during forms without one
  // (the group used to wait there for as long as ps:1 stayed down).
  Reg("ps", 0);
  Reg("ps", 1);
  Reg("worker", 0);
  Reg("worker", 1);
  SubmitCentralStorageCheckpointingEvery4();
  Join(0, 0, -1);
  const v1::GroupAssignment a = Join(1, 0, -1);
  ASSERT_EQ(a.state(), v1::GroupAssignment::READY);
  auto ps1_fails = [&] {
    for (int i = 0; i < 2; ++i) {
      now_ += absl::Seconds(3);
      for (int w = 0; w < 2; ++w) {
        state_->Heartbeat(Task("worker", w), "a").IgnoreError();
      }
      state_->Heartbeat(Task("ps", 0), "a").IgnoreError();
    }
    state_->CheckLeases();
  };
  ps1_fails();
  for (int64_t s = 0; s < 4; ++s) Report(0, s, 0, 0, a.generation());
  EXPECT_EQ(state_->NewestGroup(), a.group());  // not due while ps:1 is down
  EXPECT_FALSE(state_->NextPsAction().has_value());
  Reg("ps", 1, "b");  // back: holds nothing, nothing to restore
  Report(0, 4, 0, 0, a.generation());
  const int64_t barrier = state_->NewestGroup();
  EXPECT_GT(barrier, a.group());
  // ps:1 goes down again while the replicas gather: the group forms.
  Join(0, a.group(), 5);
  ps1_fails();
  const v1::GroupAssignment b = Join(1, a.group(), 5);
  ASSERT_EQ(b.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(b.start_step(), 5);
  EXPECT_FALSE(state_->NextPsAction().has_value());
  EXPECT_THAT(log_.str(), ::testing::HasSubstr("checkpoint_deferred"));
}

TEST_F(CoordinatorGroupsTest, CentralStorageResumesPastStepsTheStoreApplied) {
  // The reports of steps 4-7 were lost (a coordinator restart), but the
  // members pulled version 8: the next group starts at 8 and counts 4-7
  // applied (it used to re-run them, every push refused as stale, to the
  // end of the run). After a restore of the store, a claim from a group
  // before it is ignored: that store is gone.
  Reg("ps", 0);
  Reg("worker", 0);
  Reg("worker", 1);
  Submit("central_storage");
  Join(0, 0, -1);
  const v1::GroupAssignment a = Join(1, 0, -1);
  ASSERT_EQ(a.state(), v1::GroupAssignment::READY);
  for (int64_t s = 0; s < 4; ++s) Report(0, s, 0.5, 0.75, a.generation());
  Join(0, a.group(), 8);
  const v1::GroupAssignment b = Join(1, a.group(), 6);
  ASSERT_EQ(b.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(b.start_step(), 8);
  EXPECT_EQ(state_->GetJob().steps_completed(), 8);
  EXPECT_DOUBLE_EQ(state_->GetJob().epochs(0).loss(), 0.5);  // 4 reported
  // ps:0 restarts (no checkpoint): the run rewinds to step 0.
  Reg("ps", 0, "b");
  EXPECT_EQ(state_->GetJob().steps_completed(), 0);
  Join(0, b.group(), 12);  // pulled from the store that is gone
  const v1::GroupAssignment c = Join(1, b.group(), 12);
  ASSERT_EQ(c.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(c.start_step(), 0);
  // Pulls in the group formed after the restore count again.
  Join(0, c.group(), 3);
  const v1::GroupAssignment d = Join(1, c.group(), -1);
  ASSERT_EQ(d.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(d.start_step(), 3);
}

TEST_F(CoordinatorGroupsTest, ReturningWorkerTriggersANewGroupAndCopiesState) {
  Reg("worker", 0);
  Reg("worker", 1);
  Submit("multi_worker_mirrored");
  Join(0, 0, -1);
  const int64_t g1 = Join(1, 0, -1).group();
  // Worker 1 restarts (new incarnation): a new group forms.
  Reg("worker", 1, "b");
  const int64_t g2 = state_->NewestGroup();
  EXPECT_GT(g2, g1);
  EXPECT_EQ(Join(1, 0, -1, "b").state(), v1::GroupAssignment::WAIT);
  v1::GroupAssignment a = Join(0, g1, 3);
  ASSERT_EQ(a.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(a.start_step(), 3);
  EXPECT_EQ(a.source_rank(), 0);
}

TEST_F(CoordinatorGroupsTest, MemberAskingAgainStartsANewGroup) {
  Reg("worker", 0);
  Reg("worker", 1);
  Submit("central_storage");
  Reg("ps", 0);
  Join(0, 0, -1);
  const int64_t g1 = Join(1, 0, -1).group();
  Report(0, 0);
  Report(0, 1);
  // A collective failed on worker 0: it asks for a group after g1.
  EXPECT_EQ(Join(0, g1, -1).state(), v1::GroupAssignment::WAIT);
  EXPECT_GT(state_->NewestGroup(), g1);
  v1::GroupAssignment a = Join(1, g1, -1);
  ASSERT_EQ(a.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(a.start_step(), 2);     // the first unreported step
  EXPECT_EQ(a.source_rank(), -1);   // variables live on the ps task
}

TEST_F(CoordinatorGroupsTest, MirroredGroupsOnlyTheFirstTrainer) {
  Reg("worker", 0);
  Reg("worker", 1);
  Submit("mirrored");
  v1::GroupAssignment a = Join(0, 0, -1);
  ASSERT_EQ(a.state(), v1::GroupAssignment::READY);
  EXPECT_EQ(a.size(), 1);
}

TEST_F(CoordinatorGroupsTest, StepQueueJobsRefuseGroups) {
  Reg("worker", 0);
  Reg("ps", 0);
  Submit("parameter_server");
  v1::JoinGroupRequest r;
  *r.mutable_task() = Task("worker", 0);
  r.set_incarnation("a");
  auto a = state_->JoinGroup(r);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  r.mutable_task()->set_role("ps");
  EXPECT_EQ(state_->JoinGroup(r).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace strata

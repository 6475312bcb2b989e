// CoordinatorState: membership, the step queue, checkpoint and restore
// orchestration, persistence. A fake clock is stepped; nothing sleeps.
#include "coordinator/coordinator_state.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

v1::TaskId Task(const std::string& role, int index) {
  v1::TaskId t;
  t.set_role(role);
  t.set_index(index);
  return t;
}

// Records calls; answers with `status`.
class FakeCheckpointer : public PsCheckpointer {
 public:
  absl::Status SaveAll(const std::string& name) override {
    saves.push_back(name);
    return status;
  }
  absl::Status DeleteAll(const std::vector<std::string>& names) override {
    deletes.push_back(names);
    return absl::OkStatus();
  }
  absl::Status RestoreAll(const std::string& name) override {
    restores.push_back(name);
    auto it = restore_status.find(name);
    return it != restore_status.end() ? it->second : status;
  }
  std::vector<std::string> saves;
  std::vector<std::vector<std::string>> deletes;
  std::vector<std::string> restores;
  absl::Status status;
  // Per checkpoint, what RestoreAll answers instead of `status`.
  std::map<std::string, absl::Status> restore_status;
};

std::string JobJson(int epochs, int batch_size, int every_epochs = 0,
                    int checkpoint_every_steps = 0,
                    const std::string& strategy = "parameter_server") {
  nlohmann::json j = {{"epochs", epochs},
                      {"batch_size", batch_size},
                      {"strategy", {{"type", strategy}}},
                      {"evaluation", {{"every_epochs", every_epochs}}}};
  if (checkpoint_every_steps > 0) {
    j["checkpoint"] = {{"every_steps", checkpoint_every_steps}};
  }
  return j.dump();
}

class CoordinatorStateTest : public ::testing::Test {
 protected:
  CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.clock = [this] { return now_; };
    return o;
  }

  std::unique_ptr<CoordinatorState> Make(CoordinatorOptions options) {
    auto s = CoordinatorState::Create(std::move(options), &logger_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  void SetUp() override { state_ = Make(Options()); }

  void TearDown() override {
    state_.reset();
    std::error_code ec;
    for (const std::string& dir : dirs_) std::filesystem::remove_all(dir, ec);
  }

  std::string TempDir() {
    std::string dir = ::testing::TempDir() + "/coordinator_state_test_" +
                      std::to_string(::getpid()) + "_" +
                      std::to_string(dir_counter_++);
    std::filesystem::remove_all(dir);
    dirs_.push_back(dir);
    return dir;
  }

  int64_t Reg(const std::string& role, int index,
              const std::string& incarnation = "a",
              CoordinatorState* state = nullptr) {
    state = state ? state : state_.get();
    auto g = state->Register(
        Task(role, index), role + std::to_string(index) + ":1000", incarnation);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : -1;
  }

  v1::WorkItem Work(int worker, const std::string& incarnation = "a",
                    CoordinatorState* state = nullptr) {
    state = state ? state : state_.get();
    auto item = state->GetWork(Task("worker", worker), incarnation);
    EXPECT_TRUE(item.ok()) << item.status();
    return item.ok() ? *item : v1::WorkItem();
  }

  v1::ReportWorkRequest Report(int worker, const v1::WorkItem& item,
                               double loss = 1.0, double accuracy = 0.5,
                               int64_t examples = 10,
                               const std::string& incarnation = "a") {
    v1::ReportWorkRequest r;
    *r.mutable_task() = Task("worker", worker);
    r.set_incarnation(incarnation);
    *r.mutable_item() = item;
    r.set_loss(loss);
    r.set_accuracy(accuracy);
    r.set_examples(examples);
    return r;
  }

  void Done(int worker, const v1::WorkItem& item,
            CoordinatorState* state = nullptr) {
    state = state ? state : state_.get();
    STRATA_ASSERT_OK(state->ReportWork(Report(worker, item)));
  }

  // ps:0, worker:0, worker:1 and a job; returns the job id.
  std::string StartJob(const std::string& job_json, int64_t examples) {
    Reg("ps", 0);
    Reg("worker", 0);
    Reg("worker", 1);
    auto id = state_->SubmitJob(job_json, examples);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }

  void HeartbeatAll(const std::vector<v1::TaskId>& tasks) {
    for (const v1::TaskId& t : tasks) {
      STRATA_ASSERT_OK(state_->Heartbeat(t, "a"));
    }
  }

  absl::Time now_ = absl::FromUnixSeconds(1700000000);
  std::ostringstream log_;
  Logger logger_{"coordinator", &log_, [this] { return now_; }};
  std::unique_ptr<CoordinatorState> state_;
  int dir_counter_ = 0;
  std::vector<std::string> dirs_;
};

// ---------------------------------------------------------------------------
// Membership.

TEST_F(CoordinatorStateTest, RegisterBumpsGenerationOnlyOnChange) {
  EXPECT_EQ(state_->generation(), 0);
  EXPECT_EQ(Reg("worker", 0, "a"), 1);
  EXPECT_EQ(Reg("worker", 0, "a"), 1);  // same registration: lease only
  EXPECT_EQ(Reg("worker", 0, "b"), 2);  // a restart
  EXPECT_EQ(Reg("ps", 0, "a"), 3);      // a new member
  auto g = state_->Register(Task("ps", 0), "elsewhere:1", "a");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, 4);  // moved
  v1::ClusterState cluster = state_->GetClusterState();
  EXPECT_EQ(cluster.generation(), 4);
  ASSERT_EQ(cluster.members_size(), 2);
  EXPECT_EQ(cluster.members(0).task().role(), "ps");
  EXPECT_EQ(cluster.members(0).address(), "elsewhere:1");
  EXPECT_EQ(cluster.members(1).incarnation(), "b");
  EXPECT_EQ(cluster.members(1).state(), v1::Member::ALIVE);
  EXPECT_EQ(cluster.members(1).last_heartbeat_unix_ms(),
            absl::ToUnixMillis(now_));
}

TEST_F(CoordinatorStateTest, RegisterRejectsBadTasks) {
  EXPECT_THAT(state_->Register(Task("driver", 0), "h:1", "a"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "task.role: unknown role \"driver\""));
  EXPECT_THAT(
      state_->Register(Task("worker", -1), "h:1", "a"),
      StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "task.index"));
  EXPECT_THAT(
      state_->Register(Task("worker", 0), "h:1", ""),
      StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "incarnation"));
  EXPECT_EQ(state_->generation(), 0);
}

TEST_F(CoordinatorStateTest, HeartbeatOfUnknownOrStaleTaskIsNotFound) {
  EXPECT_THAT(state_->Heartbeat(Task("worker", 0), "a"),
              StatusIsWithMessage(absl::StatusCode::kNotFound, "re-register"));
  Reg("worker", 0, "a");
  Reg("worker", 0, "b");
  EXPECT_THAT(state_->Heartbeat(Task("worker", 0), "a"),
              StatusIsWithMessage(absl::StatusCode::kNotFound, "stale"));
  auto g = state_->Heartbeat(Task("worker", 0), "b");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g, 2);
  // GetWork asks the same of its caller.
  EXPECT_THAT(state_->GetWork(Task("worker", 0), "a"),
              StatusIsWithMessage(absl::StatusCode::kNotFound, "re-register"));
  EXPECT_THAT(state_->GetWork(Task("worker", 7), "a"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CoordinatorStateTest, DeregisterMarksLeftUntilReRegistered) {
  Reg("worker", 0);
  STRATA_ASSERT_OK(state_->Deregister(Task("worker", 0), "a"));
  EXPECT_EQ(state_->generation(), 2);
  STRATA_ASSERT_OK(state_->Deregister(Task("worker", 0), "a"));  // again: OK
  EXPECT_EQ(state_->generation(), 2);
  EXPECT_EQ(state_->GetClusterState().members(0).state(), v1::Member::LEFT);
  EXPECT_THAT(state_->Heartbeat(Task("worker", 0), "a"),
              StatusIsWithMessage(absl::StatusCode::kNotFound, "deregistered"));
  EXPECT_THAT(state_->Deregister(Task("worker", 3), "a"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(Reg("worker", 0), 3);
  EXPECT_EQ(state_->GetClusterState().members(0).state(), v1::Member::ALIVE);
}

TEST_F(CoordinatorStateTest, ExpiredLeaseFailsMemberAndRequeuesItsStep) {
  StartJob(JobJson(1, 5), 10);  // steps 0 and 1
  const int64_t g0 = state_->generation();
  v1::WorkItem taken = Work(0);
  ASSERT_EQ(taken.kind(), v1::WorkItem::TRAIN);
  EXPECT_EQ(taken.step(), 0);

  now_ += absl::Seconds(3);
  HeartbeatAll({Task("worker", 1), Task("ps", 0)});
  now_ += absl::Seconds(2);
  state_->CheckLeases();  // worker:0 silent for 5 s: not yet
  EXPECT_EQ(state_->generation(), g0);
  now_ += absl::Milliseconds(1);
  state_->CheckLeases();
  EXPECT_EQ(state_->generation(), g0 + 1);
  EXPECT_EQ(state_->GetClusterState().members(1).state(), v1::Member::FAILED);
  EXPECT_THAT(
      state_->Heartbeat(Task("worker", 0), "a"),
      StatusIsWithMessage(absl::StatusCode::kNotFound, "declared failed"));
  EXPECT_THAT(log_.str(), HasSubstr("\"event\":\"member_failed\""));

  // The step goes to the other worker and is completed once.
  v1::WorkItem again = Work(1);
  ASSERT_EQ(again.kind(), v1::WorkItem::TRAIN);
  EXPECT_EQ(again.step(), 0);
  Done(1, again);
  // The failed worker's late report is accepted but not counted again.
  STRATA_ASSERT_OK(state_->ReportWork(Report(0, taken)));
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.steps_completed(), 1);
  EXPECT_EQ(job.examples(), 10);
  v1::WorkItem next = Work(1);
  EXPECT_EQ(next.step(), 1);
  Done(1, next);
  EXPECT_EQ(state_->GetJob().state(), v1::JobStatus::SUCCEEDED);
  EXPECT_EQ(Work(1).kind(), v1::WorkItem::DONE);
}

TEST_F(CoordinatorStateTest, RestartedWorkerLosesItsInFlightStep) {
  StartJob(JobJson(1, 5), 10);
  EXPECT_EQ(Work(0).step(), 0);
  Reg("worker", 0, "b");  // restarted: step 0 is pending again
  EXPECT_EQ(Work(1).step(), 0);
  EXPECT_EQ(Work(0, "b").step(), 1);
}

TEST_F(CoordinatorStateTest, ClusterSpecOfAliveMembersInTfConfigForm) {
  state_->Register(Task("worker", 1), "w1:1", "a").IgnoreError();
  state_->Register(Task("worker", 0), "w0:1", "a").IgnoreError();
  state_->Register(Task("ps", 0), "p0:1", "a").IgnoreError();
  state_->Register(Task("chief", 0), "", "a").IgnoreError();  // a pure client
  EXPECT_EQ(state_->GetClusterSpec(),
            R"({"cluster":{"ps":["p0:1"],"worker":["w0:1","w1:1"]}})");
  auto parsed = ParseTfConfig(state_->GetClusterSpec());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  STRATA_ASSERT_OK(state_->Deregister(Task("worker", 0), "a"));
  EXPECT_EQ(state_->GetClusterSpec(),
            R"({"cluster":{"ps":["p0:1"],"worker":["w1:1"]}})");
  EXPECT_THAT(state_->PsTargets(), ElementsAre(PsTarget{"ps:0", "p0:1"}));
}

TEST_F(CoordinatorStateTest, StaticClusterSpecIsAnsweredAsGiven) {
  CoordinatorOptions options = Options();
  ClusterSpec cluster;
  cluster.jobs["worker"] = {"w0:2222", "w1:2222"};
  cluster.jobs["ps"] = {"p0:2222"};
  options.static_cluster = cluster;
  auto state = Make(options);
  EXPECT_EQ(state->GetClusterSpec(),
            R"({"cluster":{"ps":["p0:2222"],"worker":["w0:2222","w1:2222"]}})");
  EXPECT_THAT(state->PsTargets(), ElementsAre(PsTarget{"ps:0", "p0:2222"}));
  EXPECT_THAT(state->Register(Task("worker", 2), "w2:1", "a"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "not in the static cluster"));
  // Static workers count for the topology: the job starts at once.
  Reg("worker", 0, "a", state.get());
  STRATA_ASSERT_OK(state->SubmitJob(JobJson(1, 5), 10));
  EXPECT_EQ(Work(0, "a", state.get()).kind(), v1::WorkItem::TRAIN);
}

TEST_F(CoordinatorStateTest, WatchersSeeGenerationChanges) {
  std::vector<int64_t> seen;
  int64_t id = state_->AddWatcher([&seen](int64_t g) { seen.push_back(g); });
  Reg("worker", 0);
  Reg("worker", 0);  // no change, no call
  Reg("worker", 1);
  EXPECT_THAT(seen, ElementsAre(1, 2));
  EXPECT_EQ(state_->WaitForChange(1, absl::InfinitePast()), 2);
  EXPECT_EQ(state_->WaitForChange(2, absl::Now()), 2);  // times out at once
  state_->RemoveWatcher(id);
  Reg("worker", 2);
  EXPECT_EQ(seen.size(), 2u);
}

// ---------------------------------------------------------------------------
// Jobs and the step queue.

// SubmitJob from any client applies the job file's limits (job/job_limits.h):
// refused at once naming the field and the limit, the message short.
TEST_F(CoordinatorStateTest, JobsBeyondTheJobFileLimitsAreRefused) {
  Reg("ps", 0);
  Reg("worker", 0);
  const std::string huge_name =
      "{\"name\": \"" + std::string(50 << 20, 'n') + "\"}";
  auto named = state_->SubmitJob(huge_name, 10);
  EXPECT_THAT(named, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                         "at most 1048576"));
  EXPECT_LT(named.status().message().size(), 200u);
  const std::string long_name =
      "{\"name\": \"" + std::string(129, 'n') + "\"}";
  EXPECT_THAT(state_->SubmitJob(long_name, 10),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.name: 129 characters, at most 128"));
  EXPECT_THAT(state_->SubmitJob(std::string(1000, '['), 10),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "more than 32 nested"));
  const std::string path = "{\"data\": {\"train\": {\"path\": \"" +
                           std::string(4097, 'p') + "\"}}}";
  EXPECT_THAT(state_->SubmitJob(path, 10),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.data.train.path: 4097 characters"));
}

TEST_F(CoordinatorStateTest, JobFieldsAreValidated) {
  Reg("ps", 0);
  Reg("worker", 0);
  EXPECT_THAT(state_->SubmitJob("{\"batch_size\": 0}", 10),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.batch_size: must be >= 1, got 0"));
  EXPECT_THAT(
      state_->SubmitJob("{\"epochs\": \"ten\"}", 10),
      StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "job.epochs"));
  EXPECT_THAT(state_->SubmitJob("{\"strategy\": {\"type\": \"magic\"}}", 10),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.strategy.type: 'magic' is not one of "
                                  "parameter_server, central_storage"));
  EXPECT_THAT(state_->SubmitJob("{\"checkpoint\": {\"every_steps\": -1}}", 10),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.checkpoint.every_steps"));
  EXPECT_THAT(
      state_->SubmitJob("{\"checkpoint\": {\"every_seconds\": \"x\"}}", 10),
      StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                          "job.checkpoint.every_seconds"));
  EXPECT_THAT(
      state_->SubmitJob("{\"evaluation\": {\"every_epochs\": 1.5}}", 10),
      StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                          "job.evaluation.every_epochs"));
  EXPECT_THAT(state_->SubmitJob("[1]", 10),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job: expected an object, got [1]"));
  EXPECT_THAT(state_->SubmitJob("{}", 0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "train_examples"));
  EXPECT_EQ(state_->GetJob().state(), v1::JobStatus::NONE);

  auto spec = ParseCoordinatorJobSpec(
      "{\"strategy\": {\"type\": \"central_storage\"}}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->epochs, 1);
  EXPECT_EQ(spec->batch_size, 32);
  EXPECT_EQ(spec->strategy, "central_storage");
  EXPECT_EQ(spec->evaluate_every_epochs, 1);
  EXPECT_EQ(spec->checkpoint_every_steps, 0);
}

TEST_F(CoordinatorStateTest, StepsPerEpochRoundUpAndOneJobAtATime) {
  StartJob(JobJson(3, 32), 100);  // ceil(100 / 32) = 4
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::RUNNING);
  EXPECT_EQ(job.steps_scheduled(), 12);
  EXPECT_THAT(state_->SubmitJob(JobJson(1, 1), 1),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "still running"));
}

TEST_F(CoordinatorStateTest, WaitWithoutJobThenLowestStepFirst) {
  Reg("ps", 0);
  Reg("worker", 0);
  v1::WorkItem wait = Work(0);
  EXPECT_EQ(wait.kind(), v1::WorkItem::WAIT);
  EXPECT_EQ(wait.retry_after_ms(), 50);
  EXPECT_THAT(state_->GetWork(Task("ps", 0), "a"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  auto id = state_->SubmitJob(JobJson(2, 10), 30);  // 3 steps per epoch
  ASSERT_TRUE(id.ok());
  v1::WorkItem a = Work(0);
  v1::WorkItem b = Work(0);
  EXPECT_EQ(a.kind(), v1::WorkItem::TRAIN);
  EXPECT_EQ(a.job_id(), *id);
  EXPECT_EQ(a.step(), 0);
  EXPECT_EQ(b.step(), 1);
  EXPECT_EQ(b.epoch(), 0);
  EXPECT_EQ(b.batch(), 1);
  EXPECT_EQ(b.generation(), state_->generation());
}

TEST_F(CoordinatorStateTest, AMissingEvaluationEndsTheEpochWithoutFigures) {
  StartJob(JobJson(2, 5, /*every_epochs=*/1), 10);  // 2 steps per epoch
  Done(0, Work(0));
  Done(1, Work(1));
  v1::WorkItem eval = Work(1);
  ASSERT_EQ(eval.kind(), v1::WorkItem::EVALUATE);
  v1::ReportWorkRequest missing = Report(1, eval);
  missing.set_evaluation_missing(true);
  missing.set_test_accuracy(0.99);  // ignored: there are no figures
  STRATA_ASSERT_OK(state_->ReportWork(missing));
  v1::JobStatus job = state_->GetJob();
  ASSERT_GE(job.epochs_size(), 1);
  EXPECT_TRUE(job.epochs(0).evaluated());
  EXPECT_TRUE(job.epochs(0).evaluation_missing());
  EXPECT_DOUBLE_EQ(job.epochs(0).test_accuracy(), 0);
  EXPECT_THAT(log_.str(), HasSubstr("\"event\":\"evaluation_missing\""));
  // The epoch gate opens.
  v1::WorkItem s2 = Work(0);
  ASSERT_EQ(s2.kind(), v1::WorkItem::TRAIN);
  EXPECT_EQ(s2.step(), 2);
  // Figures found later (a resent result) replace the "missing".
  v1::ReportWorkRequest figures = Report(1, eval);
  figures.set_test_loss(0.5);
  figures.set_test_accuracy(0.8);
  STRATA_ASSERT_OK(state_->ReportWork(figures));
  job = state_->GetJob();
  EXPECT_FALSE(job.epochs(0).evaluation_missing());
  EXPECT_DOUBLE_EQ(job.epochs(0).test_accuracy(), 0.8);
  // And nothing replaces figures.
  STRATA_ASSERT_OK(state_->ReportWork(missing));
  EXPECT_FALSE(state_->GetJob().epochs(0).evaluation_missing());
}

TEST_F(CoordinatorStateTest, EpochGateAndEvaluation) {
  StartJob(JobJson(2, 5, /*every_epochs=*/1), 10);  // 2 steps per epoch
  v1::WorkItem s0 = Work(0);
  v1::WorkItem s1 = Work(1);
  EXPECT_EQ(s1.step(), 1);
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::WAIT);  // epoch 1 is gated
  now_ += absl::Seconds(2);
  STRATA_ASSERT_OK(state_->ReportWork(Report(0, s0, 2.0, 0.25, 5)));
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::WAIT);
  STRATA_ASSERT_OK(state_->ReportWork(Report(1, s1, 1.0, 0.75, 5)));

  v1::WorkItem eval = Work(1);
  ASSERT_EQ(eval.kind(), v1::WorkItem::EVALUATE);
  EXPECT_EQ(eval.epoch(), 0);
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::WAIT);  // gated until evaluated
  v1::ReportWorkRequest r = Report(1, eval);
  r.set_test_loss(0.4);
  r.set_test_accuracy(0.9);
  STRATA_ASSERT_OK(state_->ReportWork(r));
  STRATA_ASSERT_OK(state_->ReportWork(r));  // duplicate: ignored

  v1::WorkItem s2 = Work(0);
  ASSERT_EQ(s2.kind(), v1::WorkItem::TRAIN);
  EXPECT_EQ(s2.step(), 2);
  EXPECT_EQ(s2.epoch(), 1);
  EXPECT_EQ(s2.batch(), 0);
  Done(0, s2);
  Done(0, Work(0));
  v1::WorkItem last_eval = Work(0);
  ASSERT_EQ(last_eval.kind(), v1::WorkItem::EVALUATE);
  EXPECT_EQ(last_eval.epoch(), 1);
  EXPECT_EQ(state_->GetJob().state(), v1::JobStatus::RUNNING);
  Done(0, last_eval);

  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::SUCCEEDED);
  EXPECT_EQ(job.steps_completed(), 4);
  EXPECT_DOUBLE_EQ(job.wall_seconds(), 2.0);
  ASSERT_EQ(job.epochs_size(), 2);
  const v1::EpochResult& e0 = job.epochs(0);
  EXPECT_EQ(e0.steps(), 2);
  EXPECT_DOUBLE_EQ(e0.loss(), 1.5);
  EXPECT_DOUBLE_EQ(e0.accuracy(), 0.5);
  EXPECT_TRUE(e0.evaluated());
  EXPECT_DOUBLE_EQ(e0.test_loss(), 0.4);
  EXPECT_DOUBLE_EQ(e0.test_accuracy(), 0.9);
  EXPECT_DOUBLE_EQ(e0.elapsed_seconds(), 2.0);
  EXPECT_DOUBLE_EQ(e0.examples_per_second(), 5.0);
  EXPECT_EQ(Work(1).kind(), v1::WorkItem::DONE);
  EXPECT_THAT(log_.str(), HasSubstr("\"event\":\"epoch_end\""));
  // A finished job may be replaced.
  STRATA_ASSERT_OK(state_->SubmitJob(JobJson(1, 5), 5));
  EXPECT_EQ(Work(1).kind(), v1::WorkItem::TRAIN);
}

TEST_F(CoordinatorStateTest, DuplicateAndFailedReportsAndBadReports) {
  StartJob(JobJson(1, 5), 15);  // 3 steps
  v1::WorkItem s0 = Work(0);
  Done(0, s0);
  Done(0, s0);
  Done(1, s0);
  EXPECT_EQ(state_->GetJob().steps_completed(), 1);
  EXPECT_EQ(state_->GetJob().examples(), 10);

  v1::WorkItem s1 = Work(0);
  v1::ReportWorkRequest failed = Report(0, s1);
  failed.set_error("push failed: UNAVAILABLE");
  STRATA_ASSERT_OK(state_->ReportWork(failed));
  EXPECT_EQ(Work(1).step(), 1);  // re-queued

  v1::ReportWorkRequest bad = Report(0, s1);
  bad.mutable_item()->set_step(99);
  EXPECT_THAT(
      state_->ReportWork(bad),
      StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "item.step"));
  bad = Report(0, s1);
  bad.mutable_item()->set_kind(v1::WorkItem::WAIT);
  EXPECT_THAT(state_->ReportWork(bad),
              StatusIs(absl::StatusCode::kInvalidArgument));
  bad = Report(5, s1);
  EXPECT_THAT(state_->ReportWork(bad), StatusIs(absl::StatusCode::kNotFound));
  bad = Report(0, s1);
  bad.mutable_item()->set_job_id("job-of-yesterday");
  STRATA_ASSERT_OK(state_->ReportWork(bad));  // ignored
  EXPECT_EQ(state_->GetJob().steps_completed(), 1);
}

TEST_F(CoordinatorStateTest, MissingPsFailsJobAfterTopologyTimeout) {
  Reg("worker", 0);
  Reg("worker", 1);
  STRATA_ASSERT_OK(state_->SubmitJob(JobJson(1, 5), 10));
  EXPECT_EQ(state_->GetJob().state(), v1::JobStatus::RUNNING);
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::WAIT);
  for (int i = 0; i < 9; ++i) {
    now_ += absl::Seconds(1);
    HeartbeatAll({Task("worker", 0), Task("worker", 1)});
    state_->CheckLeases();
  }
  EXPECT_EQ(state_->GetJob().state(), v1::JobStatus::RUNNING);
  now_ += absl::Seconds(1);
  state_->CheckLeases();
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::FAILED);
  EXPECT_EQ(job.error(),
            "strategy parameter_server needs at least one ps task; none "
            "registered after 10 s; registered: worker:0, worker:1");
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::DONE);
}

TEST_F(CoordinatorStateTest, JobWaitsForPsThenRuns) {
  Reg("worker", 0);
  STRATA_ASSERT_OK(state_->SubmitJob(JobJson(1, 5), 10));
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::WAIT);
  now_ += absl::Seconds(4);
  Reg("ps", 0);
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::TRAIN);
  now_ += absl::Seconds(4.5);
  state_->CheckLeases();
  EXPECT_EQ(state_->GetJob().state(), v1::JobStatus::RUNNING);
}

TEST_F(CoordinatorStateTest, StaticClusterWithoutPsFailsAtOnce) {
  CoordinatorOptions options = Options();
  ClusterSpec cluster;
  cluster.jobs["chief"] = {"c:1"};
  cluster.jobs["worker"] = {"w0:1", "w1:1"};
  options.static_cluster = cluster;
  auto state = Make(options);
  EXPECT_THAT(state->SubmitJob(JobJson(1, 5), 10),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "strategy parameter_server needs at least "
                                  "one ps task; the static cluster"));
  v1::JobStatus job = state->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::FAILED);
  EXPECT_THAT(job.error(), HasSubstr("(jobs: chief, worker)"));
  // A strategy without PS tasks is fine there.
  STRATA_ASSERT_OK(
      state->SubmitJob(JobJson(1, 5, 0, 0, "multi_worker_mirrored"), 10));
  EXPECT_EQ(state->GetJob().state(), v1::JobStatus::RUNNING);
}

// ---------------------------------------------------------------------------
// Checkpoints and PS restarts.

TEST_F(CoordinatorStateTest, CheckpointWaitsForInFlightStepsThenResumes) {
  FakeCheckpointer ckpt;
  StartJob(JobJson(1, 1, 0, /*checkpoint_every_steps=*/2), 6);
  v1::WorkItem s0 = Work(0);
  v1::WorkItem s1 = Work(1);
  v1::WorkItem s2 = Work(0);
  Done(0, s0);
  EXPECT_FALSE(state_->NextPsAction().has_value());
  Done(1, s1);  // 2 completed: a checkpoint is due
  EXPECT_EQ(Work(1).kind(), v1::WorkItem::WAIT);
  EXPECT_FALSE(state_->NextPsAction().has_value());  // step 2 in flight
  Done(0, s2);
  std::optional<PsAction> action = state_->NextPsAction();
  ASSERT_TRUE(action.has_value());
  EXPECT_EQ(action->kind, PsAction::Kind::kSave);
  EXPECT_EQ(action->checkpoint, "ckpt-3");
  EXPECT_FALSE(state_->NextPsAction().has_value());  // one at a time
  EXPECT_EQ(Work(1).kind(), v1::WorkItem::WAIT);
  state_->FinishPsAction(*action, ckpt.SaveAll(action->checkpoint));
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.last_checkpoint(), "ckpt-3");
  EXPECT_EQ(job.last_checkpoint_step(), 3);
  EXPECT_EQ(Work(1).step(), 3);
  EXPECT_THAT(ckpt.saves, ElementsAre("ckpt-3"));
}

TEST_F(CoordinatorStateTest, FailedCheckpointIsNotRecordedAndTrainingGoesOn) {
  StartJob(JobJson(1, 1, 0, 2), 4);
  Done(0, Work(0));
  Done(0, Work(0));
  std::optional<PsAction> action = state_->NextPsAction();
  ASSERT_TRUE(action.has_value());
  state_->FinishPsAction(*action, absl::UnavailableError("ps:0 down"));
  EXPECT_EQ(state_->GetJob().last_checkpoint(), "");
  EXPECT_EQ(Work(0).step(), 2);
  EXPECT_FALSE(state_->NextPsAction().has_value());
}

TEST_F(CoordinatorStateTest, FinalCheckpointBeforeSuccess) {
  StartJob(JobJson(1, 1, 0, 2), 3);
  for (int i = 0; i < 2; ++i) Done(0, Work(0));
  auto first = state_->NextPsAction();
  ASSERT_TRUE(first.has_value());
  state_->FinishPsAction(*first, absl::OkStatus());
  Done(0, Work(0));
  EXPECT_EQ(state_->GetJob().state(), v1::JobStatus::RUNNING);
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::WAIT);
  auto last = state_->NextPsAction();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->checkpoint, "ckpt-3");
  state_->FinishPsAction(*last, absl::OkStatus());
  EXPECT_EQ(state_->GetJob().state(), v1::JobStatus::SUCCEEDED);
  EXPECT_EQ(state_->GetJob().last_checkpoint_step(), 3);
}

TEST_F(CoordinatorStateTest, RequestedCheckpointDrainsThenSaves) {
  FakeCheckpointer ckpt;
  // Checkpoints every 100 steps: none would be due on its own.
  StartJob(JobJson(1, 1, 0, /*checkpoint_every_steps=*/100), 10);
  EXPECT_EQ(state_->RequestCheckpoint(), -1);  // nothing completed yet
  v1::WorkItem s0 = Work(0);
  v1::WorkItem s1 = Work(1);
  Done(0, s0);
  EXPECT_EQ(state_->RequestCheckpoint(), 1);
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::WAIT);     // hand-out paused
  EXPECT_FALSE(state_->NextPsAction().has_value());  // s1 in flight
  Done(1, s1);
  std::optional<PsAction> action = state_->NextPsAction();
  ASSERT_TRUE(action.has_value());
  EXPECT_EQ(action->kind, PsAction::Kind::kSave);
  EXPECT_EQ(action->checkpoint, "ckpt-2");
  EXPECT_LT(state_->CheckpointAttempted(), 1);
  state_->FinishPsAction(*action, ckpt.SaveAll(action->checkpoint));
  EXPECT_EQ(state_->CheckpointAttempted(), 2);
  EXPECT_EQ(state_->LastCheckpoint(), "ckpt-2");
  EXPECT_EQ(Work(0).step(), 2);  // hand-out resumes
  // Nothing new since: no second request.
  EXPECT_EQ(state_->RequestCheckpoint(), -1);
}

TEST_F(CoordinatorStateTest, RequestedCheckpointNeedsCheckpointsAndLivePs) {
  StartJob(JobJson(1, 1), 10);  // no checkpoints in the job
  Done(0, Work(0));
  EXPECT_EQ(state_->RequestCheckpoint(), -1);
  EXPECT_FALSE(state_->NextPsAction().has_value());

  auto other = Make(Options());
  Reg("ps", 0, "a", other.get());
  Reg("worker", 0, "a", other.get());
  ASSERT_TRUE(other->SubmitJob(JobJson(1, 1, 0, 100), 10).ok());
  Done(0, Work(0, "a", other.get()), other.get());
  STRATA_ASSERT_OK(other->Deregister(Task("ps", 0), "a"));
  EXPECT_EQ(other->RequestCheckpoint(), -1);  // a ps task is down
}

TEST_F(CoordinatorStateTest, LeasesTheWorkerNoLongerHoldsAreRequeued) {
  StartJob(JobJson(1, 1), 10);
  v1::WorkItem s0 = Work(0);
  v1::WorkItem s1 = Work(0);
  v1::WorkItem s2 = Work(0);
  v1::WorkItem other = Work(1);
  // worker:0 says it holds s0 and s2: s1's lease was lost in transit.
  absl::StatusOr<int> released =
      state_->ReleaseUnheld(Task("worker", 0), "a", {s0.step(), s2.step()});
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 1);
  EXPECT_EQ(Work(1).step(), s1.step());  // handed out again
  // Another incarnation's or task's leases are not touched.
  released = state_->ReleaseUnheld(Task("worker", 0), "b", {});
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(*released, 0);
  EXPECT_THAT(state_->ReleaseUnheld(Task("driver", 0), "a", {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Done(0, s0);
  Done(0, s2);
  Done(1, other);
  EXPECT_EQ(state_->GetJob().steps_completed(), 3);
}

// A replicated ps task (ps.replication 2): replicas register exclusively;
// the backup of incarnation "a" takes the task over from it with its state
// (no restore, nothing lost) unless "a" fenced it off first.
TEST_F(CoordinatorStateTest, ReplicatedPsTakeoverKeepsStateUnlessFenced) {
  StartJob(JobJson(1, 1, 0, /*checkpoint_every_steps=*/3), 6);
  for (int i = 0; i < 3; ++i) Done(0, Work(0));
  auto save = state_->NextPsAction();  // due at step 3
  ASSERT_TRUE(save.has_value());
  state_->FinishPsAction(*save, absl::OkStatus());
  Done(0, Work(0));  // step 3
  const v1::TaskId ps = Task("ps", 0);
  // Held by "a" (alive): a claim that replaces nothing is refused.
  EXPECT_THAT(state_->Register(ps, "p0:1,p1:1", "b", true, ""),
              StatusIsWithMessage(absl::StatusCode::kAlreadyExists,
                                  "is held by incarnation \"a\""));
  // "a" lost its backup "c" and fenced it: "c" may not take over.
  ASSERT_TRUE(state_->Heartbeat(ps, "a", "c").ok());
  EXPECT_THAT(state_->Register(ps, "p0:1,p1:1", "c", true, "a"),
              StatusIsWithMessage(absl::StatusCode::kAlreadyExists,
                                  "dropped this replica"));
  // A takeover only once "a"'s lease expired (a hung primary) is refused
  // while "a" is alive.
  EXPECT_THAT(state_->Register(ps, "p0:1,p1:1", "b", true, "a",
                               /*only_if_failed=*/true),
              StatusIsWithMessage(absl::StatusCode::kAlreadyExists,
                                  "lease has not expired"));
  // Its backup "b" takes over: no restore, no lost step, work goes on.
  ASSERT_TRUE(state_->Register(ps, "p0:1,p1:1", "b", true, "a").ok());
  EXPECT_THAT(log_.str(), HasSubstr("\"event\":\"ps_failover\""));
  EXPECT_THAT(log_.str(), Not(HasSubstr("ps_restart_detected")));
  EXPECT_FALSE(state_->NextPsAction().has_value());
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::TRAIN);
  EXPECT_EQ(state_->GetJob().lost_steps(), 0);
  // The old primary is fenced off: its heartbeat says so, and it cannot
  // claim the task back while "b" holds it.
  EXPECT_THAT(state_->Heartbeat(ps, "a"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(state_->Register(ps, "p0:1,p1:1", "a", true, ""),
              StatusIs(absl::StatusCode::kAlreadyExists));
  // A replica whose predecessor is gone (lease expired) claims it, with a
  // restore: that is a restart, not a takeover.
  now_ += absl::Seconds(30);
  state_->CheckLeases();
  // (A backup of "b" asking for a takeover once b's lease expired would
  // get it now, with the state.)
  ASSERT_TRUE(state_->Register(ps, "p0:1,p1:1", "d", true, "").ok());
  EXPECT_THAT(log_.str(), HasSubstr("ps_restart_detected"));
}

TEST_F(CoordinatorStateTest, PsRestartRestoresCheckpointAndRequeuesLaterSteps) {
  FakeCheckpointer ckpt;
  StartJob(JobJson(1, 1, 0, /*checkpoint_every_steps=*/3), 6);
  for (int i = 0; i < 3; ++i) Done(0, Work(0));
  auto save = state_->NextPsAction();
  ASSERT_TRUE(save.has_value());
  state_->FinishPsAction(*save, ckpt.SaveAll(save->checkpoint));
  Done(0, Work(0));  // step 3
  Done(1, Work(1));  // step 4
  v1::WorkItem s5 = Work(0);
  EXPECT_EQ(s5.step(), 5);
  EXPECT_EQ(state_->GetJob().steps_completed(), 5);

  Reg("ps", 0, "restarted");  // kill -9 and back
  EXPECT_THAT(log_.str(), HasSubstr("\"event\":\"ps_restart_detected\""));
  EXPECT_EQ(Work(1).kind(), v1::WorkItem::WAIT);
  EXPECT_FALSE(state_->NextPsAction().has_value());  // step 5 in flight
  Done(0, s5);  // handed out before the restart: re-queued, not counted
  EXPECT_EQ(state_->GetJob().steps_completed(), 5);
  auto restore = state_->NextPsAction();
  ASSERT_TRUE(restore.has_value());
  EXPECT_EQ(restore->kind, PsAction::Kind::kRestore);
  EXPECT_EQ(restore->checkpoint, "ckpt-3");

  // A failed restore is retried after restore_retry.
  state_->FinishPsAction(*restore, absl::UnavailableError("not yet"));
  EXPECT_FALSE(state_->NextPsAction().has_value());
  now_ += absl::Seconds(1);
  HeartbeatAll({Task("worker", 0), Task("worker", 1)});
  state_->Heartbeat(Task("ps", 0), "restarted").IgnoreError();
  restore = state_->NextPsAction();
  ASSERT_TRUE(restore.has_value());
  state_->FinishPsAction(*restore, ckpt.RestoreAll(restore->checkpoint));
  EXPECT_THAT(ckpt.restores, ElementsAre("ckpt-3"));

  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.lost_steps(), 2);
  EXPECT_EQ(job.steps_completed(), 3);
  EXPECT_EQ(job.steps_scheduled(), 6);
  EXPECT_EQ(job.epochs(0).steps(), 3);
  EXPECT_THAT(log_.str(), HasSubstr("\"event\":\"ps_restored\""));
  for (int64_t expected = 3; expected < 6; ++expected) {
    v1::WorkItem item = Work(1);
    ASSERT_EQ(item.kind(), v1::WorkItem::TRAIN);
    EXPECT_EQ(item.step(), expected);
    Done(1, item);
  }
  auto final_save = state_->NextPsAction();
  ASSERT_TRUE(final_save.has_value());
  state_->FinishPsAction(*final_save, absl::OkStatus());
  job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::SUCCEEDED);
  EXPECT_EQ(job.steps_completed(), 6);
  EXPECT_EQ(job.lost_steps(), 2);
}

// A job checkpointing after every `every` steps, keeping `keep`, failing
// after `max_failures` failed saves in a row (0: never).
std::string CheckpointJob(int every, int keep, int max_failures = 0) {
  nlohmann::json j = nlohmann::json::parse(JobJson(1, 1, 0, every));
  j["checkpoint"]["keep"] = keep;
  j["checkpoint"]["max_failures"] = max_failures;
  return j.dump();
}

TEST_F(CoordinatorStateTest, KeepsTheNewestCheckpointsAndPrunesOlderOnes) {
  FakeCheckpointer ckpt;
  StartJob(CheckpointJob(/*every=*/1, /*keep=*/2), 5);
  std::vector<std::vector<std::string>> prunes;
  for (int i = 0; i < 4; ++i) {
    Done(0, Work(0));
    std::optional<PsAction> save = state_->NextPsAction();
    ASSERT_TRUE(save.has_value());
    ASSERT_EQ(save->kind, PsAction::Kind::kSave);
    prunes.push_back(save->prune);
    state_->FinishPsAction(*save, ckpt.SaveAll(save->checkpoint));
  }
  // ckpt-1 and ckpt-2 are kept; ckpt-3 drops ckpt-1, ckpt-4 drops ckpt-2.
  EXPECT_THAT(prunes, ElementsAre(ElementsAre(), ElementsAre(),
                                  ElementsAre("ckpt-1"), ElementsAre("ckpt-2")));
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.last_checkpoint(), "ckpt-4");
  EXPECT_EQ(job.checkpoints_saved(), 4);
  EXPECT_EQ(job.checkpoints_failed(), 0);
  // The kept ones are what a restore may fall back to: ckpt-4, then ckpt-3.
  Reg("ps", 0, "restarted");
  ckpt.restore_status["ckpt-4"] = absl::DataLossError("ckpt-4/0.bin: CRC");
  std::optional<PsAction> restore = state_->NextPsAction();
  ASSERT_TRUE(restore.has_value());
  state_->FinishPsAction(*restore, ckpt.RestoreAll(restore->checkpoint));
  restore = state_->NextPsAction();
  ASSERT_TRUE(restore.has_value());
  EXPECT_EQ(restore->checkpoint, "ckpt-3");
}

TEST_F(CoordinatorStateTest, ADiscardedSaveDeletesNothing) {
  StartJob(CheckpointJob(/*every=*/1, /*keep=*/1), 5);
  Done(0, Work(0));
  std::optional<PsAction> first = state_->NextPsAction();
  ASSERT_TRUE(first.has_value());
  EXPECT_THAT(state_->FinishPsAction(*first, absl::OkStatus()), ElementsAre());
  Done(0, Work(0));
  std::optional<PsAction> second = state_->NextPsAction();
  ASSERT_TRUE(second.has_value());
  EXPECT_THAT(second->prune, ElementsAre("ckpt-1"));
  // A ps task restarts during the save: it is discarded, ckpt-1 stays.
  Reg("ps", 0, "restarted");
  EXPECT_THAT(state_->FinishPsAction(*second, absl::OkStatus()),
              ElementsAre());
  EXPECT_EQ(state_->GetJob().last_checkpoint(), "ckpt-1");
  std::optional<PsAction> restore = state_->NextPsAction();
  ASSERT_TRUE(restore.has_value());
  EXPECT_EQ(restore->checkpoint, "ckpt-1");
  state_->FinishPsAction(*restore, absl::OkStatus());
  // A recorded save hands back what it no longer keeps. (It rewrites the
  // discarded ckpt-2, which a restarted task may have written, so that one
  // is not deleted.)
  Done(0, Work(0));
  std::optional<PsAction> third = state_->NextPsAction();
  ASSERT_TRUE(third.has_value());
  EXPECT_EQ(third->checkpoint, "ckpt-2");
  EXPECT_THAT(third->prune, ElementsAre("ckpt-1"));
  EXPECT_THAT(state_->FinishPsAction(*third, absl::OkStatus()),
              ElementsAre("ckpt-1"));
}

TEST_F(CoordinatorStateTest, CheckpointsThatCouldNotBeDeletedArePrunedLater) {
  StartJob(CheckpointJob(/*every=*/1, /*keep=*/1), 5);
  for (int i = 0; i < 2; ++i) {
    Done(0, Work(0));
    std::optional<PsAction> save = state_->NextPsAction();
    ASSERT_TRUE(save.has_value());
    state_->FinishPsAction(*save, absl::OkStatus());
  }
  state_->PruneLater({"ckpt-1", "ckpt-2"});  // ckpt-2 is kept: not listed
  Done(0, Work(0));
  std::optional<PsAction> save = state_->NextPsAction();
  ASSERT_TRUE(save.has_value());
  EXPECT_THAT(save->prune, ElementsAre("ckpt-1", "ckpt-2"));
  EXPECT_THAT(state_->FinishPsAction(*save, absl::OkStatus()),
              ElementsAre("ckpt-1", "ckpt-2"));
}

TEST_F(CoordinatorStateTest, CentralStorageWithTwoPsTasksSurvivesEitherRestart) {
  // central_storage keeps every variable on ps:0. A restart of ps:1 loses
  // nothing (the job used to fail: "the other ps task(s) cannot be rewound
  // to step 0"); one of ps:0 rewinds the group to step 0, which is
  // consistent because ps:1 holds nothing.
  Reg("ps", 1);
  StartJob(JobJson(1, 1, 0, 0, "central_storage"), 10);
  ASSERT_EQ(state_->GetJob().state(), v1::JobStatus::RUNNING);
  Reg("ps", 1, "restarted");
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::RUNNING) << job.error();
  EXPECT_EQ(job.lost_steps(), 0);
  EXPECT_THAT(log_.str(), HasSubstr("holds none of the job's variables"));
  Reg("ps", 0, "restarted");
  job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::RUNNING) << job.error();
  EXPECT_THAT(log_.str(), HasSubstr("\"member\":\"ps:0\""));
}

TEST_F(CoordinatorStateTest, RestoreFallsBackToTheNewestCheckpointThatVerifies) {
  FakeCheckpointer ckpt;
  StartJob(CheckpointJob(/*every=*/2, /*keep=*/3), 8);
  for (int i = 0; i < 6; ++i) {
    Done(0, Work(0));
    if (std::optional<PsAction> save = state_->NextPsAction()) {
      state_->FinishPsAction(*save, ckpt.SaveAll(save->checkpoint));
    }
  }
  ASSERT_THAT(ckpt.saves, ElementsAre("ckpt-2", "ckpt-4", "ckpt-6"));
  Done(0, Work(0));  // step 6

  Reg("ps", 0, "restarted");
  // The newest is corrupt, the next gone from a task: ckpt-2 is restored.
  ckpt.restore_status["ckpt-6"] =
      absl::DataLossError("ckpt-6/3.bin: CRC32C mismatch");
  ckpt.restore_status["ckpt-4"] =
      absl::NotFoundError("no checkpoint at ckpt-4 (no manifest.json)");
  for (int i = 0; i < 3; ++i) {
    std::optional<PsAction> restore = state_->NextPsAction();
    ASSERT_TRUE(restore.has_value()) << i;
    ASSERT_EQ(restore->kind, PsAction::Kind::kRestore);
    state_->FinishPsAction(*restore, ckpt.RestoreAll(restore->checkpoint));
  }
  EXPECT_THAT(ckpt.restores, ElementsAre("ckpt-6", "ckpt-4", "ckpt-2"));
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::RUNNING);
  EXPECT_EQ(job.steps_completed(), 2);
  EXPECT_EQ(job.lost_steps(), 5);
  EXPECT_EQ(job.last_checkpoint(), "ckpt-2");
  ASSERT_EQ(job.checkpoints_skipped_size(), 2);
  EXPECT_THAT(job.checkpoints_skipped(0), HasSubstr("ckpt-6: DATA_LOSS"));
  EXPECT_THAT(job.checkpoints_skipped(1), HasSubstr("ckpt-4: NOT_FOUND"));
  EXPECT_THAT(log_.str(), HasSubstr("\"event\":\"checkpoint_skipped\""));
  v1::WorkItem next = Work(0);
  EXPECT_EQ(next.step(), 2);

  // The skipped ones are deleted with the next save (ckpt-4 is written
  // afresh, so only ckpt-6 goes).
  Done(0, next);
  Done(0, Work(0));
  std::optional<PsAction> save = state_->NextPsAction();
  ASSERT_TRUE(save.has_value());
  EXPECT_EQ(save->checkpoint, "ckpt-4");
  EXPECT_THAT(save->prune, ElementsAre("ckpt-6"));
  state_->FinishPsAction(*save, absl::OkStatus());
  EXPECT_EQ(state_->GetJob().last_checkpoint(), "ckpt-4");
}

TEST_F(CoordinatorStateTest, RestoreFailsTheJobWhenNoCheckpointVerifies) {
  FakeCheckpointer ckpt;
  StartJob(CheckpointJob(/*every=*/1, /*keep=*/2), 4);
  for (int i = 0; i < 2; ++i) {
    Done(0, Work(0));
    std::optional<PsAction> save = state_->NextPsAction();
    ASSERT_TRUE(save.has_value());
    state_->FinishPsAction(*save, ckpt.SaveAll(save->checkpoint));
  }
  Reg("ps", 0, "restarted");
  ckpt.status = absl::DataLossError("manifest.json: invalid JSON");
  for (int i = 0; i < 2; ++i) {
    std::optional<PsAction> restore = state_->NextPsAction();
    ASSERT_TRUE(restore.has_value()) << i;
    state_->FinishPsAction(*restore, ckpt.RestoreAll(restore->checkpoint));
  }
  EXPECT_FALSE(state_->NextPsAction().has_value());
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::FAILED);
  EXPECT_THAT(job.error(), HasSubstr("no checkpoint to restore the ps tasks "
                                     "from verifies: ckpt-2: DATA_LOSS"));
  EXPECT_THAT(job.error(), HasSubstr("ckpt-1: DATA_LOSS"));
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::DONE);
}

TEST_F(CoordinatorStateTest, RestoreThatKeepsFailingEndsTheJobInBoundedTime) {
  CoordinatorOptions options = Options();
  options.restore_attempts = 3;
  state_ = Make(options);
  FakeCheckpointer ckpt;
  StartJob(CheckpointJob(/*every=*/1, /*keep=*/3), 4);
  Done(0, Work(0));
  std::optional<PsAction> save = state_->NextPsAction();
  ASSERT_TRUE(save.has_value());
  state_->FinishPsAction(*save, ckpt.SaveAll(save->checkpoint));
  Reg("ps", 0, "restarted");
  for (int i = 0; i < 3; ++i) {
    now_ += options.restore_retry;
    HeartbeatAll({Task("worker", 0), Task("worker", 1)});
    state_->Heartbeat(Task("ps", 0), "restarted").IgnoreError();
    std::optional<PsAction> restore = state_->NextPsAction();
    ASSERT_TRUE(restore.has_value()) << i;
    EXPECT_EQ(restore->checkpoint, "ckpt-1");
    state_->FinishPsAction(*restore,
                           absl::InternalError("cannot read ckpt-1/0.bin: EIO"));
  }
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::FAILED);
  EXPECT_THAT(job.error(), HasSubstr("restoring the ps tasks from ckpt-1 "
                                     "failed 3 times in a row"));
  EXPECT_THAT(job.error(), HasSubstr("EIO"));
}

TEST_F(CoordinatorStateTest, FailedCheckpointsAreCountedAndCanEndTheJob) {
  StartJob(CheckpointJob(/*every=*/1, /*keep=*/3, /*max_failures=*/3), 10);
  const absl::Status full =
      absl::InternalError("cannot write ckpt/0.bin: No space left on device");
  Done(0, Work(0));
  std::optional<PsAction> save = state_->NextPsAction();
  ASSERT_TRUE(save.has_value());
  state_->FinishPsAction(*save, absl::OkStatus());
  for (int i = 0; i < 2; ++i) {
    Done(0, Work(0));
    save = state_->NextPsAction();
    ASSERT_TRUE(save.has_value());
    state_->FinishPsAction(*save, full);
  }
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::RUNNING);
  EXPECT_EQ(job.checkpoints_saved(), 1);
  EXPECT_EQ(job.checkpoints_failed(), 2);
  EXPECT_EQ(job.checkpoint_failures_in_a_row(), 2);
  EXPECT_THAT(job.last_checkpoint_error(), HasSubstr("No space left"));
  EXPECT_EQ(job.last_checkpoint(), "ckpt-1");
  EXPECT_THAT(log_.str(), HasSubstr("\"level\":\"error\""));
  // A success resets the run of failures, not the count.
  Done(0, Work(0));
  save = state_->NextPsAction();
  ASSERT_TRUE(save.has_value());
  state_->FinishPsAction(*save, absl::OkStatus());
  EXPECT_EQ(state_->GetJob().checkpoint_failures_in_a_row(), 0);
  for (int i = 0; i < 3; ++i) {
    Done(0, Work(0));
    save = state_->NextPsAction();
    ASSERT_TRUE(save.has_value()) << i;
    state_->FinishPsAction(*save, full);
  }
  job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::FAILED);
  EXPECT_EQ(job.checkpoints_failed(), 5);
  EXPECT_THAT(job.error(),
              HasSubstr("checkpoint failed 3 times in a row "
                        "(job.checkpoint.max_failures is 3)"));
  EXPECT_THAT(job.error(), HasSubstr("No space left on device"));
}

TEST_F(CoordinatorStateTest, KeptCheckpointsSurviveACoordinatorRestart) {
  CoordinatorOptions options = Options();
  options.state_dir = TempDir();
  state_ = Make(options);
  FakeCheckpointer ckpt;
  StartJob(CheckpointJob(/*every=*/1, /*keep=*/2), 6);
  for (int i = 0; i < 3; ++i) {
    Done(0, Work(0));
    std::optional<PsAction> save = state_->NextPsAction();
    ASSERT_TRUE(save.has_value());
    state_->FinishPsAction(*save, i == 1 ? absl::InternalError("disk")
                                          : ckpt.SaveAll(save->checkpoint));
  }
  state_.reset();
  state_ = Make(options);
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.last_checkpoint(), "ckpt-3");
  EXPECT_EQ(job.checkpoints_saved(), 2);
  EXPECT_EQ(job.checkpoints_failed(), 1);
  EXPECT_EQ(job.last_checkpoint_error(), "INTERNAL: disk");
  Reg("ps", 0, "restarted");
  ckpt.restore_status["ckpt-3"] = absl::DataLossError("bad");
  std::optional<PsAction> restore = state_->NextPsAction();
  ASSERT_TRUE(restore.has_value());
  state_->FinishPsAction(*restore, ckpt.RestoreAll(restore->checkpoint));
  restore = state_->NextPsAction();
  ASSERT_TRUE(restore.has_value());
  EXPECT_EQ(restore->checkpoint, "ckpt-1");  // kept across the restart
}

TEST_F(CoordinatorStateTest, PsRestartWithoutCheckpointRedoesEverything) {
  StartJob(JobJson(1, 1), 4);
  Done(0, Work(0));
  Done(0, Work(0));
  Reg("ps", 0, "restarted");
  EXPECT_FALSE(state_->NextPsAction().has_value());  // nothing to restore
  v1::WorkItem item = Work(0);
  ASSERT_EQ(item.kind(), v1::WorkItem::TRAIN);
  EXPECT_EQ(item.step(), 0);
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.lost_steps(), 2);
  EXPECT_EQ(job.steps_completed(), 0);
}

TEST_F(CoordinatorStateTest, DownPsPausesWork) {
  StartJob(JobJson(1, 1), 4);
  Done(0, Work(0));
  now_ += absl::Seconds(3);
  HeartbeatAll({Task("worker", 0), Task("worker", 1)});
  now_ += absl::Seconds(3);
  HeartbeatAll({Task("worker", 0), Task("worker", 1)});
  state_->CheckLeases();  // ps:0 failed
  EXPECT_EQ(Work(0).kind(), v1::WorkItem::WAIT);
  Reg("ps", 0, "a");  // the same process is back (a partition)
  EXPECT_EQ(Work(0).step(), 1);
  EXPECT_EQ(state_->GetJob().lost_steps(), 0);
}

TEST_F(CoordinatorStateTest, ConcurrentWorkersCompleteEveryStepOnce) {
  CoordinatorOptions options = Options();
  options.state_dir = TempDir();
  state_ = Make(options);
  constexpr int kWorkers = 4;
  Reg("ps", 0);
  for (int w = 0; w < kWorkers; ++w) Reg("worker", w);
  // 2 epochs of 40 steps, evaluated each epoch, a checkpoint every 10 steps.
  STRATA_ASSERT_OK(state_->SubmitJob(JobJson(2, 1, 1, 10), 40));
  std::atomic<int> trained{0};
  std::atomic<int> evaluated{0};
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (;;) {
        auto item = state_->GetWork(Task("worker", w), "a");
        if (!item.ok()) return;
        if (item->kind() == v1::WorkItem::DONE) return;
        if (item->kind() == v1::WorkItem::WAIT) continue;
        (item->kind() == v1::WorkItem::TRAIN ? trained : evaluated)++;
        if (!state_->ReportWork(Report(w, *item)).ok()) return;
      }
    });
  }
  std::vector<std::string> saves;
  std::thread driver([&] {
    while (!over.load()) {
      if (auto action = state_->NextPsAction()) {
        saves.push_back(action->checkpoint);
        state_->FinishPsAction(*action, absl::OkStatus());
      }
    }
  });
  for (std::thread& t : threads) t.join();
  over = true;
  driver.join();
  v1::JobStatus job = state_->GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::SUCCEEDED);
  EXPECT_EQ(job.steps_completed(), 80);
  EXPECT_EQ(trained.load(), 80);
  EXPECT_EQ(evaluated.load(), 2);
  EXPECT_EQ(job.examples(), 800);
  EXPECT_EQ(saves.size(), 8u);
  EXPECT_EQ(job.last_checkpoint(), "ckpt-80");
  auto reloaded = Make(options);
  EXPECT_EQ(reloaded->GetJob().steps_completed(), 80);
}

// ---------------------------------------------------------------------------
// Barriers.

TEST_F(CoordinatorStateTest, BarrierReleasesWhenAllArrive) {
  std::vector<std::string> released;
  auto done = [&released](const std::string& who) {
    return [&released, who](absl::Status s) {
      released.push_back(who + ":" +
                         std::string(absl::StatusCodeToString(s.code())));
    };
  };
  STRATA_ASSERT_OK(
      state_->ArriveAtBarrier("init", Task("worker", 0), 2, 1, done("w0")));
  EXPECT_TRUE(released.empty());
  EXPECT_THAT(
      state_->ArriveAtBarrier("init", Task("worker", 1), 3, 2, done("bad")),
      StatusIs(absl::StatusCode::kInvalidArgument));
  STRATA_ASSERT_OK(
      state_->ArriveAtBarrier("init", Task("worker", 1), 2, 3, done("w1")));
  EXPECT_THAT(released, ElementsAre("w0:OK", "w1:OK"));

  released.clear();
  STRATA_ASSERT_OK(
      state_->ArriveAtBarrier("init", Task("worker", 0), 2, 4, done("w0")));
  EXPECT_TRUE(state_->CancelBarrierWait(4));
  EXPECT_FALSE(state_->CancelBarrierWait(4));
  STRATA_ASSERT_OK(
      state_->ArriveAtBarrier("init", Task("worker", 0), 2, 5, done("w0")));
  state_->CancelAllBarriers(absl::UnavailableError("bye"));
  EXPECT_THAT(released, ElementsAre("w0:UNAVAILABLE"));
}

TEST_F(CoordinatorStateTest, BarrierAbortsWhenAWaiterFails) {
  Reg("worker", 0);
  absl::Status result;
  STRATA_ASSERT_OK(
      state_->ArriveAtBarrier("sync", Task("worker", 0), 2, 1,
                              [&result](absl::Status s) { result = s; }));
  now_ += absl::Seconds(6);
  state_->CheckLeases();
  EXPECT_THAT(result, StatusIsWithMessage(absl::StatusCode::kAborted,
                                          "worker:0 failed"));
}

// ---------------------------------------------------------------------------
// Persistence.

TEST_F(CoordinatorStateTest, StateSurvivesARestart) {
  CoordinatorOptions options = Options();
  options.state_dir = TempDir();
  state_ = Make(options);
  StartJob(JobJson(2, 1, 0, /*checkpoint_every_steps=*/3), 3);
  Done(0, Work(0));
  v1::WorkItem s1 = Work(1);
  Done(0, Work(0));  // step 2
  Done(1, s1);
  auto save = state_->NextPsAction();
  ASSERT_TRUE(save.has_value());
  state_->FinishPsAction(*save, absl::OkStatus());
  Done(0, Work(0));           // step 3 (epoch 1)
  v1::WorkItem s4 = Work(1);  // in flight at the "crash"
  EXPECT_EQ(s4.step(), 4);
  const v1::JobStatus before = state_->GetJob();
  const int64_t generation = state_->generation();
  EXPECT_TRUE(std::filesystem::exists(options.state_dir + "/state.json"));
  EXPECT_FALSE(std::filesystem::exists(options.state_dir + "/state.json.tmp"));

  state_.reset();  // no flush or shutdown: as after kill -9
  now_ += absl::Seconds(30);
  state_ = Make(options);
  v1::JobStatus after = state_->GetJob();
  EXPECT_EQ(after.job_id(), before.job_id());
  EXPECT_EQ(after.state(), v1::JobStatus::RUNNING);
  EXPECT_EQ(after.steps_completed(), 4);
  EXPECT_EQ(after.last_checkpoint(), "ckpt-3");
  EXPECT_EQ(after.last_checkpoint_step(), 3);
  EXPECT_EQ(after.examples(), before.examples());
  ASSERT_EQ(after.epochs_size(), 2);
  EXPECT_DOUBLE_EQ(after.epochs(0).loss(), before.epochs(0).loss());
  EXPECT_EQ(state_->generation(), generation);
  // Members keep their incarnation and get a full lease.
  state_->CheckLeases();
  STRATA_ASSERT_OK(state_->Heartbeat(Task("worker", 1), "a"));
  // The in-flight step is pending again; the late report still counts.
  EXPECT_EQ(Work(0).step(), 4);
  Done(1, s4);
  EXPECT_EQ(Work(0).step(), 5);
  EXPECT_EQ(state_->GetJob().steps_completed(), 5);
}

TEST_F(CoordinatorStateTest, CorruptStateFileIsAClearError) {
  CoordinatorOptions options = Options();
  options.state_dir = TempDir();
  std::filesystem::create_directories(options.state_dir);
  const std::string path = options.state_dir + "/state.json";
  {
    std::ofstream out(path);
    out << "{\"format\": 1, \"generation\": ";
  }
  auto state = CoordinatorState::Create(options, &logger_);
  EXPECT_THAT(state, StatusIsWithMessage(absl::StatusCode::kDataLoss, path));
  EXPECT_THAT(state,
              StatusIsWithMessage(absl::StatusCode::kDataLoss, "invalid JSON"));
  {
    std::ofstream out(path);
    out << R"({"format": 1, "generation": 3, "members": [)"
        << R"({"role": "worker", "index": 0, "address": "", )"
        << R"("incarnation": "a", "state": "SLEEPY"}]})";
  }
  EXPECT_THAT(CoordinatorState::Create(options, &logger_),
              StatusIsWithMessage(absl::StatusCode::kDataLoss, "SLEEPY"));
  {
    std::ofstream out(path);
    out << R"({"format": 1, "generation": 3})";
  }
  EXPECT_THAT(CoordinatorState::Create(options, &logger_),
              StatusIsWithMessage(absl::StatusCode::kDataLoss, "members"));
}

TEST_F(CoordinatorStateTest, BadOptionsAreRejected) {
  CoordinatorOptions options = Options();
  options.heartbeat_interval = options.lease;
  EXPECT_THAT(CoordinatorState::Create(options, &logger_),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StepSetTest, RangesMergeAndSubtract) {
  StepSet set;
  EXPECT_TRUE(set.Insert(3));
  EXPECT_TRUE(set.Insert(1));
  EXPECT_TRUE(set.Insert(2));
  EXPECT_FALSE(set.Insert(2));
  EXPECT_TRUE(set.Insert(0));
  EXPECT_TRUE(set.Insert(7));
  EXPECT_EQ(set.size(), 5);
  EXPECT_THAT(set.Ranges(),
              ElementsAre(std::make_pair(int64_t{0}, int64_t{4}),
                          std::make_pair(int64_t{7}, int64_t{8})));
  EXPECT_EQ(set.NextAbsent(0), 4);
  EXPECT_EQ(set.NextAbsent(5), 5);
  EXPECT_EQ(set.NextAbsent(7), 8);
  StepSet other;
  STRATA_ASSERT_OK(other.SetRanges({{0, 2}, {2, 3}}));
  EXPECT_EQ(other.size(), 3);
  EXPECT_THAT(set.Minus(other), ElementsAre(3, 7));
  EXPECT_FALSE(other.SetRanges({{2, 3}, {0, 1}}).ok());
  EXPECT_FALSE(other.SetRanges({{-1, 3}}).ok());
}

}  // namespace
}  // namespace strata

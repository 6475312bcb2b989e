// PsWorker's recovery logic against a fake coordinator (client/
// coordinator_client.h's Coordinator interface) and a real PS in-process on
// 127.0.0.1:0: a coordinator that forgot the worker (NOT_FOUND to its
// heartbeat and to its reports), and one whose answer was lost after it
// took the reports (UNAVAILABLE), still see every step trained once and
// reported, the worker registered again, and the run ended by DONE; a
// finished job ends Run at once; a job that cannot run here fails it.
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/coordinator_client.h"
#include "common/logging.h"
#include "gtest/gtest.h"
#include "server/ps_server.h"
#include "tests/test_util.h"
#include "worker/ps_worker.h"

namespace strata {
namespace {

constexpr int kSteps = 8;

std::string JobJson() {
  return R"({
    "name": "recovery",
    "model": {"input_shape": [784],
              "layers": [{"type": "dense", "units": 8, "activation": "relu"},
                         {"type": "dense", "units": 10,
                          "activation": "softmax"}]},
    "loss": "sparse_categorical_crossentropy",
    "metrics": ["accuracy"],
    "optimizer": {"type": "sgd", "learning_rate": 0.05},
    "data": {"format": "idx",
      "train": {"images": "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                "labels": "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"},
      "test": {"images": "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz",
               "labels": "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"},
      "scale": 255.0, "limit_train": 256, "limit_test": 64},
    "strategy": {"type": "parameter_server", "update": "async"},
    "epochs": 1, "batch_size": 32, "seed": 1, "shuffle_seed": 1,
    "checkpoint": {"every_steps": 0},
    "evaluation": {"every_epochs": 1}
  })";
}

// A coordinator of one job of kSteps steps and one evaluation, with faults
// to inject. Thread-safe.
class FakeCoordinator : public Coordinator {
 public:
  explicit FakeCoordinator(std::string ps_address)
      : ps_address_(std::move(ps_address)) {}

  // Faults: the first heartbeat answers NOT_FOUND (the task is unknown);
  // the first report call answers NOT_FOUND; the first report call that
  // carries a TRAIN report takes it and then answers UNAVAILABLE (the
  // answer was lost).
  bool forget_once = false;
  bool lose_answer_once = false;
  v1::JobStatus::State state = v1::JobStatus::RUNNING;
  std::string job_json = JobJson();

  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& r) override {
    absl::MutexLock lock(&mu_);
    ++registers_;
    incarnations_.insert(r.incarnation());
    v1::RegisterResponse out;
    out.set_generation(registers_);
    out.set_lease_ms(5000);
    out.set_heartbeat_ms(20);
    return out;
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest&) override {
    absl::MutexLock lock(&mu_);
    if (forget_once && !heartbeat_forgot_) {
      heartbeat_forgot_ = true;
      return absl::NotFoundError("task worker:0 is not registered");
    }
    return v1::HeartbeatResponse();
  }
  absl::Status Deregister(const v1::DeregisterRequest&) override {
    absl::MutexLock lock(&mu_);
    ++deregisters_;
    return absl::OkStatus();
  }
  absl::StatusOr<v1::GetClusterSpecResponse> GetClusterSpec() override {
    v1::GetClusterSpecResponse out;
    out.set_tf_config(absl::StrCat(R"({"cluster": {"ps": [")", ps_address_,
                                   R"("], "worker": ["127.0.0.1:1"]}})"));
    return out;
  }
  absl::StatusOr<v1::SubmitJobResponse> SubmitJob(
      const v1::SubmitJobRequest&) override {
    return absl::UnimplementedError("not in this fake");
  }
  absl::StatusOr<v1::JobStatus> GetJob() override {
    v1::JobStatus out;
    out.set_job_id("job-1");
    out.set_job_json(job_json);
    out.set_state(state);
    out.set_steps_scheduled(kSteps);
    return out;
  }
  absl::StatusOr<v1::WorkItem> GetWork(const v1::GetWorkRequest&) override {
    return absl::UnimplementedError("the worker leases through reports");
  }
  absl::StatusOr<v1::ReportWorkResponse> ReportWork(
      const v1::ReportWorkRequest&) override {
    return absl::UnimplementedError("the worker reports in batches");
  }
  absl::StatusOr<v1::ReportWorkBatchResponse> ReportWorkBatch(
      const v1::ReportWorkBatchRequest& r) override {
    absl::MutexLock lock(&mu_);
    ++report_calls_;
    if (forget_once && !reports_forgot_) {
      reports_forgot_ = true;
      return absl::NotFoundError("task worker:0 is not registered");
    }
    bool has_train = false;
    for (const v1::ReportWorkRequest& report : r.reports()) {
      if (report.item().kind() == v1::WorkItem::TRAIN) {
        has_train = true;
        EXPECT_TRUE(report.error().empty()) << report.error();
        ++reported_[report.item().step()];
        losses_[report.item().step()] = report.loss();
      } else if (report.item().kind() == v1::WorkItem::EVALUATE) {
        ++evaluations_;
      }
    }
    if (lose_answer_once && has_train && !answer_lost_) {
      answer_lost_ = true;
      return absl::UnavailableError("the answer was lost");
    }
    v1::ReportWorkBatchResponse out;
    std::set<int64_t> held(r.holding().begin(), r.holding().end());
    for (int i = 0; i < r.max_items() && next_step_ < kSteps; ++i) {
      v1::WorkItem* item = out.add_items();
      item->set_kind(v1::WorkItem::TRAIN);
      item->set_job_id("job-1");
      item->set_epoch(0);
      item->set_batch(next_step_);
      item->set_step(next_step_++);
    }
    const bool trained = static_cast<int>(reported_.size()) == kSteps;
    if (trained && !evaluation_sent_ && r.max_items() > 0) {
      evaluation_sent_ = true;
      v1::WorkItem* item = out.add_items();
      item->set_kind(v1::WorkItem::EVALUATE);
      item->set_job_id("job-1");
      item->set_epoch(0);
    } else if (trained && evaluations_ > 0 &&
               (!forget_once || registers_ >= 2)) {
      // (A forgotten task is done once it registered again.)
      out.add_items()->set_kind(v1::WorkItem::DONE);
    } else if (out.items().empty()) {
      v1::WorkItem* item = out.add_items();
      item->set_kind(v1::WorkItem::WAIT);
      item->set_retry_after_ms(5);
    }
    return out;
  }
  absl::StatusOr<v1::GroupAssignment> JoinGroup(
      const v1::JoinGroupRequest&) override {
    return absl::UnimplementedError("not in this fake");
  }
  const std::string& target() const override { return target_; }

  int registers() const {
    absl::MutexLock lock(&mu_);
    return registers_;
  }
  int deregisters() const {
    absl::MutexLock lock(&mu_);
    return deregisters_;
  }
  std::map<int64_t, int> reported() const {
    absl::MutexLock lock(&mu_);
    return reported_;
  }
  std::map<int64_t, double> losses() const {
    absl::MutexLock lock(&mu_);
    return losses_;
  }
  int evaluations() const {
    absl::MutexLock lock(&mu_);
    return evaluations_;
  }
  bool answer_lost() const {
    absl::MutexLock lock(&mu_);
    return answer_lost_;
  }

 private:
  const std::string ps_address_;
  const std::string target_ = "fake-coordinator";
  mutable absl::Mutex mu_;
  int registers_ ABSL_GUARDED_BY(mu_) = 0;
  int deregisters_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> incarnations_ ABSL_GUARDED_BY(mu_);
  bool heartbeat_forgot_ ABSL_GUARDED_BY(mu_) = false;
  bool reports_forgot_ ABSL_GUARDED_BY(mu_) = false;
  bool answer_lost_ ABSL_GUARDED_BY(mu_) = false;
  int report_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, int> reported_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, double> losses_ ABSL_GUARDED_BY(mu_);
  bool evaluation_sent_ ABSL_GUARDED_BY(mu_) = false;
  int evaluations_ ABSL_GUARDED_BY(mu_) = 0;
};

class PsWorkerRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PsServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    auto server = PsServer::Start(options, &logger_);
    ASSERT_TRUE(server.ok()) << server.status();
    ps_ = *std::move(server);
  }
  void TearDown() override {
    if (ps_) ps_->Shutdown(absl::Seconds(5));
  }

  PsWorkerOptions Options() {
    PsWorkerOptions options;
    options.steps_in_flight = 1;
    options.ps_shared_memory = false;
    options.stop = &stop_;
    return options;
  }

  Logger logger_{"test"};
  std::unique_ptr<PsServer> ps_;
  std::atomic<bool> stop_{false};
};

TEST_F(PsWorkerRecoveryTest, ForgottenAndLostAnswersLoseAndRepeatNoStep) {
  FakeCoordinator coordinator(ps_->address());
  coordinator.forget_once = true;
  coordinator.lose_answer_once = true;
  PsWorker worker(&coordinator, &logger_, Options());
  STRATA_ASSERT_OK(worker.Run());
  // Every step reported (the one whose answer was lost, twice: the worker
  // kept its reports and sent them again), with the loss it trained to.
  std::map<int64_t, int> reported = coordinator.reported();
  ASSERT_EQ(reported.size(), static_cast<size_t>(kSteps));
  int repeated = 0;
  for (const auto& [step, count] : reported) {
    EXPECT_GE(count, 1) << step;
    EXPECT_LE(count, 2) << step;
    if (count == 2) ++repeated;
  }
  EXPECT_TRUE(coordinator.answer_lost());
  EXPECT_GE(repeated, 1);
  for (const auto& [step, loss] : coordinator.losses()) {
    EXPECT_GT(loss, 0) << step;
    EXPECT_LT(loss, 10) << step;
  }
  EXPECT_EQ(coordinator.evaluations(), 1);
  // Registered again after the coordinator forgot the task, and
  // deregistered at the end.
  EXPECT_GE(coordinator.registers(), 2);
  EXPECT_EQ(coordinator.deregisters(), 1);
  // Each step trained once: every variable on the PS took kSteps pushes.
  auto variables = ps_->store()->List();
  ASSERT_FALSE(variables.empty());
  for (const auto& v : variables) {
    EXPECT_EQ(v->version(), kSteps) << v->name();
  }
}

TEST_F(PsWorkerRecoveryTest, AFinishedJobEndsTheRunWithoutTraining) {
  FakeCoordinator coordinator(ps_->address());
  coordinator.state = v1::JobStatus::SUCCEEDED;
  PsWorker worker(&coordinator, &logger_, Options());
  STRATA_ASSERT_OK(worker.Run());
  EXPECT_EQ(coordinator.registers(), 1);
  EXPECT_EQ(coordinator.deregisters(), 1);
  EXPECT_TRUE(coordinator.reported().empty());
  EXPECT_TRUE(ps_->store()->List().empty());
}

TEST_F(PsWorkerRecoveryTest, AJobThatCannotRunHereFailsTheRun) {
  FakeCoordinator coordinator(ps_->address());
  coordinator.job_json = "{\"name\": \"bad\"}";
  PsWorker worker(&coordinator, &logger_, Options());
  absl::Status s = worker.Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("job.model"), std::string::npos) << s;
  EXPECT_TRUE(coordinator.reported().empty());
}

}  // namespace
}  // namespace strata

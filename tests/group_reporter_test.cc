// GroupReporter against a real coordinator in-process on 127.0.0.1: step
// reports reach it in order without the caller waiting, the newest group
// comes back, and reports queued while the coordinator is down (restarted
// on the same port and state directory) are delivered once it is back.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/coordinator_client.h"
#include "coordinator/coordinator_server.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/group_reporter.h"

namespace strata {
namespace {

v1::TaskId Worker0() {
  v1::TaskId t;
  t.set_role("worker");
  t.set_index(0);
  return t;
}

class GroupReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_dir_ = ::testing::TempDir() + "/group_reporter_" +
                 std::to_string(getpid());
    std::filesystem::remove_all(state_dir_);
    StartServer(0);
    client_ = CoordinatorClient::Connect(address_, absl::Seconds(10));
    RegisterWorker();
    v1::SubmitJobRequest submit;
    submit.set_job_json(
        R"({"epochs": 2, "batch_size": 1,
            "strategy": {"type": "multi_worker_mirrored"},
            "evaluation": {"every_epochs": 0}})");
    submit.set_train_examples(10);
    STRATA_ASSERT_OK(client_->SubmitJob(submit));
    v1::JoinGroupRequest join;
    *join.mutable_task() = Worker0();
    join.set_incarnation("a");
    join.set_next_step(-1);
    join.set_address("w0:1");
    absl::StatusOr<v1::GroupAssignment> a = client_->JoinGroup(join);
    STRATA_ASSERT_OK(a);
    ASSERT_EQ(a->state(), v1::GroupAssignment::READY);
    group_ = a->group();
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(5));
    std::filesystem::remove_all(state_dir_);
  }

  void StartServer(int port) {
    CoordinatorServerOptions options;
    options.port = port;
    options.coordinator.state_dir = state_dir_;
    auto server = CoordinatorServer::Start(options, &logger_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = server_->address();
  }

  void RegisterWorker() {
    v1::RegisterRequest r;
    *r.mutable_task() = Worker0();
    r.set_address("w0:1");
    r.set_incarnation("a");
    STRATA_ASSERT_OK(client_->Register(r));
  }

  v1::ReportWorkRequest StepReport(int64_t step) {
    v1::ReportWorkRequest r;
    *r.mutable_task() = Worker0();
    r.set_incarnation("a");
    r.mutable_item()->set_kind(v1::WorkItem::TRAIN);
    r.mutable_item()->set_step(step);
    r.set_examples(1);
    return r;
  }

  int64_t Completed() {
    absl::StatusOr<v1::JobStatus> job = client_->GetJob();
    return job.ok() ? job->steps_completed() : -1;
  }

  std::string state_dir_;
  std::string address_;
  int64_t group_ = 0;
  std::ostringstream log_;
  Logger logger_{"coordinator:test", &log_};
  std::ostringstream worker_log_;
  Logger worker_logger_{"worker:0", &worker_log_};
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<CoordinatorClient> client_;
};

TEST_F(GroupReporterTest, DeliversEveryReportAndTheNewestGroup) {
  std::atomic<int64_t> seen{0};
  GroupReporter reporter(client_.get(), &worker_logger_,
                         [&seen](int64_t g) { seen = g; });
  for (int64_t s = 0; s < 7; ++s) reporter.Add(StepReport(s));
  ASSERT_TRUE(reporter.Flush(absl::Seconds(10)));
  EXPECT_EQ(reporter.sent(), 7);
  EXPECT_EQ(Completed(), 7);
  EXPECT_EQ(seen.load(), group_);
}

TEST_F(GroupReporterTest, ReportsQueuedWhileTheCoordinatorIsDownArriveLater) {
  GroupReporterOptions options;
  options.max_batch = 2;  // several calls, in order
  GroupReporter reporter(client_.get(), &worker_logger_, [](int64_t) {},
                         options);
  for (int64_t s = 0; s < 3; ++s) reporter.Add(StepReport(s));
  ASSERT_TRUE(reporter.Flush(absl::Seconds(10)));
  const std::string address = address_;
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  // The caller never waits for the coordinator: queued at once.
  for (int64_t s = 3; s < 10; ++s) reporter.Add(StepReport(s));
  EXPECT_FALSE(reporter.Flush(absl::Milliseconds(300)));
  EXPECT_EQ(reporter.sent(), 3);
  // Back on the same address and state: the reports follow (the task is
  // registered again as its membership agent would).
  StartServer(port);
  ASSERT_EQ(address_, address);
  RegisterWorker();
  ASSERT_TRUE(reporter.Flush(absl::Seconds(10))) << worker_log_.str();
  EXPECT_EQ(reporter.sent(), 10);
  EXPECT_EQ(Completed(), 10) << log_.str();
}

}  // namespace
}  // namespace strata

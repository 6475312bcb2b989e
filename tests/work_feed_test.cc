// WorkFeed and ReportWorkBatch against a real coordinator in-process on
// 127.0.0.1:0: step threads share leased items, every step is trained and
// reported once, evaluations gate the epochs, the feed ends with DONE; and
// ReportWorkBatch refuses malformed batches.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/coordinator_client.h"
#include "coordinator/coordinator_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/work_feed.h"

namespace strata {
namespace {

v1::TaskId Task(const std::string& role, int index) {
  v1::TaskId t;
  t.set_role(role);
  t.set_index(index);
  return t;
}

class WorkFeedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    auto server = CoordinatorServer::Start(options, &logger_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = CoordinatorClient::Connect(server_->address(),
                                         absl::Seconds(10));
    for (auto [role, index] :
         std::vector<std::pair<std::string, int>>{{"ps", 0}, {"worker", 0}}) {
      v1::RegisterRequest r;
      *r.mutable_task() = Task(role, index);
      r.set_address(role + ":1");
      r.set_incarnation("a");
      STRATA_ASSERT_OK(client_->Register(r));
    }
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(5));
  }

  void Submit(int epochs, int steps_per_epoch) {
    v1::SubmitJobRequest submit;
    submit.set_job_json(
        absl::StrCat(R"({"epochs": )", epochs,
                     R"(, "batch_size": 1, "evaluation": {"every_epochs": 1}})"));
    submit.set_train_examples(steps_per_epoch);
    STRATA_ASSERT_OK(client_->SubmitJob(submit));
  }

  std::ostringstream log_;
  Logger logger_{"coordinator:test", &log_};
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<CoordinatorClient> client_;
};

TEST_F(WorkFeedTest, StepThreadsTrainEveryStepOnceAndEndWithDone) {
  constexpr int kEpochs = 3;
  constexpr int kSteps = 40;  // per epoch
  Submit(kEpochs, kSteps);
  WorkFeedOptions options;
  options.lease = 6;
  options.report_every = 3;
  options.low_water = 3;
  WorkFeed feed(client_.get(), Task("worker", 0), "a", options);

  absl::Mutex mu;
  std::map<int64_t, int> trained;   // step -> times
  std::map<int, int> evaluated;     // epoch -> times
  // Every step of an epoch is trained before that epoch's evaluation.
  std::vector<int> steps_before_eval;
  std::atomic<int> errors{0};
  auto run = [&] {
    std::optional<v1::ReportWorkRequest> done;
    for (int i = 0; i < 100000; ++i) {
      absl::StatusOr<v1::WorkItem> item = feed.Next(std::move(done));
      done.reset();
      if (!item.ok()) {
        ++errors;
        return;
      }
      if (item->kind() == v1::WorkItem::DONE) return;
      if (item->kind() == v1::WorkItem::WAIT) continue;
      v1::ReportWorkRequest report;
      *report.mutable_task() = Task("worker", 0);
      report.set_incarnation("a");
      *report.mutable_item() = *item;
      {
        absl::MutexLock lock(&mu);
        if (item->kind() == v1::WorkItem::TRAIN) {
          ++trained[item->step()];
          report.set_examples(1);
          report.set_loss(1);
        } else {
          ++evaluated[item->epoch()];
          steps_before_eval.push_back(static_cast<int>(trained.size()));
          report.set_test_accuracy(0.5);
        }
      }
      done = std::move(report);
    }
    ++errors;  // never reached DONE
  };
  std::thread other(run);
  run();
  other.join();

  EXPECT_EQ(errors.load(), 0);
  ASSERT_EQ(trained.size(), static_cast<size_t>(kEpochs * kSteps));
  for (const auto& [step, times] : trained) EXPECT_EQ(times, 1) << step;
  ASSERT_EQ(evaluated.size(), static_cast<size_t>(kEpochs));
  for (const auto& [epoch, times] : evaluated) EXPECT_EQ(times, 1) << epoch;
  EXPECT_THAT(steps_before_eval,
              ::testing::ElementsAre(kSteps, 2 * kSteps, 3 * kSteps));
  absl::StatusOr<v1::JobStatus> job = client_->GetJob();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JobStatus::SUCCEEDED);
  EXPECT_EQ(job->steps_completed(), kEpochs * kSteps);
  // Reports went in batches: far fewer calls than items.
  EXPECT_LT(feed.calls(), kEpochs * kSteps);
}

TEST_F(WorkFeedTest, ReportWorkBatchRefusesMalformedBatches) {
  Submit(1, 10);
  v1::ReportWorkBatchRequest batch;
  *batch.mutable_task() = Task("worker", 0);
  batch.set_incarnation("a");
  batch.set_max_items(65);
  EXPECT_THAT(client_->ReportWorkBatch(batch),
              StatusIs(absl::StatusCode::kInvalidArgument));
  batch.set_max_items(2);
  absl::StatusOr<v1::ReportWorkBatchResponse> leased =
      client_->ReportWorkBatch(batch);
  ASSERT_TRUE(leased.ok()) << leased.status();
  ASSERT_EQ(leased->items_size(), 2);
  // A report for another task in the batch: refused, nothing applied.
  v1::ReportWorkRequest* r = batch.add_reports();
  *r->mutable_task() = Task("worker", 1);
  r->set_incarnation("a");
  *r->mutable_item() = leased->items(0);
  batch.set_max_items(0);
  EXPECT_THAT(client_->ReportWorkBatch(batch),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<v1::JobStatus> job = client_->GetJob();
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->steps_completed(), 0);
  // Holding nothing gives every earlier lease back: 0 and 1 come again.
  batch.clear_reports();
  batch.set_max_items(3);
  leased = client_->ReportWorkBatch(batch);
  ASSERT_TRUE(leased.ok()) << leased.status();
  ASSERT_EQ(leased->items_size(), 3);
  EXPECT_EQ(leased->items(0).step(), 0);
  EXPECT_EQ(leased->items(1).step(), 1);
  EXPECT_EQ(leased->items(2).step(), 2);
  // Holding 0 and 1 gives back 2 (its answer "was lost"): it comes next.
  batch.add_holding(0);
  batch.add_holding(1);
  batch.set_max_items(1);
  leased = client_->ReportWorkBatch(batch);
  ASSERT_TRUE(leased.ok()) << leased.status();
  ASSERT_EQ(leased->items_size(), 1);
  EXPECT_EQ(leased->items(0).step(), 2);
}

}  // namespace
}  // namespace strata

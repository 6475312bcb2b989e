// Integration tests: a real coordinator in-process on 127.0.0.1:0, driven
// through the generated CoordinatorService stub. Waits are bounded by call
// deadlines; nothing sleeps.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_server.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "rpc/grpc_status.h"
#include "strata/v1/coordinator.grpc.pb.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

class CountingCheckpointer : public PsCheckpointer {
 public:
  absl::Status SaveAll(const std::string& name) override {
    absl::MutexLock lock(&mu_);
    saves_.push_back(name);
    return absl::OkStatus();
  }
  absl::Status RestoreAll(const std::string& name) override {
    return absl::OkStatus();
  }
  absl::Status DeleteAll(const std::vector<std::string>& names) override {
    return absl::OkStatus();
  }
  std::vector<std::string> saves() {
    absl::MutexLock lock(&mu_);
    return saves_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> saves_ ABSL_GUARDED_BY(mu_);
};

v1::TaskId Task(const std::string& role, int index) {
  v1::TaskId t;
  t.set_role(role);
  t.set_index(index);
  return t;
}

std::chrono::system_clock::time_point In(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_dir_ =
        ::testing::TempDir() + "/coordinator_service_test_" +
        std::to_string(::getpid()) + "_" +
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(state_dir_);
    CoordinatorServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.coordinator.state_dir = state_dir_;
    options.checkpointer = checkpointer_;
    auto server = CoordinatorServer::Start(options, &logger_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::CoordinatorService::NewStub(channel_);
  }

  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(5));
    std::error_code ec;
    std::filesystem::remove_all(state_dir_, ec);
  }

  // A client context whose call gives up after 10 s.
  static std::unique_ptr<grpc::ClientContext> Ctx(
      absl::Duration d = absl::Seconds(10)) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(In(d));
    return ctx;
  }

  absl::StatusOr<v1::RegisterResponse> Register(const std::string& role,
                                                int index,
                                                const std::string& inc) {
    v1::RegisterRequest req;
    *req.mutable_task() = Task(role, index);
    req.set_address(absl::StrCat(role, index, ".local:2222"));
    req.set_incarnation(inc);
    v1::RegisterResponse resp;
    grpc::Status s = stub_->Register(Ctx().get(), req, &resp);
    if (!s.ok()) return FromGrpcStatus(s);
    return resp;
  }

  absl::StatusOr<v1::WorkItem> GetWork(int worker, const std::string& inc) {
    v1::GetWorkRequest req;
    *req.mutable_task() = Task("worker", worker);
    req.set_incarnation(inc);
    v1::WorkItem item;
    grpc::Status s = stub_->GetWork(Ctx().get(), req, &item);
    if (!s.ok()) return FromGrpcStatus(s);
    return item;
  }

  v1::JobStatus GetJob() {
    v1::JobStatus job;
    grpc::Status s = stub_->GetJob(Ctx().get(), v1::GetJobRequest(), &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  std::string state_dir_;
  std::ostringstream log_;
  Logger logger_{"coordinator:test", &log_};
  std::shared_ptr<CountingCheckpointer> checkpointer_ =
      std::make_shared<CountingCheckpointer>();
  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::CoordinatorService::Stub> stub_;
};

TEST_F(CoordinatorServiceTest, RegisterAndHeartbeat) {
  auto reg = Register("worker", 0, "inc-1");
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->generation(), 1);
  EXPECT_EQ(reg->lease_ms(), 5000);
  EXPECT_EQ(reg->heartbeat_ms(), 1000);

  v1::HeartbeatRequest hb;
  *hb.mutable_task() = Task("worker", 0);
  hb.set_incarnation("inc-1");
  v1::HeartbeatResponse hb_resp;
  grpc::Status s = stub_->Heartbeat(Ctx().get(), hb, &hb_resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(hb_resp.generation(), 1);

  hb.set_incarnation("inc-0");
  s = stub_->Heartbeat(Ctx().get(), hb, &hb_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("re-register"));
  *hb.mutable_task() = Task("worker", 9);
  s = stub_->Heartbeat(Ctx().get(), hb, &hb_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  EXPECT_THAT(Register("janitor", 0, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));

  v1::GetClusterSpecResponse spec;
  s = stub_->GetClusterSpec(Ctx().get(), v1::GetClusterSpecRequest(), &spec);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(spec.tf_config(),
            R"({"cluster":{"worker":["worker0.local:2222"]}})");

  v1::DeregisterRequest leave;
  *leave.mutable_task() = Task("worker", 0);
  leave.set_incarnation("inc-1");
  v1::DeregisterResponse left;
  s = stub_->Deregister(Ctx().get(), leave, &left);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(server_->state()->GetClusterState().members(0).state(),
            v1::Member::LEFT);
}

TEST_F(CoordinatorServiceTest, TinyJobRunsToSuccess) {
  ASSERT_TRUE(Register("ps", 0, "p").ok());
  ASSERT_TRUE(Register("worker", 0, "w").ok());
  v1::SubmitJobRequest submit;
  submit.set_job_json(R"({"epochs": 2, "batch_size": 2,
                          "evaluation": {"every_epochs": 1},
                          "checkpoint": {"every_steps": 2}})");
  submit.set_train_examples(4);  // 2 steps per epoch
  v1::SubmitJobResponse submitted;
  grpc::Status s = stub_->SubmitJob(Ctx().get(), submit, &submitted);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(submitted.job_id(), HasSubstr("job-"));

  // A second submission while it runs is refused.
  v1::SubmitJobResponse again;
  s = stub_->SubmitJob(Ctx().get(), submit, &again);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  int trained = 0;
  int evaluated = 0;
  bool done = false;
  // Bounded: WAITs occur only while the background thread checkpoints.
  for (int i = 0; i < 100000 && !done; ++i) {
    auto item = GetWork(0, "w");
    ASSERT_TRUE(item.ok()) << item.status();
    EXPECT_EQ(item->job_id(), submitted.job_id());
    v1::ReportWorkRequest report;
    *report.mutable_task() = Task("worker", 0);
    report.set_incarnation("w");
    *report.mutable_item() = *item;
    switch (item->kind()) {
      case v1::WorkItem::TRAIN:
        EXPECT_EQ(item->step(), trained);
        report.set_loss(1.0 / (1 + item->step()));
        report.set_accuracy(0.5);
        report.set_examples(2);
        ++trained;
        break;
      case v1::WorkItem::EVALUATE:
        report.set_test_loss(0.3);
        report.set_test_accuracy(0.8 + item->epoch() * 0.05);
        ++evaluated;
        break;
      case v1::WorkItem::DONE:
        done = true;
        continue;
      default:
        continue;  // WAIT
    }
    v1::ReportWorkResponse reported;
    s = stub_->ReportWork(Ctx().get(), report, &reported);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_TRUE(done);
  EXPECT_EQ(trained, 4);
  EXPECT_EQ(evaluated, 2);
  v1::JobStatus job = GetJob();
  EXPECT_EQ(job.state(), v1::JobStatus::SUCCEEDED);
  EXPECT_EQ(job.steps_completed(), 4);
  EXPECT_EQ(job.steps_scheduled(), 4);
  EXPECT_EQ(job.examples(), 8);
  EXPECT_EQ(job.last_checkpoint(), "ckpt-4");
  ASSERT_EQ(job.epochs_size(), 2);
  EXPECT_DOUBLE_EQ(job.epochs(1).test_accuracy(), 0.85);
  EXPECT_DOUBLE_EQ(job.epochs(0).loss(), 0.75);
  EXPECT_THAT(checkpointer_->saves(),
              ::testing::ElementsAre("ckpt-2", "ckpt-4"));
  // Everything reported is on disk.
  EXPECT_TRUE(std::filesystem::exists(state_dir_ + "/state.json"));
  auto reloaded = CoordinatorState::Create(
      [this] {
        CoordinatorOptions o;
        o.state_dir = state_dir_;
        return o;
      }(),
      &logger_);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ((*reloaded)->GetJob().state(), v1::JobStatus::SUCCEEDED);
  EXPECT_EQ((*reloaded)->GetJob().steps_completed(), 4);

  // Metrics count the calls.
  EXPECT_THAT(server_->metrics()->Serialize(),
              HasSubstr("strata_coordinator_rpcs_total{code=\"OK\","
                        "method=\"ReportWork\"} 6"));
}

TEST_F(CoordinatorServiceTest, WatchClusterStreamsChangesAndEndsOnCancel) {
  ASSERT_TRUE(Register("worker", 0, "a").ok());
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(10)));
  v1::WatchClusterRequest req;
  auto reader = stub_->WatchCluster(&ctx, req);
  v1::ClusterState state;
  ASSERT_TRUE(reader->Read(&state));
  EXPECT_EQ(state.generation(), 1);
  ASSERT_EQ(state.members_size(), 1);

  ASSERT_TRUE(Register("worker", 1, "b").ok());
  ASSERT_TRUE(reader->Read(&state));
  EXPECT_EQ(state.generation(), 2);
  ASSERT_EQ(state.members_size(), 2);
  EXPECT_EQ(state.members(1).task().index(), 1);
  EXPECT_EQ(state.members(1).state(), v1::Member::ALIVE);

  ctx.TryCancel();
  while (reader->Read(&state)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(CoordinatorServiceTest, WatchClusterEndsOnShutdown) {
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(30)));
  auto reader = stub_->WatchCluster(&ctx, v1::WatchClusterRequest());
  v1::ClusterState state;
  ASSERT_TRUE(reader->Read(&state));
  EXPECT_EQ(state.generation(), 0);
  const absl::Time start = absl::Now();
  server_->Shutdown(absl::Seconds(20));
  // The stream was ended, not cut off at the grace deadline.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  while (reader->Read(&state)) {
  }
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("shutting down"));
}

TEST_F(CoordinatorServiceTest, BarrierReleasesAllTasks) {
  v1::BarrierRequest first_req;
  first_req.set_name("variables-created");
  first_req.set_count(2);
  v1::BarrierRequest second_req = first_req;
  *first_req.mutable_task() = Task("worker", 0);
  *second_req.mutable_task() = Task("worker", 1);
  grpc::Status first;
  std::thread waiter([&] {
    v1::BarrierResponse resp;
    first = stub_->Barrier(Ctx().get(), first_req, &resp);
  });
  v1::BarrierResponse resp;
  // The second arrival may come first; either way both are released.
  grpc::Status second = stub_->Barrier(Ctx().get(), second_req, &resp);
  waiter.join();
  EXPECT_TRUE(first.ok()) << first.error_message();
  EXPECT_TRUE(second.ok()) << second.error_message();

  second_req.set_count(0);
  grpc::Status bad = stub_->Barrier(Ctx().get(), second_req, &resp);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(CoordinatorServiceTest, BarrierWaitEndsAtClientDeadline) {
  v1::BarrierRequest req;
  req.set_name("never");
  req.set_count(2);
  *req.mutable_task() = Task("worker", 0);
  v1::BarrierResponse resp;
  grpc::Status s =
      stub_->Barrier(Ctx(absl::Milliseconds(200)).get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server keeps serving.
  EXPECT_EQ(GetJob().state(), v1::JobStatus::NONE);
}

TEST_F(CoordinatorServiceTest, HealthIsServing) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (const char* service : {"", "strata.v1.CoordinatorService"}) {
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status s = health->Check(Ctx().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << service << ": " << s.error_message();
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
}

TEST_F(CoordinatorServiceTest, LeaseExpiryIsDetectedByTheBackgroundThread) {
  server_->Shutdown(absl::Seconds(1));
  CoordinatorServerOptions options;
  options.coordinator.lease = absl::Milliseconds(300);
  options.coordinator.heartbeat_interval = absl::Milliseconds(100);
  options.service.tick = absl::Milliseconds(10);
  auto server = CoordinatorServer::Start(options, &logger_);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  channel_ = grpc::CreateChannel(server_->address(),
                                 grpc::InsecureChannelCredentials());
  stub_ = v1::CoordinatorService::NewStub(channel_);
  ASSERT_TRUE(Register("worker", 0, "a").ok());
  // No heartbeats: the watch sees the failure (generation 2).
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(10)));
  auto reader = stub_->WatchCluster(&ctx, v1::WatchClusterRequest());
  v1::ClusterState state;
  while (reader->Read(&state) && state.generation() < 2) {
  }
  ASSERT_EQ(state.generation(), 2);
  EXPECT_EQ(state.members(0).state(), v1::Member::FAILED);
  ctx.TryCancel();
  while (reader->Read(&state)) {
  }
  reader->Finish();
}

TEST_F(CoordinatorServiceTest, CorruptStateFailsStart) {
  server_->Shutdown(absl::Seconds(1));
  server_.reset();
  {
    std::ofstream out(state_dir_ + "/state.json");
    out << "not json";
  }
  CoordinatorServerOptions options;
  options.coordinator.state_dir = state_dir_;
  auto server = CoordinatorServer::Start(options, &logger_);
  EXPECT_THAT(server, StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                          "state.json is corrupt"));
}

}  // namespace
}  // namespace strata

// Integration tests: a real PS in-process on 127.0.0.1:0, driven through
// PsClient from one or many threads.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/server_interceptor.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/ps_server.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

v1::VariableSpec Spec(const std::string& name, Shape shape,
                      const std::string& optimizer = "sgd",
                      double lr = 0.1) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_type("ones");
  spec.mutable_optimizer()->set_type(optimizer);
  spec.mutable_optimizer()->set_learning_rate(lr);
  return spec;
}

class PsTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer({}); }

  void StartServer(PsServerOptions options) {
    client_.reset();
    server_.reset();
    options.host = "127.0.0.1";
    options.port = 0;
    if (options.checkpoint_dir.empty()) {
      checkpoint_dir_ = std::filesystem::path(::testing::TempDir()) /
                        ("ps_test_" + std::to_string(::getpid()) + "_" +
                         std::to_string(counter_++));
      std::filesystem::remove_all(checkpoint_dir_);
      options.checkpoint_dir = checkpoint_dir_;
    }
    auto s = PsServer::Start(options, &logger_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    PsClientOptions copts;
    copts.deadline = absl::Seconds(20);
    copts.initial_backoff = absl::Milliseconds(1);
    client_ = PsClient::Connect(server_->address(), copts);
  }

  std::vector<float> PullAll(const std::string& name, size_t n) {
    std::vector<float> out(n);
    auto r = client_->Pull(name, out.data(), n * sizeof(float));
    EXPECT_TRUE(r.ok()) << r.status();
    return out;
  }

  static int counter_;
  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  std::string checkpoint_dir_;
  std::unique_ptr<PsServer> server_;
  std::unique_ptr<PsClient> client_;
};
int PsTest::counter_ = 0;

TEST_F(PsTest, CreatePushPullRoundTrip) {
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {2, 3})));
  std::vector<float> grad = {1, 2, 3, 4, 5, 6};
  auto r = client_->Push("w", DType::kFloat32, {2, 3}, grad.data(),
                         PushTag{"job", 0, 0});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->applied);
  EXPECT_EQ(r->version, 1);
  std::vector<float> w = PullAll("w", 6);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(w[i], 1.0f - 0.1f * grad[i]);
}

TEST_F(PsTest, LargeTensorsTravelInChunks) {
  const int64_t rows = 3 * 1024, cols = 1024;  // 12 MiB float32
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("big", {rows, cols},
                                                "assign_add", 1)));
  std::vector<float> grad(rows * cols);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(i % 977);
  STRATA_ASSERT_OK(client_->Push("big", DType::kFloat32, {rows, cols},
                                 grad.data(), PushTag{"job", 0, 0}));
  int64_t version = 0;
  auto t = client_->PullTensor("big", {}, &version);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(version, 1);
  EXPECT_EQ(t->shape, (Shape{rows, cols}));
  auto got = t->buffer->span<float>();
  for (size_t i = 0; i < grad.size(); i += 4099) {
    ASSERT_FLOAT_EQ(got[i], 1.0f + grad[i]) << i;
  }
  EXPECT_FLOAT_EQ(got[grad.size() - 1], 1.0f + grad.back());
}

TEST_F(PsTest, CreateIsIdempotentAndConflictsAreRefused) {
  auto first = client_->CreateVariable(Spec("w", {4}));
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(*first);
  auto again = client_->CreateVariable(Spec("w", {4}));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  EXPECT_THAT(client_->CreateVariable(Spec("w", {5})),
              StatusIsWithMessage(absl::StatusCode::kAlreadyExists, "'w'"));
}

// Every bad input gets its status, names the problem, and changes nothing.
TEST_F(PsTest, BadInputsAreRefusedAndChangeNothing) {
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {2, 2})));
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("emb", {4, 2})));
  const std::vector<float> before = PullAll("w", 4);
  const std::vector<float> emb_before = PullAll("emb", 8);
  std::vector<float> g = {1, 1, 1, 1};
  std::vector<double> gd = {1, 1, 1, 1};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> g_nan = {1, nan, 1, 1};
  std::vector<float> g_inf = {1, 1, -inf, 1};
  PushTag tag{"job", 0, 0};

  EXPECT_THAT(client_->Push("nope", DType::kFloat32, {2, 2}, g.data(), tag),
              StatusIsWithMessage(absl::StatusCode::kNotFound, "'nope'"));
  std::vector<float> out(4);
  EXPECT_THAT(client_->Pull("nope", out.data(), 16),
              StatusIsWithMessage(absl::StatusCode::kNotFound, "'nope'"));
  EXPECT_THAT(client_->Push("w", DType::kFloat64, {2, 2}, gd.data(), tag),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "float64"));
  EXPECT_THAT(client_->Push("w", DType::kFloat32, {4}, g.data(), tag),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "[2, 2]"));
  EXPECT_THAT(client_->Push("w", DType::kFloat32, {2, 2}, g_nan.data(), tag),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "non-finite"));
  EXPECT_THAT(client_->Push("w", DType::kFloat32, {2, 2}, g_inf.data(), tag),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "element 2"));
  EXPECT_THAT(client_->Assign("w", DType::kFloat32, {3}, g.data()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(client_->Assign("w", DType::kFloat32, {2, 2}, g_nan.data()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<int64_t> bad_ids = {0, 4};
  std::vector<float> rows(4, 1.0f);
  EXPECT_THAT(client_->PushRows("emb", DType::kFloat32, bad_ids, 2,
                                rows.data(), tag),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "row id 4"));
  EXPECT_THAT(client_->PullRows("emb", bad_ids, rows.data(), 16),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "row id 4"));
  EXPECT_THAT(client_->PushRows("w", DType::kFloat32, {0}, 3, rows.data(),
                                tag),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A destination of the wrong size is refused before anything is written.
  EXPECT_THAT(client_->Pull("w", out.data(), 12),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Oversized: a variable above the server's limit, and a message above
  // gRPC's receive limit (a pull with 600k row ids in one request).
  EXPECT_THAT(client_->CreateVariable(Spec("huge", {int64_t{1} << 40})),
              StatusIs(absl::StatusCode::kResourceExhausted));
  {
    // A client that sends 6 MiB in one message (above gRPC's 4 MiB limit).
    STRATA_ASSERT_OK(client_->CreateVariable(Spec("six", {6 << 18})));
    const std::vector<float> six_before = PullAll("six", 6 << 18);
    PsClientOptions big_chunks;
    big_chunks.chunk_bytes = 8 << 20;
    big_chunks.max_attempts = 1;
    auto greedy = PsClient::Connect(server_->address(), big_chunks);
    std::vector<float> six(6 << 18, 1.0f);
    EXPECT_THAT(greedy->Push("six", DType::kFloat32, {6 << 18}, six.data(), tag),
                StatusIs(absl::StatusCode::kResourceExhausted));
    EXPECT_EQ(PullAll("six", 6 << 18), six_before);
  }
  // Bad specs.
  v1::VariableSpec bad = Spec("bad", {2});
  bad.mutable_optimizer()->set_type("adamw");
  EXPECT_THAT(client_->CreateVariable(bad),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "adamw"));
  bad = Spec("bad", {-1});
  EXPECT_THAT(client_->CreateVariable(bad),
              StatusIs(absl::StatusCode::kInvalidArgument));
  bad = Spec("bad", {2});
  bad.set_dtype(v1::DT_INT32);
  EXPECT_THAT(client_->CreateVariable(bad),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "assign_add"));

  // Nothing changed, and the server still serves.
  EXPECT_EQ(PullAll("w", 4), before);
  EXPECT_EQ(PullAll("emb", 8), emb_before);
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->pushes_applied(), 0);
  EXPECT_EQ(stats->num_variables(), 3);
  STRATA_ASSERT_OK(client_->Push("w", DType::kFloat32, {2, 2}, g.data(), tag));
}

TEST_F(PsTest, DuplicatePushIsAcknowledgedNotApplied) {
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {3}, "assign_add", 1)));
  std::vector<float> g = {1, 2, 3};
  auto first = client_->Push("w", DType::kFloat32, {3}, g.data(),
                             PushTag{"job", 7, 11});
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->duplicate);
  auto second = client_->Push("w", DType::kFloat32, {3}, g.data(),
                              PushTag{"job", 7, 11});
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->duplicate);
  EXPECT_EQ(second->version, 1);
  EXPECT_EQ(PullAll("w", 3), (std::vector<float>{2, 3, 4}));
  // Another worker's step 11 is a different push.
  auto other = client_->Push("w", DType::kFloat32, {3}, g.data(),
                             PushTag{"job", 8, 11});
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->duplicate);
  EXPECT_EQ(PullAll("w", 3), (std::vector<float>{3, 5, 7}));
}

// Replaces the status of the first Push with UNAVAILABLE after the handler
// ran: the push was applied but the client never heard so.
class LoseFirstPushResponse : public grpc::experimental::Interceptor {
 public:
  LoseFirstPushResponse(grpc::experimental::ServerRpcInfo* info,
                        std::atomic<int>* lost)
      : is_push_(std::string(info->method()) ==
                 "/strata.v1.ParameterService/Push"),
        lost_(lost) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (is_push_ &&
        methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS) &&
        methods->GetSendStatus().ok() && lost_->fetch_add(1) == 0) {
      methods->ModifySendStatus(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "response lost"));
    }
    methods->Proceed();
  }

 private:
  bool is_push_;
  std::atomic<int>* lost_;
};

class LoseFirstPushResponseFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit LoseFirstPushResponseFactory(std::atomic<int>* lost) : lost_(lost) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new LoseFirstPushResponse(info, lost_);
  }

 private:
  std::atomic<int>* lost_;
};

TEST_F(PsTest, RetriedPushAfterLostResponseIsAppliedOnce) {
  std::atomic<int> lost{0};
  PsServerOptions options;
  options.configure_builder = [&lost](grpc::ServerBuilder& b) {
    std::vector<std::unique_ptr<
        grpc::experimental::ServerInterceptorFactoryInterface>>
        factories;
    factories.push_back(std::make_unique<LoseFirstPushResponseFactory>(&lost));
    b.experimental().SetInterceptorCreators(std::move(factories));
  };
  StartServer(std::move(options));
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {2}, "assign_add", 1)));
  std::vector<float> g = {10, 20};
  auto r = client_->Push("w", DType::kFloat32, {2}, g.data(),
                         PushTag{"job", 1, 5});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->attempts, 2);
  EXPECT_TRUE(r->duplicate);
  EXPECT_EQ(PullAll("w", 2), (std::vector<float>{11, 21}));
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->pushes_applied(), 1);
  EXPECT_EQ(stats->pushes_duplicate(), 1);
}

TEST_F(PsTest, SyncModeAveragesReplicasAndAppliesOnce) {
  const int kReplicas = 3;
  v1::VariableSpec spec = Spec("w", {2}, "sgd", 1.0);
  spec.mutable_update_mode()->set_kind(v1::UpdateMode::SYNC);
  spec.mutable_update_mode()->set_num_replicas(kReplicas);
  STRATA_ASSERT_OK(client_->CreateVariable(spec));

  // A pull for version 1 waits until step 0 is applied.
  std::vector<float> waited(2);
  absl::StatusOr<PullResult> waited_result;
  std::thread puller([&] {
    PullOptions o;
    o.min_version = 1;
    waited_result = client_->Pull("w", waited.data(), 8, o);
  });
  std::vector<std::thread> workers;
  std::vector<absl::StatusOr<PushResult>> results(kReplicas);
  for (int w = 0; w < kReplicas; ++w) {
    workers.emplace_back([&, w] {
      std::vector<float> g = {static_cast<float>(w + 1),
                              static_cast<float>(10 * (w + 1))};
      results[w] = client_->Push("w", DType::kFloat32, {2}, g.data(),
                                 PushTag{"job", w, 0});
    });
  }
  for (auto& t : workers) t.join();
  puller.join();
  int applied = 0;
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    applied += r->applied ? 1 : 0;
  }
  EXPECT_EQ(applied, 1);  // exactly one push completed the step
  ASSERT_TRUE(waited_result.ok()) << waited_result.status();
  EXPECT_EQ(waited_result->version, 1);
  // mean gradient = (2, 20); w = 1 - 1.0 * mean.
  EXPECT_EQ(waited, (std::vector<float>{-1, -19}));
  EXPECT_EQ(PullAll("w", 2), (std::vector<float>{-1, -19}));

  // A retry of a taken push is acknowledged; a new gradient for step 0 is
  // stale.
  std::vector<float> g = {1, 1};
  auto retry = client_->Push("w", DType::kFloat32, {2}, g.data(),
                             PushTag{"job", 0, 0});
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_TRUE(retry->duplicate);
  EXPECT_THAT(client_->Push("w", DType::kFloat32, {2}, g.data(),
                            PushTag{"other-job", 0, 0}),
              StatusIsWithMessage(absl::StatusCode::kAborted, "stale"));
  EXPECT_THAT(client_->Push("w", DType::kFloat32, {2}, g.data(),
                            PushTag{"job", 3, 1}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "worker 3"));
  EXPECT_EQ(PullAll("w", 2), (std::vector<float>{-1, -19}));

  // Step 1 completes only with all three replicas.
  for (int w = 0; w < kReplicas; ++w) {
    auto r = client_->Push("w", DType::kFloat32, {2}, g.data(),
                           PushTag{"job", w, 1});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->applied, w == kReplicas - 1);
    EXPECT_EQ(r->version, w == kReplicas - 1 ? 2 : 1);
  }
  EXPECT_EQ(PullAll("w", 2), (std::vector<float>{-2, -20}));
}

TEST_F(PsTest, StalenessBoundHoldsFastWorkerUntilSlowOneCatchesUp) {
  v1::VariableSpec spec = Spec("w", {1}, "assign_add", 1);
  spec.mutable_update_mode()->set_kind(v1::UpdateMode::STALENESS);
  spec.mutable_update_mode()->set_num_replicas(2);
  spec.mutable_update_mode()->set_staleness(1);
  STRATA_ASSERT_OK(client_->CreateVariable(spec));
  float one = 1;
  // Worker 0 runs three steps ahead; worker 1 has done none.
  for (int step = 0; step < 3; ++step) {
    STRATA_ASSERT_OK(client_->Push("w", DType::kFloat32, {1}, &one,
                                   PushTag{"job", 0, step}));
  }
  float value = 0;
  PullOptions at_clock_1;
  at_clock_1.clock = 1;  // needs the slowest at >= 0: fine
  STRATA_ASSERT_OK(client_->Pull("w", &value, 4, at_clock_1));
  EXPECT_EQ(value, 4);

  // At clock 3 the pull needs the slowest worker at >= 2: it waits, and a
  // short deadline turns the wait into DEADLINE_EXCEEDED naming the bound
  // (the server's answer, before the call's own deadline).
  PsClientOptions short_opts;
  short_opts.deadline = absl::Milliseconds(200);
  auto impatient = PsClient::Connect(server_->address(), short_opts);
  PullOptions at_clock_3;
  at_clock_3.clock = 3;
  EXPECT_THAT(impatient->Pull("w", &value, 4, at_clock_3),
              StatusIsWithMessage(absl::StatusCode::kDeadlineExceeded,
                                  "staleness bound 1"));

  // With a long deadline the pull completes once worker 1 reaches clock 2.
  absl::StatusOr<PullResult> waited;
  float waited_value = 0;
  std::thread puller(
      [&] { waited = client_->Pull("w", &waited_value, 4, at_clock_3); });
  STRATA_ASSERT_OK(client_->Push("w", DType::kFloat32, {1}, &one,
                                 PushTag{"job", 1, 0}));
  STRATA_ASSERT_OK(client_->Push("w", DType::kFloat32, {1}, &one,
                                 PushTag{"job", 1, 1}));
  puller.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited_value, 6);
}

TEST_F(PsTest, ConcurrentPushesAreSerializedPerVariable) {
  const int kThreads = 8, kSteps = 50;
  v1::VariableSpec spec = Spec("counter", {16}, "assign_add", 1);
  spec.set_dtype(v1::DT_INT64);
  spec.mutable_initializer()->set_type("zeros");
  STRATA_ASSERT_OK(client_->CreateVariable(spec));
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("other", {16}, "assign_add", 1)));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int64_t> ones(16, 1);
      std::vector<float> fones(16, 1.0f);
      for (int s = 0; s < kSteps; ++s) {
        ASSERT_TRUE(client_->Push("counter", DType::kInt64, {16}, ones.data(),
                                  PushTag{"job", t, s})
                        .ok());
        ASSERT_TRUE(client_->Push("other", DType::kFloat32, {16}, fones.data(),
                                  PushTag{"job", t, s})
                        .ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> counter(16);
  STRATA_ASSERT_OK(client_->Pull("counter", counter.data(), 16 * 8));
  for (int64_t c : counter) EXPECT_EQ(c, kThreads * kSteps);
  for (float v : PullAll("other", 16)) EXPECT_EQ(v, 1 + kThreads * kSteps);
}

TEST_F(PsTest, PullNeverSeesAHalfAppliedUpdate) {
  const int64_t n = 1 << 20;  // 4 MiB: several chunks per pull
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {n}, "assign_add", 1)));
  std::atomic<bool> stop{false};
  std::thread pusher([&] {
    std::vector<float> ones(n, 1.0f);
    for (int s = 0; s < 30 && !stop; ++s) {
      ASSERT_TRUE(client_->Push("w", DType::kFloat32, {n}, ones.data(),
                                PushTag{"job", 0, s})
                      .ok());
    }
  });
  std::vector<float> snapshot(n);
  for (int i = 0; i < 30; ++i) {
    auto r = client_->Pull("w", snapshot.data(), n * sizeof(float));
    ASSERT_TRUE(r.ok()) << r.status();
    // Every element carries the same number of updates: version + 1.
    for (int64_t j = 0; j < n; j += 1021) {
      ASSERT_EQ(snapshot[j], static_cast<float>(r->version + 1)) << j;
    }
    ASSERT_EQ(snapshot[n - 1], static_cast<float>(r->version + 1));
  }
  stop = true;
  pusher.join();
}

TEST_F(PsTest, RowPullAndRowPushSumDuplicates) {
  v1::VariableSpec spec = Spec("emb", {5, 3}, "sgd", 1.0);
  spec.mutable_initializer()->set_type("zeros");
  STRATA_ASSERT_OK(client_->CreateVariable(spec));
  std::vector<float> init(15);
  std::iota(init.begin(), init.end(), 0.0f);
  STRATA_ASSERT_OK(client_->Assign("emb", DType::kFloat32, {5, 3}, init.data()));
  std::vector<int64_t> ids = {4, 0, 4};
  std::vector<float> rows(9);
  auto pulled = client_->PullRows("emb", ids, rows.data(), rows.size() * 4);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->shape, (Shape{3, 3}));
  EXPECT_EQ(rows, (std::vector<float>{12, 13, 14, 0, 1, 2, 12, 13, 14}));
  std::vector<float> grads = {1, 1, 1, 2, 2, 2, 3, 3, 3};
  STRATA_ASSERT_OK(client_->PushRows("emb", DType::kFloat32, ids, 3,
                                     grads.data(), PushTag{"job", 0, 0}));
  std::vector<float> w = PullAll("emb", 15);
  // Row 4 got 1 + 3 = 4 subtracted, row 0 got 2, the others nothing.
  EXPECT_EQ(w, (std::vector<float>{-2, -1, 0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 8,
                                   9, 10}));
}

TEST_F(PsTest, CheckpointRoundTripRestoresValuesAndSlots) {
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {4}, "adam", 0.01)));
  std::vector<float> g = {0.5f, -1.0f, 2.0f, 0.25f};
  STRATA_ASSERT_OK(client_->Push("w", DType::kFloat32, {4}, g.data(),
                                 PushTag{"job", 0, 0}));
  auto saved = client_->Save("ckpt-1");
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->num_variables(), 1);
  const std::vector<float> at_save = PullAll("w", 4);
  // Continue one step: this is the reference for "after restore".
  STRATA_ASSERT_OK(client_->Push("w", DType::kFloat32, {4}, g.data(),
                                 PushTag{"job", 0, 1}));
  const std::vector<float> reference = PullAll("w", 4);
  STRATA_ASSERT_OK(client_->Push("w", DType::kFloat32, {4}, g.data(),
                                 PushTag{"job", 0, 2}));

  auto restored = client_->Restore("ckpt-1");
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(PullAll("w", 4), at_save);
  // The push of step 0 is remembered; step 1 applies with restored slots.
  auto dup = client_->Push("w", DType::kFloat32, {4}, g.data(),
                           PushTag{"job", 0, 0});
  ASSERT_TRUE(dup.ok());
  EXPECT_TRUE(dup->duplicate);
  STRATA_ASSERT_OK(client_->Push("w", DType::kFloat32, {4}, g.data(),
                                 PushTag{"job", 0, 1}));
  EXPECT_EQ(PullAll("w", 4), reference);
}

TEST_F(PsTest, DeleteCheckpointsRemovesTheNamedCheckpoints) {
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {4}, "sgd", 0.1)));
  STRATA_ASSERT_OK(client_->Save("ckpt-1").status());
  STRATA_ASSERT_OK(client_->Save("ckpt-2").status());
  absl::StatusOr<int64_t> deleted =
      client_->DeleteCheckpoints({"ckpt-1", "ckpt-9"});
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 1);  // ckpt-9 was never there
  EXPECT_THAT(client_->Restore("ckpt-1"),
              StatusIs(absl::StatusCode::kNotFound));
  STRATA_ASSERT_OK(client_->Restore("ckpt-2").status());
  // Every path is checked before any is deleted.
  EXPECT_THAT(client_->DeleteCheckpoints({"ckpt-2", "../elsewhere"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  STRATA_ASSERT_OK(client_->Restore("ckpt-2").status());
}

// A Save meant for another incarnation of the task (the coordinator's
// record, while this process restarted and has not registered) is refused
// and writes nothing: an empty store is never recorded as the task's.
TEST_F(PsTest, SaveForAnotherIncarnationIsRefusedAndWritesNothing) {
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {4}, "sgd", 0.1)));
  server_->set_incarnation("new-process");
  EXPECT_THAT(client_->Save("ckpt-1", 0, "old-process"),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "has not registered yet"));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(checkpoint_dir_) / "ckpt-1"));
  STRATA_ASSERT_OK(client_->Save("ckpt-1", 0, "new-process").status());
  STRATA_ASSERT_OK(client_->Save("ckpt-2").status());  // no expectation
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(checkpoint_dir_) / "ckpt-1"));
}

TEST_F(PsTest, CorruptCheckpointIsRefusedAndChangesNothing) {
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {1000}, "adam", 0.01)));
  auto saved = client_->Save("ckpt");
  ASSERT_TRUE(saved.ok()) << saved.status();
  std::vector<float> g(1000, 1.0f);
  STRATA_ASSERT_OK(client_->Push("w", DType::kFloat32, {1000}, g.data(),
                                 PushTag{"job", 0, 0}));
  const std::vector<float> before = PullAll("w", 1000);
  // Flip one byte in one payload file.
  std::string victim;
  for (const auto& e : std::filesystem::directory_iterator(saved->path())) {
    if (e.path().extension() == ".bin") victim = e.path();
  }
  ASSERT_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c;
    f.read(&c, 1);
    c ^= 0x40;
    f.seekp(100);
    f.write(&c, 1);
  }
  EXPECT_THAT(client_->Restore("ckpt"),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  std::filesystem::path(victim).filename().string()));
  EXPECT_EQ(PullAll("w", 1000), before);
  EXPECT_THAT(client_->Restore("missing"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(client_->Save("../escape"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(PsTest, SeveralVariablesInOneCall) {
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("a", {3}, "sgd", 1.0)));
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("b", {2, 2}, "sgd", 1.0)));
  std::vector<float> ga = {1, 2, 3}, gb = {0.5f, 0.5f, 0.5f, 0.5f};
  auto pushed = client_->PushVariables({"a", "b"}, DType::kFloat32,
                                       {{3}, {2, 2}}, {ga.data(), gb.data()},
                                       PushTag{"job", 0, 0});
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  ASSERT_EQ(pushed->size(), 2u);
  EXPECT_EQ((*pushed)[1].version, 1);
  std::vector<float> a(3), b(4);
  auto versions = client_->PullVariables({"a", "b"}, {a.data(), b.data()},
                                         {12, 16});
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_EQ(*versions, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(a, (std::vector<float>{0, -1, -2}));
  EXPECT_EQ(b, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
  // The same tag again: both acknowledged as duplicates.
  pushed = client_->PushVariables({"a", "b"}, DType::kFloat32, {{3}, {2, 2}},
                                  {ga.data(), gb.data()}, PushTag{"job", 0, 0});
  ASSERT_TRUE(pushed.ok());
  EXPECT_TRUE((*pushed)[0].duplicate);
  EXPECT_TRUE((*pushed)[1].duplicate);

  // A NaN in the second variable: nothing is applied to either.
  std::vector<float> bad = {0.5f, std::numeric_limits<float>::quiet_NaN(),
                            0.5f, 0.5f};
  EXPECT_THAT(client_->PushVariables({"a", "b"}, DType::kFloat32,
                                     {{3}, {2, 2}}, {ga.data(), bad.data()},
                                     PushTag{"job", 0, 1}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "'b'"));
  // An unknown variable or a wrong shape: refused before any update.
  EXPECT_THAT(client_->PushVariables({"a", "zz"}, DType::kFloat32,
                                     {{3}, {2, 2}}, {ga.data(), gb.data()},
                                     PushTag{"job", 0, 2}),
              StatusIsWithMessage(absl::StatusCode::kNotFound, "'zz'"));
  EXPECT_THAT(client_->PushVariables({"a", "b"}, DType::kFloat32,
                                     {{3}, {4}}, {ga.data(), gb.data()},
                                     PushTag{"job", 0, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(client_->PullVariables({"a", "zz"}, {a.data(), b.data()},
                                     {12, 16}),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(client_->PullVariables({"a", "b"}, {a.data(), b.data()},
                                     {12, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  versions = client_->PullVariables({"a", "b"}, {a.data(), b.data()},
                                    {12, 16});
  ASSERT_TRUE(versions.ok());
  EXPECT_EQ(*versions, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(a, (std::vector<float>{0, -1, -2}));
}

TEST_F(PsTest, SeveralLargeVariablesAreChunkedPerVariable) {
  const int64_t n = 700 * 1024;  // 2.7 MiB each: several chunks
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("x", {n}, "assign_add", 1)));
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("y", {5}, "assign_add", 1)));
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("z", {n}, "assign_add", 1)));
  std::vector<float> gx(n), gy(5, 2.0f), gz(n);
  for (int64_t i = 0; i < n; ++i) {
    gx[i] = static_cast<float>(i % 101);
    gz[i] = static_cast<float>(i % 53);
  }
  STRATA_ASSERT_OK(client_->PushVariables(
      {"x", "y", "z"}, DType::kFloat32, {{n}, {5}, {n}},
      {gx.data(), gy.data(), gz.data()}, PushTag{"job", 0, 0}));
  std::vector<float> x(n), y(5), z(n);
  STRATA_ASSERT_OK(client_->PullVariables({"x", "y", "z"},
                                          {x.data(), y.data(), z.data()},
                                          {size_t(n) * 4, 20, size_t(n) * 4}));
  for (int64_t i = 0; i < n; i += 997) {
    ASSERT_EQ(x[i], 1 + gx[i]);
    ASSERT_EQ(z[i], 1 + gz[i]);
  }
  EXPECT_EQ(x[n - 1], 1 + gx[n - 1]);
  EXPECT_EQ(z[n - 1], 1 + gz[n - 1]);
  EXPECT_EQ(y, std::vector<float>(5, 3.0f));
}

TEST_F(PsTest, HealthServiceReportsServing) {
  auto channel = grpc::CreateChannel(server_->address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  for (const std::string service : {"", "strata.v1.ParameterService"}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(stub->Check(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
}

TEST_F(PsTest, MetricsEndpointServesRpcCounters) {
  PsServerOptions options;
  options.metrics_port = 0;
  StartServer(std::move(options));
  STRATA_ASSERT_OK(client_->CreateVariable(Spec("w", {2})));
  std::vector<float> g = {1, 1};
  STRATA_ASSERT_OK(client_->Push("w", DType::kFloat32, {2}, g.data(),
                                 PushTag{"job", 0, 0}));
  httplib::Client http("127.0.0.1", server_->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body,
              HasSubstr("strata_ps_rpcs_total{code=\"OK\",method=\"Push\"} 1"));
  EXPECT_THAT(res->body, HasSubstr("strata_ps_rpc_latency_seconds_bucket"));
  EXPECT_THAT(res->body, HasSubstr("strata_ps_variables 1"));
}

// Each dynamic table's rows, bytes, lookups, admissions, evictions, ...
// (TableInfo) as series labelled with the table's name, read at each scrape.
TEST_F(PsTest, MetricsEndpointServesPerTableCounters) {
  PsServerOptions options;
  options.metrics_port = 0;
  StartServer(std::move(options));
  v1::TableSpec spec;
  spec.set_name("clicks");
  spec.set_dim(4);
  spec.set_min_count(2);
  spec.set_max_rows(3);
  spec.set_eviction("lru");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(0.1);
  STRATA_ASSERT_OK(client_->CreateTable(spec).status());
  // Ids 1..5 seen twice (admitted on the second lookup); capacity 3 evicts
  // two of them.
  std::vector<int64_t> ids = {1, 2, 3, 4, 5};
  std::vector<float> rows(ids.size() * 4);
  STRATA_ASSERT_OK(client_->LookupRows("clicks", ids, true, absl::MakeSpan(rows)));
  STRATA_ASSERT_OK(client_->LookupRows("clicks", ids, true, absl::MakeSpan(rows)));
  std::vector<int64_t> push_ids = {5, 9};  // 9 was never admitted: dropped
  std::vector<float> grads(push_ids.size() * 4, 1.0f);
  STRATA_ASSERT_OK(client_->PushTableRows("clicks", push_ids, grads,
                                          PushTag{"job", 0, 0})
                       .status());
  auto stats = client_->TableStats("clicks");
  ASSERT_TRUE(stats.ok()) << stats.status();
  const v1::TableInfo& info = stats->tables(0);
  httplib::Client http("127.0.0.1", server_->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  auto series = [](const char* name, int64_t value) {
    return absl::StrCat(name, "{table=\"clicks\"} ", value, "\n");
  };
  EXPECT_EQ(info.rows(), 3);
  EXPECT_GT(info.evictions(), 0);
  EXPECT_EQ(info.gradients_dropped(), 1);
  EXPECT_THAT(res->body, HasSubstr(series("strata_ps_table_rows", info.rows())));
  EXPECT_THAT(res->body,
              HasSubstr(series("strata_ps_table_bytes", info.bytes())));
  EXPECT_THAT(res->body, HasSubstr(series("strata_ps_table_lookups_total",
                                          info.lookups())));
  EXPECT_THAT(res->body, HasSubstr(series("strata_ps_table_admissions_total",
                                          info.admissions())));
  EXPECT_THAT(res->body, HasSubstr(series("strata_ps_table_evictions_total",
                                          info.evictions())));
  EXPECT_THAT(res->body, HasSubstr(series("strata_ps_table_updates_total",
                                          info.updates())));
  EXPECT_THAT(res->body,
              HasSubstr(series("strata_ps_table_gradients_dropped_total", 1)));
  EXPECT_THAT(res->body,
              HasSubstr("# TYPE strata_ps_table_evictions_total counter"));
  EXPECT_THAT(res->body, HasSubstr("# TYPE strata_ps_table_rows gauge"));
}

}  // namespace
}  // namespace strata

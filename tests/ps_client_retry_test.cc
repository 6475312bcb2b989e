// Retrier, PushTag's wire form, and PsClient's retries against a fake
// service that fails with UNAVAILABLE a set number of times.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/ps_client.h"
#include "client/push_tag.h"
#include "client/retry.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace strata {
namespace {

// A SleepFunction that records what it was asked to wait, without waiting.
class FakeSleep {
 public:
  SleepFunction Function() {
    return [this](absl::Duration d) { waits_.push_back(d); };
  }
  const std::vector<absl::Duration>& waits() const { return waits_; }

 private:
  std::vector<absl::Duration> waits_;
};

RetryPolicy Policy(int max_attempts) {
  RetryPolicy policy;
  policy.max_attempts = max_attempts;
  policy.initial_backoff = absl::Milliseconds(50);
  policy.max_backoff = absl::Milliseconds(150);
  return policy;
}

TEST(RetrierTest, RetriesUnavailableWithDoublingCappedBackoff) {
  FakeSleep sleep;
  Retrier retrier(Policy(5), sleep.Function());
  std::vector<int> attempts;
  absl::StatusOr<int> result = retrier.Run([&](int attempt) {
    attempts.push_back(attempt);
    if (attempt < 4) return absl::StatusOr<int>(absl::UnavailableError("x"));
    return absl::StatusOr<int>(42);
  });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, 42);
  EXPECT_EQ(attempts, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(sleep.waits(),
            (std::vector<absl::Duration>{absl::Milliseconds(50),
                                         absl::Milliseconds(100),
                                         absl::Milliseconds(150)}));
}

TEST(RetrierTest, StopsAfterMaxAttemptsWithTheLastError) {
  FakeSleep sleep;
  Retrier retrier(Policy(3), sleep.Function());
  int calls = 0;
  absl::Status s = retrier.Run([&](int attempt) {
    ++calls;
    return absl::UnavailableError(std::to_string(attempt));
  });
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kUnavailable, "3"));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(sleep.waits().size(), 2u);
}

// Runs a call that always fails with `error`; returns how often it ran.
int CallsMade(int max_attempts, const absl::Status& error, FakeSleep* sleep) {
  Retrier retrier(Policy(max_attempts), sleep->Function());
  int calls = 0;
  absl::Status s = retrier.Run([&](int) {
    ++calls;
    return error;
  });
  EXPECT_EQ(s, error);
  return calls;
}

TEST(RetrierTest, OtherErrorsAreNotRetried) {
  FakeSleep sleep;
  EXPECT_EQ(CallsMade(5, absl::AbortedError("stale"), &sleep), 1);
  EXPECT_TRUE(sleep.waits().empty());
}

TEST(RetrierTest, MakesOneAttemptWhenMaxAttemptsIsZero) {
  FakeSleep sleep;
  EXPECT_EQ(CallsMade(0, absl::UnavailableError("down"), &sleep), 1);
  EXPECT_TRUE(sleep.waits().empty());
}

TEST(PushTagTest, ToProtoCopiesEveryFieldWithAttemptZero) {
  v1::PushTag proto = ToProto(PushTag{"job", 3, 17, 5, 4});
  EXPECT_EQ(proto.job(), "job");
  EXPECT_EQ(proto.worker(), 3);
  EXPECT_EQ(proto.step(), 17);
  EXPECT_EQ(proto.group(), 5);
  EXPECT_EQ(proto.group_size(), 4);
  EXPECT_EQ(proto.attempt(), 0);
}

// Answers Stats, Push and ExchangeShared, failing the first `failures`
// calls of each with UNAVAILABLE; records the push attempt numbers seen.
class FlakyService final : public v1::ParameterService::Service {
 public:
  explicit FlakyService(int failures) : failures_(failures) {}

  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*,
                     v1::StatsResponse*) override {
    if (stats_calls_.fetch_add(1) < failures_) return Unavailable();
    return grpc::Status::OK;
  }

  grpc::Status Push(grpc::ServerContext*,
                    grpc::ServerReader<v1::TensorChunk>* reader,
                    v1::PushResponse* response) override {
    v1::TensorChunk chunk;
    bool first = true;
    while (reader->Read(&chunk)) {
      if (first) {
        v1::PushHeader header;
        if (!header.ParseFromString(chunk.header())) {
          return grpc::Status(grpc::StatusCode::INTERNAL, "bad header");
        }
        Record(header.tag().attempt());
        first = false;
      }
    }
    if (push_calls_.fetch_add(1) < failures_) return Unavailable();
    response->set_version(7);
    response->set_applied(true);
    return grpc::Status::OK;
  }

  grpc::Status ExchangeShared(grpc::ServerContext*,
                              const v1::SharedExchangeRequest* request,
                              v1::SharedExchangeResponse*) override {
    Record(request->push().tag().attempt());
    if (exchange_calls_.fetch_add(1) < failures_) return Unavailable();
    return grpc::Status::OK;
  }

  int stats_calls() const { return stats_calls_.load(); }
  std::vector<int64_t> attempts() {
    absl::MutexLock lock(&mu_);
    return attempts_;
  }

 private:
  static grpc::Status Unavailable() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "flaky");
  }
  void Record(int64_t attempt) {
    absl::MutexLock lock(&mu_);
    attempts_.push_back(attempt);
  }

  const int failures_;
  std::atomic<int> stats_calls_{0};
  std::atomic<int> push_calls_{0};
  std::atomic<int> exchange_calls_{0};
  absl::Mutex mu_;
  std::vector<int64_t> attempts_ ABSL_GUARDED_BY(mu_);
};

class PsClientRetryTest : public ::testing::Test {
 protected:
  void Start(int failures) {
    service_ = std::make_unique<FlakyService>(failures);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    PsClientOptions options;
    options.deadline = absl::Seconds(30);
    options.max_attempts = 4;
    options.initial_backoff = absl::Milliseconds(50);
    options.max_backoff = absl::Seconds(2);
    options.sleep = sleep_.Function();
    client_ = PsClient::Connect("127.0.0.1:" + std::to_string(port), options);
  }

  void TearDown() override {
    client_.reset();
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(5));
    }
  }

  FakeSleep sleep_;
  std::unique_ptr<FlakyService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<PsClient> client_;
};

TEST_F(PsClientRetryTest, UnaryCallRetriesUnavailableThroughTheInjectedSleep) {
  Start(/*failures=*/2);
  STRATA_ASSERT_OK(client_->Stats().status());
  EXPECT_EQ(service_->stats_calls(), 3);
  EXPECT_EQ(sleep_.waits(),
            (std::vector<absl::Duration>{absl::Milliseconds(50),
                                         absl::Milliseconds(100)}));
}

TEST_F(PsClientRetryTest, UnaryCallGivesUpAfterMaxAttempts) {
  Start(/*failures=*/100);
  EXPECT_THAT(client_->Stats(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(service_->stats_calls(), 4);
  EXPECT_EQ(sleep_.waits().size(), 3u);
}

TEST_F(PsClientRetryTest, PushRetriesCarryTheAttemptNumber) {
  Start(/*failures=*/2);
  const float grad[2] = {1, 2};
  absl::StatusOr<PushResult> r =
      client_->Push("w", DType::kFloat32, {2}, grad, PushTag{"job", 1, 9});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version, 7);
  EXPECT_EQ(r->attempts, 3);
  EXPECT_EQ(service_->attempts(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(sleep_.waits().size(), 2u);
}

TEST_F(PsClientRetryTest, ExchangeSharedRetriesCarryTheAttemptNumber) {
  Start(/*failures=*/1);
  v1::SharedExchangeRequest request;
  request.mutable_push()->add_variables()->set_name("w");
  STRATA_ASSERT_OK(client_->ExchangeShared(request).status());
  EXPECT_EQ(service_->attempts(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(sleep_.waits().size(), 1u);
}

}  // namespace
}  // namespace strata

// The daemons' shared pieces: DaemonServer (health and /metrics), the stop
// signals taken synchronously (StopSignals) and through a flag (StopFlag).
#include "rpc/daemon.h"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <string>

#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// The health status of `service` ("" = the server's) at `address`.
HealthCheckResponse::ServingStatus Health(const std::string& address,
                                          const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  grpc::Status status = stub->Check(&ctx, req, &resp);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return resp.status();
}

TEST(DaemonServerTest, HealthOnlyServerAnswers) {
  DaemonServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  auto server = DaemonServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(),
            "127.0.0.1:" + std::to_string((*server)->port()));
  EXPECT_EQ((*server)->metrics_port(), -1);
  EXPECT_EQ(Health((*server)->address(), ""), HealthCheckResponse::SERVING);

  (*server)->SetServing(false);
  EXPECT_EQ(Health((*server)->address(), ""),
            HealthCheckResponse::NOT_SERVING);
  (*server)->Shutdown(absl::Seconds(1));
  (*server)->Shutdown(absl::Seconds(1));  // idempotent
}

TEST(DaemonServerTest, NamedHealthServicesAndMetrics) {
  MetricsRegistry registry;
  registry.GetCounter("strata_daemon_test_total", "Test.")->Increment();
  DaemonServerOptions options;
  options.health_services = {"strata.v1.Test"};
  options.metrics_port = 0;
  options.metrics = &registry;
  auto server = DaemonServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(Health((*server)->address(), "strata.v1.Test"),
            HealthCheckResponse::SERVING);
  (*server)->SetServing(false);
  EXPECT_EQ(Health((*server)->address(), "strata.v1.Test"),
            HealthCheckResponse::NOT_SERVING);

  ASSERT_GT((*server)->metrics_port(), 0);
  httplib::Client client("127.0.0.1", (*server)->metrics_port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, registry.Serialize());
  (*server)->StopMetrics();
  (*server)->StopMetrics();  // idempotent
}

TEST(DaemonServerTest, PortInUseIsUnavailable) {
  DaemonServerOptions options;
  // As the coordinator does: a port in use is an error, not shared.
  options.configure_builder = [](grpc::ServerBuilder& builder) {
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  };
  auto first = DaemonServer::Start(options);
  ASSERT_TRUE(first.ok()) << first.status();
  options.port = (*first)->port();
  auto second = DaemonServer::Start(options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(),
            "cannot listen on 127.0.0.1:" + std::to_string(options.port));
}

TEST(DaemonServerTest, MetricsFailureStopsTheServer) {
  DaemonServerOptions options;
  options.metrics_port = 0;  // and no registry
  auto server = DaemonServer::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StopSignalsTest, WaitTakesABlockedSignal) {
  sigset_t old;
  pthread_sigmask(SIG_SETMASK, nullptr, &old);
  const StopSignals stop = StopSignals::Block();
  EXPECT_EQ(stop.WaitFor(absl::ZeroDuration()), 0);  // none yet
  raise(SIGTERM);  // pending: blocked in this thread
  EXPECT_EQ(stop.Wait(), SIGTERM);
  raise(SIGINT);
  EXPECT_EQ(stop.WaitFor(absl::Seconds(10)), SIGINT);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

TEST(StopFlagTest, SignalSetsTheFlagAndEndsWait) {
  StopFlag* stop = StopFlag::Install();
  EXPECT_EQ(stop, StopFlag::Install());
  EXPECT_FALSE(stop->stopped());
  raise(SIGINT);  // the handler runs before raise returns
  EXPECT_TRUE(stop->stopped());
  EXPECT_TRUE(stop->flag()->load());
  stop->Wait();  // returns at once
  stop->Wait();
}

}  // namespace
}  // namespace strata

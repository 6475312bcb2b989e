// What every Strata daemon's main() shares: waiting for SIGTERM/SIGINT, and
// serving gRPC with the grpc.health.v1 service and, optionally, the
// Prometheus /metrics endpoint (common/metrics.h).
//
// Two ways to take the stop signals, one per kind of daemon:
//   StopSignals  blocks them in every thread and takes them synchronously
//                (a daemon whose main thread only waits: strata-ps,
//                strata-coordinator);
//   StopFlag     sets a flag a library polls (PsWorker, Launch, Submit) from
//                an async-signal-safe handler.
#ifndef STRATA_RPC_DAEMON_H_
#define STRATA_RPC_DAEMON_H_

#include <signal.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "rpc/tls.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"

namespace strata {

// SIGTERM and SIGINT, blocked and taken with sigwait. Copyable; the
// signal mask is per thread, so Block() must run in main() before any
// thread starts (threads inherit it).
class StopSignals {
 public:
  // Blocks both signals in the calling thread.
  static StopSignals Block();

  // Waits for one of them; returns its number.
  int Wait() const;
  // Waits at most `timeout` for one; its number, or 0 when none came.
  int WaitFor(absl::Duration timeout) const;

 private:
  StopSignals() = default;
  sigset_t set_;
};

// A process-wide flag that SIGTERM and SIGINT set. Thread-safe.
class StopFlag {
 public:
  // Installs the handlers (idempotent). Never null, never destroyed.
  static StopFlag* Install();

  // Set once a stop signal arrived; for libraries that poll it.
  const std::atomic<bool>* flag() const;
  bool stopped() const { return flag()->load(); }
  // Blocks until a stop signal arrived (returns at once when one did).
  void Wait() const;

 private:
  StopFlag() = default;
};

struct DaemonServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 picks a free one (see DaemonServer::port())
  // Null: insecure.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Registered services, not owned; they must outlive the server. Empty:
  // the server serves the health service alone.
  std::vector<grpc::Service*> services;
  // Service names the health service reports SERVING, besides the
  // overall status ("").
  std::vector<std::string> health_services;
  // Runs on the builder after the services are registered, before it
  // starts (channel arguments, tests' interceptors). To serve reflection,
  // call grpc::reflection::InitProtoReflectionServerBuilderPlugin() before
  // Start.
  std::function<void(grpc::ServerBuilder&)> configure_builder;
  // The /metrics endpoint on `host`: -1 none, 0 picks a port.
  int metrics_port = -1;
  const MetricsRegistry* metrics = nullptr;  // required with metrics_port >= 0
};

// The options of a daemon listening on host:port with `tls` (plaintext
// when not enabled), reflection served: the rest (services, health names,
// metrics) is the caller's. Errors: those of MakeServerCredentials.
absl::StatusOr<DaemonServerOptions> ListeningOptions(const std::string& host,
                                                     int port,
                                                     const TlsOptions& tls);

// A started gRPC server with the default health service (SERVING) and
// the optional /metrics endpoint. Thread-compatible; the gRPC server itself
// is thread-safe.
class DaemonServer {
 public:
  // Errors: UNAVAILABLE "cannot listen on HOST:PORT" when the address cannot
  // be bound; those of MetricsHttpServer::Start (the gRPC server is then
  // stopped).
  static absl::StatusOr<std::unique_ptr<DaemonServer>> Start(
      const DaemonServerOptions& options);

  DaemonServer(const DaemonServer&) = delete;
  DaemonServer& operator=(const DaemonServer&) = delete;
  ~DaemonServer();

  int port() const { return port_; }
  std::string address() const;  // host:port, the bound port
  int metrics_port() const { return http_ ? http_->port() : -1; }

  // Reports every health service (and the overall status) SERVING or
  // NOT_SERVING.
  void SetServing(bool serving);
  // Stops accepting calls, cancels those still running after `grace` and
  // waits for them. Idempotent.
  void Shutdown(absl::Duration grace);
  // Stops the /metrics endpoint. Idempotent.
  void StopMetrics();

 private:
  DaemonServer() = default;

  std::string host_;
  std::vector<std::string> health_services_;
  int port_ = 0;
  bool shut_down_ = false;
  // Declared before server_, which uses it.
  grpc::CallbackGenericService no_methods_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> http_;
};

}  // namespace strata

#endif  // STRATA_RPC_DAEMON_H_

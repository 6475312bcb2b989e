// A running parameter server: store + gRPC service + health + reflection,
// and optionally the Prometheus /metrics endpoint.
#ifndef STRATA_SERVER_PS_SERVER_H_
#define STRATA_SERVER_PS_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/tf_config.h"  // JoinHostPort
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "rpc/daemon.h"
#include "rpc/tls.h"
#include "server/parameter_service_impl.h"
#include "server/variable_store.h"

namespace strata {

struct PsServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;               // 0 picks a free port
  int metrics_port = -1;      // -1: no metrics endpoint; 0 picks a port
  std::string checkpoint_dir;
  uint64_t max_variable_bytes = uint64_t{16} << 30;
  // Where variables live (strata-ps --device); Start fails when it is a CUDA
  // device this build or machine cannot use.
  PsDevice device;
  // TLS of the listening port (plaintext when not enabled); bearer-token
  // credentials are service.credentials.
  TlsOptions tls;
  ParameterServiceOptions service;
  // Extra builder configuration (interceptors in tests, credentials).
  std::function<void(grpc::ServerBuilder&)> configure_builder;
  // Builds the store and service but does not listen until StartServing
  // (a replicated task's backup listens only once promoted).
  bool defer_serving = false;
};

// Owns everything a PS process runs. Thread-safe.
class PsServer {
 public:
  // Builds and starts the server. Errors: UNAVAILABLE when the address
  // cannot be bound (naming it), INVALID_ARGUMENT for bad options,
  // FAILED_PRECONDITION for an unusable device (see CheckPsDevice).
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(
      const PsServerOptions& options, Logger* logger);
  ~PsServer();

  // Listens on options.port (once; the deferred start of defer_serving).
  // Errors: UNAVAILABLE when the address cannot be bound.
  absl::Status StartServing();
  bool serving() const { return daemon_ != nullptr; }

  int port() const { return daemon_ ? daemon_->port() : 0; }
  int metrics_port() const { return daemon_ ? daemon_->metrics_port() : -1; }
  // "host:port" (IPv6 hosts in brackets).
  std::string address() const { return JoinHostPort(options_.host, port()); }
  VariableStore* store() { return store_.get(); }
  // The incarnation registered with the coordinator (see
  // ParameterServiceImpl::set_incarnation).
  void set_incarnation(const std::string& incarnation) {
    service_->set_incarnation(incarnation);
  }
  MetricsRegistry* metrics() { return metrics_.get(); }
  // "cpu", or the CUDA device's description (CheckPsDevice).
  const std::string& device_description() const { return device_description_; }

  // Stops accepting calls and lets in-flight calls finish, cancelling those
  // still running after `grace`. Idempotent.
  void Shutdown(absl::Duration grace);

 private:
  PsServer() = default;

  PsServerOptions options_;
  Logger* logger_ = nullptr;
  std::string device_description_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<VariableStore> store_;
  std::unique_ptr<ParameterServiceImpl> service_;
  std::unique_ptr<DaemonServer> daemon_;  // gRPC, health, /metrics
  bool shut_down_ = false;
};

}  // namespace strata

#endif  // STRATA_SERVER_PS_SERVER_H_

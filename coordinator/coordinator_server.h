// A running coordinator: state + driver (background work) + gRPC service +
// health + reflection, and optionally the Prometheus /metrics endpoint.
#ifndef STRATA_COORDINATOR_COORDINATOR_SERVER_H_
#define STRATA_COORDINATOR_COORDINATOR_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/tf_config.h"  // JoinHostPort
#include "coordinator/coordinator_driver.h"
#include "coordinator/coordinator_service_impl.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/ps_checkpointer.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "rpc/daemon.h"
#include "rpc/tls.h"

namespace strata {

struct CoordinatorServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;           // 0 picks a free port
  int metrics_port = -1;  // -1: no metrics endpoint; 0 picks a port
  // Membership and job options: state_dir, lease, heartbeat_interval,
  // topology_timeout, static_cluster (TF_CONFIG's cluster), clock.
  CoordinatorOptions coordinator;
  // Bearer-token credentials of callers are service.credentials; the
  // driver's periods are service.tick and service.persist_interval.
  CoordinatorServiceOptions service;
  // TLS of the listening port (plaintext when not enabled).
  TlsOptions tls;
  // Saves/restores the PS tasks. Null: built by `checkpointer_factory`
  // (main() wires daemons/ps_client_checkpointer.h, over PsClient); both
  // null: every PS checkpoint fails with FAILED_PRECONDITION.
  std::shared_ptr<PsCheckpointer> checkpointer;
  // What a checkpointer is built from: the PS tasks of the moment
  // (CoordinatorState::PsTargets), and this server's leader epoch and
  // leading check (service.leader_epoch, service.leading).
  struct CheckpointerContext {
    std::function<std::vector<PsTarget>()> targets;
    int64_t coordinator_epoch = 0;
    std::function<bool()> leading;
  };
  using CheckpointerFactory = std::function<std::shared_ptr<PsCheckpointer>(
      const CheckpointerContext&)>;
  CheckpointerFactory checkpointer_factory;
  // Extra builder configuration (interceptors in tests, credentials).
  std::function<void(grpc::ServerBuilder&)> configure_builder;
};

// Owns everything a coordinator process runs. Thread-safe.
class CoordinatorServer {
 public:
  // Loads the state (if any), builds and starts the server. Errors: those
  // of CoordinatorState::Create (DATA_LOSS for a corrupt state file,
  // INVALID_ARGUMENT for bad options); UNAVAILABLE when the address cannot
  // be bound (naming it); INVALID_ARGUMENT for a bad port.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const CoordinatorServerOptions& options, Logger* logger);
  ~CoordinatorServer();

  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  int port() const { return daemon_ ? daemon_->port() : 0; }
  int metrics_port() const { return daemon_ ? daemon_->metrics_port() : -1; }
  // "host:port" (IPv6 hosts in brackets).
  std::string address() const { return JoinHostPort(options_.host, port()); }
  CoordinatorState* state() { return state_.get(); }
  MetricsRegistry* metrics() { return metrics_.get(); }

  // Health goes NOT_SERVING, watch streams and barrier waits end, the
  // background threads stop, the state is written, then in-flight calls
  // finish (cancelled after `grace`). Idempotent.
  void Shutdown(absl::Duration grace);

 private:
  CoordinatorServer() = default;

  CoordinatorServerOptions options_;
  Logger* logger_ = nullptr;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<CoordinatorState> state_;
  std::shared_ptr<PsCheckpointer> checkpointer_;
  // Destroyed (stopped) after the service, before the state.
  std::unique_ptr<CoordinatorDriver> driver_;
  std::unique_ptr<CoordinatorServiceImpl> service_;
  std::unique_ptr<DaemonServer> daemon_;  // gRPC, health, /metrics
  bool shut_down_ = false;
};

}  // namespace strata

#endif  // STRATA_COORDINATOR_COORDINATOR_SERVER_H_

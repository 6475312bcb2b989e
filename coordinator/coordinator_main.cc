// strata-coordinator: the coordinator daemon. Parses flags and TF_CONFIG,
// loads the state directory, starts the server, prints
// "listening on HOST:PORT", and on SIGTERM or SIGINT drains and exits 0.
// Exit 2: bad flags, bad TF_CONFIG, or a corrupt state file; exit 1: the
// address cannot be bound.
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/cli.h"
#include "common/daemon.h"
#include "common/logging.h"
#include "common/security_flags.h"
#include "common/task_identity.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/final_checkpoint.h"

ABSL_FLAG(std::string, host, "",
          "Address to listen on (default 127.0.0.1, "
          "or 0.0.0.0 when TF_CONFIG names this task as the chief)");
ABSL_FLAG(int, port, -1,
          "Port; 0 picks a free one (default 0, or the port "
          "of the chief task in TF_CONFIG)");
ABSL_FLAG(std::string, state_dir, "",
          "Directory for state.json (membership, "
          "job, completed steps); empty: nothing survives a restart");
ABSL_FLAG(int64_t, lease_ms, 5000,
          "A member that has not heartbeat for this "
          "long is declared failed");
ABSL_FLAG(int64_t, heartbeat_ms, 1000, "Heartbeat interval told to members");
ABSL_FLAG(int64_t, topology_timeout_ms, 10000,
          "How long a submitted job "
          "waits for the ps/worker tasks its strategy needs");
ABSL_FLAG(int, metrics_port, -1,
          "Prometheus /metrics port; 0 picks one, "
          "-1 disables");
ABSL_FLAG(double, final_checkpoint_seconds, 0,
          "On SIGTERM/SIGINT, first take a checkpoint of the running job "
          "(when it takes checkpoints, steps completed since the last and "
          "every ps task is up), waiting at most this long; 0: none. The PS "
          "tasks must keep serving meanwhile (strata-ps "
          "--shutdown-delay-seconds)");
ABSL_FLAG(double, drain_seconds, 10,
          "Grace period for in-flight calls on "
          "SIGTERM");

namespace {

// --help: what strata-coordinator is and its flags, grouped.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "strata-coordinator";
  cli.usage = "strata-coordinator [--port P] [--state-dir DIR] [flags]";
  cli.description =
      "The coordinator daemon: owns the cluster's membership and failure "
      "detection, the submitted job, its step queue and its checkpoints, "
      "and on SIGTERM drains and exits 0 (TF_CONFIG, where set, gives the "
      "chief task's port and the static cluster).";
  cli.groups = {
      {"Serving", {"host", "port", "metrics_port"}},
      {"Membership", {"lease_ms", "heartbeat_ms", "topology_timeout_ms"}},
      {"State and checkpoints", {"state_dir", "final_checkpoint_seconds"}},
      {"Shutdown", {"drain_seconds"}},
      strata::SecurityFlagGroup()};
  return cli;
}

int Fail(int code, absl::string_view message) {
  std::cerr << "strata-coordinator: " << message << "\n";
  return code;
}

// The server's options from the flags and TF_CONFIG. Errors:
// INVALID_ARGUMENT, the message to print.
absl::StatusOr<strata::CoordinatorServerOptions> OptionsFromFlags() {
  strata::TaskIdentityFlags flags;
  flags.host = absl::GetFlag(FLAGS_host);
  flags.port = absl::GetFlag(FLAGS_port);
  const char* tf_config = std::getenv("TF_CONFIG");
  auto id = strata::ResolveTaskIdentity(
      strata::DaemonKind::kCoordinator, flags,
      tf_config ? std::optional<std::string>(tf_config) : std::nullopt);
  if (!id.ok()) return id.status();
  strata::CoordinatorServerOptions options;
  options.host = id->host;
  options.port = id->port;
  options.coordinator.static_cluster = id->static_cluster;
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.coordinator.state_dir = absl::GetFlag(FLAGS_state_dir);
  const int64_t lease_ms = absl::GetFlag(FLAGS_lease_ms);
  const int64_t heartbeat_ms = absl::GetFlag(FLAGS_heartbeat_ms);
  const int64_t topology_ms = absl::GetFlag(FLAGS_topology_timeout_ms);
  if (lease_ms <= 0 || heartbeat_ms <= 0 || heartbeat_ms >= lease_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("need 0 < --heartbeat-ms < --lease-ms, got ",
                     heartbeat_ms, " and ", lease_ms));
  }
  if (topology_ms < 0) {
    return absl::InvalidArgumentError("--topology-timeout-ms must be >= 0");
  }
  options.coordinator.lease = absl::Milliseconds(lease_ms);
  options.coordinator.heartbeat_interval = absl::Milliseconds(heartbeat_ms);
  options.coordinator.topology_timeout = absl::Milliseconds(topology_ms);
  // --tls-* serve TLS; --auth-file authenticates callers; --auth-token is
  // the coordinator credential it sends to the PS tasks (checkpoints).
  auto security = strata::SecurityFromFlags();
  if (!security.ok()) {
    return absl::InvalidArgumentError(security.status().message());
  }
  options.tls = security->tls;
  options.ps_security = security->client;
  options.service.credentials = security->credentials;
  return options;
}

void LogListening(const strata::CoordinatorServerOptions& options,
                  const strata::CoordinatorServer& server,
                  strata::Logger* logger) {
  logger->Log(
      strata::LogLevel::kInfo, "listening",
      {{"address", server.address()},
       {"metrics_port", server.metrics_port()},
       {"state_dir", options.coordinator.state_dir},
       {"static_cluster", options.coordinator.static_cluster.has_value()},
       {"tls", options.tls.enabled},
       {"client_auth", options.tls.client_auth},
       {"credentials", options.service.credentials != nullptr},
       {"lease_ms", absl::ToInt64Milliseconds(options.coordinator.lease)},
       {"heartbeat_ms",
        absl::ToInt64Milliseconds(options.coordinator.heartbeat_interval)},
       {"topology_timeout_ms",
        absl::ToInt64Milliseconds(options.coordinator.topology_timeout)}});
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());
  // Blocked in every thread; the main thread waits for them below.
  const strata::StopSignals stop = strata::StopSignals::Block();
  absl::StatusOr<strata::CoordinatorServerOptions> options =
      OptionsFromFlags();
  if (!options.ok()) return Fail(2, options.status().message());

  strata::Logger logger("coordinator");
  auto server = strata::CoordinatorServer::Start(*options, &logger);
  if (!server.ok()) {
    logger.Log(strata::LogLevel::kError, "start_failed",
               {{"error", server.status().ToString()}});
    // Not binding is an environment problem (1); a bad state file or bad
    // options are the operator's to fix (2).
    return Fail(server.status().code() == absl::StatusCode::kUnavailable ? 1
                                                                         : 2,
                server.status().message());
  }
  std::cout << "listening on " << (*server)->address() << std::endl;
  LogListening(*options, **server, &logger);
  if ((*server)->metrics_port() > 0) {
    std::cout << "metrics on " << options->host << ":"
              << (*server)->metrics_port() << std::endl;
  }

  const int sig = stop.Wait();
  strata::FinalCheckpointOptions final_checkpoint;
  final_checkpoint.timeout =
      absl::Seconds(absl::GetFlag(FLAGS_final_checkpoint_seconds));
  strata::TakeFinalCheckpoint(
      strata::StateCheckpointProgress((*server)->state()).get(),
      final_checkpoint, &logger, sig);
  logger.Log(strata::LogLevel::kInfo, "draining", {{"signal", sig}});
  (*server)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_seconds)));
  logger.Log(strata::LogLevel::kInfo, "stopped", {});
  return 0;
}

// strata-coordinator: the coordinator daemon. Parses flags and TF_CONFIG,
// loads the state directory, starts the server, prints
// "listening on HOST:PORT", and on SIGTERM or SIGINT drains and exits 0.
// Exit 2: bad flags, bad TF_CONFIG, or a corrupt state file; exit 1: the
// address cannot be bound.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/cli.h"
#include "common/logging.h"
#include "common/security_flags.h"
#include "common/tf_config.h"
#include "coordinator/coordinator_server.h"

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

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());

  // Block the stop signals in every thread; one waits for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  strata::CoordinatorServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  if (const char* tf_config = std::getenv("TF_CONFIG");
      tf_config != nullptr && *tf_config != '\0') {
    auto config = strata::ParseTfConfig(tf_config);
    if (!config.ok()) {
      std::cerr << "strata-coordinator: bad TF_CONFIG: "
                << config.status().message() << "\n";
      return 2;
    }
    if (!config->cluster.jobs.empty()) {
      options.coordinator.static_cluster = config->cluster;
    }
    if (config->task_type == "chief" || config->task_type == "master") {
      const std::string address = strata::TaskAddress(*config);
      if (!address.empty()) {
        auto hp = strata::SplitHostPort(address);
        if (!hp.ok()) {
          std::cerr << "strata-coordinator: TF_CONFIG address: "
                    << hp.status().message() << "\n";
          return 2;
        }
        // The cluster lists the name others reach us by; listen on all
        // interfaces at that port.
        options.host = "0.0.0.0";
        options.port = hp->second;
      }
    }
  }
  if (!absl::GetFlag(FLAGS_host).empty()) {
    options.host = absl::GetFlag(FLAGS_host);
  }
  if (absl::GetFlag(FLAGS_port) >= 0) options.port = absl::GetFlag(FLAGS_port);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.coordinator.state_dir = absl::GetFlag(FLAGS_state_dir);
  const int64_t lease_ms = absl::GetFlag(FLAGS_lease_ms);
  const int64_t heartbeat_ms = absl::GetFlag(FLAGS_heartbeat_ms);
  const int64_t topology_ms = absl::GetFlag(FLAGS_topology_timeout_ms);
  if (lease_ms <= 0 || heartbeat_ms <= 0 || heartbeat_ms >= lease_ms) {
    std::cerr << "strata-coordinator: need 0 < --heartbeat-ms < --lease-ms, "
              << "got " << heartbeat_ms << " and " << lease_ms << "\n";
    return 2;
  }
  if (topology_ms < 0) {
    std::cerr << "strata-coordinator: --topology-timeout-ms must be >= 0\n";
    return 2;
  }
  options.coordinator.lease = absl::Milliseconds(lease_ms);
  options.coordinator.heartbeat_interval = absl::Milliseconds(heartbeat_ms);
  options.coordinator.topology_timeout = absl::Milliseconds(topology_ms);

  // --tls-* serve TLS; --auth-file authenticates callers; --auth-token is
  // the coordinator credential it sends to the PS tasks (checkpoints).
  auto tls = strata::TlsFromFlags();
  auto ps_security = strata::ClientSecurityFromFlags();
  auto credentials = strata::CredentialsFromFlags();
  for (const absl::Status& s :
       {tls.status(), ps_security.status(), credentials.status()}) {
    if (!s.ok()) {
      std::cerr << "strata-coordinator: " << s.message() << "\n";
      return 2;
    }
  }
  options.tls = *tls;
  options.ps_security = *ps_security;
  options.service.credentials = *credentials;

  strata::Logger logger("coordinator");
  auto server = strata::CoordinatorServer::Start(options, &logger);
  if (!server.ok()) {
    logger.Log(strata::LogLevel::kError, "start_failed",
               {{"error", server.status().ToString()}});
    std::cerr << "strata-coordinator: " << server.status().message() << "\n";
    // Not binding is an environment problem (1); a bad state file or bad
    // options are the operator's to fix (2).
    return server.status().code() == absl::StatusCode::kUnavailable ? 1 : 2;
  }
  std::cout << "listening on " << (*server)->address() << std::endl;
  logger.Log(
      strata::LogLevel::kInfo, "listening",
      {{"address", (*server)->address()},
       {"metrics_port", (*server)->metrics_port()},
       {"state_dir", options.coordinator.state_dir},
       {"static_cluster", options.coordinator.static_cluster.has_value()},
       {"tls", options.tls.enabled},
       {"client_auth", options.tls.client_auth},
       {"credentials", *credentials != nullptr},
       {"lease_ms", lease_ms},
       {"heartbeat_ms", heartbeat_ms},
       {"topology_timeout_ms", topology_ms}});
  if ((*server)->metrics_port() > 0) {
    std::cout << "metrics on " << options.host << ":"
              << (*server)->metrics_port() << std::endl;
  }

  int sig = 0;
  sigwait(&stop_signals, &sig);
  const double final_wait = absl::GetFlag(FLAGS_final_checkpoint_seconds);
  strata::CoordinatorState* state = (*server)->state();
  const int64_t target = final_wait > 0 ? state->RequestCheckpoint() : -1;
  if (target >= 0) {
    logger.Log(strata::LogLevel::kInfo, "final_checkpoint_started",
               {{"signal", sig}, {"steps_completed", target}});
    const absl::Time give_up = absl::Now() + absl::Seconds(final_wait);
    while (state->CheckpointAttempted() < target && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    const bool done = state->CheckpointAttempted() >= target;
    logger.Log(done ? strata::LogLevel::kInfo : strata::LogLevel::kWarning,
               "final_checkpoint",
               {{"done", done},
                {"checkpoint", state->LastCheckpoint()},
                {"steps_covered", state->CheckpointAttempted()}});
  }
  logger.Log(strata::LogLevel::kInfo, "draining", {{"signal", sig}});
  (*server)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_seconds)));
  logger.Log(strata::LogLevel::kInfo, "stopped", {});
  return 0;
}

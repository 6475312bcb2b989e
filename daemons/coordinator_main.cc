// strata-coordinator: the coordinator daemon. Parses flags and TF_CONFIG,
// loads the state directory, starts the server, prints
// "listening on HOST:PORT", and on SIGTERM or SIGINT drains and exits 0.
// Exit 2: bad flags, bad TF_CONFIG, or a corrupt state file; exit 1: the
// address cannot be bound.
//
// With --etcd-endpoints it is one replica of an elected coordinator: it
// listens at once as a standby (every call answered UNAVAILABLE, so that
// clients go on to the next replica), campaigns for the leader key in etcd,
// and once it leads loads the state from etcd and serves on the same port
// (logging "leading as epoch N" on stderr). A leader that loses its lease, or whose
// state write etcd refuses, exits at once with code 3 (to be restarted as
// a standby).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/cli.h"
#include "common/logging.h"
#include "common/task_identity.h"
#include "common/tf_config.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/etcd_client.h"
#include "coordinator/etcd_state_file_system.h"
#include "coordinator/final_checkpoint.h"
#include "coordinator/leader_election.h"
#include "daemons/ps_client_checkpointer.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "rpc/daemon.h"
#include "rpc/security_flags.h"
#include "rpc/tls.h"

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
ABSL_FLAG(std::string, etcd_endpoints, "",
          "etcd client endpoints HOST:PORT[,HOST:PORT...]: run as one "
          "replica of an elected coordinator whose state and leadership "
          "live in etcd (instead of --state-dir); the others are standbys");
ABSL_FLAG(std::string, etcd_prefix, "/strata/default",
          "Prefix of this cluster's keys in etcd (the leader key, the "
          "state)");
ABSL_FLAG(int64_t, leader_ttl_ms, 3000,
          "TTL of the leader's etcd lease: a dead leader is replaced "
          "within about this long (etcd rounds it up to whole seconds)");
ABSL_FLAG(std::string, advertise_address, "",
          "The address other tasks reach this replica at, written in the "
          "leader key (default: the listening HOST:PORT)");

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
      {"High availability (etcd)",
       {"etcd_endpoints", "etcd_prefix", "leader_ttl_ms",
        "advertise_address"}},
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
  options.checkpointer_factory = PsClientCheckpointerFactory(security->client);
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

// A standby replica's server: binds the port and answers every call with
// UNAVAILABLE (clients try the next replica) until this replica leads.
class StandbyServer {
 public:
  static absl::StatusOr<std::unique_ptr<StandbyServer>> Start(
      const std::string& host, int port, const strata::TlsOptions& tls) {
    auto credentials = strata::MakeServerCredentials(tls);
    if (!credentials.ok()) return credentials.status();
    std::unique_ptr<StandbyServer> s(new StandbyServer());
    grpc::ServerBuilder builder;
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.AddListeningPort(strata::JoinHostPort(host, port), *credentials,
                             &s->port_);
    builder.RegisterCallbackGenericService(&s->service_);
    s->server_ = builder.BuildAndStart();
    if (s->server_ == nullptr || s->port_ == 0) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", strata::JoinHostPort(host, port)));
    }
    return s;
  }
  int port() const { return port_; }
  void Shutdown() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(200));
    server_->Wait();
    server_.reset();
  }
  ~StandbyServer() { Shutdown(); }

 private:
  class Refuse final : public grpc::CallbackGenericService {
   public:
    grpc::ServerGenericBidiReactor* CreateReactor(
        grpc::GenericCallbackServerContext*) override {
      class Reactor : public grpc::ServerGenericBidiReactor {
       public:
        Reactor() {
          Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "this coordinator is a standby replica; "
                              "another one leads"));
        }
        void OnDone() override { delete this; }
      };
      return new Reactor;
    }
  };
  StandbyServer() = default;
  Refuse service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// On stop signal `sig`: the final checkpoint (--final-checkpoint-seconds),
// then the drain (--drain-seconds), the state written.
void CheckpointAndDrain(int sig, strata::CoordinatorServer* server,
                        strata::Logger* logger) {
  strata::FinalCheckpointOptions final_checkpoint;
  final_checkpoint.timeout =
      absl::Seconds(absl::GetFlag(FLAGS_final_checkpoint_seconds));
  strata::TakeFinalCheckpoint(
      strata::StateCheckpointProgress(server->state()).get(),
      final_checkpoint, logger, sig);
  logger->Info("draining", {{"signal", sig}});
  server->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_seconds)));
}

[[noreturn]] void ExitLostLeadership(strata::Logger* logger,
                                     const std::string& reason) {
  logger->Error("leadership_lost", {{"reason", reason}, {"exit_code", 3}});
  std::cerr << "strata-coordinator: lost leadership (" << reason
            << "); exiting with code 3" << std::endl;
  std::_Exit(3);
}

// The replica of an elected coordinator (--etcd-endpoints): standby, then
// leader until a stop signal (exit 0) or the loss of leadership (exit 3).
int RunElected(strata::CoordinatorServerOptions options,
               const strata::StopSignals& stop, strata::Logger* logger) {
  if (!options.coordinator.state_dir.empty()) {
    return Fail(2,
                "--state-dir and --etcd-endpoints exclude each other: with "
                "etcd the state lives in etcd");
  }
  const int64_t ttl_ms = absl::GetFlag(FLAGS_leader_ttl_ms);
  if (ttl_ms < 1000) {
    return Fail(2, absl::StrCat("--leader-ttl-ms must be >= 1000 (etcd "
                                "leases last whole seconds), got ",
                                ttl_ms));
  }
  const std::string prefix = absl::GetFlag(FLAGS_etcd_prefix);
  if (prefix.empty() || prefix[0] != '/') {
    return Fail(2, absl::StrCat("--etcd-prefix must start with '/', got '",
                                prefix, "'"));
  }
  auto etcd = strata::EtcdClient::Connect(absl::GetFlag(FLAGS_etcd_endpoints));
  auto standby =
      StandbyServer::Start(options.host, options.port, options.tls);
  if (!standby.ok()) {
    return Fail(standby.status().code() == absl::StatusCode::kUnavailable ? 1
                                                                          : 2,
                standby.status().message());
  }
  options.port = (*standby)->port();
  const std::string address = strata::JoinHostPort(options.host, options.port);
  std::string advertise = absl::GetFlag(FLAGS_advertise_address);
  if (advertise.empty()) advertise = address;
  std::cout << "listening on " << address << std::endl;
  logger->Info("standby", {{"address", address},
                           {"advertise", advertise},
                           {"etcd", etcd->endpoints()},
                           {"prefix", prefix}});

  strata::LeaderElectionOptions election_options;
  election_options.key = prefix + "/leader";
  election_options.candidate = advertise;
  election_options.ttl = absl::Milliseconds(ttl_ms);
  // The election's calls end well within the lease (a renewal stuck for
  // the client's default 5 s would outlast a 2 s lease).
  auto election_etcd = strata::EtcdClient::Connect(
      absl::GetFlag(FLAGS_etcd_endpoints),
      std::max(absl::Milliseconds(300), absl::Milliseconds(ttl_ms) / 3));
  strata::LeaderElection election(election_etcd.get(), election_options,
                                  logger);
  absl::Notification campaign_stop;
  std::atomic<int64_t> won{0};
  std::thread campaign([&] {
    absl::StatusOr<int64_t> epoch = election.Campaign(&campaign_stop);
    if (epoch.ok()) won = *epoch;
  });
  int sig = 0;
  while (won.load() == 0 && (sig = stop.WaitFor(absl::Milliseconds(50))) == 0) {
  }
  if (sig != 0) {
    campaign_stop.Notify();
    campaign.join();
    (*standby)->Shutdown();
    logger->Info("stopped", {{"signal", sig}, {"led", won.load() != 0}});
    return 0;  // ~LeaderElection resigns if it won meanwhile
  }
  campaign.join();
  const int64_t epoch = won.load();

  // Lead: the state from etcd, every write fenced by the epoch.
  election.KeepLeading([logger](const std::string& reason) {
    ExitLostLeadership(logger, reason);
  });
  strata::EtcdStateFileSystem state_fs(
      etcd.get(), prefix, election_options.key, epoch,
      [logger](const std::string& why) { ExitLostLeadership(logger, why); });
  options.coordinator.state_dir = "/state";
  options.coordinator.file_system = &state_fs;
  options.service.leader_epoch = epoch;
  options.service.leading = [&election] { return election.Leading(); };
  (*standby)->Shutdown();
  absl::StatusOr<std::unique_ptr<strata::CoordinatorServer>> server;
  // The standby's port is free again once its server is gone; a moment
  // may pass before the kernel lets it be bound.
  for (int attempt = 0;; ++attempt) {
    server = strata::CoordinatorServer::Start(options, logger);
    if (server.ok() || attempt >= 50 ||
        server.status().code() != absl::StatusCode::kUnavailable) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (!server.ok()) {
    logger->Error("start_failed", {{"error", server.status().ToString()}});
    election.Resign();
    return Fail(server.status().code() == absl::StatusCode::kUnavailable ? 1
                                                                         : 2,
                server.status().message());
  }
  // (stdout is done with: a launcher stops reading it after "listening on")
  std::cerr << "strata-coordinator: leading as epoch " << epoch << " on "
            << address << std::endl;
  logger->Info("leading", {{"epoch", epoch}, {"address", address}});
  LogListening(options, **server, logger);

  CheckpointAndDrain(stop.Wait(), server->get(), logger);
  // The state is written: a standby may take over at once.
  election.Resign();
  logger->Info("stopped", {});
  return 0;
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
  if (!absl::GetFlag(FLAGS_etcd_endpoints).empty()) {
    return RunElected(*std::move(options), stop, &logger);
  }
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

  CheckpointAndDrain(stop.Wait(), server->get(), &logger);
  logger.Log(strata::LogLevel::kInfo, "stopped", {});
  return 0;
}

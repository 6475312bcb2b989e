// strata-ps: the parameter-server daemon. Parses flags and TF_CONFIG, starts
// the server, prints "listening on HOST:PORT", and on SIGTERM or SIGINT
// drains in-flight calls and exits 0.
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/coordinator_client.h"
#include "common/cli.h"
#include "common/logging.h"
#include "common/task_identity.h"
#include "daemons/ps_replica.h"
#include "rpc/daemon.h"
#include "rpc/security_flags.h"
#include "server/device_state.h"
#include "server/ps_server.h"

ABSL_FLAG(std::string, host, "", "Address to listen on (default 127.0.0.1, "
          "or the host of this task in TF_CONFIG)");
ABSL_FLAG(int, port, -1, "Port; 0 picks a free one (default 0, or the port "
          "of this task in TF_CONFIG)");
ABSL_FLAG(int, metrics_port, -1, "Prometheus /metrics port; 0 picks one, "
          "-1 disables");
ABSL_FLAG(std::string, checkpoint_dir, "", "Directory for checkpoints");
ABSL_FLAG(std::string, task_index_from_name, "",
          "Take this PS task's index from NAME's ordinal suffix (a "
          "StatefulSet pod name, e.g. strata-ps-3 → 3); --task-index wins");
ABSL_FLAG(int, task_index, -1, "Index of this PS task (default: TF_CONFIG "
          "task.index, else 0)");
ABSL_FLAG(int64_t, max_variable_bytes, int64_t{16} << 30,
          "Largest variable, push or pull in bytes");
ABSL_FLAG(std::string, coordinator, "", "Coordinator host:port to register "
          "with (role ps); default: the chief task of TF_CONFIG, else none "
          "(standalone)");
ABSL_FLAG(std::string, advertise, "", "Address others reach this task by "
          "(default HOST:PORT, or the TF_CONFIG address)");
ABSL_FLAG(double, shutdown_delay_seconds, 0,
          "After SIGTERM/SIGINT, keep serving (and registered) this long "
          "before draining, so that the coordinator can take a final "
          "checkpoint; a second signal ends the wait");
ABSL_FLAG(double, drain_seconds, 10, "Grace period for in-flight calls on "
          "SIGTERM");
ABSL_FLAG(int, replica, -1, "A replicated task (ps.replication 2): this "
          "process's replica index in --replica-addresses");
ABSL_FLAG(std::string, replica_addresses, "", "A replicated task: every "
          "replica's serving HOST:PORT, comma-separated (clients fail over "
          "along it; names are resolved once, so they must be stable, e.g. "
          "a Service per replica); this replica listens on its own once "
          "primary (on --host with its port when --host is given)");
ABSL_FLAG(std::string, replication_addresses, "", "A replicated task: every "
          "replica's replication HOST:PORT, comma-separated (this replica "
          "listens on its own, or on --host with its port)");
ABSL_FLAG(bool, chunked_apply, true, "Run the optimizer step of a Lane push "
          "that arrives in several chunks as the chunks arrive, on a staged "
          "copy of the value and slots published once the push is whole "
          "(needs room for that copy); false: step once the push is whole");
ABSL_FLAG(std::string, device, "cpu", "Where variables and optimizer slots "
          "live and the optimizers run: cpu, cuda (device 0) or cuda:N");

namespace {

// --help: what strata-ps is and its flags, grouped.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "strata-ps";
  cli.usage =
      "strata-ps [--port P] [--checkpoint-dir DIR] "
      "[--coordinator HOST:PORT --task-index I] [flags]";
  cli.description =
      "The parameter-server daemon: holds variables and their optimizer "
      "slots, applies pushed gradients, serves pulls over gRPC, writes "
      "checkpoints, and on SIGTERM drains and exits 0 (TF_CONFIG, where "
      "set, gives its task index and port).";
  cli.groups = {
      {"Serving",
       {"host", "port", "metrics_port", "device", "max_variable_bytes",
        "chunked_apply"}},
      {"Cluster", {"coordinator", "task_index", "task_index_from_name",
                   "advertise"}},
      {"Replication", {"replica", "replica_addresses",
                       "replication_addresses"}},
      {"Checkpoints", {"checkpoint_dir"}},
      {"Shutdown", {"shutdown_delay_seconds", "drain_seconds"}},
      strata::SecurityFlagGroup()};
  return cli;
}

// Everything main() needs from the flags and TF_CONFIG.
struct PsConfig {
  strata::TaskIdentity id;
  strata::PsServerOptions server;
  strata::SecurityOptions security;
  // A replicated task (--replica >= 0).
  std::optional<strata::PsReplicaOptions> replica;
};

// --replica*: the replica's options, with its serving port in `options`.
absl::Status ReplicaFromFlags(PsConfig* config) {
  const int replica = absl::GetFlag(FLAGS_replica);
  if (replica < 0) return absl::OkStatus();
  const std::vector<std::string> serving = absl::StrSplit(
      absl::GetFlag(FLAGS_replica_addresses), ',', absl::SkipEmpty());
  const std::vector<std::string> replication = absl::StrSplit(
      absl::GetFlag(FLAGS_replication_addresses), ',', absl::SkipEmpty());
  if (serving.size() < 2 || serving.size() != replication.size() ||
      replica >= static_cast<int>(serving.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replica ", replica, ": --replica-addresses and "
        "--replication-addresses must list the same number (at least 2) of "
        "HOST:PORT, this replica among them (got ", serving.size(), " and ",
        replication.size(), ")"));
  }
  const std::string& own = serving[replica];
  const size_t colon = own.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(own.substr(colon + 1),
                                                      &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replica-addresses: ", own, " is not HOST:PORT with a port"));
  }
  std::string host = own.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') {
    host = host.substr(1, host.size() - 2);
  }
  // --host given: listen there (e.g. 0.0.0.0 behind a Service name) on the
  // ports of this replica's entries; else on the entries' hosts.
  std::string listen_host = absl::GetFlag(FLAGS_host);
  if (listen_host.size() > 2 && listen_host.front() == '[' &&
      listen_host.back() == ']') {
    listen_host = listen_host.substr(1, listen_host.size() - 2);
  }
  if (!listen_host.empty()) host = listen_host;
  config->server.host = host;
  config->server.port = port;
  config->server.defer_serving = true;
  strata::PsReplicaOptions r;
  r.task_index = config->id.task_index;
  r.replica = replica;
  r.replication_addresses = replication;
  r.listen_host = listen_host;
  r.advertise = absl::StrJoin(serving, ",");
  r.tls = config->security.tls;
  r.security = config->security.client;
  config->replica = std::move(r);
  return absl::OkStatus();
}

int Fail(int code, absl::string_view message) {
  std::cerr << "strata-ps: " << message << "\n";
  return code;
}

// A start-up error: FAILED_PRECONDITION (exit 1) where the device cannot be
// used, INVALID_ARGUMENT (exit 2) for bad flags or TF_CONFIG.
absl::Status BadFlag(const absl::Status& status) {
  return absl::InvalidArgumentError(status.message());
}

absl::StatusOr<PsConfig> ConfigFromFlags() {
  strata::TaskIdentityFlags flags;
  flags.host = absl::GetFlag(FLAGS_host);
  flags.port = absl::GetFlag(FLAGS_port);
  flags.task_index = absl::GetFlag(FLAGS_task_index);
  flags.task_index_from_name = absl::GetFlag(FLAGS_task_index_from_name);
  flags.coordinator = absl::GetFlag(FLAGS_coordinator);
  const char* tf_config = std::getenv("TF_CONFIG");
  auto id = strata::ResolveTaskIdentity(
      strata::DaemonKind::kPs, flags,
      tf_config ? std::optional<std::string>(tf_config) : std::nullopt);
  if (!id.ok()) return BadFlag(id.status());
  PsConfig config;
  config.id = *std::move(id);
  strata::PsServerOptions& options = config.server;
  options.host = config.id.host;
  options.port = config.id.port;
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (absl::GetFlag(FLAGS_max_variable_bytes) <= 0) {
    return absl::InvalidArgumentError("--max_variable_bytes must be positive");
  }
  options.max_variable_bytes =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_max_variable_bytes));
  const std::string device_flag = absl::GetFlag(FLAGS_device);
  auto device = strata::ParsePsDevice(device_flag, "--device");
  if (!device.ok()) return BadFlag(device.status());
  options.device = *device;
  options.service.chunked_apply = absl::GetFlag(FLAGS_chunked_apply);
  // Fail at start, before listening, when the device cannot be used.
  auto device_description = strata::CheckPsDevice(*device);
  if (!device_description.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", device_flag, ": ",
                     device_description.status().message()));
  }
  // --tls-* serve TLS (and dial the coordinator with it); --auth-file
  // authenticates callers; --auth-token is sent to the coordinator.
  auto security = strata::SecurityFromFlags();
  if (!security.ok()) return BadFlag(security.status());
  config.security = *std::move(security);
  options.tls = config.security.tls;
  options.service.credentials = config.security.credentials;
  absl::Status replica = ReplicaFromFlags(&config);
  if (!replica.ok()) return BadFlag(replica);
  return config;
}

// Registers with the coordinator, when there is one: the agent, null when
// standalone, or an error.
absl::StatusOr<std::unique_ptr<strata::MembershipAgent>> Register(
    const PsConfig& config, const std::string& advertise,
    const std::string& incarnation,
    std::unique_ptr<strata::CoordinatorClient>* coordinator,
    strata::Logger* logger) {
  if (config.id.coordinator.empty()) {
    return std::unique_ptr<strata::MembershipAgent>();
  }
  *coordinator = strata::CoordinatorClient::Connect(
      config.id.coordinator, absl::Seconds(30), config.security.client);
  strata::v1::TaskId task;
  task.set_role("ps");
  task.set_index(config.id.task_index);
  auto agent = std::make_unique<strata::MembershipAgent>(
      coordinator->get(), task, advertise, incarnation, logger);
  absl::Status s = agent->Start();
  if (!s.ok()) return s;
  return agent;
}

// A replicated task's replica: the role loop until a stop signal.
int RunReplica(const PsConfig& config, strata::PsServer* server,
               const strata::StopSignals& stop, strata::Logger* logger) {
  if (config.id.coordinator.empty()) {
    return Fail(2, "--replica needs a coordinator (--coordinator)");
  }
  auto coordinator = strata::CoordinatorClient::Connect(
      config.id.coordinator, absl::Seconds(30), config.security.client);
  auto replica = strata::PsReplica::Start(server, coordinator.get(),
                                          *config.replica, logger);
  if (!replica.ok()) return Fail(1, replica.status().message());
  // The replication address is the one this process listens on at once;
  // it serves on its --replica-addresses entry once primary.
  std::cout << "listening on "
            << config.replica->replication_addresses[config.replica->replica]
            << std::endl;
  const int sig = stop.Wait();
  logger->Log(strata::LogLevel::kInfo, "draining", {{"signal", sig}});
  (*replica)->Stop();
  server->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_seconds)));
  logger->Log(strata::LogLevel::kInfo, "stopped", {});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());
  // Blocked in every thread; the main thread waits for them below.
  const strata::StopSignals stop = strata::StopSignals::Block();
  absl::StatusOr<PsConfig> config = ConfigFromFlags();
  if (!config.ok()) {
    return Fail(absl::IsFailedPrecondition(config.status()) ? 1 : 2,
                config.status().message());
  }
  const strata::PsServerOptions& options = config->server;

  strata::Logger logger(absl::StrCat("ps:", config->id.task_index));
  auto server = strata::PsServer::Start(options, &logger);
  if (!server.ok()) {
    logger.Log(strata::LogLevel::kError, "start_failed",
               {{"error", server.status().ToString()}});
    return Fail(1, server.status().message());
  }
  if (config->replica.has_value()) {
    return RunReplica(*config, server->get(), stop, &logger);
  }
  std::cout << "listening on " << (*server)->address() << std::endl;
  std::string advertise = absl::GetFlag(FLAGS_advertise);
  if (advertise.empty()) advertise = config->id.tf_config_address;
  if (advertise.empty()) advertise = (*server)->address();
  std::unique_ptr<strata::CoordinatorClient> coordinator;
  // Saves are refused to the coordinator's record of another incarnation.
  const std::string incarnation = strata::NewIncarnation();
  if (!config->id.coordinator.empty()) (*server)->set_incarnation(incarnation);
  auto agent =
      Register(*config, advertise, incarnation, &coordinator, &logger);
  if (!agent.ok()) {
    logger.Log(strata::LogLevel::kError, "register_failed",
               {{"error", agent.status().ToString()}});
    return Fail(1, absl::StrCat("cannot register with the coordinator: ",
                                agent.status().message()));
  }
  logger.Log(strata::LogLevel::kInfo, "listening",
             {{"address", (*server)->address()},
              {"metrics_port", (*server)->metrics_port()},
              {"checkpoint_dir", options.checkpoint_dir},
              {"device", (*server)->device_description()},
              {"tls", options.tls.enabled},
              {"client_auth", options.tls.client_auth},
              {"credentials", options.service.credentials != nullptr}});
  if ((*server)->metrics_port() > 0) {
    std::cout << "metrics on " << options.host << ":"
              << (*server)->metrics_port() << std::endl;
  }

  int sig = stop.Wait();
  const double delay = absl::GetFlag(FLAGS_shutdown_delay_seconds);
  if (delay > 0) {
    logger.Log(strata::LogLevel::kInfo, "shutdown_delay",
               {{"signal", sig}, {"seconds", delay}});
    if (const int again = stop.WaitFor(absl::Seconds(delay))) sig = again;
  }
  logger.Log(strata::LogLevel::kInfo, "draining", {{"signal", sig}});
  if (*agent) (*agent)->Stop();
  (*server)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_seconds)));
  logger.Log(strata::LogLevel::kInfo, "stopped", {});
  return 0;
}

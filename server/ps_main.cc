// strata-ps: the parameter-server daemon. Parses flags and TF_CONFIG, starts
// the server, prints "listening on HOST:PORT", and on SIGTERM or SIGINT
// drains in-flight calls and exits 0.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/coordinator_client.h"
#include "common/cli.h"
#include "common/logging.h"
#include "common/security_flags.h"
#include "common/tf_config.h"
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
       {"host", "port", "metrics_port", "device", "max_variable_bytes"}},
      {"Cluster", {"coordinator", "task_index", "task_index_from_name",
                   "advertise"}},
      {"Checkpoints", {"checkpoint_dir"}},
      {"Shutdown", {"shutdown_delay_seconds", "drain_seconds"}},
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

  strata::PsServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  int task_index = 0;
  std::string tf_config_address;
  std::string coordinator_address = absl::GetFlag(FLAGS_coordinator);
  if (const char* tf_config = std::getenv("TF_CONFIG");
      tf_config != nullptr && *tf_config != '\0') {
    auto config = strata::ParseTfConfig(tf_config);
    if (!config.ok()) {
      std::cerr << "strata-ps: bad TF_CONFIG: " << config.status().message()
                << "\n";
      return 2;
    }
    if (config->task_type == "ps") {
      task_index = config->task_index;
      std::string address = strata::TaskAddress(*config);
      tf_config_address = address;
      if (!address.empty()) {
        auto hp = strata::SplitHostPort(address);
        if (!hp.ok()) {
          std::cerr << "strata-ps: TF_CONFIG address: " << hp.status().message()
                    << "\n";
          return 2;
        }
        // The cluster lists names others reach us by; listen on all
        // interfaces at that port.
        options.host = "0.0.0.0";
        options.port = hp->second;
      }
    }
    if (coordinator_address.empty()) {
      coordinator_address = strata::ChiefAddress(*config);
    }
  }
  if (!absl::GetFlag(FLAGS_host).empty()) options.host = absl::GetFlag(FLAGS_host);
  if (absl::GetFlag(FLAGS_port) >= 0) options.port = absl::GetFlag(FLAGS_port);
  if (!absl::GetFlag(FLAGS_task_index_from_name).empty()) {
    absl::StatusOr<int> ordinal =
        strata::OrdinalFromName(absl::GetFlag(FLAGS_task_index_from_name));
    if (!ordinal.ok()) {
      std::cerr << "strata-ps: --task-index-from-name: "
                << ordinal.status().message() << "\n";
      return 2;
    }
    task_index = *ordinal;
  }
  if (absl::GetFlag(FLAGS_task_index) >= 0) {
    task_index = absl::GetFlag(FLAGS_task_index);
  }
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (absl::GetFlag(FLAGS_max_variable_bytes) <= 0) {
    std::cerr << "strata-ps: --max_variable_bytes must be positive\n";
    return 2;
  }
  options.max_variable_bytes =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_max_variable_bytes));
  const std::string device_flag = absl::GetFlag(FLAGS_device);
  auto device = strata::ParsePsDevice(device_flag, "--device");
  if (!device.ok()) {
    std::cerr << "strata-ps: " << device.status().message() << "\n";
    return 2;
  }
  options.device = *device;
  // Fail at start, before listening, when the device cannot be used.
  auto device_description = strata::CheckPsDevice(*device);
  if (!device_description.ok()) {
    std::cerr << "strata-ps: --device " << device_flag << ": "
              << device_description.status().message() << "\n";
    return 1;
  }

  // --tls-* serve TLS (and dial the coordinator with it); --auth-file
  // authenticates callers; --auth-token is sent to the coordinator.
  auto tls = strata::TlsFromFlags();
  auto security = strata::ClientSecurityFromFlags();
  auto credentials = strata::CredentialsFromFlags();
  for (const absl::Status& s :
       {tls.status(), security.status(), credentials.status()}) {
    if (!s.ok()) {
      std::cerr << "strata-ps: " << s.message() << "\n";
      return 2;
    }
  }
  options.tls = *tls;
  options.service.credentials = *credentials;

  strata::Logger logger(absl::StrCat("ps:", task_index));
  auto server = strata::PsServer::Start(options, &logger);
  if (!server.ok()) {
    logger.Log(strata::LogLevel::kError, "start_failed",
               {{"error", server.status().ToString()}});
    std::cerr << "strata-ps: " << server.status().message() << "\n";
    return 1;
  }
  std::cout << "listening on " << (*server)->address() << std::endl;
  std::string advertise = absl::GetFlag(FLAGS_advertise);
  if (advertise.empty()) advertise = tf_config_address;
  if (advertise.empty()) advertise = (*server)->address();
  std::unique_ptr<strata::CoordinatorClient> coordinator;
  std::unique_ptr<strata::MembershipAgent> agent;
  if (!coordinator_address.empty()) {
    coordinator = strata::CoordinatorClient::Connect(
        coordinator_address, absl::Seconds(30), *security);
    strata::v1::TaskId task;
    task.set_role("ps");
    task.set_index(task_index);
    agent = std::make_unique<strata::MembershipAgent>(
        coordinator.get(), task, advertise, strata::NewIncarnation(), &logger);
    absl::Status s = agent->Start();
    if (!s.ok()) {
      logger.Log(strata::LogLevel::kError, "register_failed",
                 {{"error", s.ToString()}});
      std::cerr << "strata-ps: cannot register with the coordinator: "
                << s.message() << "\n";
      return 1;
    }
  }
  logger.Log(strata::LogLevel::kInfo, "listening",
             {{"address", (*server)->address()},
              {"metrics_port", (*server)->metrics_port()},
              {"checkpoint_dir", options.checkpoint_dir},
              {"device", (*server)->device_description()},
              {"tls", options.tls.enabled},
              {"client_auth", options.tls.client_auth},
              {"credentials", *credentials != nullptr}});
  if ((*server)->metrics_port() > 0) {
    std::cout << "metrics on " << options.host << ":"
              << (*server)->metrics_port() << std::endl;
  }

  int sig = 0;
  sigwait(&stop_signals, &sig);
  const double delay = absl::GetFlag(FLAGS_shutdown_delay_seconds);
  if (delay > 0) {
    logger.Log(strata::LogLevel::kInfo, "shutdown_delay",
               {{"signal", sig}, {"seconds", delay}});
    const timespec wait = absl::ToTimespec(absl::Seconds(delay));
    const int again = sigtimedwait(&stop_signals, nullptr, &wait);
    if (again > 0) sig = again;
  }
  logger.Log(strata::LogLevel::kInfo, "draining", {{"signal", sig}});
  if (agent) agent->Stop();
  (*server)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_seconds)));
  logger.Log(strata::LogLevel::kInfo, "stopped", {});
  return 0;
}

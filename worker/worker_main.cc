// strata-worker: one worker task. Registers with the coordinator, takes the
// running job's steps until it is done, then exits 0 (or, with
// --wait-after-job, stays up until SIGTERM). With --port it serves
// grpc.health.v1 for the kubelet's probes and prints "listening on HOST:PORT".
// With --device cuda[:N] it computes on that GPU whatever the job says, and
// exits 1 at once, with the reason, where that device cannot be used.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "common/cli.h"
#include "common/logging.h"
#include "common/security_flags.h"
#include "common/tf_config.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "worker/job.h"
#include "worker/model.h"
#include "worker/ps_worker.h"

ABSL_FLAG(std::string, coordinator, "", "Coordinator host:port (default: "
          "the chief task of TF_CONFIG; required without it)");
ABSL_FLAG(int, steps_in_flight, 2, "Training steps run concurrently");
ABSL_FLAG(bool, ps_shared_memory, true, "Exchange gradients and values with "
          "a PS task on this host through shared memory (ExchangeShared); "
          "false: always stream them over gRPC");
ABSL_FLAG(std::string, export_dir, "", "Synchronous strategies with "
          "variables on the replicas: rank 0 writes its final state to "
          "DIR/final_state.pb when the job ends");
ABSL_FLAG(std::string, advertise_host, "", "Host the other workers reach "
          "this worker's WorkerService at (default: this task's host in "
          "TF_CONFIG, else --host; needed where --host is 0.0.0.0)");
ABSL_FLAG(int, worker_port, 0, "Port of the WorkerService that synchronous "
          "strategies use (ring all-reduce, state copies); 0 picks one");
ABSL_FLAG(std::string, task_index_from_name, "",
          "Take this worker's index from NAME's ordinal suffix (a "
          "StatefulSet pod name, e.g. strata-ps-3 → 3); --task-index wins");
ABSL_FLAG(int, task_index, -1, "Index of this worker (default: TF_CONFIG "
          "task.index, else 0)");
ABSL_FLAG(std::string, host, "", "Address the health server listens on "
          "(default 127.0.0.1, or 0.0.0.0 when TF_CONFIG lists this task)");
ABSL_FLAG(int, port, -1, "Port of the grpc.health.v1 server; 0 picks one, "
          "-1 (default) serves none unless TF_CONFIG lists this task");
ABSL_FLAG(std::string, device, "", "Where this worker computes: cpu, cuda "
          "or cuda:N, replacing the job's \"device\" (default: the job's)");
ABSL_FLAG(bool, wait_after_job, false, "When the job has ended, stay up "
          "(healthy) until SIGTERM instead of exiting, so that a controller "
          "that restarts exited containers (a StatefulSet) leaves it alone");

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

// --help: what strata-worker is and its flags, grouped.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "strata-worker";
  cli.usage =
      "strata-worker --coordinator HOST:PORT [--task-index I] [--port P] "
      "[flags]";
  cli.description =
      "One worker task: registers with the coordinator, trains the running "
      "job's steps against the parameter servers (or its peers, under the "
      "synchronous strategies) until the job ends, then exits 0 (TF_CONFIG, "
      "where set, gives its index, address and the coordinator).";
  cli.groups = {
      {"Cluster", {"coordinator", "task_index", "task_index_from_name",
                   "advertise_host", "worker_port"}},
      {"Training", {"device", "steps_in_flight", "ps_shared_memory",
                    "export_dir"}},
      {"Health server", {"host", "port", "wait_after_job"}},
      strata::SecurityFlagGroup()};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());

  // The device first: a GPU this machine cannot use ends the task here.
  std::string device;
  if (const std::string flag = absl::GetFlag(FLAGS_device); !flag.empty()) {
    absl::StatusOr<int> cuda = strata::ParseDeviceName(flag, "--device");
    if (!cuda.ok()) {
      std::cerr << "strata-worker: " << cuda.status() << "\n";
      return 2;
    }
    device = *cuda < 0 ? "cpu" : absl::StrCat("cuda:", *cuda);
    if (absl::Status usable = strata::CheckDevice(device, "--device");
        !usable.ok()) {
      std::cerr << "strata-worker: " << usable << "\n";
      return 1;
    }
  }

  int task_index = 0;
  std::string role = "worker";
  std::string health_host = "127.0.0.1";
  std::string advertise_host;
  int health_port = -1;
  std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (const char* env = std::getenv("TF_CONFIG"); env != nullptr && *env) {
    auto config = strata::ParseTfConfig(env);
    if (!config.ok()) {
      std::cerr << "strata-worker: bad TF_CONFIG: "
                << config.status().message() << "\n";
      return 2;
    }
    if (config->task_type == "worker" || config->task_type == "chief") {
      role = config->task_type;
      task_index = config->task_index;
      const std::string address = strata::TaskAddress(*config);
      if (!address.empty()) {
        auto hp = strata::SplitHostPort(address);
        if (!hp.ok()) {
          std::cerr << "strata-worker: TF_CONFIG address: "
                    << hp.status().message() << "\n";
          return 2;
        }
        health_host = "0.0.0.0";
        health_port = hp->second;
        advertise_host = hp->first;
      }
    }
    if (coordinator.empty()) coordinator = strata::ChiefAddress(*config);
  }
  if (!absl::GetFlag(FLAGS_host).empty()) health_host = absl::GetFlag(FLAGS_host);
  if (absl::GetFlag(FLAGS_port) >= 0) health_port = absl::GetFlag(FLAGS_port);
  if (!absl::GetFlag(FLAGS_task_index_from_name).empty()) {
    absl::StatusOr<int> ordinal =
        strata::OrdinalFromName(absl::GetFlag(FLAGS_task_index_from_name));
    if (!ordinal.ok()) {
      std::cerr << "strata-worker: --task-index-from-name: "
                << ordinal.status().message() << "\n";
      return 2;
    }
    task_index = *ordinal;
  }
  if (absl::GetFlag(FLAGS_task_index) >= 0) {
    task_index = absl::GetFlag(FLAGS_task_index);
  }
  if (coordinator.empty()) {
    std::cerr << "strata-worker: --coordinator HOST:PORT is required (or a "
                 "chief task in TF_CONFIG)\n";
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // --tls-* serve the health server over TLS and dial the coordinator and
  // PS tasks with it; --auth-token is sent on those calls.
  auto tls = strata::TlsFromFlags();
  auto security = strata::ClientSecurityFromFlags();
  for (const absl::Status& st : {tls.status(), security.status()}) {
    if (!st.ok()) {
      std::cerr << "strata-worker: " << st.message() << "\n";
      return 2;
    }
  }
  auto server_credentials = strata::MakeServerCredentials(*tls);
  if (!server_credentials.ok()) {
    std::cerr << "strata-worker: " << server_credentials.status().message()
              << "\n";
    return 2;
  }

  strata::Logger logger(absl::StrCat(role, ":", task_index));
  // gRPC adds its default health service only to a server with a service
  // of its own: an empty generic one (every other method: UNIMPLEMENTED).
  grpc::CallbackGenericService no_methods;
  std::unique_ptr<grpc::Server> health_server;
  if (health_port >= 0) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int bound = 0;
    const std::string address = strata::JoinHostPort(health_host, health_port);
    builder.AddListeningPort(address, *server_credentials, &bound);
    builder.RegisterCallbackGenericService(&no_methods);
    health_server = builder.BuildAndStart();
    if (health_server == nullptr || bound == 0) {
      std::cerr << "strata-worker: cannot listen on " << address << "\n";
      return 1;
    }
    health_server->GetHealthCheckService()->SetServingStatus(true);
    std::cout << "listening on " << strata::JoinHostPort(health_host, bound)
              << std::endl;
  }
  auto client = strata::CoordinatorClient::Connect(
      coordinator, absl::Seconds(30), *security);
  strata::PsWorkerOptions options;
  options.task_index = task_index;
  options.role = role;
  options.stop = &g_stop;
  options.steps_in_flight = absl::GetFlag(FLAGS_steps_in_flight);
  options.ps_shared_memory = absl::GetFlag(FLAGS_ps_shared_memory);
  options.host = health_host;
  if (!absl::GetFlag(FLAGS_advertise_host).empty()) {
    advertise_host = absl::GetFlag(FLAGS_advertise_host);
  }
  options.advertise_host = advertise_host;
  options.worker_port = absl::GetFlag(FLAGS_worker_port);
  options.export_dir = absl::GetFlag(FLAGS_export_dir);
  options.ps_security = *security;
  options.worker_tls = *tls;
  options.device = device;
  if (options.steps_in_flight < 1) {
    std::cerr << "strata-worker: --steps-in-flight must be >= 1\n";
    return 2;
  }
  strata::PsWorker worker(client.get(), &logger, options);
  absl::Status s = worker.Run();
  if (!s.ok() && !(g_stop && s.code() == absl::StatusCode::kCancelled)) {
    logger.Log(strata::LogLevel::kError, "worker_failed",
               {{"error", s.ToString()}});
    std::cerr << "strata-worker: " << s.message() << "\n";
    return 1;
  }
  if (absl::GetFlag(FLAGS_wait_after_job) && !g_stop) {
    logger.Log(strata::LogLevel::kInfo, "job_ended_waiting", {});
    while (!g_stop) absl::SleepFor(absl::Milliseconds(200));
  }
  if (health_server) {
    health_server->GetHealthCheckService()->SetServingStatus(false);
    health_server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::seconds(1));
  }
  return 0;
}

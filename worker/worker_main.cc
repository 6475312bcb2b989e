// strata-worker: one worker task. Registers with the coordinator, takes the
// running job's steps until it is done, then exits 0 (or, with
// --wait-after-job, stays up until SIGTERM). With --port it serves
// grpc.health.v1 for the kubelet's probes and prints "listening on HOST:PORT".
// With --device cuda[:N] it computes on that GPU whatever the job says, and
// exits 3 at once, with the reason, where that device cannot be used.
// Exit codes: 2 bad flags; 3 the job cannot run on this task (an unusable
// device, a job or data it refuses: restarting it would not help, and
// `strata launch` does not); 1 other failures (it may be restarted).
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/coordinator_client.h"
#include "common/cli.h"
#include "common/logging.h"
#include "common/task_identity.h"
#include "job/job.h"
#include "rpc/daemon.h"
#include "rpc/security_flags.h"
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

int Fail(int code, absl::string_view message) {
  std::cerr << "strata-worker: " << message << "\n";
  return code;
}

// The exit code of a failed run: 3 when the failure is the job's or this
// task's (no restart helps), else 1.
int ExitCodeOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kUnimplemented:
      return 3;
    default:
      return 1;
  }
}

// --device as a device name ("" when not given), or the exit code after the
// reason is printed: 2 a bad name, 1 a device that cannot be used.
std::optional<std::string> DeviceFromFlag(int* exit_code) {
  const std::string flag = absl::GetFlag(FLAGS_device);
  if (flag.empty()) return std::string();
  absl::StatusOr<int> cuda = strata::ParseDeviceName(flag, "--device");
  if (!cuda.ok()) {
    *exit_code = Fail(2, cuda.status().ToString());
    return std::nullopt;
  }
  std::string device = *cuda < 0 ? "cpu" : absl::StrCat("cuda:", *cuda);
  if (absl::Status usable = strata::CheckDevice(device, "--device");
      !usable.ok()) {
    *exit_code = Fail(3, usable.ToString());
    return std::nullopt;
  }
  return device;
}

absl::StatusOr<strata::TaskIdentity> IdentityFromFlags() {
  strata::TaskIdentityFlags flags;
  flags.host = absl::GetFlag(FLAGS_host);
  flags.port = absl::GetFlag(FLAGS_port);
  flags.task_index = absl::GetFlag(FLAGS_task_index);
  flags.task_index_from_name = absl::GetFlag(FLAGS_task_index_from_name);
  flags.coordinator = absl::GetFlag(FLAGS_coordinator);
  const char* tf_config = std::getenv("TF_CONFIG");
  return strata::ResolveTaskIdentity(
      strata::DaemonKind::kWorker, flags,
      tf_config ? std::optional<std::string>(tf_config) : std::nullopt);
}

strata::PsWorkerOptions WorkerOptions(const strata::TaskIdentity& id,
                                      const strata::ClientSecurity& security,
                                      const strata::TlsOptions& tls,
                                      const std::string& device,
                                      const std::atomic<bool>* stop) {
  strata::PsWorkerOptions options;
  options.task_index = id.task_index;
  options.role = id.role;
  options.stop = stop;
  options.steps_in_flight = absl::GetFlag(FLAGS_steps_in_flight);
  options.ps_shared_memory = absl::GetFlag(FLAGS_ps_shared_memory);
  options.host = id.host;
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host).empty()
                               ? id.tf_config_host
                               : absl::GetFlag(FLAGS_advertise_host);
  options.worker_port = absl::GetFlag(FLAGS_worker_port);
  options.export_dir = absl::GetFlag(FLAGS_export_dir);
  options.ps_security = security;
  options.worker_tls = tls;
  options.device = device;
  return options;
}

// The grpc.health.v1 server the kubelet probes, when the task has a port
// (null otherwise), or the exit code after the reason is printed.
std::optional<std::unique_ptr<strata::DaemonServer>> StartHealthServer(
    const strata::TaskIdentity& id,
    std::shared_ptr<grpc::ServerCredentials> credentials, int* exit_code) {
  if (id.port < 0) return std::unique_ptr<strata::DaemonServer>();
  strata::DaemonServerOptions options;
  options.host = id.host;
  options.port = id.port;
  options.credentials = std::move(credentials);
  auto server = strata::DaemonServer::Start(std::move(options));
  if (!server.ok()) {
    *exit_code = Fail(1, server.status().message());
    return std::nullopt;
  }
  std::cout << "listening on " << (*server)->address() << std::endl;
  return *std::move(server);
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());
  int exit_code = 0;
  // The device first: a GPU this machine cannot use ends the task here.
  const std::optional<std::string> device = DeviceFromFlag(&exit_code);
  if (!device) return exit_code;
  const absl::StatusOr<strata::TaskIdentity> id = IdentityFromFlags();
  if (!id.ok()) return Fail(2, id.status().message());
  const strata::StopFlag* stop = strata::StopFlag::Install();

  // --tls-* serve the health server over TLS and dial the coordinator and
  // PS tasks with it; --auth-token is sent on those calls.
  auto tls = strata::TlsFromFlags();
  auto security = strata::ClientSecurityFromFlags();
  for (const absl::Status& st : {tls.status(), security.status()}) {
    if (!st.ok()) return Fail(2, st.message());
  }
  auto server_credentials = strata::MakeServerCredentials(*tls);
  if (!server_credentials.ok()) {
    return Fail(2, server_credentials.status().message());
  }

  strata::Logger logger(absl::StrCat(id->role, ":", id->task_index));
  std::optional<std::unique_ptr<strata::DaemonServer>> health =
      StartHealthServer(*id, *server_credentials, &exit_code);
  if (!health) return exit_code;
  auto client = strata::CoordinatorClient::Connect(
      id->coordinator, absl::Seconds(30), *security);
  const strata::PsWorkerOptions options =
      WorkerOptions(*id, *security, *tls, *device, stop->flag());
  if (options.steps_in_flight < 1) {
    return Fail(2, "--steps-in-flight must be >= 1");
  }
  strata::PsWorker worker(client.get(), &logger, options);
  absl::Status s = worker.Run();
  if (!s.ok() &&
      !(stop->stopped() && s.code() == absl::StatusCode::kCancelled)) {
    logger.Log(strata::LogLevel::kError, "worker_failed",
               {{"error", s.ToString()}});
    return Fail(ExitCodeOf(s), s.message());
  }
  if (absl::GetFlag(FLAGS_wait_after_job) && !stop->stopped()) {
    logger.Log(strata::LogLevel::kInfo, "job_ended_waiting", {});
    stop->Wait();
  }
  if (*health) {
    (*health)->SetServing(false);
    (*health)->Shutdown(absl::Seconds(1));
  }
  return 0;
}

// strata-worker: one worker task. Registers with the coordinator, takes the
// running job's steps until it is done, then exits 0.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "client/coordinator_client.h"
#include "common/cli.h"
#include "common/logging.h"
#include "common/tf_config.h"
#include "worker/ps_worker.h"

ABSL_FLAG(std::string, coordinator, "", "Coordinator host:port (required)");
ABSL_FLAG(int, steps_in_flight, 2, "Training steps run concurrently");
ABSL_FLAG(int, task_index, -1, "Index of this worker (default: TF_CONFIG "
          "task.index, else 0)");

namespace {
std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> storage;
  std::vector<char*> args = strata::NormalizeFlagDashes(argc, argv, &storage);
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  int task_index = 0;
  std::string role = "worker";
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
    }
  }
  if (absl::GetFlag(FLAGS_task_index) >= 0) {
    task_index = absl::GetFlag(FLAGS_task_index);
  }
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) {
    std::cerr << "strata-worker: --coordinator HOST:PORT is required\n";
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  strata::Logger logger(absl::StrCat(role, ":", task_index));
  auto client = strata::CoordinatorClient::Connect(coordinator);
  strata::PsWorkerOptions options;
  options.task_index = task_index;
  options.role = role;
  options.stop = &g_stop;
  options.steps_in_flight = absl::GetFlag(FLAGS_steps_in_flight);
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
  return 0;
}

// ps_failover_bench: the pause a PS primary's kill -9 causes under PS
// replication (strategy.ps_replication 2), and replication's throughput
// cost, on the small Fashion-MNIST job with `strata launch`.
//
//   ps_failover_bench --strategy parameter_server --update async --kills 5
//
// Per kill: the primary replica of ps task 0 is killed once the run has
// made progress and the task has a backup again; the pause is the longest
// time between two successive increases of the coordinator's completed
// step count in the 1.5 s after the kill (the fault-free run's longest such
// gap is printed beside it). The run must end with lost_steps 0 and every
// scheduled step applied. The cost: examples/s of a fault-free run with
// replication 1 and 2, run back to back.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "tests/launch_util.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, strategy, "parameter_server",
          "parameter_server or central_storage");
ABSL_FLAG(std::string, update, "async", "async or sync");
ABSL_FLAG(int, kills, 5, "Primary kills in the faulty run");
ABSL_FLAG(int, ps, 2, "PS tasks");
ABSL_FLAG(int, epochs, 40, "Epochs of the small job (long enough for the kills)");

namespace strata {
namespace {

using namespace launch_util;  // NOLINT
using Clock = std::chrono::steady_clock;

std::string JobFile(int replication, const std::string& name) {
  std::ifstream in(kJob);
  nlohmann::json job = nlohmann::json::parse(in);
  job["strategy"] = {{"type", absl::GetFlag(FLAGS_strategy)},
                     {"update", absl::GetFlag(FLAGS_update)},
                     {"ps_replication", replication}};
  if (absl::GetFlag(FLAGS_strategy) == "parameter_server") {
    job["strategy"]["partitioner"] = {{"type", "fixed"}, {"num_shards", 2}};
  }
  if (absl::GetFlag(FLAGS_update) == "sync") {
    job["checkpoint"]["every_steps"] = 0;
  }
  job["epochs"] = absl::GetFlag(FLAGS_epochs);
  std::string path = "/tmp/ps_failover_" + name + ".json";
  std::ofstream out(path);
  out << job.dump();
  return path;
}

int Count(const std::string& path, const std::string& needle) {
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)),
                   std::istreambuf_iterator<char>());
  int n = 0;
  for (size_t p = text.find(needle); p != std::string::npos;
       p = text.find(needle, p + 1)) {
    ++n;
  }
  return n;
}

struct Progress {
  std::unique_ptr<CoordinatorClient> client;
  int64_t Steps(const LaunchRun& run) {
    if (!client) {
      for (const auto& c : Cluster(run)) {
        if (c["name"] == "coordinator") {
          client = CoordinatorClient::Connect(c["address"], absl::Seconds(1));
        }
      }
    }
    if (!client) return -1;
    auto job = client->GetJob();
    return job.ok() ? job->steps_completed() : -1;
  }
};

// The longest gap (ms) between successive increases of the completed
// steps over `window`, polled every 2 ms.
double LongestGap(const LaunchRun& run, Progress* p,
                  std::chrono::milliseconds window) {
  const auto end = Clock::now() + window;
  auto last_change = Clock::now();
  int64_t last = p->Steps(run);
  double longest = 0;
  while (Clock::now() < end) {
    const int64_t s = p->Steps(run);
    const auto now = Clock::now();
    if (s > last) {
      longest = std::max(
          longest,
          std::chrono::duration<double, std::milli>(now - last_change).count());
      last = s;
      last_change = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return longest;
}

nlohmann::json RunClean(int replication) {
  LaunchRun run = StartLaunch(
      absl::StrCat("failover_clean_", replication),
      {"--job=" + JobFile(replication, absl::StrCat("clean", replication)),
       "--ps=" + std::to_string(absl::GetFlag(FLAGS_ps)), "--workers=2"});
  Wait(run);
  return Summary(run);
}

int Main() {
  const std::string mode = absl::GetFlag(FLAGS_strategy) + "/" +
                           absl::GetFlag(FLAGS_update);
  // Throughput: replication 1 then 2, fault-free, back to back.
  nlohmann::json one = RunClean(1);
  nlohmann::json two = RunClean(2);
  if (one.is_discarded() || two.is_discarded()) {
    std::cerr << "a fault-free run failed\n";
    return 1;
  }
  // The faulty run.
  LaunchRun run = StartLaunch(
      "failover_kills",
      {"--job=" + JobFile(2, "kills"),
       "--ps=" + std::to_string(absl::GetFlag(FLAGS_ps)), "--workers=2"});
  Progress progress;
  nlohmann::json cluster = WaitForProgress(run, 60);
  const double clean_gap =
      LongestGap(run, &progress, std::chrono::milliseconds(1500));
  std::vector<double> pauses;
  for (int k = 0; k < absl::GetFlag(FLAGS_kills); ++k) {
    // Both replicas up and the task replicated again: the backup logged
    // the opening of its primary's stream once per attachment.
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    std::string primary;
    while (Clock::now() < deadline) {
      cluster = Cluster(run);
      primary = PrimaryReplica(cluster, 0);
      int backups = 0;
      for (int r = 0; r < 2; ++r) {
        backups += Count(run.dir + "/run/ps-0-" + std::to_string(r) + ".log",
                         "\"event\":\"backup\"");
      }
      if (!primary.empty() && backups >= k + 1) break;
      primary.clear();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (primary.empty()) {
      std::cerr << "kill " << k << ": ps task 0 did not get a backup again\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    kill(PidOf(cluster, primary), SIGKILL);
    pauses.push_back(
        LongestGap(run, &progress, std::chrono::milliseconds(1500)));
    std::cout << absl::StrFormat("kill %d of %s: pause %.0f ms\n", k + 1,
                                 primary, pauses.back())
              << std::flush;
  }
  const int rc = Wait(run);
  nlohmann::json s = Summary(run);
  std::vector<double> sorted = pauses;
  std::sort(sorted.begin(), sorted.end());
  const double p50 = sorted.empty() ? -1 : sorted[sorted.size() / 2];
  std::cout << absl::StrFormat(
      "%s, %d ps + 2 workers: kills %d, pause p50 %.0f ms (max %.0f; "
      "fault-free longest gap %.0f ms), lost_steps %s, steps applied %s of "
      "%s (ps count %s), accuracy %s, launcher rc %d\n",
      mode, absl::GetFlag(FLAGS_ps), static_cast<int>(pauses.size()), p50,
      sorted.empty() ? -1.0 : sorted.back(), clean_gap,
      s.is_discarded() ? "?" : s["lost_steps"].dump(),
      s.is_discarded() ? "?" : s["steps_applied"].dump(),
      s.is_discarded() ? "?" : s["steps_scheduled"].dump(),
      s.is_discarded() ? "?" : s["steps_applied_ps"].dump(),
      s.is_discarded() ? "?" : s["test_accuracy"].dump(), rc);
  std::cout << absl::StrFormat(
      "throughput: replication 1 %.0f examples/s (accuracy %.4f), "
      "replication 2 %.0f examples/s (accuracy %.4f): ratio %.3f\n",
      one["examples_per_second"].get<double>(),
      one["test_accuracy"].get<double>(),
      two["examples_per_second"].get<double>(),
      two["test_accuracy"].get<double>(),
      two["examples_per_second"].get<double>() /
          one["examples_per_second"].get<double>());
  return rc == 0 && !s.is_discarded() && s["lost_steps"] == 0 ? 0 : 1;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return strata::Main();
}

// Helpers of the process-level tests that run `strata launch`: start it as
// a child, wait for it (bounded), read its cluster file, summary and log.
// The including target defines STRATA_BIN_DIR and STRATA_SOURCE_DIR.
#ifndef STRATA_TESTS_LAUNCH_UTIL_H_
#define STRATA_TESTS_LAUNCH_UTIL_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "client/coordinator_client.h"
#include "client/ps_client.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace strata {
namespace launch_util {

namespace fs = std::filesystem;
inline constexpr char kJob[] = STRATA_SOURCE_DIR "/tests/data/small_job.json";
inline constexpr auto kRunLimit = std::chrono::minutes(8);

// Waits up to `timeout` for a child to change state (SIGCHLD); the polling
// loops below recheck their condition after each wake and stop at their
// deadline.
inline void AwaitChildEvent(std::chrono::milliseconds timeout =
                                std::chrono::milliseconds(100)) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  timespec ts{0, static_cast<long>(timeout.count()) * 1000 * 1000};
  sigtimedwait(&set, nullptr, &ts);
}

// SIGCHLD is blocked in this process so that AwaitChildEvent can take it.
class BlockSigchld : public ::testing::Environment {
 public:
  void SetUp() override {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
};
inline const auto* const kBlockSigchld =
    ::testing::AddGlobalTestEnvironment(new BlockSigchld);

inline bool HaveData() {
  return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

struct LaunchRun {
  pid_t pid = -1;
  std::string dir;
  std::string summary;
};

inline LaunchRun StartLaunch(const std::string& name, std::vector<std::string> extra) {
  LaunchRun run;
  run.dir = (fs::path(::testing::TempDir()) /
             ("launch_" + name + "_" + std::to_string(getpid())))
                .string();
  fs::remove_all(run.dir);
  fs::create_directories(run.dir);
  run.summary = run.dir + "/summary.json";
  std::vector<std::string> args = {STRATA_BIN_DIR "/strata", "launch",
                                   std::string("--job=") + kJob,
                                   "--run-dir=" + run.dir + "/run",
                                   "--summary=" + run.summary};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  std::string log = run.dir + "/launch.log";
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  EXPECT_EQ(posix_spawn(&run.pid, argv[0], &actions, &attr, argv.data(),
                        environ),
            0);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return run;
}

// Waits (bounded) for the launcher; returns its exit code or -1.
inline int Wait(const LaunchRun& run) {
  auto deadline = std::chrono::steady_clock::now() + kRunLimit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(run.pid, &status, WNOHANG) == run.pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    AwaitChildEvent();
  }
  kill(run.pid, SIGTERM);
  waitpid(run.pid, nullptr, 0);
  return -1;
}

inline std::string Log(const LaunchRun& run) {
  std::ifstream f(run.dir + "/launch.log");
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline nlohmann::json Cluster(const LaunchRun& run) {
  std::ifstream f(run.dir + "/run/cluster.json");
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  return j.is_discarded() ? nlohmann::json::array() : j;
}

// Waits until the cluster file lists the coordinator and the job has
// completed at least `steps` steps; returns the cluster file.
// How a test reaches a `strata launch --tls` cluster: its client
// certificate and admin token (RUN_DIR/tls, written before any process
// starts).
inline ClientSecurity LaunchSecurity(const LaunchRun& run) {
  const std::string dir = run.dir + "/run/tls";
  ClientSecurity security;
  auto tls = LoadTlsOptions(
      {dir + "/client.pem", dir + "/client.key", dir + "/ca.pem", false});
  EXPECT_TRUE(tls.ok()) << tls.status();
  if (tls.ok()) security.tls = *tls;
  std::ifstream f(dir + "/auth.json");
  nlohmann::json auth = nlohmann::json::parse(f, nullptr, false);
  if (auth.is_object() && auth.contains("credentials")) {
    for (const auto& c : auth["credentials"]) {
      if (c["role"] == "admin") security.auth_token = c["token"];
    }
  }
  return security;
}

// Waits until the job has completed `steps` steps; returns the cluster
// (empty when it did not in time). `tls`: the run has --tls.
// Every coordinator of `cluster` ("coordinator", or the replicas
// "coordinator:I" of --ha), comma-separated: a client follows the leader.
inline std::string CoordinatorAddresses(const nlohmann::json& cluster) {
  std::string coordinators;
  for (const auto& c : cluster) {
    if (c["name"].get<std::string>().rfind("coordinator", 0) == 0) {
      if (!coordinators.empty()) coordinators += ",";
      coordinators += c["address"].get<std::string>();
    }
  }
  return coordinators;
}

// The job's completed steps as its coordinator reports them now; -1 when
// it does not answer.
inline int64_t StepsCompleted(const LaunchRun& run) {
  const std::string coordinators = CoordinatorAddresses(Cluster(run));
  if (coordinators.empty()) return -1;
  auto client = CoordinatorClient::Connect(coordinators, absl::Seconds(2));
  auto job = client->GetJob();
  return job.ok() ? job->steps_completed() : -1;
}

inline nlohmann::json WaitForProgress(const LaunchRun& run, int64_t steps,
                                      bool tls = false) {
  auto deadline = std::chrono::steady_clock::now() + kRunLimit;
  std::unique_ptr<CoordinatorClient> client;
  while (std::chrono::steady_clock::now() < deadline) {
    nlohmann::json cluster = Cluster(run);
    const std::string coordinators = CoordinatorAddresses(cluster);
    if (!coordinators.empty() && !client) {
      client = CoordinatorClient::Connect(
          coordinators, absl::Seconds(2),
          tls ? LaunchSecurity(run) : ClientSecurity{});
    }
    if (client) {
      auto job = client->GetJob();
      if (job.ok() && job->steps_completed() >= steps) return cluster;
    }
    AwaitChildEvent();
  }
  return nlohmann::json::array();
}

inline pid_t PidOf(const nlohmann::json& cluster, const std::string& name) {
  for (const auto& c : cluster) {
    if (c["name"] == name) return c["pid"].get<pid_t>();
  }
  return -1;
}

// The replica of replicated ps task `task` (strategy.ps_replication 2,
// named "ps:T/R" in the cluster file) that serves now: its own serving
// address, the R-th of the task's comma-separated address, answers. ""
// when none does.
inline std::string PrimaryReplica(const nlohmann::json& cluster, int task) {
  const std::string prefix = "ps:" + std::to_string(task) + "/";
  for (const auto& c : cluster) {
    const std::string name = c["name"];
    if (name.rfind(prefix, 0) != 0) continue;
    const int replica = std::stoi(name.substr(prefix.size()));
    std::vector<std::string> addresses;
    std::stringstream all(c["address"].get<std::string>());
    for (std::string a; std::getline(all, a, ',');) addresses.push_back(a);
    if (replica >= static_cast<int>(addresses.size())) continue;
    PsClientOptions options;
    options.max_attempts = 1;
    options.deadline = absl::Seconds(1);
    if (PsClient::Connect(addresses[replica], options)->Stats().ok()) {
      return name;
    }
  }
  return "";
}

inline nlohmann::json Summary(const LaunchRun& run) {
  std::ifstream f(run.summary);
  return nlohmann::json::parse(f, nullptr, false);
}

}  // namespace launch_util
}  // namespace strata

#endif  // STRATA_TESTS_LAUNCH_UTIL_H_

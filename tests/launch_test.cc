// Process-level tests of `strata launch`: a whole local cluster trains a
// small Fashion-MNIST job; workers, PS tasks and the coordinator are killed
// with SIGKILL mid-run and the run still completes.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/coordinator_client.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace strata {
namespace {

namespace fs = std::filesystem;
constexpr char kJob[] = STRATA_SOURCE_DIR "/tests/data/small_job.json";
constexpr auto kRunLimit = std::chrono::minutes(8);

// Waits up to 100 ms for a child to change state (SIGCHLD); the polling
// loops below recheck their condition after each wake and stop at their
// deadline.
void AwaitChildEvent() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  timespec ts{0, 100 * 1000 * 1000};
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
const auto* const kBlockSigchld =
    ::testing::AddGlobalTestEnvironment(new BlockSigchld);

bool HaveData() {
  return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

struct LaunchRun {
  pid_t pid = -1;
  std::string dir;
  std::string summary;
};

LaunchRun StartLaunch(const std::string& name, std::vector<std::string> extra) {
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
int Wait(const LaunchRun& run) {
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

std::string Log(const LaunchRun& run) {
  std::ifstream f(run.dir + "/launch.log");
  return std::string(std::istreambuf_iterator<char>(f), {});
}

nlohmann::json Cluster(const LaunchRun& run) {
  std::ifstream f(run.dir + "/run/cluster.json");
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  return j.is_discarded() ? nlohmann::json::array() : j;
}

// Waits until the cluster file lists the coordinator and the job has
// completed at least `steps` steps; returns the cluster file.
nlohmann::json WaitForProgress(const LaunchRun& run, int64_t steps) {
  auto deadline = std::chrono::steady_clock::now() + kRunLimit;
  std::unique_ptr<CoordinatorClient> client;
  while (std::chrono::steady_clock::now() < deadline) {
    nlohmann::json cluster = Cluster(run);
    for (const auto& c : cluster) {
      if (c["name"] == "coordinator" && !client) {
        client = CoordinatorClient::Connect(c["address"].get<std::string>(),
                                            absl::Seconds(2));
      }
    }
    if (client) {
      auto job = client->GetJob();
      if (job.ok() && job->steps_completed() >= steps) return cluster;
    }
    AwaitChildEvent();
  }
  return nlohmann::json::array();
}

pid_t PidOf(const nlohmann::json& cluster, const std::string& name) {
  for (const auto& c : cluster) {
    if (c["name"] == name) return c["pid"].get<pid_t>();
  }
  return -1;
}

nlohmann::json Summary(const LaunchRun& run) {
  std::ifstream f(run.summary);
  return nlohmann::json::parse(f, nullptr, false);
}

void ExpectCompleted(const LaunchRun& run, const nlohmann::json& summary) {
  ASSERT_FALSE(summary.is_discarded()) << Log(run);
  EXPECT_EQ(summary["steps_applied"], summary["steps_scheduled"]) << Log(run);
  EXPECT_EQ(summary["steps_applied_ps"], summary["steps_scheduled"])
      << Log(run);
}

class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveData()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  }
  // Sync updates make a run deterministic: a step re-run after a failure
  // computes the same gradient, so a run with a fault must end where a run
  // without one does.
  static std::string SyncJob(const std::string& name) {
    std::ifstream in(kJob);
    nlohmann::json job = nlohmann::json::parse(in);
    job["strategy"]["update"] = "sync";
    job["strategy"]["sync_replicas"] = 2;
    job["checkpoint"]["every_steps"] = 0;
    std::string path = ::testing::TempDir() + "/" + name + ".json";
    std::ofstream out(path);
    out << job.dump();
    return path;
  }
  static double SyncBaseline() {
    static double accuracy = [] {
      LaunchRun run = StartLaunch(
          "sync_baseline",
          {"--job=" + SyncJob("sync_baseline"), "--ps=2", "--workers=2"});
      EXPECT_EQ(Wait(run), 0) << Log(run);
      nlohmann::json s = Summary(run);
      ExpectCompleted(run, s);
      return s.is_discarded() ? 0.0 : s["test_accuracy"].get<double>();
    }();
    return accuracy;
  }
};

TEST_F(LaunchTest, TrainsToCompletionWithTwoPsAndTwoWorkers) {
  LaunchRun run = StartLaunch("async", {"--ps=2", "--workers=2"});
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_EQ(s["lost_steps"], 0);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.7);
}

TEST_F(LaunchTest, WorkerKilledMidEpochDoesNotStopTheRun) {
  const double baseline = SyncBaseline();
  EXPECT_GT(baseline, 0.7);
  LaunchRun run = StartLaunch(
      "kill_worker",
      {"--job=" + SyncJob("sync_kill"), "--ps=2", "--workers=2"});
  nlohmann::json cluster = WaitForProgress(run, 80);  // mid epoch 1 of 3
  pid_t victim = PidOf(cluster, "worker:1");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_NEAR(s["test_accuracy"].get<double>(), baseline, 0.01) << Log(run);
  EXPECT_NE(Log(run).find("worker:1 exited (killed by signal 9)"),
            std::string::npos);
}

TEST_F(LaunchTest, AsyncWorkerKilledMidEpochCompletesEveryStepOnce) {
  LaunchRun run = StartLaunch("kill_worker_async", {"--ps=2", "--workers=2"});
  nlohmann::json cluster = WaitForProgress(run, 80);
  pid_t victim = PidOf(cluster, "worker:0");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.7);
}

TEST_F(LaunchTest, PsKilledAndRestartedRestoresTheCheckpoint) {
  LaunchRun run = StartLaunch("kill_ps", {"--ps=2", "--workers=2"});
  nlohmann::json cluster = WaitForProgress(run, 120);
  pid_t victim = PidOf(cluster, "ps:1");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_LE(s["lost_steps"].get<int64_t>(), 50);  // the checkpoint interval
  EXPECT_EQ(s["restarts"]["ps:1"], 1);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.7);
}

TEST_F(LaunchTest, CoordinatorKilledAndRestartedResumesTheRun) {
  // Sync updates: the resumed run must end where an uninterrupted one does.
  const double baseline = SyncBaseline();
  LaunchRun run = StartLaunch(
      "kill_coordinator",
      {"--job=" + SyncJob("sync_kill_coordinator"), "--ps=2", "--workers=2"});
  nlohmann::json cluster = WaitForProgress(run, 100);
  pid_t victim = PidOf(cluster, "coordinator");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_EQ(s["restarts"]["coordinator"], 1);
  EXPECT_NEAR(s["test_accuracy"].get<double>(), baseline, 0.01) << Log(run);
}

TEST_F(LaunchTest, SyncUpdatesAggregateReplicaSteps) {
  std::ifstream in(kJob);
  nlohmann::json job = nlohmann::json::parse(in);
  job["strategy"]["update"] = "sync";
  job["strategy"]["sync_replicas"] = 2;
  job["epochs"] = 2;
  job["data"]["limit_train"] = 6000 + 64;  // an odd number of steps
  job["checkpoint"]["every_steps"] = 0;
  std::string path = ::testing::TempDir() + "/sync_job.json";
  {
    std::ofstream out(path);
    out << job.dump();
  }
  LaunchRun run = StartLaunch("sync", {"--job=" + path, "--ps=1",
                                       "--workers=2"});
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_EQ(s["steps_scheduled"], 2 * 95);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.6);
}

TEST_F(LaunchTest, SyncWithCheckpointsIsRefusedUpFront) {
  std::ifstream in(kJob);
  nlohmann::json job = nlohmann::json::parse(in);
  job["strategy"]["update"] = "sync";
  std::string path = ::testing::TempDir() + "/sync_ckpt_job.json";
  {
    std::ofstream out(path);
    out << job.dump();
  }
  LaunchRun run = StartLaunch("sync_ckpt", {"--job=" + path});
  EXPECT_EQ(Wait(run), 1);
  EXPECT_NE(Log(run).find("not supported yet"), std::string::npos) << Log(run);
}

TEST_F(LaunchTest, SigtermStopsEveryProcess) {
  LaunchRun run = StartLaunch("sigterm", {"--ps=2", "--workers=2",
                                          "--epochs=50"});
  nlohmann::json cluster = WaitForProgress(run, 20);
  ASSERT_EQ(cluster.size(), 5u) << Log(run);
  ASSERT_EQ(kill(run.pid, SIGTERM), 0);
  EXPECT_EQ(Wait(run), 130) << Log(run);
  // The launcher reaped every child before it exited.
  for (const auto& c : cluster) {
    pid_t pid = c["pid"].get<pid_t>();
    EXPECT_NE(kill(pid, 0), 0) << c["name"] << " still runs";
  }
  EXPECT_NE(Log(run).find("interrupted"), std::string::npos) << Log(run);
}

TEST_F(LaunchTest, BadJobFailsWithTheFieldName) {
  std::string bad = ::testing::TempDir() + "/bad_job.json";
  {
    std::ofstream f(bad);
    f << R"({"model": {"input_shape": [4], "layers": [{"type": "conv"}]},
            "loss": "mse", "data": {"format": "csv",
            "train": {"path": "/nonexistent.csv"}}})";
  }
  LaunchRun run = StartLaunch("bad_job", {"--job=" + bad});
  EXPECT_EQ(Wait(run), 1);
  EXPECT_NE(Log(run).find("conv"), std::string::npos) << Log(run);
}

}  // namespace
}  // namespace strata

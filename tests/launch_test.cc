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
#include "tests/launch_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using namespace launch_util;  // NOLINT: the helpers of these tests

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

// --tls: every process over mutual TLS with the job's credentials; the
// coordinator restores a killed PS from its job's checkpoints (saved with
// its coordinator credential under ps-1/<job>/).
TEST_F(LaunchTest, TlsClusterWithCredentialsTrainsAndRestoresAKilledPs) {
  LaunchRun run = StartLaunch("tls", {"--ps=2", "--workers=2", "--tls"});
  nlohmann::json cluster = WaitForProgress(run, 120, /*tls=*/true);
  pid_t victim = PidOf(cluster, "ps:1");
  ASSERT_GT(victim, 0) << Log(run);
  // At once: the small job may finish within the checks below.
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  // The coordinator refuses plaintext, and TLS without a token.
  std::string coordinator;
  for (const auto& c : cluster) {
    if (c["name"] == "coordinator") coordinator = c["address"];
  }
  EXPECT_FALSE(
      CoordinatorClient::Connect(coordinator, absl::Milliseconds(500))
          ->GetJob()
          .ok());
  ClientSecurity no_token = LaunchSecurity(run);
  no_token.auth_token.clear();
  EXPECT_EQ(CoordinatorClient::Connect(coordinator, absl::Seconds(5), no_token)
                ->GetJob()
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_LE(s["lost_steps"].get<int64_t>(), 50);
  EXPECT_EQ(s["restarts"]["ps:1"], 1);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.7);
  const std::string dir = run.dir + "/run";
  EXPECT_TRUE(fs::exists(dir + "/tls/ca.pem"));
  EXPECT_EQ(fs::status(dir + "/tls/auth.json").permissions() &
                (fs::perms::group_all | fs::perms::others_all),
            fs::perms::none);
  EXPECT_TRUE(fs::is_directory(dir + "/ps-1/fashion-mnist-small"));
  for (const char* log : {"/coordinator.log", "/ps-0.log", "/ps-1.log"}) {
    std::ifstream in(dir + log);
    std::string text((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    EXPECT_NE(text.find(R"("tls":true,"client_auth":true,"credentials":true)"),
              std::string::npos)
        << log;
    // (The coordinator logs the refused call above.)
    if (std::string(log) != "/coordinator.log") {
      EXPECT_EQ(text.find("UNAUTHENTICATED"), std::string::npos) << log;
    }
    EXPECT_EQ(text.find("PERMISSION_DENIED"), std::string::npos) << log;
  }
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
  EXPECT_EQ(Wait(run), 2);  // refused before anything started
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
  EXPECT_EQ(Wait(run), 2);  // a refused job file exits 2
  EXPECT_NE(Log(run).find("conv"), std::string::npos) << Log(run);
}

TEST_F(LaunchTest, PsDeviceIsPassedToEveryPsTask) {
  LaunchRun run = StartLaunch("ps_device", {"--ps=1", "--workers=1",
                                            "--ps_device=cuda:0"});
  const int code = Wait(run);
  if (code == 0) {
    // A machine with a usable GPU: the variables lived there and trained.
    nlohmann::json s = Summary(run);
    ExpectCompleted(run, s);
    EXPECT_GT(s["test_accuracy"].get<double>(), 0.7);
    return;
  }
  // Elsewhere strata-ps refuses at start, and the launcher says why.
  EXPECT_EQ(code, 1) << Log(run);
  EXPECT_NE(Log(run).find("ps:0 did not report its address (exit code 1)"),
            std::string::npos)
      << Log(run);
  EXPECT_NE(Log(run).find("strata-ps: --device cuda:0: "), std::string::npos)
      << Log(run);
}

}  // namespace
}  // namespace strata

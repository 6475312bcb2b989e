// PS replication end to end (strategy.ps_replication 2, strata launch): the
// primary replica of a PS task is killed with SIGKILL mid-run, its backup
// takes the task over with every acknowledged change, and the run loses no
// step: lost_steps 0 and every scheduled step applied once, under
// parameter_server (async and sync) and central_storage.
#include <signal.h>
#include <sys/types.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/launch_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using namespace launch_util;  // NOLINT: the helpers of these tests

struct Mode {
  const char* name;
  const char* strategy;
  const char* update;
  int ps;
};

std::string JobFile(const Mode& mode) {
  std::ifstream in(kJob);
  nlohmann::json job = nlohmann::json::parse(in);
  job["strategy"] = {{"type", mode.strategy},
                     {"update", mode.update},
                     {"ps_replication", 2}};
  if (std::string(mode.strategy) == "parameter_server") {
    job["strategy"]["partitioner"] = {{"type", "fixed"}, {"num_shards", 2}};
  }
  if (std::string(mode.update) == "sync") job["checkpoint"]["every_steps"] = 0;
  std::string path = ::testing::TempDir() + "/replicated_" + mode.name + ".json";
  std::ofstream out(path);
  out << job.dump();
  return path;
}

class PsReplicationLaunchTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    if (!HaveData()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  }
};

TEST_P(PsReplicationLaunchTest, PrimaryKilledLosesNoStep) {
  const Mode& mode = GetParam();
  LaunchRun run = StartLaunch(
      std::string("replicated_") + mode.name,
      {"--job=" + JobFile(mode), "--ps=" + std::to_string(mode.ps),
       "--workers=2"});
  nlohmann::json cluster = WaitForProgress(run, 150);
  ASSERT_FALSE(cluster.empty()) << Log(run);
  const std::string primary = PrimaryReplica(cluster, 0);
  ASSERT_FALSE(primary.empty()) << Log(run);
  // The replicas are known by names (as Services on Kubernetes), which
  // clients resolve and the replicas listen behind (--host).
  for (const auto& c : cluster) {
    if (c["name"].get<std::string>().rfind("ps:", 0) == 0) {
      EXPECT_EQ(c["address"].get<std::string>().rfind("localhost:", 0), 0u)
          << c.dump();
    }
  }
  const pid_t victim = PidOf(cluster, primary);
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ASSERT_FALSE(s.is_discarded()) << Log(run);
  EXPECT_EQ(s["lost_steps"], 0) << Log(run);
  EXPECT_EQ(s["steps_applied"], s["steps_scheduled"]) << Log(run);
  if (std::string(mode.strategy) == "parameter_server") {
    // The PS tasks' own count: each step's push applied once (sync: per
    // aggregated step).
    EXPECT_EQ(s["steps_applied_ps"], s["steps_scheduled"]) << Log(run);
  }
  EXPECT_EQ(s["restarts"][primary], 1) << Log(run);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.7);
  EXPECT_NE(Log(run).find(primary + " exited (killed by signal 9)"),
            std::string::npos);
  // The other replica took the task over with its state.
  const int other = 1 - (primary.back() - '0');
  std::ifstream backup_log(run.dir + "/run/ps-0-" + std::to_string(other) +
                           ".log");
  const std::string text((std::istreambuf_iterator<char>(backup_log)),
                         std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"promoted\""), std::string::npos) << text;
}

// A primary that hangs (SIGSTOP): once its lease expires its backup takes
// the task over (the clients' keepalive pings give up on the hung
// connection); resumed, the old primary finds itself replaced, exits and
// comes back as the backup. No step is lost.
TEST(PsReplicationHangTest, HungPrimaryIsTakenOverAndStepsAreNotLost) {
  if (!HaveData()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const Mode mode{"hang", "parameter_server", "async", 2};
  LaunchRun run = StartLaunch("replicated_hang",
                              {"--job=" + JobFile(mode), "--ps=2",
                               "--workers=2"});
  nlohmann::json cluster = WaitForProgress(run, 150);
  ASSERT_FALSE(cluster.empty()) << Log(run);
  const std::string primary = PrimaryReplica(cluster, 0);
  ASSERT_FALSE(primary.empty()) << Log(run);
  const pid_t victim = PidOf(cluster, primary);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  const int other = 1 - (primary.back() - '0');
  const std::string other_log =
      run.dir + "/run/ps-0-" + std::to_string(other) + ".log";
  // The backup takes over (bounded: lease 5 s plus its 1 s check).
  bool promoted = false;
  for (int i = 0; i < 600 && !promoted; ++i) {
    std::ifstream f(other_log);
    const std::string text((std::istreambuf_iterator<char>(f)),
                           std::istreambuf_iterator<char>());
    promoted = text.find("\"primary_hangs\"") != std::string::npos &&
               text.find("\"promoted\"") != std::string::npos;
    if (!promoted) AwaitChildEvent();
  }
  ASSERT_EQ(kill(victim, SIGCONT), 0);
  ASSERT_TRUE(promoted) << Log(run);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ASSERT_FALSE(s.is_discarded()) << Log(run);
  EXPECT_EQ(s["lost_steps"], 0) << Log(run);
  EXPECT_EQ(s["steps_applied"], s["steps_scheduled"]) << Log(run);
  EXPECT_EQ(s["steps_applied_ps"], s["steps_scheduled"]) << Log(run);
  // Resumed, the old primary was replaced: it exited and was restarted.
  EXPECT_EQ(s["restarts"][primary], 1) << Log(run);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.7);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, PsReplicationLaunchTest,
    ::testing::Values(Mode{"ps_async", "parameter_server", "async", 2},
                      Mode{"ps_sync", "parameter_server", "sync", 2},
                      Mode{"central_storage", "central_storage", "sync", 1}),
    [](const ::testing::TestParamInfo<Mode>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace strata

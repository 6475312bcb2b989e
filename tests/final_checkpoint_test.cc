// Process-level test of the final checkpoint on SIGTERM: a coordinator, a
// PS task and a worker get SIGTERM at once (as Kubernetes sends it to every
// pod of a deleted job); the PS keeps serving for its shutdown delay, the
// coordinator drains the stopped worker's steps and saves every PS shard
// before it exits.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "client/coordinator_client.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/launch_util.h"
#include "tools/process.h"

namespace strata {
namespace {

using namespace launch_util;  // NOLINT: the helpers of these tests

std::string Bin(const std::string& name) {
  return std::string(STRATA_BIN_DIR) + "/" + name;
}

// Waits (bounded) until `child` exited.
bool AwaitExit(ChildProcess* child, std::chrono::seconds limit) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (!Reap(child)) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    AwaitChildEvent();
  }
  return true;
}

// The JSON log lines of `path` whose "event" is `event`.
std::vector<nlohmann::json> Events(const std::string& path,
                                   const std::string& event) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("event", "") == event) out.push_back(j);
  }
  return out;
}

TEST(FinalCheckpointTest, SigtermSavesEveryShardBeforeTheCoordinatorStops) {
  if (!HaveData()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string dir = ::testing::TempDir() + "/final_checkpoint_" +
                          std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string submit_log;
  // Checkpoints on, but no periodic one during the test.
  {
    std::ifstream in(kJob);
    nlohmann::json job = nlohmann::json::parse(in);
    job["checkpoint"]["every_steps"] = 100000;
    job["epochs"] = 20;
    std::ofstream(dir + "/job.json") << job.dump();
  }
  ChildProcess coordinator{"coordinator",
                           {Bin("strata-coordinator"), "--host=127.0.0.1",
                            "--port=0", "--state-dir=" + dir + "/state",
                            "--lease-ms=1000", "--heartbeat-ms=200",
                            "--final-checkpoint-seconds=30"}};
  coordinator.log_path = dir + "/coordinator.log";
  ASSERT_TRUE(Spawn(&coordinator, true, absl::Seconds(30)).ok());
  ChildProcess ps{"ps:0",
                  {Bin("strata-ps"), "--host=127.0.0.1", "--port=0",
                   "--task-index=0", "--checkpoint-dir=" + dir + "/ckpt",
                   "--coordinator=" + coordinator.address,
                   "--shutdown-delay-seconds=20"}};
  ps.log_path = dir + "/ps.log";
  ASSERT_TRUE(Spawn(&ps, true, absl::Seconds(30)).ok());
  ChildProcess worker{"worker:0",
                      {Bin("strata-worker"),
                       "--coordinator=" + coordinator.address,
                       "--task-index=0"}};
  worker.log_path = dir + "/worker.log";
  ASSERT_TRUE(Spawn(&worker, false, absl::Seconds(30)).ok());
  // strata submit prints to stdout: into its log, through a shell.
  submit_log = dir + "/submit.log";
  ChildProcess submit{
      "submit",
      {"/bin/sh", "-c",
       "exec \"$0\" submit --coordinator=\"$1\" --job=\"$2\" --wait_ps=1 "
       "--wait_workers=1 >\"$3\" 2>&1",
       Bin("strata"), coordinator.address, dir + "/job.json", submit_log}};
  submit.log_path = submit_log;
  ASSERT_TRUE(Spawn(&submit, false, absl::Seconds(30)).ok());
  ASSERT_TRUE(AwaitExit(&submit, std::chrono::seconds(60)));
  ASSERT_EQ(submit.wait_status, 0)
      << DescribeExit(submit.wait_status) << ", see " << submit_log;

  // Let it train a while.
  auto client = CoordinatorClient::Connect(coordinator.address,
                                           absl::Seconds(10));
  int64_t completed = 0;
  const auto give_up = std::chrono::steady_clock::now() + kRunLimit;
  while (completed < 100 && std::chrono::steady_clock::now() < give_up) {
    absl::StatusOr<v1::JobStatus> job = client->GetJob();
    ASSERT_TRUE(job.ok()) << job.status();
    completed = job->steps_completed();
    AwaitChildEvent();
  }
  ASSERT_GE(completed, 100);

  for (ChildProcess* c : {&coordinator, &ps, &worker}) {
    ASSERT_EQ(::kill(c->pid, SIGTERM), 0) << c->name;
  }
  ASSERT_TRUE(AwaitExit(&coordinator, std::chrono::seconds(60)));
  EXPECT_EQ(coordinator.wait_status, 0) << DescribeExit(coordinator.wait_status);
  std::vector<nlohmann::json> done =
      Events(coordinator.log_path, "final_checkpoint");
  ASSERT_EQ(done.size(), 1u) << "see " << coordinator.log_path;
  EXPECT_TRUE(done[0]["done"].get<bool>()) << done[0].dump();
  EXPECT_GE(done[0]["steps_covered"].get<int64_t>(), completed);
  const std::string name = done[0]["checkpoint"].get<std::string>();
  EXPECT_EQ(name, "ckpt-" + std::to_string(
                                done[0]["steps_covered"].get<int64_t>()));
  EXPECT_TRUE(fs::is_directory(dir + "/ckpt/" + name)) << name;

  // The PS kept serving for the save, then stops on a second signal.
  EXPECT_EQ(Events(ps.log_path, "shutdown_delay").size(), 1u);
  Stop(&ps, absl::Seconds(10));
  Stop(&worker, absl::Seconds(10));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata

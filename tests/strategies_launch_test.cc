// Process-level tests of the synchronous strategies through `strata
// launch`: each trains the small Fashion-MNIST job to completion; a worker
// killed with SIGKILL under central_storage and multi_worker_mirrored is
// survived (the group re-forms, the global batch is re-divided) with the
// accuracy of a run without the fault; a restarted worker rejoins the group
// with state copied from a survivor.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/launch_util.h"

namespace strata {
namespace {

using namespace launch_util;  // NOLINT: the helpers of these tests

// The small job with more epochs (so that a fault lands mid-run) and no
// checkpoints (the synchronous strategies keep their state elsewhere).
std::string Job(const std::string& name, int epochs,
                double collective_timeout_seconds = 0) {
  std::ifstream in(kJob);
  nlohmann::json job = nlohmann::json::parse(in);
  job["epochs"] = epochs;
  if (collective_timeout_seconds > 0) {
    job["strategy"]["timeout_seconds"] = collective_timeout_seconds;
  }
  job["checkpoint"]["every_steps"] = 0;
  std::string path = ::testing::TempDir() + "/strategies_" + name + ".json";
  std::ofstream out(path);
  out << job.dump();
  return path;
}

struct Outcome {
  int exit_code = -1;
  nlohmann::json summary;
};

Outcome RunToEnd(const std::string& name, std::vector<std::string> flags) {
  flags.push_back("--job=" + Job(name, 3));
  LaunchRun run = StartLaunch(name, flags);
  Outcome out;
  out.exit_code = Wait(run);
  EXPECT_EQ(out.exit_code, 0) << Log(run);
  out.summary = Summary(run);
  EXPECT_FALSE(out.summary.is_discarded()) << Log(run);
  if (!out.summary.is_discarded()) {
    EXPECT_EQ(out.summary["steps_applied"], out.summary["steps_scheduled"])
        << Log(run);
  }
  return out;
}

double Accuracy(const Outcome& o) {
  return o.summary.is_discarded() ? 0.0
                                  : o.summary["test_accuracy"].get<double>();
}

// JSON lines of a log file whose "event" is `event`.
std::vector<nlohmann::json> Events(const std::string& path,
                                   const std::string& event) {
  std::ifstream f(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(f, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("event", "") == event) {
      out.push_back(j);
    }
  }
  return out;
}

class StrategiesLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveData()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  }

  // Accuracy of a fault-free run per strategy flags (computed once).
  static double Baseline(const std::string& key,
                         const std::vector<std::string>& flags) {
    static std::map<std::string, double>* cache =
        new std::map<std::string, double>();
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
    Outcome o = RunToEnd("baseline_" + key, flags);
    return (*cache)[key] = Accuracy(o);
  }

  // Kills worker 1 mid-run; the group re-forms (the launcher restarts the
  // worker, which rejoins with a survivor's state) and the run ends with
  // the accuracy of the fault-free run.
  static void KillOneWorker(const std::string& key,
                            std::vector<std::string> flags) {
    const double baseline = Baseline(key, flags);
    flags.push_back("--job=" + Job("kill_" + key, 3));
    LaunchRun run = StartLaunch("kill_" + key, flags);
    nlohmann::json cluster = WaitForProgress(run, 60);
    pid_t victim = PidOf(cluster, "worker:1");
    ASSERT_GT(victim, 0) << Log(run);
    ASSERT_EQ(kill(victim, SIGKILL), 0);
    ASSERT_EQ(Wait(run), 0) << Log(run);
    nlohmann::json s = Summary(run);
    ASSERT_FALSE(s.is_discarded()) << Log(run);
    EXPECT_EQ(s["steps_applied"], s["steps_scheduled"]) << Log(run);
    EXPECT_NEAR(s["test_accuracy"].get<double>(), baseline, 0.01) << Log(run);
    EXPECT_EQ(s["restarts"]["worker:1"], 1) << Log(run);
    // The coordinator formed a new group after the kill.
    EXPECT_GE(Events(run.dir + "/run/coordinator.log", "group_formed").size(),
              2u);
  }

  // Kills the ps task mid-run (issue defects: the launcher restarted it
  // empty and the groups failed NOT_FOUND for good). The run must complete
  // with the accuracy of the fault-free run; `lost_ok`: the strategy keeps
  // its model on the ps task (central_storage, no checkpoints), so its
  // steps are redone from the start and counted lost.
  static void KillThePs(const std::string& key, std::vector<std::string> flags,
                        bool lost_ok, const std::string& ps = "ps:0") {
    const double baseline = Baseline(key, flags);
    flags.push_back("--job=" + Job("kill_ps_" + key, 3));
    LaunchRun run = StartLaunch("kill_ps_" + key, flags);
    nlohmann::json cluster = WaitForProgress(run, 120);
    pid_t victim = PidOf(cluster, ps);
    ASSERT_GT(victim, 0) << Log(run);
    ASSERT_EQ(kill(victim, SIGKILL), 0);
    ASSERT_EQ(Wait(run), 0) << Log(run);
    nlohmann::json s = Summary(run);
    ASSERT_FALSE(s.is_discarded()) << Log(run);
    EXPECT_EQ(s["steps_applied"], s["steps_scheduled"]) << Log(run);
    EXPECT_EQ(s["restarts"][ps], 1) << Log(run);
    if (lost_ok) {
      EXPECT_GE(s["lost_steps"].get<int64_t>(), 120) << Log(run);
    } else {
      EXPECT_EQ(s["lost_steps"], 0) << Log(run);
    }
    EXPECT_NEAR(s["test_accuracy"].get<double>(), baseline, 0.01) << Log(run);
    // Bounded re-forming, not a group per failed call.
    const auto formed =
        Events(run.dir + "/run/coordinator.log", "group_formed");
    EXPECT_LT(formed.size(), 40u) << Log(run);
  }
};

TEST_F(StrategiesLaunchTest, CentralStorageTrains) {
  Outcome o = RunToEnd("central_storage",
                       {"--strategy=central_storage", "--ps=1", "--workers=2"});
  EXPECT_GT(Accuracy(o), 0.75);
  EXPECT_EQ(o.summary["steps_applied_ps"], o.summary["steps_scheduled"]);
}

TEST_F(StrategiesLaunchTest, MultiWorkerMirroredRingTrains) {
  double a = Baseline("mwm_ring", {"--strategy=multi_worker_mirrored",
                                   "--collective=ring", "--workers=2"});
  EXPECT_GT(a, 0.75);
}

TEST_F(StrategiesLaunchTest, MultiWorkerMirroredThroughPsTrains) {
  Outcome o = RunToEnd("mwm_ps", {"--strategy=multi_worker_mirrored",
                                  "--collective=ps", "--ps=1", "--workers=2"});
  EXPECT_GT(Accuracy(o), 0.75);
  // The same math as the ring: the accuracies agree closely.
  EXPECT_NEAR(Accuracy(o),
              Baseline("mwm_ring", {"--strategy=multi_worker_mirrored",
                                    "--collective=ring", "--workers=2"}),
              0.01);
}

TEST_F(StrategiesLaunchTest, MirroredTrainsReplicasInOneProcess) {
  Outcome o = RunToEnd("mirrored", {"--strategy=mirrored", "--workers=3"});
  EXPECT_GT(Accuracy(o), 0.75);
  EXPECT_EQ(o.summary["workers"], 1);
  EXPECT_EQ(o.summary["replicas_per_worker"], 3);
}

TEST_F(StrategiesLaunchTest, CentralStorageSurvivesAKilledWorker) {
  KillOneWorker("central_storage",
                {"--strategy=central_storage", "--ps=1", "--workers=2"});
}

TEST_F(StrategiesLaunchTest, CentralStorageSurvivesAKilledPs) {
  KillThePs("central_storage",
            {"--strategy=central_storage", "--ps=1", "--workers=2"},
            /*lost_ok=*/true);
}

// With two ps tasks (the job used to fail on either death: "the other ps
// task(s) cannot be rewound to step 0"): ps:0, which holds every variable,
// rewinds the run; ps:1 holds nothing, and its death loses nothing.
TEST_F(StrategiesLaunchTest, CentralStorageWithTwoPsSurvivesAKilledPs0) {
  KillThePs("central_storage_2ps",
            {"--strategy=central_storage", "--ps=2", "--workers=2"},
            /*lost_ok=*/true, "ps:0");
}

// With checkpoints (taken at a group barrier): ps:0's death rewinds the run
// to the newest checkpoint, not to step 0; steps are neither skipped nor
// applied twice (the accuracy is the fault-free run's).
TEST_F(StrategiesLaunchTest, CentralStorageRestoresAKilledPs0FromACheckpoint) {
  const std::vector<std::string> flags = {"--strategy=central_storage",
                                          "--ps=2", "--workers=2"};
  const double baseline = Baseline("central_storage_2ps", flags);
  std::ifstream in(kJob);
  nlohmann::json job = nlohmann::json::parse(in);
  job["epochs"] = 3;
  job["checkpoint"] = {{"every_steps", 40}, {"keep", 2}};
  const std::string path =
      ::testing::TempDir() + "/strategies_cs_checkpoints.json";
  std::ofstream(path) << job.dump();
  std::vector<std::string> run_flags = flags;
  run_flags.push_back("--job=" + path);
  LaunchRun run = StartLaunch("cs_checkpoints", run_flags);
  nlohmann::json cluster = WaitForProgress(run, 130);
  pid_t victim = PidOf(cluster, "ps:0");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ASSERT_FALSE(s.is_discarded()) << Log(run);
  EXPECT_EQ(s["steps_applied"], s["steps_scheduled"]) << Log(run);
  EXPECT_EQ(s["restarts"]["ps:0"], 1) << Log(run);
  EXPECT_GE(s["checkpoints"]["saved"].get<int64_t>(), 3) << s.dump();
  // At most one interval (and the step applied but unreported at the cut).
  EXPECT_LE(s["lost_steps"].get<int64_t>(), 41) << s.dump();
  const auto restored =
      Events(run.dir + "/run/coordinator.log", "ps_restored");
  ASSERT_EQ(restored.size(), 1u) << Log(run);
  EXPECT_NE(restored[0]["checkpoint"], "(none)") << restored[0].dump();
  EXPECT_GE(restored[0]["checkpoint_step"].get<int64_t>(), 80)
      << restored[0].dump();
  EXPECT_NEAR(s["test_accuracy"].get<double>(), baseline, 0.01) << Log(run);
}

TEST_F(StrategiesLaunchTest, CentralStorageWithTwoPsSurvivesAKilledPs1) {
  KillThePs("central_storage_2ps",
            {"--strategy=central_storage", "--ps=2", "--workers=2"},
            /*lost_ok=*/false, "ps:1");
}

TEST_F(StrategiesLaunchTest, MultiWorkerMirroredPsCollectiveSurvivesAKilledPs) {
  KillThePs("mwm_ps",
            {"--strategy=multi_worker_mirrored", "--collective=ps", "--ps=1",
             "--workers=2"},
            /*lost_ok=*/false);
}

// The coordinator killed around the end of epoch 1 under
// multi_worker_mirrored: the evaluation it loses is reported again from the
// worker that computed it, or as missing; no epoch gets a later model's
// figures (they used to be re-run on the final model). Sync training is
// deterministic, so each epoch's figures must be the fault-free run's.
TEST_F(StrategiesLaunchTest, CoordinatorRestartKeepsEachEpochsOwnEvaluation) {
  const std::vector<std::string> flags = {"--strategy=multi_worker_mirrored",
                                          "--collective=ring", "--workers=2"};
  Outcome baseline = RunToEnd("epochs_baseline_mwm", flags);
  ASSERT_FALSE(baseline.summary.is_discarded());
  std::vector<std::string> run_flags = flags;
  run_flags.push_back("--job=" + Job("kill_coordinator_mwm", 3));
  LaunchRun run = StartLaunch("kill_coordinator_mwm", run_flags);
  nlohmann::json cluster = WaitForProgress(run, 187);  // 188 steps an epoch
  pid_t victim = PidOf(cluster, "coordinator");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ASSERT_FALSE(s.is_discarded()) << Log(run);
  EXPECT_EQ(s["steps_applied"], s["steps_scheduled"]) << Log(run);
  EXPECT_EQ(s["restarts"]["coordinator"], 1);
  const nlohmann::json& want = baseline.summary["epochs_detail"];
  const nlohmann::json& got = s["epochs_detail"];
  ASSERT_EQ(got.size(), want.size()) << s.dump();
  for (size_t e = 0; e < got.size(); ++e) {
    if (got[e].value("evaluation_missing", false)) continue;
    ASSERT_TRUE(got[e].contains("test_accuracy")) << got[e].dump();
    EXPECT_NEAR(got[e]["test_accuracy"].get<double>(),
                want[e]["test_accuracy"].get<double>(), 1e-6)
        << "epoch " << e + 1 << ": " << s.dump();
  }
  // The last epoch is always evaluated on the final model.
  EXPECT_FALSE(got.back().value("evaluation_missing", false));
  EXPECT_NEAR(s["test_accuracy"].get<double>(), Accuracy(baseline), 1e-6);
}

TEST_F(StrategiesLaunchTest, MultiWorkerMirroredSurvivesAKilledWorker) {
  KillOneWorker("mwm_ring", {"--strategy=multi_worker_mirrored",
                             "--collective=ring", "--workers=2"});
}

// A worker that stops answering (SIGSTOP) without dying: the survivor's
// collective gives up at its deadline (2 s here, before the 5 s lease), it
// asks for a new group, which forms without the stuck worker once its
// lease expires; the survivor trains on alone; once resumed (SIGCONT) the
// stuck worker finds its group replaced, registers again and rejoins. The
// run completes.
TEST_F(StrategiesLaunchTest, StuckWorkerIsRegroupedAroundAndRejoins) {
  const double baseline = Baseline(
      "mwm_ring", {"--strategy=multi_worker_mirrored", "--collective=ring",
                   "--workers=2"});
  LaunchRun run = StartLaunch(
      "stuck", {"--strategy=multi_worker_mirrored", "--workers=2",
                "--job=" + Job("stuck", 3, /*collective_timeout_seconds=*/2)});
  nlohmann::json cluster = WaitForProgress(run, 60);
  pid_t victim = PidOf(cluster, "worker:1");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  // Bounded wait for the coordinator to form a group without worker:1.
  const std::string coordinator_log = run.dir + "/run/coordinator.log";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool alone = false;
  while (!alone && std::chrono::steady_clock::now() < deadline) {
    for (const auto& e : Events(coordinator_log, "group_formed")) {
      alone = alone || e["members"] == "worker:0";
    }
    if (!alone) AwaitChildEvent();
  }
  ASSERT_EQ(kill(victim, SIGCONT), 0);
  ASSERT_TRUE(alone) << "no group without the stuck worker";
  // The survivor's collective ran into its deadline (not a forever wait).
  bool timed_out = false;
  for (const auto& e : Events(run.dir + "/run/worker-0.log", "group_failed")) {
    timed_out = timed_out || e.value("error", "").find("DEADLINE_EXCEEDED") !=
                                 std::string::npos;
  }
  EXPECT_TRUE(timed_out) << "worker:0 never reported a collective deadline";
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ASSERT_FALSE(s.is_discarded()) << Log(run);
  EXPECT_EQ(s["steps_applied"], s["steps_scheduled"]);
  EXPECT_NEAR(s["test_accuracy"].get<double>(), baseline, 0.01);
}

TEST_F(StrategiesLaunchTest, RestartedWorkerRejoinsWithASurvivorsState) {
  LaunchRun run = StartLaunch(
      "rejoin", {"--strategy=multi_worker_mirrored", "--workers=2",
                 "--job=" + Job("rejoin", 6)});
  nlohmann::json cluster = WaitForProgress(run, 60);
  pid_t victim = PidOf(cluster, "worker:1");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  // The launcher brings worker 1 back as a new process (a new
  // incarnation), logging to the same file.
  const std::string log = run.dir + "/run/worker-1.log";
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ASSERT_FALSE(s.is_discarded()) << Log(run);
  EXPECT_EQ(s["steps_applied"], s["steps_scheduled"]);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.75);
  EXPECT_EQ(s["restarts"]["worker:1"], 1) << Log(run);
  // It joined a group and copied a survivor's state.
  auto copied = Events(log, "state_copied");
  EXPECT_FALSE(copied.empty()) << "the returning worker copied no state";
  bool pair_again = false;
  for (const auto& e :
       Events(run.dir + "/run/coordinator.log", "group_formed")) {
    pair_again = pair_again || e["members"] == "worker:0,worker:1";
  }
  EXPECT_TRUE(pair_again);
}

}  // namespace
}  // namespace strata

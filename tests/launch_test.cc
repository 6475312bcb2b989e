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
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/coordinator_client.h"
#include "tests/launch_util.h"
#include "tests/process_util.h"
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
  // The checkpoint interval, and the steps in flight when the save fell due
  // (a worker's lease: up to 4 steps).
  EXPECT_LE(s["lost_steps"].get<int64_t>(), 50 + 2 * 4);
  EXPECT_EQ(s["restarts"]["ps:1"], 1);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.7);
}

// A model with embeddings (issue 15) on the checked-in Criteo-format
// sample: 26 dynamic tables sharded over two PS tasks, one of which is
// killed with SIGKILL mid-run. Its restart restores its checkpoint, tables
// included (rows, slots, exactly-once windows), every step is applied once,
// at most a checkpoint interval is lost, and the model still learns (test
// AUC in the summary).
// Multi-hot features end to end: strata datagen writes two multi-hot
// columns (1 to 3 ids a field, their latent vectors averaged in the hidden
// model), a mean bag reads them, and the job trains under parameter_server
// (async and sync) and in one process (local_train) to an AUC near the
// generator's ceiling on the training set.
TEST_F(LaunchTest, MultiHotEmbeddingJobTrainsOnPsAndLocally) {
  const std::string data = ::testing::TempDir() + "/multi_hot_" +
                           std::to_string(getpid()) + ".tsv";
  testing_util::ChildResult gen = testing_util::RunChild(
      {STRATA_BIN_DIR "/strata", "datagen", "--out=" + data,
       "--examples=4000", "--seed=3", "--multi-hot-columns=0,1",
       "--max-hot=3", "--max-cardinality=300"},
      std::chrono::seconds(120));
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  std::ifstream summary_file(data + ".summary.json");
  const nlohmann::json gen_summary = nlohmann::json::parse(summary_file);
  const double bayes = gen_summary["bayes_auc"].get<double>();
  nlohmann::json emb = nlohmann::json::array();
  emb.push_back({{"table", "tags"},
                 {"columns", {0, 1}},
                 {"output_dim", 4},
                 {"combiner", "mean"},
                 {"optimizer", {{"type", "adagrad"}, {"learning_rate", 0.1}}}});
  for (int c = 2; c < 26; ++c) {
    emb.push_back({{"table", "C" + std::to_string(c)},
                   {"columns", {c}},
                   {"output_dim", 4},
                   {"optimizer", {{"type", "adagrad"},
                                  {"learning_rate", 0.1}}}});
  }
  nlohmann::json job = {
      {"name", "multi-hot"},
      {"model",
       {{"input_shape", {13}},
        {"categorical_columns", 26},
        {"embeddings", emb},
        {"layers",
         {{{"type", "dense"}, {"units", 16}, {"activation", "relu"}},
          {{"type", "dense"}, {"units", 1}, {"activation", "sigmoid"}}}}}},
      {"loss", "binary_crossentropy"},
      {"metrics", {"accuracy", "auc"}},
      {"optimizer", "adam"},
      {"data",
       {{"format", "criteo"},
        {"multi_hot_columns", {0, 1}},
        {"train", {{"path", data}}},
        {"test", {{"path", data}}}}},
      {"strategy", {{"type", "parameter_server"}}},
      {"epochs", 6},
      {"batch_size", 64},
      {"seed", 1}};
  for (const char* update : {"async", "sync"}) {
    SCOPED_TRACE(update);
    job["strategy"]["update"] = update;
    const std::string path =
        ::testing::TempDir() + "/multi_hot_" + update + ".json";
    std::ofstream(path) << job.dump();
    LaunchRun run = StartLaunch(std::string("multi_hot_") + update,
                                {"--job=" + path, "--ps=2", "--workers=2"});
    ASSERT_EQ(Wait(run), 0) << Log(run);
    nlohmann::json s = Summary(run);
    ExpectCompleted(run, s);
    ASSERT_TRUE(s["test_auc"].is_number()) << s.dump();
    // Trained and tested on the same 4000 lines, below the ceiling but
    // well above chance.
    EXPECT_GT(s["test_auc"].get<double>(), 0.7) << Log(run);
    RecordProperty(std::string("auc_") + update,
                   std::to_string(s["test_auc"].get<double>()));
  }
  const std::string local = ::testing::TempDir() + "/multi_hot_local.json";
  std::ofstream(local) << job.dump();
  testing_util::ChildResult trained = testing_util::RunChild(
      {STRATA_BIN_DIR "/local_train", "--job=" + local}, std::chrono::seconds(300));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_NE(trained.output.find("test_auc"), std::string::npos)
      << trained.output;
  RecordProperty("bayes_auc", std::to_string(bayes));
}

TEST_F(LaunchTest, EmbeddingJobOnPsTablesSurvivesAKilledPs) {
  const std::string sample =
      std::string(STRATA_SOURCE_DIR) + "/tests/data/criteo_sample.tsv";
  nlohmann::json emb = nlohmann::json::array();
  for (int c = 0; c < 26; ++c) {
    emb.push_back({{"table", "C" + std::to_string(c)},
                   {"columns", {c}},
                   {"output_dim", 4},
                   {"optimizer", {{"type", "adagrad"},
                                  {"learning_rate", 0.1}}}});
  }
  const nlohmann::json job = {
      {"name", "sparse"},
      {"model",
       {{"input_shape", {13}},
        {"categorical_columns", 26},
        {"embeddings", emb},
        {"layers",
         {{{"type", "dense"}, {"units", 16}, {"activation", "relu"}},
          {{"type", "dense"}, {"units", 1}, {"activation", "sigmoid"}}}}}},
      {"loss", "binary_crossentropy"},
      {"metrics", {"accuracy", "auc"}},
      {"optimizer", "adam"},
      {"data",
       {{"format", "criteo"}, {"train", {{"path", sample}}},
        {"test", {{"path", sample}}}}},
      {"strategy", {{"type", "parameter_server"}}},
      {"checkpoint", {{"every_steps", 20}}},
      {"epochs", 8},
      {"batch_size", 32},
      {"seed", 1}};
  const std::string path = ::testing::TempDir() + "/sparse_job.json";
  std::ofstream(path) << job.dump();
  LaunchRun run =
      StartLaunch("sparse_kill_ps", {"--job=" + path, "--ps=2", "--workers=1"});
  nlohmann::json cluster = WaitForProgress(run, 120);
  pid_t victim = PidOf(cluster, "ps:1");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_EQ(s["restarts"]["ps:1"], 1) << Log(run);
  EXPECT_LE(s["lost_steps"].get<int64_t>(), 20 + 4) << Log(run);
  ASSERT_TRUE(s["test_auc"].is_number()) << s.dump();
  EXPECT_GT(s["test_auc"].get<double>(), 0.7) << Log(run);
  EXPECT_TRUE(s["epochs_detail"][7].contains("test_auc")) << s.dump();
}

// The checkpoint directories ("ckpt-N", and temporaries "ckpt-N.tmp-...")
// anywhere under `dir`, by path.
std::vector<fs::path> CheckpointDirs(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (it->is_directory() && name.rfind("ckpt-", 0) == 0) {
      out.push_back(it->path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t CheckpointStep(const fs::path& dir) {
  return std::stoll(dir.filename().string().substr(5));
}

// The newest checkpoint is corrupted, then its PS is killed: the restart
// restores the next older one that verifies, says which it skipped and
// why, and the run completes. Checkpoints are pruned to the newest
// `keep`, and the half-written save the kill left is swept.
// The small job checkpointing every 30 steps (2 kept), for 10 epochs: long
// enough that the run is still training when its PS is frozen at step 130
// (3 epochs, 564 steps, took 1.3 s on a quiet machine: the run had ended
// before the kill, and nothing was restored).
std::string CheckpointEvery30Job(const std::string& name) {
  std::ifstream in(kJob);
  nlohmann::json job = nlohmann::json::parse(in);
  job["checkpoint"] = {{"every_steps", 30}, {"keep", 2}};
  job["epochs"] = 10;
  const std::string path = ::testing::TempDir() + "/" + name + "_job.json";
  std::ofstream(path) << job.dump();
  return path;
}

TEST_F(LaunchTest, AJobThatFailsExitsNonZeroWithItsSummaryWritten) {
  // Every checkpoint corrupt when the PS restarts: the job fails ("no
  // checkpoint ... verifies"); launch says why, exits non-zero, and still
  // writes the summary, with the state and the error.
  LaunchRun run = StartLaunch("all_corrupt",
                              {"--job=" + CheckpointEvery30Job("all_corrupt"),
                               "--ps=1", "--workers=2"});
  nlohmann::json cluster = WaitForProgress(run, 130);
  pid_t victim = PidOf(cluster, "ps:0");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  int corrupted = 0;
  std::set<std::string> corrupted_names;
  for (const fs::path& d : CheckpointDirs(run.dir + "/run/ps-0")) {
    if (d.filename().string().find(".tmp-") != std::string::npos) continue;
    if (!fs::exists(d / "0.bin")) continue;
    std::fstream payload(d / "0.bin",
                         std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(payload.good());
    payload.seekp(5);
    payload.put('\x7f');
    ++corrupted;
    corrupted_names.insert(d.filename().string());
  }
  ASSERT_GE(corrupted, 1) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const int code = Wait(run);
  EXPECT_NE(code, 0) << Log(run);
  EXPECT_NE(Log(run).find("job failed: "), std::string::npos) << Log(run);
  nlohmann::json s = Summary(run);
  ASSERT_FALSE(s.is_discarded()) << Log(run);
  EXPECT_EQ(s["state"], "FAILED") << s.dump();
  EXPECT_NE(s["error"].get<std::string>().find("verifies"), std::string::npos)
      << s.dump();
  // Every checkpoint the coordinator had committed was tried and skipped:
  // the newest `keep` (2). The disk may hold one more than that when the
  // PS was frozen between a save and the pruning of the oldest one.
  const nlohmann::json& skipped = s["checkpoints"]["skipped"];
  EXPECT_EQ(skipped.size(), static_cast<size_t>(std::min(corrupted, 2)))
      << s.dump();
  for (const auto& entry : skipped) {
    const std::string text = entry.get<std::string>();
    const std::string name = text.substr(0, text.find(':'));
    EXPECT_EQ(corrupted_names.count(name), 1u) << text;
  }
}

TEST_F(LaunchTest, CorruptNewestCheckpointFallsBackToAnOlderOne) {
  LaunchRun run =
      StartLaunch("corrupt_ckpt", {"--job=" + CheckpointEvery30Job(
                                                  "corrupt_ckpt"),
                                   "--ps=1", "--workers=2"});
  nlohmann::json cluster = WaitForProgress(run, 130);
  pid_t victim = PidOf(cluster, "ps:0");
  ASSERT_GT(victim, 0) << Log(run);
  // Frozen, the PS finishes no save while its newest one is corrupted.
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  const std::string ps_dir = run.dir + "/run/ps-0";
  fs::path newest;
  for (const fs::path& d : CheckpointDirs(ps_dir)) {
    if (d.filename().string().find(".tmp-") != std::string::npos) continue;
    if (fs::exists(d / "manifest.json") &&
        (newest.empty() || CheckpointStep(d) > CheckpointStep(newest))) {
      newest = d;
    }
  }
  ASSERT_FALSE(newest.empty()) << Log(run);
  // The checkpoint the restart falls back to: the newest complete one
  // older than the corrupted one.
  int64_t older_step = -1;
  for (const fs::path& d : CheckpointDirs(ps_dir)) {
    if (d.filename().string().find(".tmp-") != std::string::npos) continue;
    if (fs::exists(d / "manifest.json") && d != newest) {
      older_step = std::max(older_step, CheckpointStep(d));
    }
  }
  {
    std::fstream payload(newest / "0.bin",
                         std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(payload.good());
    payload.seekp(5);
    payload.put('\x7f');
  }
  // What a save killed half-way leaves (a pid no process has).
  fs::create_directories(newest.parent_path() / "ckpt-7.tmp-99999999-0");
  // With the PS frozen no push completes: what the coordinator counts from
  // now on is at most the steps leased before (2 workers, 4 each).
  const int64_t completed = StepsCompleted(run);
  ASSERT_GE(completed, 130) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  ASSERT_EQ(s["checkpoints"]["skipped"].size(), 1u) << s.dump();
  const std::string skipped = s["checkpoints"]["skipped"][0];
  // The operator sees it in launch's output too.
  EXPECT_NE(Log(run).find("restore skipped checkpoint " +
                          newest.filename().string() + ": DATA_LOSS"),
            std::string::npos)
      << Log(run);
  EXPECT_EQ(skipped.rfind(newest.filename().string() + ": DATA_LOSS", 0), 0u)
      << skipped;
  EXPECT_NE(skipped.find("CRC32C mismatch"), std::string::npos) << skipped;
  EXPECT_EQ(s["restarts"]["ps:0"], 1);
  // Back to the checkpoint before the corrupt one (when there was one;
  // otherwise to the start): past the corrupt one's steps, and no further
  // than the steps completed at the freeze plus those in flight.
  const int64_t base = std::max<int64_t>(older_step, 0);
  EXPECT_GE(s["lost_steps"].get<int64_t>(), CheckpointStep(newest) - base)
      << s.dump();
  EXPECT_LE(s["lost_steps"].get<int64_t>(), completed - base + 2 * 4)
      << s.dump();
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.7);
  std::vector<fs::path> left = CheckpointDirs(ps_dir);
  EXPECT_LE(left.size(), 2u);
  for (const fs::path& d : left) {
    EXPECT_EQ(d.filename().string().find(".tmp-"), std::string::npos) << d;
    EXPECT_TRUE(fs::exists(d / "manifest.json")) << d;
  }
}

// The only worker dies: the launcher starts it again and the run completes
// (it used to go on "on the other workers", of which there were none).
TEST_F(LaunchTest, TheOnlyWorkerKilledIsRestarted) {
  LaunchRun run = StartLaunch("kill_only_worker", {"--ps=1", "--workers=1"});
  nlohmann::json cluster = WaitForProgress(run, 80);
  pid_t victim = PidOf(cluster, "worker:0");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_EQ(s["restarts"]["worker:0"], 1);
  EXPECT_NE(Log(run).find("worker:0 exited (killed by signal 9); restarting"),
            std::string::npos)
      << Log(run);
}

// The PS stops answering, then dies, while the workers create their
// variables: they wait for its restart (each try running into the 2 s
// deadline of sync jobs) instead of exiting, which lost the run.
TEST_F(LaunchTest, PsLostWhileWorkersSetUpDoesNotEndTheRun) {
  LaunchRun run = StartLaunch(
      "ps_lost_setup",
      {"--job=" + SyncJob("ps_lost_setup"), "--ps=1", "--workers=2"});
  // As soon as the workers are started (they load the data, then create
  // the variables).
  pid_t victim = -1;
  const auto deadline = std::chrono::steady_clock::now() + kRunLimit;
  while (victim <= 0 && std::chrono::steady_clock::now() < deadline) {
    nlohmann::json cluster = Cluster(run);
    if (PidOf(cluster, "worker:1") > 0) victim = PidOf(cluster, "ps:0");
    if (victim <= 0) AwaitChildEvent(std::chrono::milliseconds(5));
  }
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  // Bounded: until a worker's set-up has failed once and is retrying.
  const std::string worker_log = run.dir + "/run/worker-0.log";
  bool retrying = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!retrying && std::chrono::steady_clock::now() < until) {
    std::ifstream in(worker_log);
    std::string text((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    retrying = text.find("\"event\":\"setup_retry\"") != std::string::npos;
    if (!retrying) AwaitChildEvent(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  EXPECT_TRUE(retrying) << Log(run);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_EQ(s["restarts"]["ps:0"], 1);
  EXPECT_EQ(s["restarts"].count("worker:0"), 0u) << s.dump();
  EXPECT_EQ(s["restarts"].count("worker:1"), 0u) << s.dump();
}

// While the coordinator does not answer (stopped), a PS that dies is
// restarted at once: the launcher's polls of the coordinator give up
// within a second instead of holding every restart behind them.
TEST_F(LaunchTest, PsIsRestartedWhileTheCoordinatorHangs) {
  LaunchRun run = StartLaunch("ps_restart_coordinator_stopped",
                              {"--ps=1", "--workers=2"});
  nlohmann::json cluster = WaitForProgress(run, 60);
  const pid_t coordinator = PidOf(cluster, "coordinator");
  const pid_t victim = PidOf(cluster, "ps:0");
  ASSERT_GT(coordinator, 0) << Log(run);
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(coordinator, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  // Bounded: the restart shows in cluster.json while the coordinator is
  // still stopped (the old loop sat 10 s and more in one coordinator call).
  pid_t restarted = -1;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    restarted = PidOf(Cluster(run), "ps:0");
    if (restarted > 0 && restarted != victim) break;
    AwaitChildEvent(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(kill(coordinator, SIGCONT), 0);
  EXPECT_GT(restarted, 0);
  EXPECT_NE(restarted, victim) << "ps:0 was not restarted while the "
                                  "coordinator was stopped";
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_EQ(s["restarts"]["ps:0"], 1);
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
  EXPECT_LE(s["lost_steps"].get<int64_t>(), 50 + 2 * 4);  // as above
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

// The lines of a JSON-lines log whose event is `event`.
int CountEvents(const std::string& path, const std::string& event) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    n += line.find("\"event\":\"" + event + "\"") != std::string::npos;
  }
  return n;
}

TEST_F(LaunchTest, CoordinatorPausedThenKilledLosesNoMember) {
  // The coordinator paused 0.5 s, then killed. The restarted one gives the
  // members it restores a lease (5 s) to beat again, and the workers'
  // clients reconnect at once: nobody is declared failed or re-registers.
  // (Workers used to send nothing for 7-10 s: their channels waited for
  // gRPC's 30 s re-resolution spacing, so both were failed at 5 s.)
  LaunchRun run = StartLaunch("pause_kill_coordinator",
                              {"--ps=2", "--workers=2", "--epochs=6"});
  nlohmann::json cluster = WaitForProgress(run, 100);
  pid_t victim = PidOf(cluster, "coordinator");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json s = Summary(run);
  ExpectCompleted(run, s);
  EXPECT_EQ(s["restarts"]["coordinator"], 1);
  const std::string dir = run.dir + "/run";
  EXPECT_EQ(CountEvents(dir + "/coordinator.log", "member_failed"), 0);
  for (const char* worker : {"/worker-0.log", "/worker-1.log"}) {
    EXPECT_EQ(CountEvents(dir + worker, "reregistering"), 0) << worker;
  }
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

TEST_F(LaunchTest, CheckpointsAStrategyCannotTakeAreRefusedOrResetAloud) {
  // A job file asking multi_worker_mirrored for checkpoints is refused,
  // naming the field; --strategy overriding a parameter_server job's
  // strategy resets its interval and says so (the coordinator used to drop
  // it).
  std::ifstream in(kJob);
  nlohmann::json job = nlohmann::json::parse(in);
  job["strategy"] = {{"type", "multi_worker_mirrored"}};
  const std::string path = ::testing::TempDir() + "/mwm_checkpoint_job.json";
  std::ofstream(path) << job.dump();
  LaunchRun refused = StartLaunch("mwm_checkpoint", {"--job=" + path});
  EXPECT_EQ(Wait(refused), 2);
  EXPECT_NE(Log(refused).find("job.checkpoint.every_steps: strategy "
                              "multi_worker_mirrored takes no coordinated "
                              "checkpoints"),
            std::string::npos)
      << Log(refused);
  LaunchRun run = StartLaunch(
      "override_checkpoint", {"--strategy=mirrored", "--workers=2",
                              "--epochs=1"});
  ASSERT_EQ(Wait(run), 0) << Log(run);
  EXPECT_NE(Log(run).find("--strategy=mirrored takes no checkpoints: the "
                          "job's checkpoint.every_steps (50) does not apply"),
            std::string::npos)
      << Log(run);
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

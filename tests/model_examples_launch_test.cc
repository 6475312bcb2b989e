// The layer-graph example jobs (examples/fashion_mnist/cnn.json and
// resnet_block.json, examples/criteo_like/dlrm.json, dcn.json and
// wide_deep.json: Keras model config JSON) trained by `strata launch` under
// every strategy in short runs, and by local_train: each run completes,
// applies every scheduled step, and learns (test accuracy or AUC well above
// chance).
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/launch_util.h"

namespace strata {
namespace {

using namespace launch_util;  // NOLINT: the helpers of these tests

// Criteo-format train and test files written by README's command
// (`strata datagen --out ... --test-out ... --split ...`) into a directory
// that does not exist yet; made once per process.
const std::string& CriteoDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(::testing::TempDir() + "/examples_criteo_" +
                              std::to_string(getpid()) + "/data");
    const std::string cmd = std::string(STRATA_BIN_DIR) +
                            "/strata datagen --out " + *d + "/train.tsv" +
                            " --test-out " + *d + "/test.tsv" +
                            " --examples 80000 --split 64000 --seed 1" +
                            " > /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return d;
  }();
  return *dir;
}

// The example job, shortened: a slice of the data, `epochs` epochs, no
// checkpoints. Criteo jobs read the generated files.
std::string ShortJob(const std::string& example, const std::string& name,
                     int64_t limit_train, int epochs = 1) {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/examples/" + example);
  nlohmann::json job = nlohmann::json::parse(in);
  job["epochs"] = epochs;
  job["checkpoint"]["every_steps"] = 0;
  if (job["data"]["format"] == "criteo") {
    job["data"]["train"]["path"] = CriteoDir() + "/train.tsv";
    job["data"]["test"]["path"] = CriteoDir() + "/test.tsv";
  } else {
    job["data"]["limit_train"] = limit_train;
    job["data"]["limit_test"] = 1000;
  }
  std::string path = ::testing::TempDir() + "/examples_" + name + ".json";
  std::ofstream out(path);
  out << job.dump();
  return path;
}

nlohmann::json RunLaunch(const std::string& name, const std::string& job,
                         std::vector<std::string> flags) {
  flags.push_back("--job=" + job);
  LaunchRun run = StartLaunch(name, flags);
  const int rc = Wait(run);
  EXPECT_EQ(rc, 0) << Log(run);
  nlohmann::json s = Summary(run);
  EXPECT_FALSE(s.is_discarded()) << Log(run);
  if (s.is_discarded()) return s;
  EXPECT_EQ(s["steps_applied"], s["steps_scheduled"]) << Log(run);
  return s;
}

struct StrategyRun {
  const char* name;
  std::vector<std::string> flags;
};

const std::vector<StrategyRun>& Strategies() {
  static const auto* runs = new std::vector<StrategyRun>{
      {"ps_async", {"--strategy=parameter_server", "--ps=2", "--workers=2"}},
      {"central_storage", {"--strategy=central_storage", "--ps=1",
                           "--workers=2"}},
      {"mwm_ring", {"--strategy=multi_worker_mirrored", "--collective=ring",
                    "--ps=0", "--workers=2"}},
      {"mwm_ps", {"--strategy=multi_worker_mirrored", "--collective=ps",
                  "--ps=1", "--workers=2"}},
      {"mirrored", {"--strategy=mirrored", "--ps=0", "--workers=2"}},
      {"one_device", {"--strategy=one_device", "--ps=0", "--workers=1"}},
  };
  return *runs;
}

TEST(ModelExamplesLaunchTest, CnnTrainsUnderEveryStrategy) {
  if (!HaveData()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  for (const StrategyRun& s : Strategies()) {
    SCOPED_TRACE(s.name);
    nlohmann::json out = RunLaunch(
        std::string("cnn_") + s.name,
        ShortJob("fashion_mnist/cnn.json", std::string("cnn_") + s.name, 6000),
        s.flags);
    if (out.is_discarded()) continue;
    EXPECT_GT(out["test_accuracy"].get<double>(), 0.6) << out.dump();
  }
}

TEST(ModelExamplesLaunchTest, ResidualBlockTrainsUnderMirroredAndPs) {
  if (!HaveData()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  for (const StrategyRun& s : Strategies()) {
    const std::string n = s.name;
    if (n != "ps_async" && n != "mirrored" && n != "mwm_ring") continue;
    SCOPED_TRACE(n);
    nlohmann::json out = RunLaunch(
        "resnet_" + n,
        ShortJob("fashion_mnist/resnet_block.json", "resnet_" + n, 6000, 2),
        s.flags);
    if (out.is_discarded()) continue;
    if (n != "ps_async") {
      EXPECT_GT(out["test_accuracy"].get<double>(), 0.35) << out.dump();
      continue;
    }
    // Async 2 + 2: the epoch's training accuracy (a mean over 94 steps) is
    // steady, 0.589-0.600 in 10 runs (local_train 0.644); the test accuracy
    // is one snapshot of weights still moving fast and spread 0.364-0.613
    // on an idle machine, 0.281 once under ctest -j2. So learning is
    // checked on the mean, and the snapshot only for being above chance.
    const nlohmann::json& last = out["epochs_detail"].back();
    EXPECT_GT(last["accuracy"].get<double>(), 0.5) << out.dump();
    EXPECT_GT(out["test_accuracy"].get<double>(), 0.15) << out.dump();
  }
}

TEST(ModelExamplesLaunchTest, RecommendationModelsTrainOnParameterServers) {
  for (const char* example : {"dlrm", "dcn", "wide_deep"}) {
    for (const char* flags : {"1+1", "2+2"}) {
      SCOPED_TRACE(std::string(example) + " " + flags);
      const std::string name = std::string(example) + "_" +
                               (flags[0] == '1' ? "1x1" : "2x2");
      const bool small = flags[0] == '1';
      nlohmann::json out = RunLaunch(
          name,
          ShortJob(std::string("criteo_like/") + example + ".json", name, 0,
                   2),
          {"--strategy=parameter_server", small ? "--ps=1" : "--ps=2",
           small ? "--workers=1" : "--workers=2"});
      if (out.is_discarded()) continue;
      ASSERT_TRUE(out.contains("test_auc")) << out.dump();
      // local_train reaches about 0.7 on these files (the seen-ids
      // ceiling is 0.79), async 2 + 2 DLRM 0.65-0.69; chance is 0.5.
      EXPECT_GT(out["test_auc"].get<double>(), 0.6) << out.dump();
    }
  }
}

// A model whose BatchNormalization only works with the right moving
// statistics: raw pixel values (0..255, no scaling) through Dense(64) ->
// BatchNormalization(momentum 0.5) -> relu -> Dense(10, softmax). Evaluated
// with the initial statistics (mean 0, variance 1) its activations are
// hundreds of times too large and the accuracy collapses; so a strategy
// whose statistics are not updated, averaged or held on the PS, or lost on a
// restart, fails the checks (local_train: test accuracy 0.81 and loss 0.54
// after 2 epochs; with statistics held at their start, 0.70 and 4.5).
std::string BatchNormJob(const std::string& name, int epochs) {
  nlohmann::json job = nlohmann::json::parse(std::ifstream(kJob));
  job["name"] = "batch-norm";
  job["model"] = {
      {"input_shape", {784}},
      {"layers",
       {{{"type", "dense"}, {"units", 64}},
        {{"type", "batch_normalization"}, {"momentum", 0.5}},
        {{"type", "activation"}, {"activation", "relu"}},
        {{"type", "dense"}, {"units", 10}, {"activation", "softmax"}}}}};
  job["data"]["scale"] = 1.0;
  job["data"]["limit_train"] = 6000;
  job["epochs"] = epochs;
  job["checkpoint"]["every_steps"] = 20;
  std::string path = ::testing::TempDir() + "/bn_" + name + ".json";
  std::ofstream(path) << job.dump();
  return path;
}

TEST(ModelExamplesLaunchTest, BatchNormStatisticsUnderEveryStrategy) {
  if (!HaveData()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  for (const StrategyRun& s : Strategies()) {
    SCOPED_TRACE(s.name);
    std::vector<std::string> flags = s.flags;
    std::string job = BatchNormJob(s.name, 2);
    const std::string n = s.name;
    if (n != "ps_async" && n != "central_storage") {
      // No checkpoints where the strategies keep none.
      nlohmann::json j = nlohmann::json::parse(std::ifstream(job));
      j["checkpoint"]["every_steps"] = 0;
      std::ofstream(job) << j.dump();
    }
    nlohmann::json out = RunLaunch(std::string("bn_") + s.name, job, flags);
    if (out.is_discarded()) continue;
    EXPECT_GT(out["test_accuracy"].get<double>(), 0.75) << out.dump();
    EXPECT_LT(out["test_loss"].get<double>(), 1.0) << out.dump();
  }
}

TEST(ModelExamplesLaunchTest, BatchNormStatisticsSurviveAKilledPs) {
  if (!HaveData()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  LaunchRun run = StartLaunch(
      "bn_kill_ps", {"--job=" + BatchNormJob("kill", 4),
                     "--strategy=parameter_server", "--ps=2", "--workers=2"});
  nlohmann::json cluster = WaitForProgress(run, 150);
  const pid_t victim = PidOf(cluster, "ps:1");
  ASSERT_GT(victim, 0) << Log(run);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_EQ(Wait(run), 0) << Log(run);
  nlohmann::json out = Summary(run);
  ASSERT_FALSE(out.is_discarded()) << Log(run);
  EXPECT_EQ(out["steps_applied"], out["steps_scheduled"]) << Log(run);
  EXPECT_EQ(out["restarts"]["ps:1"], 1) << Log(run);
  // The restored checkpoint holds the moving statistics with the weights.
  EXPECT_GT(out["test_accuracy"].get<double>(), 0.75) << out.dump();
  EXPECT_LT(out["test_loss"].get<double>(), 1.0) << out.dump();
  // They are PS variables: in the PS tasks' checkpoints.
  std::string manifests;
  for (const auto& entry :
       fs::recursive_directory_iterator(run.dir + "/run")) {
    if (entry.path().filename() != "manifest.json") continue;
    std::ifstream in(entry.path());
    manifests += std::string(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(manifests.find("\"batch_normalization/moving_mean"),
            std::string::npos);
  EXPECT_NE(manifests.find("\"batch_normalization/moving_variance"),
            std::string::npos);
}

}  // namespace
}  // namespace strata

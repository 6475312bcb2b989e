// Mirrored on GPUs (NCCL all-reduce), from the outside: the NCCL group, the
// SDK's MirroredStrategy::CreateOnDevices and a strata-worker running a
// mirrored job with device "cuda". Without a usable GPU (or without CUDA in
// the build) each must fail FAILED_PRECONDITION with a clear message (these
// tests run everywhere); with one, the same entry points train (those tests
// skip where no device is usable).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "collective/nccl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdk/strata.h"
#include "tests/launch_util.h"

namespace strata {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

bool HaveGpu() { return collective::NcclVisibleDevices().ok(); }

// What a no-device failure must say: this build lacks CUDA, or the CUDA
// runtime found no usable device.
const auto kNoDeviceMessage =
    AnyOf(HasSubstr("no CUDA support"), HasSubstr("no usable CUDA device"),
          HasSubstr("no CUDA device is visible"), HasSubstr("no NCCL support"));

#define STRATA_SKIP_WITH_GPU()                                              \
  do {                                                                      \
    if (HaveGpu()) GTEST_SKIP() << "a CUDA device is present: this test "   \
                                   "checks the failure without one";        \
  } while (0)

#define STRATA_SKIP_WITHOUT_GPU()                                           \
  do {                                                                      \
    absl::StatusOr<int> gpus = collective::NcclVisibleDevices();            \
    if (!gpus.ok()) {                                                       \
      GTEST_SKIP() << "no CUDA device, skipping: " << gpus.status();        \
    }                                                                       \
  } while (0)

// --- NCCL group -------------------------------------------------------------

TEST(GpuMirroredTest, DeviceListsAreValidatedBeforeCuda) {
  EXPECT_EQ(collective::NcclGroup::Create({}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(collective::NcclGroup::Create({-1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const auto twice = collective::NcclGroup::Create({1, 1});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(twice.status().message()),
              HasSubstr("cuda:1 is listed twice"));
  EXPECT_EQ(collective::LocalGpus(-1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(collective::LocalGpus(0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GpuMirroredTest, NcclGroupWithoutDeviceFailsPreconditionClearly) {
  STRATA_SKIP_WITH_GPU();
  const auto group = collective::NcclGroup::Create({0});
  ASSERT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition)
      << group.status();
  EXPECT_THAT(std::string(group.status().message()), kNoDeviceMessage);
  const auto gpus = collective::LocalGpus(0, -1);
  EXPECT_EQ(gpus.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(gpus.status().message()), kNoDeviceMessage);
}

TEST(GpuMirroredTest, MoreGpusThanVisibleNamesBothNumbers) {
  STRATA_SKIP_WITHOUT_GPU();
  const int visible = *collective::NcclVisibleDevices();
  const auto gpus = collective::LocalGpus(0, visible + 1);
  EXPECT_EQ(gpus.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(gpus.status().message()),
              HasSubstr(absl::StrCat(visible + 1, " GPUs were asked for")));
  EXPECT_THAT(std::string(gpus.status().message()),
              HasSubstr(absl::StrCat("only ", visible)));
  const auto all = collective::LocalGpus(0, -1);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(static_cast<int>(all->size()), visible);
}

// --- SDK --------------------------------------------------------------------

TEST(GpuMirroredTest, SdkRefusesBadDeviceLists) {
  using sdk::MirroredStrategy;
  EXPECT_EQ(MirroredStrategy::CreateOnDevices({}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const auto cpu = MirroredStrategy::CreateOnDevices({"cpu"});
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cpu.status().message()),
              HasSubstr("MirroredStrategy::Create(n)"));
  EXPECT_EQ(MirroredStrategy::CreateOnDevices({"tpu:0"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const auto twice = MirroredStrategy::CreateOnDevices({"cuda", "cuda:0"});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("twice"));
}

TEST(GpuMirroredTest, SdkOnGpusWithoutDeviceFailsPreconditionClearly) {
  STRATA_SKIP_WITH_GPU();
  for (const auto& s :
       {sdk::MirroredStrategy::CreateOnDevices({"cuda:0", "cuda:1"}).status(),
        sdk::MirroredStrategy::CreateOnAllGpus().status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("MirroredStrategy on GPUs"));
    EXPECT_THAT(std::string(s.message()), kNoDeviceMessage);
  }
}

sdk::Dataset ToyData(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int i = 0; i < n; ++i) {
    const float a = u(rng);
    const float b = u(rng);
    x.push_back(a);
    x.push_back(b);
    y.push_back(a > b ? 1 : 0);
  }
  return sdk::datasets::FromArrays(std::move(x), std::move(y), 2);
}

std::vector<std::vector<float>> TrainToy(const sdk::Strategy& strategy) {
  auto scope = strategy.Scope();
  sdk::Sequential model({sdk::Dense(16, "relu", 2), sdk::Dense(2, "softmax")},
                        {"toy", /*seed=*/5});
  EXPECT_TRUE(model
                  .Compile(sdk::Adam(0.01), "sparse_categorical_crossentropy",
                           {"accuracy"})
                  .ok());
  sdk::FitOptions fit{/*epochs=*/3, /*batch_size=*/10};
  fit.verbose = 0;
  fit.shuffle_seed = 3;
  absl::StatusOr<sdk::History> h = model.Fit(ToyData(95, 4), fit);
  EXPECT_TRUE(h.ok()) << h.status();
  absl::StatusOr<std::vector<std::vector<float>>> w = model.GetWeights();
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? *w : std::vector<std::vector<float>>();
}

TEST(GpuMirroredTest, SdkOnEveryGpuTrainsAsCpuMirrored) {
  STRATA_SKIP_WITHOUT_GPU();
  auto gpu = sdk::MirroredStrategy::CreateOnAllGpus();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int n = (*gpu)->num_replicas_in_sync();
  EXPECT_EQ(static_cast<int>((*gpu)->gpus().size()), n);
  auto cpu = sdk::MirroredStrategy::Create(n);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const auto a = TrainToy(**gpu);
  const auto b = TrainToy(**cpu);
  ASSERT_EQ(a.size(), b.size());
  for (size_t v = 0; v < a.size(); ++v) {
    ASSERT_EQ(a[v].size(), b[v].size());
    for (size_t i = 0; i < a[v].size(); ++i) {
      // One GPU: the all-reduce is the identity on both paths, so the
      // weights are bitwise equal; more: the sums' order differs.
      const double tolerance = n == 1 ? 0.0 : 1e-4 * (1 + std::fabs(b[v][i]));
      ASSERT_NEAR(a[v][i], b[v][i], tolerance) << "variable " << v << "[" << i
                                               << "]";
    }
  }
}

// --- The worker daemon ---------------------------------------------------------

// A mirrored job on "cuda" over a small CSV file; returns its path.
std::string WriteCudaMirroredJob(const std::string& dir) {
  const std::string csv = dir + "/toy.csv";
  {
    std::ofstream f(csv);
    f << "label,a,b\n";
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int i = 0; i < 200; ++i) {
      const float a = u(rng);
      const float b = u(rng);
      f << (a > b ? 1 : 0) << "," << a << "," << b << "\n";
    }
  }
  nlohmann::json job = {
      {"name", "gpu-mirrored"},
      {"model",
       {{"input_shape", {2}},
        {"layers",
         {{{"type", "dense"}, {"units", 8}, {"activation", "relu"}},
          {{"type", "dense"}, {"units", 2}, {"activation", "softmax"}}}}}},
      {"loss", "sparse_categorical_crossentropy"},
      {"metrics", {"accuracy"}},
      {"optimizer", {{"type", "sgd"}, {"learning_rate", 0.1}}},
      {"data", {{"format", "csv"}, {"train", {{"path", csv}}}}},
      {"strategy", {{"type", "mirrored"}}},
      {"device", "cuda"},
      {"epochs", 1},
      {"batch_size", 20},
      {"evaluation", {{"every_epochs", 0}}}};
  const std::string path = dir + "/job.json";
  std::ofstream(path) << job.dump(2);
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(GpuMirroredTest, WorkerWithMirroredCudaJobWithoutDeviceExitsNonZero) {
  STRATA_SKIP_WITH_GPU();
  const std::string dir = ::testing::TempDir() + "/gpu_mirrored_worker_" +
                          std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string job = WriteCudaMirroredJob(dir);
  launch_util::LaunchRun run = launch_util::StartLaunch(
      "gpu_mirrored", {"--job=" + job, "--workers=1", "--ps=0"});
  const int code = launch_util::Wait(run);
  EXPECT_NE(code, 0) << launch_util::Log(run);
  EXPECT_NE(code, -1) << "the launcher did not end in time";
  const std::string worker_log = ReadFile(run.dir + "/run/worker-0.log");
  // main() prints "strata-worker: MESSAGE" just before it returns 1; the
  // message names the device (the worker checks job.device before the
  // mirrored loop does).
  const size_t line = worker_log.find("strata-worker: ");
  ASSERT_NE(line, std::string::npos) << worker_log;
  const std::string message = worker_log.substr(line);
  EXPECT_THAT(message, HasSubstr("cuda:0")) << worker_log;
  EXPECT_THAT(message, kNoDeviceMessage) << worker_log;
  EXPECT_THAT(launch_util::Log(run), HasSubstr("every worker exited"))
      << launch_util::Log(run);
}

TEST(GpuMirroredTest, WorkerTrainsAMirroredCudaJob) {
  STRATA_SKIP_WITHOUT_GPU();
  const std::string dir = ::testing::TempDir() + "/gpu_mirrored_train_" +
                          std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string job = WriteCudaMirroredJob(dir);
  launch_util::LaunchRun run = launch_util::StartLaunch(
      "gpu_mirrored_train", {"--job=" + job, "--workers=1", "--ps=0"});
  const int code = launch_util::Wait(run);
  const std::string worker_log = ReadFile(run.dir + "/run/worker-0.log");
  ASSERT_EQ(code, 0) << launch_util::Log(run) << "\n--- worker:\n"
                     << worker_log;
  // One replica per visible GPU, all-reduced through NCCL.
  EXPECT_THAT(worker_log, HasSubstr("\"nccl_gpus\":")) << worker_log;
  const nlohmann::json summary = launch_util::Summary(run);
  EXPECT_FALSE(summary.is_discarded());
}

}  // namespace
}  // namespace strata

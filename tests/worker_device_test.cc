// Processes asked for a CUDA device they cannot use (none here, an index
// past the last GPU, or a build without CUDA) exit non-zero at start with a
// message that says so, instead of hanging or crashing.
// The including target defines STRATA_BIN_DIR and STRATA_SOURCE_DIR.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/process_util.h"
#include "worker/model.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing_util::RunChild;

// tests/data/small_job.json with `device` set, written to a temp file.
std::string JobFile(const std::string& device, const std::string& name) {
  std::ifstream in(STRATA_SOURCE_DIR "/tests/data/small_job.json");
  nlohmann::json job = nlohmann::json::parse(in);
  if (!device.empty()) job["device"] = device;
  const std::string path =
      (fs::path(::testing::TempDir()) /
       ("worker_device_" + name + "_" + std::to_string(getpid()) + ".json"))
          .string();
  std::ofstream out(path);
  out << job.dump(2);
  return path;
}

bool CudaUsable() { return CheckDevice("cuda:0").ok(); }

// The reason any of the three ways of being unusable gives.
bool SaysUnusable(const std::string& output) {
  return absl::StrContains(output, "no usable CUDA device") ||
         absl::StrContains(output, "no CUDA device 9999") ||
         absl::StrContains(output, "no CUDA support");
}

constexpr std::chrono::seconds kLimit(60);

TEST(LocalTrainDeviceTest, JobOnMissingGpuIndexExitsWithMessage) {
  const testing_util::ChildResult r = RunChild(
      {STRATA_BIN_DIR "/local_train", "--job=" + JobFile("cuda:9999", "far")},
      kLimit);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, -1);
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "job.device cuda:9999: "))
      << r.output;
  EXPECT_TRUE(SaysUnusable(r.output)) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "FAILED_PRECONDITION")) << r.output;
}

TEST(LocalTrainDeviceTest, CudaJobWithoutDeviceExitsWithMessage) {
  if (CudaUsable()) GTEST_SKIP() << "a CUDA device is present";
  const testing_util::ChildResult r = RunChild(
      {STRATA_BIN_DIR "/local_train", "--job=" + JobFile("cuda", "cuda")},
      kLimit);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "job.device cuda:0: ")) << r.output;
  EXPECT_TRUE(SaysUnusable(r.output)) << r.output;
}

TEST(LocalTrainDeviceTest, DeviceFlagOverridesTheJob) {
  const testing_util::ChildResult r =
      RunChild({STRATA_BIN_DIR "/local_train",
                  "--job=" + JobFile("", "flag"), "--device=cuda:9999"},
                 kLimit);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "--device cuda:9999: "))
      << r.output;
  EXPECT_TRUE(SaysUnusable(r.output)) << r.output;
}

TEST(LocalTrainDeviceTest, MalformedDeviceFlagIsRejected) {
  const testing_util::ChildResult r =
      RunChild({STRATA_BIN_DIR "/local_train",
                  "--job=" + JobFile("", "bad"), "--device=gpu"},
                 kLimit);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "'gpu' is not one of cpu, cuda"))
      << r.output;
}

// strata-worker checks its --device before it contacts the coordinator (the
// address here has nothing listening), so it fails at once.
TEST(WorkerDeviceTest, MissingGpuIndexExitsBeforeConnecting) {
  const testing_util::ChildResult r = RunChild(
      {STRATA_BIN_DIR "/strata-worker", "--coordinator=127.0.0.1:1",
       "--device=cuda:9999"},
      kLimit);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "--device cuda:9999: "))
      << r.output;
  EXPECT_TRUE(SaysUnusable(r.output)) << r.output;
}

TEST(WorkerDeviceTest, CudaWithoutDeviceExitsBeforeConnecting) {
  if (CudaUsable()) GTEST_SKIP() << "a CUDA device is present";
  const testing_util::ChildResult r = RunChild(
      {STRATA_BIN_DIR "/strata-worker", "--coordinator=127.0.0.1:1",
       "--device=cuda"},
      kLimit);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "--device cuda:0: ")) << r.output;
  EXPECT_TRUE(SaysUnusable(r.output)) << r.output;
}

}  // namespace
}  // namespace strata

// Processes asked for a CUDA device they cannot use (none here, an index
// past the last GPU, or a build without CUDA) exit non-zero at start with a
// message that says so, instead of hanging or crashing.
// The including target defines STRATA_BIN_DIR and STRATA_SOURCE_DIR.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/model.h"

extern char** environ;

namespace strata {
namespace {

namespace fs = std::filesystem;

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed; -1 when it timed out
  std::string output;  // stdout and stderr together
};

// Runs `args` with stdout and stderr into a pipe until it exits, or kills it
// after `limit`.
ProcessResult RunProcess(std::vector<std::string> args,
                         std::chrono::seconds limit) {
  ProcessResult result;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2 failed";
    return result;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr,
                                  argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    ADD_FAILURE() << "cannot start " << args[0];
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool eof = false;
  while (!eof) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      result.output.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      eof = true;
    }
  }
  close(fds[0]);
  if (!eof) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    ADD_FAILURE() << args[0] << " did not exit within " << limit.count()
                  << " s; output: " << result.output;
    return result;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

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
  const ProcessResult r = RunProcess(
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
  const ProcessResult r = RunProcess(
      {STRATA_BIN_DIR "/local_train", "--job=" + JobFile("cuda", "cuda")},
      kLimit);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "job.device cuda:0: ")) << r.output;
  EXPECT_TRUE(SaysUnusable(r.output)) << r.output;
}

TEST(LocalTrainDeviceTest, DeviceFlagOverridesTheJob) {
  const ProcessResult r =
      RunProcess({STRATA_BIN_DIR "/local_train",
                  "--job=" + JobFile("", "flag"), "--device=cuda:9999"},
                 kLimit);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "--device cuda:9999: "))
      << r.output;
  EXPECT_TRUE(SaysUnusable(r.output)) << r.output;
}

TEST(LocalTrainDeviceTest, MalformedDeviceFlagIsRejected) {
  const ProcessResult r =
      RunProcess({STRATA_BIN_DIR "/local_train",
                  "--job=" + JobFile("", "bad"), "--device=gpu"},
                 kLimit);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "'gpu' is not one of cpu, cuda"))
      << r.output;
}

// strata-worker checks its --device before it contacts the coordinator (the
// address here has nothing listening), so it fails at once.
TEST(WorkerDeviceTest, MissingGpuIndexExitsBeforeConnecting) {
  const ProcessResult r = RunProcess(
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
  const ProcessResult r = RunProcess(
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

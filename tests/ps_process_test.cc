// Process-level tests of the strata-ps daemon: flags, TF_CONFIG, the
// "listening on" line, and a SIGTERM drain that exits 0.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "client/ps_client.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

extern char** environ;

namespace strata {
namespace {

struct Daemon {
  pid_t pid = -1;
  std::string address;
  std::string first_line;
};

// Starts strata-ps with `args` and `env` (added to this environment) and
// reads stdout up to the "listening on" line (bounded by the pipe closing).
Daemon Start(const std::vector<std::string>& args,
             const std::vector<std::string>& env = {}) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> full = {STRATA_PS_BINARY};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("TF_CONFIG=", 0) != 0) envs.push_back(*e);
  }
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  Daemon d;
  EXPECT_EQ(posix_spawn(&d.pid, STRATA_PS_BINARY, &actions, nullptr,
                        argv.data(), envp.data()),
            0);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  FILE* out = fdopen(fds[0], "r");
  char line[512];
  // fgets returns at the first line, or nullptr when the child exits.
  if (fgets(line, sizeof(line), out) != nullptr) {
    d.first_line = line;
    const std::string prefix = "listening on ";
    if (d.first_line.rfind(prefix, 0) == 0) {
      d.address = d.first_line.substr(prefix.size());
      while (!d.address.empty() && d.address.back() == '\n') {
        d.address.pop_back();
      }
    }
  }
  fclose(out);
  return d;
}

// Waits (bounded) for the child to exit; returns its wait status or -1.
int WaitExit(pid_t pid, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    std::this_thread::yield();
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

TEST(PsProcessTest, PrintsAddressServesAndDrainsOnSigterm) {
  std::string dir = ::testing::TempDir() + "/ps_process_ckpt";
  Daemon d = Start({"--host", "127.0.0.1", "--port", "0", "--checkpoint-dir",
                    dir, "--task-index", "3"});
  ASSERT_GT(d.pid, 0);
  ASSERT_FALSE(d.address.empty()) << d.first_line;
  EXPECT_EQ(d.address.rfind("127.0.0.1:", 0), 0u);
  auto client = PsClient::Connect(d.address);
  v1::VariableSpec spec;
  spec.set_name("w");
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(3);
  STRATA_ASSERT_OK(client->CreateVariable(spec));
  auto saved = client->Save("first");
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(std::filesystem::path(saved->path()),
            (std::filesystem::path(dir) / "first").lexically_normal());
  ASSERT_EQ(kill(d.pid, SIGTERM), 0);
  int status = WaitExit(d.pid, std::chrono::seconds(30));
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(PsProcessTest, TakesPortFromTfConfigAndFlagsOverride) {
  // Find a free port by letting a first daemon pick one, then stop it.
  Daemon probe = Start({"--port=0"});
  ASSERT_FALSE(probe.address.empty());
  std::string port = probe.address.substr(probe.address.rfind(':') + 1);
  kill(probe.pid, SIGTERM);
  ASSERT_NE(WaitExit(probe.pid, std::chrono::seconds(30)), -1);

  const std::string tf_config =
      "TF_CONFIG={\"cluster\": {\"ps\": [\"localhost:1\", \"localhost:" + port +
      "\"], \"worker\": [\"localhost:2\"]}, \"task\": {\"type\": \"ps\", "
      "\"index\": 1}}";
  // --host keeps the test on loopback; the port comes from TF_CONFIG.
  Daemon d = Start({"--host=127.0.0.1"}, {tf_config});
  ASSERT_FALSE(d.address.empty()) << d.first_line;
  EXPECT_EQ(d.address, "127.0.0.1:" + port);
  kill(d.pid, SIGTERM);
  ASSERT_NE(WaitExit(d.pid, std::chrono::seconds(30)), -1);

  // A flag overrides TF_CONFIG's port.
  Daemon o = Start({"--host=127.0.0.1", "--port=0"}, {tf_config});
  ASSERT_FALSE(o.address.empty()) << o.first_line;
  EXPECT_NE(o.address, "127.0.0.1:" + port);
  kill(o.pid, SIGTERM);
  ASSERT_NE(WaitExit(o.pid, std::chrono::seconds(30)), -1);
}

TEST(PsProcessTest, BadTfConfigFailsWithAMessage) {
  Daemon d = Start({"--port=0"}, {"TF_CONFIG={\"task\": {\"type\": \"ps\", "
                                  "\"index\": \"x\"}}"});
  EXPECT_TRUE(d.address.empty());
  int status = WaitExit(d.pid, std::chrono::seconds(30));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

}  // namespace
}  // namespace strata

// Runs a program to its end in a test: stdout and stderr captured together,
// every wait bounded.
#ifndef STRATA_TESTS_PROCESS_UTIL_H_
#define STRATA_TESTS_PROCESS_UTIL_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern char** environ;

namespace strata {
namespace testing_util {

struct ChildResult {
  int exit_code = -1;  // 128 + signal when killed; -1 when it timed out
  std::string output;  // stdout and stderr together
};

// Runs `args` (args[0] a path) with this process's environment minus
// TF_CONFIG and no blocked signals, until it exits; kills it after `limit`
// (exit_code -1, and a test failure naming the program).
inline ChildResult RunChild(std::vector<std::string> args,
                            std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto remaining_ms = [&] {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return left.count() > 0 ? static_cast<int>(left.count()) : 0;
  };
  ChildResult result;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2 failed";
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("TF_CONFIG=", 0) != 0) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, argv[0], &actions, &attr,
                                  argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    ADD_FAILURE() << "cannot start " << args[0];
    return result;
  }
  // Read until the child closes its output (it exits) or the deadline.
  bool eof = false;
  while (!eof && remaining_ms() > 0) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, remaining_ms()) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      result.output.append(buf, static_cast<size_t>(n));
    } else {
      eof = true;
    }
  }
  close(fds[0]);
  while (true) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                           : 128 + WTERMSIG(status);
      return result;
    }
    if (remaining_ms() == 0) break;
    // Wakes on SIGCHLD where the caller blocks it, else after 100 ms.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    timespec ts{0, 100 * 1000 * 1000};
    sigtimedwait(&set, nullptr, &ts);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  ADD_FAILURE() << args[0] << " did not exit within " << limit.count()
                << " s; output: " << result.output;
  return result;
}

}  // namespace testing_util
}  // namespace strata

#endif  // STRATA_TESTS_PROCESS_UTIL_H_

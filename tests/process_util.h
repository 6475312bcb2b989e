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

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern char** environ;

namespace strata {
namespace testing_util {

struct ChildResult {
  int exit_code = -1;  // 128 + signal when killed; -1 when it timed out
  std::string output;  // stdout (and stderr unless separate_stderr)
  std::string error;   // stderr, with ChildOptions::separate_stderr
  size_t output_bytes = 0;  // all the output read, kept or not
};

struct ChildOptions {
  // stderr into ChildResult::error instead of with stdout.
  bool separate_stderr = false;
  // Keep only the first max_output bytes of each stream (all are counted).
  size_t max_output = static_cast<size_t>(-1);
  // Start the child in its own process group and kill the group when it
  // ends (anything it left behind) or times out.
  bool own_process_group = false;
  // stdin from /dev/null.
  bool null_stdin = false;
};

// Runs `args` (args[0] a path) with this process's environment minus
// TF_CONFIG and no blocked signals, until it exits; kills it after `limit`
// (exit_code -1, and a test failure naming the program).
inline ChildResult RunChild(std::vector<std::string> args,
                            std::chrono::seconds limit,
                            const ChildOptions& options = {}) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto remaining_ms = [&] {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return left.count() > 0 ? static_cast<int>(left.count()) : 0;
  };
  ChildResult result;
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0 ||
      (options.separate_stderr && pipe2(err, O_CLOEXEC) != 0)) {
    ADD_FAILURE() << "pipe2 failed";
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (options.null_stdin) {
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(
      &actions, options.separate_stderr ? err[1] : out[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  short flags = POSIX_SPAWN_SETSIGMASK;
  if (options.own_process_group) {
    posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  posix_spawnattr_setflags(&attr, flags);
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
  close(out[1]);
  if (err[1] >= 0) close(err[1]);
  if (spawned != 0) {
    close(out[0]);
    if (err[0] >= 0) close(err[0]);
    ADD_FAILURE() << "cannot start " << args[0];
    return result;
  }
  // Read until the child closes its output (it exits) or the deadline.
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.output, &result.error};
  int open_fds = err[0] >= 0 ? 2 : 1;
  while (open_fds > 0 && remaining_ms() > 0) {
    if (poll(fds, 2, remaining_ms()) <= 0) continue;
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      char buf[1 << 16];
      const ssize_t n = read(fds[k].fd, buf, sizeof(buf));
      if (n <= 0) {
        close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
        continue;
      }
      result.output_bytes += static_cast<size_t>(n);
      std::string& sink = *sinks[k];
      if (sink.size() < options.max_output) {
        sink.append(buf, std::min(static_cast<size_t>(n),
                                  options.max_output - sink.size()));
      }
    }
  }
  for (const pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  const pid_t victim = options.own_process_group ? -pid : pid;
  while (true) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                           : 128 + WTERMSIG(status);
      if (options.own_process_group) kill(victim, SIGKILL);
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
  kill(victim, SIGKILL);
  waitpid(pid, nullptr, 0);
  ADD_FAILURE() << args[0] << " did not exit within " << limit.count()
                << " s; output began: " << result.output.substr(0, 2048);
  return result;
}

}  // namespace testing_util
}  // namespace strata

#endif  // STRATA_TESTS_PROCESS_UTIL_H_

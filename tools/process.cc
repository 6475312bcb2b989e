#include "tools/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace strata {

namespace {

// The last non-empty line of the file at `path` (at most its last 4 KiB),
// or "" when it cannot be read: what a child that exited early said.
std::string LastLogLine(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > 4096 ? size - 4096 : 0;
  in.seekg(from);
  std::string tail((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) {
    tail.pop_back();
  }
  const size_t nl = tail.rfind('\n');
  return nl == std::string::npos ? tail : tail.substr(nl + 1);
}

}  // namespace

absl::Status Spawn(ChildProcess* child, bool wait_for_address,
                   absl::Duration timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, child->log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Children start with default signal dispositions and an empty mask.
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> argv;
  for (auto& a : child->argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : child->env) envp.push_back(e.data());
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    const size_t name = eq ? static_cast<size_t>(eq - *e) : std::strlen(*e);
    bool replaced = false;
    for (const auto& mine : child->env) {
      if (mine.size() > name && mine[name] == '=' &&
          std::strncmp(mine.data(), *e, name) == 0) {
        replaced = true;
      }
    }
    if (!replaced) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  int rc = posix_spawn(&child->pid, argv[0], &actions, &attr, argv.data(),
                       envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::NotFoundError(absl::StrCat("cannot start ", child->argv[0],
                                            ": ", std::strerror(rc)));
  }
  child->exited = false;
  if (!wait_for_address) {
    close(fds[0]);
    return absl::OkStatus();
  }
  // Read stdout lines until the address line, bounded by `timeout`.
  const absl::Time deadline = absl::Now() + timeout;
  std::string buffer;
  while (true) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    pollfd p{fds[0], POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n <= 0) continue;
    char chunk[256];
    ssize_t got = read(fds[0], chunk, sizeof(chunk));
    if (got <= 0) break;  // the child closed stdout (exited)
    buffer.append(chunk, got);
    size_t pos;
    while ((pos = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, pos);
      buffer.erase(0, pos + 1);
      const std::string prefix = "listening on ";
      if (line.rfind(prefix, 0) == 0) {
        child->address = line.substr(prefix.size());
        close(fds[0]);
        return absl::OkStatus();
      }
    }
  }
  close(fds[0]);
  Stop(child, absl::Seconds(1));
  const std::string last = LastLogLine(child->log_path);
  return absl::UnavailableError(absl::StrCat(
      child->name, " did not report its address (",
      child->exited ? DescribeExit(child->wait_status) : "timed out",
      "); see ", child->log_path,
      last.empty() ? "" : absl::StrCat("; its last line: ", last)));
}

bool Reap(ChildProcess* child) {
  if (child->pid <= 0 || child->exited) return child->exited;
  int status = 0;
  pid_t r = waitpid(child->pid, &status, WNOHANG);
  if (r == child->pid) {
    child->exited = true;
    child->wait_status = status;
  }
  return child->exited;
}

void Stop(ChildProcess* child, absl::Duration grace) {
  if (child->pid <= 0 || Reap(child)) return;
  kill(child->pid, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  while (absl::Now() < deadline) {
    if (Reap(child)) return;
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(child->pid, SIGKILL);
  int status = 0;
  waitpid(child->pid, &status, 0);
  child->exited = true;
  child->wait_status = status;
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) {
    return absl::StrCat("exit code ", WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(wait_status));
  }
  return "stopped";
}

}  // namespace strata

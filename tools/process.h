// Child processes for the local launcher: spawn with stdout captured until
// a "listening on HOST:PORT" line, stderr to a log file; stop politely, then
// forcefully.
#ifndef STRATA_TOOLS_PROCESS_H_
#define STRATA_TOOLS_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace strata {

struct ChildProcess {
  std::string name;   // "coordinator", "ps:0", "worker:1"
  std::vector<std::string> argv;
  // "NAME=VALUE" added to (or replacing in) this process's environment
  // (secrets kept off the command line, e.g. STRATA_AUTH_TOKEN).
  std::vector<std::string> env;
  std::string log_path;
  pid_t pid = -1;
  std::string address;  // from the "listening on" line ("" for workers)
  int restarts = 0;
  bool exited = false;
  int wait_status = 0;
};

// Starts `child` (argv, log_path set). When `wait_for_address`, reads its
// stdout until "listening on HOST:PORT" (bounded by `timeout`) and fills
// child->address. Errors: the child exited or did not print in time (the
// log path is in the message).
absl::Status Spawn(ChildProcess* child, bool wait_for_address,
                   absl::Duration timeout);

// Non-blocking: true when the child has exited (fills exited/wait_status).
bool Reap(ChildProcess* child);

// SIGTERM, wait up to `grace`, then SIGKILL; reaps.
void Stop(ChildProcess* child, absl::Duration grace);

// "exit code 1" / "killed by signal 9".
std::string DescribeExit(int wait_status);

}  // namespace strata

#endif  // STRATA_TOOLS_PROCESS_H_

// What `strata launch` prepares before it starts a process: the run
// directory, loopback ports for etcd, the etcd binary, and for --tls the
// certificates and credentials (tools/launcher.cc runs the cluster).
#ifndef STRATA_TOOLS_LAUNCH_SETUP_H_
#define STRATA_TOOLS_LAUNCH_SETUP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/tls.h"

namespace strata {

// `n` distinct TCP ports on 127.0.0.1 that were free a moment ago (for
// etcd, which must be told its ports): all bound at once, then released.
absl::StatusOr<std::vector<int>> FreeLoopbackPorts(int n);

// The etcd binary: on the PATH, else Debian's.
std::string EtcdBinary();

// `requested` (created), or a new strata-run-XXXXXX under the temporary
// directory.
std::string MakeRunDir(const std::string& requested);

// What --tls sets up: the certificates' flags, the tokens, and how the
// launcher itself calls the servers.
struct LocalSecurity {
  std::vector<std::string> server_flags;  // --tls-* of every daemon
  std::string auth_file;
  std::string coordinator_token;
  std::string worker_token;
  ClientSecurity launcher;  // admin token, client certificate
};

// Makes RUN_DIR/tls: certificates (BIN/strata-make-certs, given
// `start_timeout` to start) and auth.json with a coordinator, a worker and
// an admin token for the job.
absl::StatusOr<LocalSecurity> MakeLocalSecurity(const std::string& run_dir,
                                                const std::string& bin,
                                                const std::string& job_name,
                                                absl::Duration start_timeout);

}  // namespace strata

#endif  // STRATA_TOOLS_LAUNCH_SETUP_H_

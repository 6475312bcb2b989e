// A daemon's identity in the cluster (role, task index, listening address,
// where to register) resolved from its command-line flags and TF_CONFIG.
// Pure: the caller reads the flags and the environment and passes them in.
#ifndef STRATA_COMMON_TASK_IDENTITY_H_
#define STRATA_COMMON_TASK_IDENTITY_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/tf_config.h"

namespace strata {

// Which daemon resolves its identity; it selects the TF_CONFIG task types
// that describe it and the defaults.
enum class DaemonKind {
  kPs,           // task type "ps"
  kWorker,       // task type "worker" or "chief"
  kCoordinator,  // task type "chief" or "master"
};

// The flags that override TF_CONFIG (unset values as the flags' defaults).
struct TaskIdentityFlags {
  std::string host;                  // --host; "" = not given
  int port = -1;                     // --port; < 0 = not given
  int task_index = -1;               // --task-index; < 0 = not given
  std::string task_index_from_name;  // --task-index-from-name; "" = not given
  std::string coordinator;           // --coordinator; "" = not given
};

struct TaskIdentity {
  // "ps", "worker", "chief" (a worker that TF_CONFIG names the chief), or
  // "coordinator".
  std::string role;
  int task_index = 0;
  // Where to listen: 127.0.0.1 by default, 0.0.0.0 when TF_CONFIG lists
  // this task (the name others reach it by is then TF_CONFIG's).
  std::string host = "127.0.0.1";
  // Port to listen on: 0 (pick one) by default for the PS and the
  // coordinator, -1 (no health server) for a worker; TF_CONFIG's port of
  // this task when it lists it.
  int port = 0;
  // This task's address in TF_CONFIG, and its host part; "" when not listed.
  std::string tf_config_address;
  std::string tf_config_host;
  // The coordinator to register with (PS, worker): --coordinator, else the
  // chief task of TF_CONFIG, else "".
  std::string coordinator;
  // The coordinator: TF_CONFIG's cluster when it lists any job.
  std::optional<ClusterSpec> static_cluster;
};

// Resolves `kind`'s identity: the defaults, then TF_CONFIG (`tf_config`,
// the variable's text; absent or empty: not set), then the flags, which
// win (--task-index over --task-index-from-name). Errors, all
// INVALID_ARGUMENT, with the message a daemon prints after its name:
//   "bad TF_CONFIG: ..."            TF_CONFIG does not parse
//   "TF_CONFIG address: ..."        this task's TF_CONFIG address is bad
//   "--task-index-from-name: ..."   the name has no ordinal suffix
//   "--coordinator HOST:PORT is required (or a chief task in TF_CONFIG)"
//                                   a worker with no coordinator
absl::StatusOr<TaskIdentity> ResolveTaskIdentity(
    DaemonKind kind, const TaskIdentityFlags& flags,
    const std::optional<std::string>& tf_config);

// As above with TF_CONFIG already parsed (null: not set). A TfConfig that
// ParseTfConfig did not make may hold a bad address.
absl::StatusOr<TaskIdentity> ResolveTaskIdentity(DaemonKind kind,
                                                 const TaskIdentityFlags& flags,
                                                 const TfConfig* tf_config);

}  // namespace strata

#endif  // STRATA_COMMON_TASK_IDENTITY_H_

// PsCheckpointer (coordinator/ps_checkpointer.h) over PsClient: how the
// coordinator's core reaches the PS tasks, implemented beside the client and
// wired into CoordinatorServer by main() (and by tests that run PS tasks).
#ifndef STRATA_DAEMONS_PS_CLIENT_CHECKPOINTER_H_
#define STRATA_DAEMONS_PS_CLIENT_CHECKPOINTER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/ps_checkpointer.h"
#include "rpc/tls.h"

namespace strata {

class PsClient;

struct PsClientCheckpointerOptions {
  // Deadline of each Save/Restore attempt (PsClient retries UNAVAILABLE).
  absl::Duration deadline = absl::Seconds(120);
  int max_attempts = 5;
  // TLS and the (coordinator) bearer token of the calls.
  ClientSecurity security;
  // The elected coordinator's epoch, sent with every call so that the PS
  // tasks refuse a deposed coordinator's (0: not elected).
  int64_t coordinator_epoch = 0;
  // Asked before every call to a PS task when set: a coordinator that no
  // longer leads makes none (UNAVAILABLE), whatever the PS tasks know.
  std::function<bool()> leading;
};

// PsCheckpointer over PsClient: calls Save/Restore on every target that
// `targets` returns at the time of the call (in order), one after another.
// Clients are cached per address. Thread-safe.
class PsClientCheckpointer final : public PsCheckpointer {
 public:
  using TargetsFn = std::function<std::vector<PsTarget>()>;

  explicit PsClientCheckpointer(TargetsFn targets,
                                PsClientCheckpointerOptions options = {});
  ~PsClientCheckpointer() override;

  // Errors: FAILED_PRECONDITION when there is no PS task; otherwise the
  // first failing task's status, its message prefixed with the task and
  // address.
  absl::Status SaveAll(const std::string& name) override;
  absl::Status RestoreAll(const std::string& name) override;
  absl::Status DeleteAll(const std::vector<std::string>& names) override;

 private:
  // Calls `call` on each target in turn; stops at the first failure unless
  // `keep_going` (then the first failure is returned at the end).
  absl::Status ForEach(
      const char* what,
      const std::function<absl::Status(PsClient*, const PsTarget&)>& call,
      bool keep_going = false);
  std::shared_ptr<PsClient> ClientFor(const std::string& address);

  const TargetsFn targets_;
  const PsClientCheckpointerOptions options_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<PsClient>> clients_
      ABSL_GUARDED_BY(mu_);
  // Whether each client's replica-set names resolved when it was made.
  std::map<std::string, bool> client_resolved_ ABSL_GUARDED_BY(mu_);
};

// The CoordinatorServerOptions::checkpointer_factory of a coordinator
// whose PS tasks are reached over PsClient with `security` (TLS and the
// coordinator's token), the server's leader epoch and leading check.
CoordinatorServerOptions::CheckpointerFactory PsClientCheckpointerFactory(
    const ClientSecurity& security);

}  // namespace strata

#endif  // STRATA_DAEMONS_PS_CLIENT_CHECKPOINTER_H_

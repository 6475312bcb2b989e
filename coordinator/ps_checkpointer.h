// How the coordinator asks the parameter servers to save and restore their
// shards. The coordinator core decides *when*; a PsCheckpointer does it.
#ifndef STRATA_COORDINATOR_PS_CHECKPOINTER_H_
#define STRATA_COORDINATOR_PS_CHECKPOINTER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"

namespace strata {

class PsClient;

// One PS task the checkpointer talks to.
struct PsTarget {
  std::string task;     // "ps:0"
  std::string address;  // "host:port"
  // The incarnation registered at that address ("" when unknown, as in a
  // static cluster): Save goes only to that process.
  std::string incarnation = "";

  bool operator==(const PsTarget& o) const {
    return task == o.task && address == o.address;
  }
};

// Saves or restores every PS task under one checkpoint name. Implementations
// are called from the coordinator's background thread, never while the
// coordinator state is locked, and may block.
class PsCheckpointer {
 public:
  virtual ~PsCheckpointer() = default;

  // Saves every PS task's shards as checkpoint `name` (a path relative to
  // each PS's --checkpoint-dir). Fails if any task fails; some tasks may
  // then have saved.
  virtual absl::Status SaveAll(const std::string& name) = 0;

  // Restores every PS task's shards from checkpoint `name`. Fails if any
  // task fails.
  virtual absl::Status RestoreAll(const std::string& name) = 0;

  // Deletes checkpoints `names` on every PS task (those there). Fails if
  // any task fails; the others still delete theirs.
  virtual absl::Status DeleteAll(const std::vector<std::string>& names) = 0;
};

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

}  // namespace strata

#endif  // STRATA_COORDINATOR_PS_CHECKPOINTER_H_

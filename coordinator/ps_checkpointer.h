// How the coordinator asks the parameter servers to save and restore their
// shards. The coordinator core decides *when*; a PsCheckpointer does it
// (daemons/ps_client_checkpointer.h over PsClient, wired in main()).
#ifndef STRATA_COORDINATOR_PS_CHECKPOINTER_H_
#define STRATA_COORDINATOR_PS_CHECKPOINTER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace strata {

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

// The checkpointer of a coordinator given none: every call fails with
// FAILED_PRECONDITION saying so.
class NoPsCheckpointer final : public PsCheckpointer {
 public:
  absl::Status SaveAll(const std::string& name) override;
  absl::Status RestoreAll(const std::string& name) override;
  absl::Status DeleteAll(const std::vector<std::string>& names) override;
};

}  // namespace strata

#endif  // STRATA_COORDINATOR_PS_CHECKPOINTER_H_

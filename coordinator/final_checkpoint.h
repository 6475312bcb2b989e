// The coordinator's final checkpoint on SIGTERM: ask for a checkpoint of the
// running job and wait, bounded, until it has been attempted. Time is
// injected so that tests step it.
#ifndef STRATA_COORDINATOR_FINAL_CHECKPOINT_H_
#define STRATA_COORDINATOR_FINAL_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/logging.h"

namespace strata {

class CoordinatorState;

// What the final checkpoint asks of the coordinator's state (see
// CoordinatorState for each method's contract). Implementations are
// thread-safe.
class CheckpointProgress {
 public:
  virtual ~CheckpointProgress() = default;
  // The completed steps the requested checkpoint will cover at least, or
  // -1 when none is due.
  virtual int64_t RequestCheckpoint() = 0;
  // Completed steps the newest finished attempt covered.
  virtual int64_t CheckpointAttempted() const = 0;
  // The newest checkpoint's name ("" when none).
  virtual std::string LastCheckpoint() const = 0;
};

// `state` (not owned; it must outlive the result) as a CheckpointProgress.
std::unique_ptr<CheckpointProgress> StateCheckpointProgress(
    CoordinatorState* state);

struct FinalCheckpointOptions {
  // The longest wait; zero or less: no final checkpoint is requested.
  absl::Duration timeout = absl::ZeroDuration();
  // How often the progress is checked.
  absl::Duration poll = absl::Milliseconds(50);
  // Default absl::Now and absl::SleepFor.
  std::function<absl::Time()> clock;
  std::function<void(absl::Duration)> sleep;
};

struct FinalCheckpointResult {
  bool requested = false;  // a checkpoint was due and asked for
  bool done = false;       // and it was attempted within the timeout
  int64_t target = -1;     // the steps it had to cover
  int64_t steps_covered = 0;
  std::string checkpoint;  // the newest checkpoint's name after the wait
};

// Requests a checkpoint (when options.timeout > 0) and waits until it was
// attempted or the timeout passed. Logs "final_checkpoint_started" (with
// `signal`, the stop signal's number) and then "final_checkpoint" (info when
// done, warning when not) when one was requested; nothing otherwise.
// `progress` and `logger` are not owned.
FinalCheckpointResult TakeFinalCheckpoint(CheckpointProgress* progress,
                                          const FinalCheckpointOptions& options,
                                          Logger* logger, int signal);

}  // namespace strata

#endif  // STRATA_COORDINATOR_FINAL_CHECKPOINT_H_

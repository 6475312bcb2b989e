// When the launcher restarts a task that exited, and when it gives up.
//
// A start is failed when the process never became ready: it did not start,
// or a server died before it listened, or a task without an address (a
// worker, etcd) died within kSoonAfterStart of its start. Failed starts in
// a row back off (the pause doubles from 500 ms up to kMaxPause) and the
// kMaxFailedStarts-th ends the run. A process that became ready (a server
// that listened, a task that ran past kSoonAfterStart) served: its death
// is not a failed start, and it restarts at once with the backoff reset,
// however often it is killed.
//
// Pure: the caller passes the time, so the policy is tested without
// processes or clocks.
#ifndef STRATA_TOOLS_RESTART_POLICY_H_
#define STRATA_TOOLS_RESTART_POLICY_H_

#include "absl/time/time.h"

namespace strata {

class RestartPolicy {
 public:
  static constexpr absl::Duration kMaxPause = absl::Seconds(8);
  static constexpr absl::Duration kSoonAfterStart = absl::Seconds(16);
  static constexpr int kMaxFailedStarts = 8;

  // The process was started at `now`; `ready` when it answered on its
  // address before Spawn returned (servers).
  void Started(absl::Time now, bool ready);
  // The start itself failed (no process, or not listening in time).
  // Returns false when the run should end.
  bool StartFailed(absl::Time now);
  // The process exited at `now` (not a clean end). Returns false when the
  // run should end; else restart at restart_at().
  bool Exited(absl::Time now);

  absl::Time restart_at() const { return restart_at_; }
  absl::Duration pause() const { return pause_; }
  int failed_starts() const { return failed_starts_; }

 private:
  // The pause before the next start after a failed one.
  void BackOff(absl::Time now);

  absl::Time started_ = absl::InfinitePast();
  bool ready_ = false;
  absl::Duration pause_ = absl::ZeroDuration();
  absl::Time restart_at_ = absl::InfinitePast();
  int failed_starts_ = 0;
};

}  // namespace strata

#endif  // STRATA_TOOLS_RESTART_POLICY_H_

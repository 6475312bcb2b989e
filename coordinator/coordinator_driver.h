// CoordinatorDriver: the coordinator's background work over a
// CoordinatorState, apart from any transport: the periodic lease checks,
// the PS checkpoint/restore calls the state asks for (NextPsAction /
// FinishPsAction), and the group commit that batches state writes.
#ifndef STRATA_COORDINATOR_COORDINATOR_DRIVER_H_
#define STRATA_COORDINATOR_COORDINATOR_DRIVER_H_

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/ps_checkpointer.h"

namespace strata {

struct CoordinatorDriverOptions {
  // Period of lease checks and of polling for due PS actions.
  absl::Duration tick = absl::Milliseconds(20);
  // Shortest time between two writes of the state file.
  absl::Duration persist_interval = absl::Milliseconds(50);
};

// Thread-safe. Starts its threads in the constructor; Stop (or the
// destructor) stops them. The state, checkpointer and logger must outlive
// it; `checkpointer` may be null (checkpoints and restores then fail,
// logged).
class CoordinatorDriver {
 public:
  using DurableDone = std::function<void(absl::Status)>;

  CoordinatorDriver(CoordinatorState* state, PsCheckpointer* checkpointer,
                    Logger* logger, CoordinatorDriverOptions options = {});
  ~CoordinatorDriver();

  CoordinatorDriver(const CoordinatorDriver&) = delete;
  CoordinatorDriver& operator=(const CoordinatorDriver&) = delete;

  // Runs `done` with the outcome of a state write that covers every change
  // made so far: on the persist thread, or inline once stopped.
  void EnqueueDurable(DurableDone done) ABSL_LOCKS_EXCLUDED(persist_mu_);

  // Stops the threads (waiting for a PS call in progress), then writes the
  // state (a failure is logged). Idempotent.
  void Stop();

 private:
  void LeaseLoop();
  void PsActionLoop();
  void PersistLoop() ABSL_LOCKS_EXCLUDED(persist_mu_);
  // Waits up to `timeout` for Stop; true when stopping.
  bool WaitForStop(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(stop_mu_);

  CoordinatorState* const state_;
  PsCheckpointer* const checkpointer_;
  Logger* const logger_;
  const CoordinatorDriverOptions options_;

  absl::Mutex stop_mu_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;

  absl::Mutex persist_mu_;
  bool persist_stop_ ABSL_GUARDED_BY(persist_mu_) = false;
  std::vector<DurableDone> persist_queue_ ABSL_GUARDED_BY(persist_mu_);

  // Started last, joined in Stop.
  std::thread lease_thread_;
  std::thread ps_thread_;
  std::thread persist_thread_;
  std::atomic<bool> stopped_{false};
};

}  // namespace strata

#endif  // STRATA_COORDINATOR_COORDINATOR_DRIVER_H_

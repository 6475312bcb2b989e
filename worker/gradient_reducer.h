// How the replicas of one training group sum a step's gradients when every
// replica keeps its own copy of the variables (the all-reduce strategies).
// The group trainer (worker/group_worker.cc) creates one reducer per group
// and calls it from each of this process's replica threads; the
// implementations are the ring over WorkerService (ring_reducer.h), the sum
// through a PS task (ps_reducer.h), threads of this process
// (transport_reducer.h) and NCCL between local GPUs (nccl_reducer.h).
//
// Thread-safety: Reduce is called concurrently by the local replicas, each
// with its own `local` index and at most one call per index at a time;
// Abort may be called from any thread at any time. The trainer owns the
// reducer for the group's lifetime and destroys it after every replica
// thread has returned.
#ifndef STRATA_WORKER_GRADIENT_REDUCER_H_
#define STRATA_WORKER_GRADIENT_REDUCER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strata {

class GradientReducer {
 public:
  // What a Reduce call achieved.
  enum class Outcome {
    // `data` now holds the sum over the group's replicas.
    kReduced,
    // A newer group was announced while waiting for the others; `data` is
    // unspecified and the replica should leave this group quietly.
    kGroupReplaced,
  };

  virtual ~GradientReducer() = default;

  // Sums `data` (this replica's contribution to step `step`) over every
  // replica of the group, in place. `local` is the caller's replica index in
  // this process (0 .. replicas-1). The replicas call it once per step in
  // step order. Errors: ABORTED once the group was aborted (by Abort, a
  // peer or a newer group); DEADLINE_EXCEEDED when the others do not arrive
  // within the collective timeout; the transport's, the PS's or the
  // device's errors (e.g. UNAVAILABLE).
  virtual absl::StatusOr<Outcome> Reduce(int local, int64_t step,
                                         absl::Span<float> data) = 0;

  // Makes waiting and later Reduce calls of every replica fail with
  // `reason` (where the implementation can interrupt them; the PS sum
  // cannot and ignores it). The first reason wins.
  virtual void Abort(const absl::Status& reason) = 0;
};

}  // namespace strata

#endif  // STRATA_WORKER_GRADIENT_REDUCER_H_

// The "ps" collective of MultiWorkerMirrored: a step's gradients (all
// variables flattened, then loss and accuracy) are summed through one SYNC
// variable on a PS task, kReductionVariable, created with the "assign"
// optimizer. Each of the group's `world` replicas pushes its share times
// `world` (the store averages a group's pushes, so the average is the sum)
// and reads the result back at version step + 1.
//
// Thread-safety: as GradientReducer. Does not own the PsCluster, which must
// outlive it.
#ifndef STRATA_WORKER_PS_REDUCER_H_
#define STRATA_WORKER_PS_REDUCER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/ps_cluster.h"
#include "worker/gradient_reducer.h"

namespace strata {

// The PS variable through which the sum runs.
inline constexpr char kReductionVariable[] = "_allreduce/gradients";

// Creates kReductionVariable with `num_floats` elements (zeros, "assign",
// SYNC over one replica) as one shard on task 0. Idempotent. Errors: those
// of PsCluster::CreateVariable.
// `first_step`: the step the group using it starts at (the variable's
// version when it is created; an existing one is kept as it is).
absl::Status CreateReductionVariable(PsCluster* cluster, int64_t num_floats,
                                     int64_t first_step = 0);

struct PsReducerOptions {
  // The push tag's job ("<job id>/g<group>") and group.
  std::string tag_job;
  int64_t group = 0;
  // Local replica i is global rank first_rank + i of `world`.
  int first_rank = 0;
  int world = 1;
  // How long Reduce waits for the sum.
  absl::Duration timeout = absl::Seconds(30);
  // Polled while waiting: `stopping` ends the wait with the pull's error,
  // `replaced` (a newer group) with Outcome::kGroupReplaced.
  std::function<bool()> stopping;
  std::function<bool()> replaced;
};

class PsReducer final : public GradientReducer {
 public:
  PsReducer(PsCluster* cluster, PsReducerOptions options);

  // Scales `data` by world, pushes it (ABORTED, a step the store already
  // has, is not an error) and pulls the sum at version step + 1, retrying
  // ABORTED and DEADLINE_EXCEEDED until the timeout. Errors: the push's
  // other errors; the last pull's error at the timeout or when stopping,
  // or at once when it is neither ABORTED nor DEADLINE_EXCEEDED.
  absl::StatusOr<Outcome> Reduce(int local, int64_t step,
                                 absl::Span<float> data) override;
  // Nothing to interrupt: a waiting Reduce ends by its predicates.
  void Abort(const absl::Status& reason) override {}

 private:
  PsCluster* const cluster_;
  const PsReducerOptions options_;
};

}  // namespace strata

#endif  // STRATA_WORKER_PS_REDUCER_H_

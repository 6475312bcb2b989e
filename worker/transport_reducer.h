// GradientReducer over collective Transports (collective/collective.h): each
// local replica sums through its own transport with the ring all-reduce
// (collective::AllReduceSum). The in-process group (the Mirrored strategy's
// replicas as threads, collective/in_process.h) is this reducer over
// NewInProcessGroup; the ring between worker processes (ring_reducer.h)
// extends it.
//
// Thread-safety: as GradientReducer. Owns its transports.
#ifndef STRATA_WORKER_TRANSPORT_REDUCER_H_
#define STRATA_WORKER_TRANSPORT_REDUCER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collective/collective.h"
#include "worker/gradient_reducer.h"

namespace strata {

class TransportReducer : public GradientReducer {
 public:
  // transports[i] is local replica i's endpoint.
  TransportReducer(
      std::vector<std::unique_ptr<collective::Transport>> transports,
      const collective::CollectiveOptions& options);

  // AllReduceSum through transports[local], op "step<step>". Errors: those
  // of AllReduceSum (which aborts the group on any error).
  absl::StatusOr<Outcome> Reduce(int local, int64_t step,
                                 absl::Span<float> data) override;
  // Aborts every transport (an in-process group is aborted as a whole).
  void Abort(const absl::Status& reason) override;

 protected:
  const std::vector<std::unique_ptr<collective::Transport>>& transports()
      const {
    return transports_;
  }

 private:
  const std::vector<std::unique_ptr<collective::Transport>> transports_;
  const collective::CollectiveOptions options_;
};

// The reducer of `replicas` threads of this process (replicas >= 1).
std::unique_ptr<GradientReducer> NewInProcessReducer(
    int replicas, const collective::CollectiveOptions& options);

}  // namespace strata

#endif  // STRATA_WORKER_TRANSPORT_REDUCER_H_

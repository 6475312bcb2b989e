// The Mirrored strategy on GPUs (job.device "cuda[:N]"): local replica i
// sums on GPU devices[i], as rank i of one NCCL clique
// (collective/nccl.h).
//
// Thread-safety: as GradientReducer. Owns the NCCL group.
#ifndef STRATA_WORKER_NCCL_REDUCER_H_
#define STRATA_WORKER_NCCL_REDUCER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "worker/gradient_reducer.h"

namespace strata {

// A reducer over the GPUs `devices` (local replica i on devices[i]).
// Errors: those of collective::NcclGroup::Create (FAILED_PRECONDITION in a
// build without CUDA/NCCL or for a device that cannot be used).
absl::StatusOr<std::unique_ptr<GradientReducer>> NewNcclReducer(
    const std::vector<int>& devices,
    const collective::CollectiveOptions& options);

}  // namespace strata

#endif  // STRATA_WORKER_NCCL_REDUCER_H_

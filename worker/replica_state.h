// A replica's model state (the variables' values and the optimizer's slots,
// in Model::variables() order) as a strata.v1.WorkerState: what a group's
// members copy from one another and what the final-state export writes.
// Tensors are named as the variables, slots as "NAME/SLOT", each a flat
// float32 vector.
//
// Pure functions over caller-owned buffers; thread-compatible.
#ifndef STRATA_WORKER_REPLICA_STATE_H_
#define STRATA_WORKER_REPLICA_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "strata/v1/worker_service.pb.h"

namespace strata {

// The variables' names and element counts, and the optimizer's slot names.
struct StateLayout {
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  std::vector<std::string> slot_names;
};

// The state at `step` (the first step not applied): params[i] and
// slots[i][j] (one per slot name) for each variable i.
v1::WorkerState SnapshotReplicaState(
    const StateLayout& layout, int64_t step,
    const std::vector<std::vector<float>>& params,
    const std::vector<std::vector<std::vector<float>>>& slots);

// Replaces *params (already one buffer per variable) and *slots with the
// tensors of `state`. Errors: DATA_LOSS naming the tensor when one is
// missing or is not float32 of the variable's size (the buffers are then
// partly loaded).
absl::Status LoadReplicaState(
    const v1::WorkerState& state, const StateLayout& layout,
    std::vector<std::vector<float>>* params,
    std::vector<std::vector<std::vector<float>>>* slots);

// Writes `state` to dir/final_state.pb atomically through `fs` (creating
// `dir` first) and logs "state_exported" with the path. Errors: UNAVAILABLE
// from FileSystem::WriteFileAtomically.
absl::Status ExportFinalState(FileSystem* fs, Logger* logger,
                              const std::string& dir,
                              const v1::WorkerState& state);

}  // namespace strata

#endif  // STRATA_WORKER_REPLICA_STATE_H_

// What the coordinator reads from a job file: the epochs, batch size,
// strategy (with its placement policy), checkpoint and evaluation cadence.
// The rest of the job file is the workers'. Pure functions, thread-safe.
#ifndef STRATA_COORDINATOR_COORDINATOR_JOB_H_
#define STRATA_COORDINATOR_COORDINATOR_JOB_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "strategies/placement_policy.h"

namespace strata {

// What the coordinator needs from a job file (the rest is the workers').
struct CoordinatorJobSpec {
  int64_t epochs = 1;
  int64_t batch_size = 32;
  std::string strategy = "parameter_server";
  int64_t checkpoint_every_steps = 0;   // 0: off
  double checkpoint_every_seconds = 0;  // 0: off
  int checkpoint_keep = 3;              // newest checkpoints kept
  int checkpoint_max_failures = 0;      // 0: failures never end the job
  int64_t evaluate_every_epochs = 1;    // 0: never
  // The strategy's placement policy (never null after parsing).
  std::shared_ptr<const PlacementPolicy> policy;
};

// Reads the job with ParseJobControl (job/job.h: the parser every worker
// and tool uses; model, loss, optimizer and data may be absent, every field
// present is validated) and keeps what the coordinator needs, with the
// defaults above. Errors: INVALID_ARGUMENT naming the field, e.g.
// "job.batch_size: must be >= 1, got 0".
absl::StatusOr<CoordinatorJobSpec> ParseCoordinatorJobSpec(
    absl::string_view job_json);

}  // namespace strata

#endif  // STRATA_COORDINATOR_COORDINATOR_JOB_H_

// ParseCoordinatorJobSpec: the coordinator's reading of a job file, through
// the one job parser (job/job.h).
#include "coordinator/coordinator_job.h"

#include <memory>
#include <utility>

#include "common/status_macros.h"
#include "job/job.h"

namespace strata {

absl::StatusOr<CoordinatorJobSpec> ParseCoordinatorJobSpec(
    absl::string_view job_json) {
  STRATA_ASSIGN_OR_RETURN(JobSpec job, ParseJobControl(job_json));
  CoordinatorJobSpec spec;
  spec.epochs = job.epochs;
  spec.batch_size = job.batch_size;
  spec.strategy = job.strategy.type;
  spec.checkpoint_every_steps = job.checkpoint.every_steps;
  spec.checkpoint_every_seconds = job.checkpoint.every_seconds;
  spec.checkpoint_keep = job.checkpoint.keep;
  spec.checkpoint_max_failures = job.checkpoint.max_failures;
  spec.evaluate_every_epochs = job.evaluation.every_epochs;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> policy,
                          PolicyFor(job));
  spec.policy = std::shared_ptr<const PlacementPolicy>(std::move(policy));
  // The job parser refused checkpoints a strategy cannot take
  // (PlacementPolicy::supports_checkpoints).
  return spec;
}

}  // namespace strata

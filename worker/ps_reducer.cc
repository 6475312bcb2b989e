#include "worker/ps_reducer.h"

#include <utility>
#include <vector>

#include "strata/v1/parameter_server.pb.h"

namespace strata {

absl::Status CreateReductionVariable(PsCluster* cluster, int64_t num_floats,
                                     int64_t first_step) {
  v1::VariableSpec spec;
  spec.set_name(kReductionVariable);
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(num_floats);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_type("assign");
  spec.mutable_update_mode()->set_kind(v1::UpdateMode::SYNC);
  spec.mutable_update_mode()->set_num_replicas(1);
  spec.mutable_update_mode()->set_first_step(first_step);
  // An existing one (an earlier group's, whatever its first step) is kept.
  return cluster->CreateVariable(spec, {}).status();
}

PsReducer::PsReducer(PsCluster* cluster, PsReducerOptions options)
    : cluster_(cluster), options_(std::move(options)) {}

absl::StatusOr<GradientReducer::Outcome> PsReducer::Reduce(
    int local, int64_t step, absl::Span<float> data) {
  float* flat = data.data();
  const float scale = static_cast<float>(options_.world);
  for (float& v : data) v *= scale;
  absl::StatusOr<int64_t> pushed = cluster_->PushMany(
      {kReductionVariable}, {flat},
      PushTag{options_.tag_job, options_.first_rank + local, step,
              options_.group, options_.world});
  if (!pushed.ok() && pushed.status().code() != absl::StatusCode::kAborted) {
    return pushed.status();
  }
  std::vector<void*> dst{flat};
  PullOptions pull;
  pull.min_version = step + 1;
  const absl::Time until = absl::Now() + options_.timeout;
  while (true) {
    absl::Status s = cluster_->PullMany({kReductionVariable}, dst, pull);
    if (s.ok()) return Outcome::kReduced;
    const bool waiting = s.code() == absl::StatusCode::kAborted ||
                         s.code() == absl::StatusCode::kDeadlineExceeded;
    if (!waiting || absl::Now() >= until || options_.stopping()) return s;
    if (options_.replaced()) return Outcome::kGroupReplaced;
  }
}

}  // namespace strata

#include "worker/transport_reducer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "collective/in_process.h"
#include "common/tensor.h"
#include "common/status_macros.h"

namespace strata {

TransportReducer::TransportReducer(
    std::vector<std::unique_ptr<collective::Transport>> transports,
    const collective::CollectiveOptions& options)
    : transports_(std::move(transports)), options_(options) {}

absl::StatusOr<GradientReducer::Outcome> TransportReducer::Reduce(
    int local, int64_t step, absl::Span<float> data) {
  STRATA_RETURN_IF_ERROR(collective::AllReduceSum(
      transports_[static_cast<size_t>(local)].get(), DType::kFloat32,
      data.data(), static_cast<int64_t>(data.size()),
      absl::StrCat("step", step), options_));
  return Outcome::kReduced;
}

void TransportReducer::Abort(const absl::Status& reason) {
  for (const auto& t : transports_) t->Abort(reason);
}

std::unique_ptr<GradientReducer> NewInProcessReducer(
    int replicas, const collective::CollectiveOptions& options) {
  return std::make_unique<TransportReducer>(
      collective::NewInProcessGroup(replicas), options);
}

}  // namespace strata

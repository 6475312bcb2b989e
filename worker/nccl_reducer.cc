#include "worker/nccl_reducer.h"

#include <utility>

#include "collective/nccl.h"
#include "common/status_macros.h"
#include "common/tensor.h"

namespace strata {
namespace {

class NcclReducer final : public GradientReducer {
 public:
  explicit NcclReducer(std::unique_ptr<collective::NcclGroup> nccl)
      : nccl_(std::move(nccl)) {}

  absl::StatusOr<Outcome> Reduce(int local, int64_t step,
                                 absl::Span<float> data) override {
    STRATA_RETURN_IF_ERROR(nccl_->AllReduce(
        local, DType::kFloat32, data.data(), static_cast<int64_t>(data.size()),
        collective::NcclReduce::kSum));
    return Outcome::kReduced;
  }

  void Abort(const absl::Status& reason) override { nccl_->Abort(reason); }

 private:
  const std::unique_ptr<collective::NcclGroup> nccl_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GradientReducer>> NewNcclReducer(
    const std::vector<int>& devices,
    const collective::CollectiveOptions& options) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<collective::NcclGroup> nccl,
                          collective::NcclGroup::Create(devices, options));
  return std::unique_ptr<GradientReducer>(new NcclReducer(std::move(nccl)));
}

}  // namespace strata

// The GPU backend of a build without CUDA: every entry point says so.
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/gpu_model.h"

namespace strata {
namespace {

absl::Status NoCuda() {
  return absl::FailedPreconditionError(
      "this build has no CUDA support (configure with -DSTRATA_WITH_CUDA=ON "
      "where nvcc is found)");
}

}  // namespace

class GpuWorkspace {};

void GpuWorkspaceDeleter::operator()(GpuWorkspace* workspace) const {
  delete workspace;
}

bool GpuBackendBuilt() { return false; }

absl::Status GpuCheckDevice(int device) { return NoCuda(); }

absl::StatusOr<StepStats> GpuTrainStep(
    const GpuModelPlan& plan, const std::vector<absl::Span<const float>>& params,
    const float* x, const int32_t* y, int64_t batch, uint64_t dropout_seed,
    std::vector<std::vector<float>>* grads, GpuWorkspacePtr* workspace) {
  return NoCuda();
}

absl::Status GpuEvaluate(const GpuModelPlan& plan,
                         const std::vector<absl::Span<const float>>& params,
                         const Dataset& data, int64_t batch, double* loss_sum,
                         int64_t* correct, GpuWorkspacePtr* workspace) {
  return NoCuda();
}

absl::Status GpuPredict(const GpuModelPlan& plan,
                        const std::vector<absl::Span<const float>>& params,
                        const float* x, int64_t batch, std::vector<float>* out,
                        GpuWorkspacePtr* workspace) {
  return NoCuda();
}

}  // namespace strata

// collective/nccl.h for builds without CUDA or NCCL: every entry point that
// needs a GPU fails FAILED_PRECONDITION saying why.
#include <memory>
#include <utility>
#include <vector>

#include "collective/nccl.h"
#include "common/status_macros.h"

namespace strata {
namespace collective {
namespace {

absl::Status NoSupport() {
#ifdef STRATA_NCCL_MISSING
  return absl::FailedPreconditionError(
      "this build has CUDA but no NCCL support (libnccl and nccl.h were not "
      "found when it was configured)");
#else
  return absl::FailedPreconditionError(
      "this build has no CUDA support (configure with -DSTRATA_WITH_CUDA=ON "
      "where nvcc is found)");
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Create(
    std::vector<int> devices, const CollectiveOptions& options) {
  STRATA_RETURN_IF_ERROR(ValidateNcclDevices(devices));
  return NoSupport();
}

absl::StatusOr<int> NcclVisibleDevices() { return NoSupport(); }

}  // namespace collective
}  // namespace strata

#include "kernels/cuda/nccl_status.h"

#include <nccl.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace strata {

absl::Status NcclErrorToStatus(int result, const char* expr, const char* file,
                               int line) {
  const ncclResult_t code = static_cast<ncclResult_t>(result);
  const std::string message =
      absl::StrCat(expr, " failed: NCCL error ", result, ": ",
                   ncclGetErrorString(code), " (", file, ":", line, ")");
  switch (code) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclRemoteError:
    case ncclSystemError:
      return absl::UnavailableError(message);
    case ncclInProgress:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace strata

// NCCL results as absl::Status (built only with STRATA_WITH_CUDA and NCCL, in
// the `strata_nccl` library). Plain C++: no NCCL include, so tests compiled
// by the host compiler can call it.
#ifndef STRATA_KERNELS_CUDA_NCCL_STATUS_H_
#define STRATA_KERNELS_CUDA_NCCL_STATUS_H_

#include "absl/status/status.h"

namespace strata {

// Turns an NCCL result (an `ncclResult_t`, passed as int) into a Status
// naming the failed expression, NCCL's error string and the source
// location. `result` must not be ncclSuccess (0). Codes: INVALID_ARGUMENT for
// ncclInvalidArgument and ncclInvalidUsage, UNAVAILABLE for
// ncclRemoteError and ncclSystemError (a peer or the system failed),
// FAILED_PRECONDITION for ncclInProgress (the communicator is not ready),
// INTERNAL otherwise (ncclUnhandledCudaError, ncclInternalError).
absl::Status NcclErrorToStatus(int result, const char* expr, const char* file,
                               int line);

// Evaluates `expr` (an ncclResult_t) and returns a non-OK absl::Status from
// the enclosing function if it is not ncclSuccess.
#define STRATA_NCCL_RETURN_IF_ERROR(expr)                                     \
  do {                                                                        \
    const int strata_nccl_result_ = static_cast<int>(expr);                   \
    if (strata_nccl_result_ != 0) {                                           \
      return ::strata::NcclErrorToStatus(strata_nccl_result_, #expr, __FILE__, \
                                         __LINE__);                           \
    }                                                                         \
  } while (0)

}  // namespace strata

#endif  // STRATA_KERNELS_CUDA_NCCL_STATUS_H_

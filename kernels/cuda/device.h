// CUDA device helpers and the first CUDA kernel (built only with
// STRATA_WITH_CUDA, in the `strata_cuda` library).
//
// This header is plain C++: it does not include the CUDA headers, so code
// compiled by the host compiler can call these functions. All functions are
// thread-safe in the sense of the CUDA runtime (they use the calling thread's
// current device and the default stream).
#ifndef STRATA_KERNELS_CUDA_DEVICE_H_
#define STRATA_KERNELS_CUDA_DEVICE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

// Turns a CUDA runtime error code (a `cudaError_t`, passed as int so that
// this header needs no CUDA include) into a Status naming the failed
// expression, the CUDA error name and text, and the source location.
// `error` must not be cudaSuccess (0). Codes: FAILED_PRECONDITION for "no
// device / no or too old driver", RESOURCE_EXHAUSTED for out of memory,
// INVALID_ARGUMENT for invalid values, INTERNAL otherwise.
absl::Status CudaErrorToStatus(int error, const char* expr, const char* file,
                               int line);

// Evaluates `expr` (a cudaError_t) and returns a non-OK absl::Status from the
// enclosing function if it is not cudaSuccess.
#define STRATA_CUDA_RETURN_IF_ERROR(expr)                                    \
  do {                                                                       \
    const int strata_cuda_error_ = static_cast<int>(expr);                   \
    if (strata_cuda_error_ != 0) {                                           \
      return ::strata::CudaErrorToStatus(strata_cuda_error_, #expr, __FILE__, \
                                         __LINE__);                          \
    }                                                                        \
  } while (0)

// Number of visible CUDA devices (> 0).
// Errors: FAILED_PRECONDITION with the CUDA error text when there is no
// device, no driver or the driver is too old for this runtime.
absl::StatusOr<int> CudaDeviceCount();

// y[i] = a * x[i] + y[i] for i in [0, n), computed on the current device.
// `x` and `y` are host pointers to n floats each; they are copied to the
// device, the kernel runs, and y is copied back. n == 0 is a no-op.
// Errors: INVALID_ARGUMENT for n < 0 or null pointers with n > 0;
// FAILED_PRECONDITION without a device; RESOURCE_EXHAUSTED when device
// memory runs out; INTERNAL for other CUDA failures.
absl::Status CudaAxpy(float a, const float* x, float* y, int64_t n);

}  // namespace strata

#endif  // STRATA_KERNELS_CUDA_DEVICE_H_

// Test helpers shared by the CUDA tests in kernels/cuda/ (CUDA builds only).
#ifndef STRATA_KERNELS_CUDA_CUDA_TEST_UTIL_H_
#define STRATA_KERNELS_CUDA_CUDA_TEST_UTIL_H_

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device.h"

// Skips the current test when no CUDA device can be used on this machine,
// with the message ctest's SKIP_REGULAR_EXPRESSION looks for.
#define STRATA_SKIP_WITHOUT_CUDA()                                       \
  do {                                                                   \
    absl::StatusOr<int> strata_cuda_count_ = ::strata::CudaDeviceCount(); \
    if (!strata_cuda_count_.ok()) {                                      \
      GTEST_SKIP() << "no CUDA device, skipping: "                       \
                   << strata_cuda_count_.status();                       \
    }                                                                    \
  } while (0)

#endif  // STRATA_KERNELS_CUDA_CUDA_TEST_UTIL_H_

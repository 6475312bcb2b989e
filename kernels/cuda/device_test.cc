#include "kernels/cuda/device.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"

namespace strata {
namespace {


TEST(CudaDeviceTest, DeviceCountIsPositiveOrFailedPrecondition) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (count.ok()) {
    EXPECT_GT(*count, 0);
  } else {
    EXPECT_EQ(count.status().code(), absl::StatusCode::kFailedPrecondition)
        << count.status();
    EXPECT_FALSE(count.status().message().empty());
  }
}

TEST(CudaDeviceTest, ErrorToStatusNamesExpressionAndLocation) {
  // 2 == cudaErrorMemoryAllocation.
  absl::Status status = CudaErrorToStatus(2, "cudaMalloc(&p, n)", "f.cu", 7);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("cudaMalloc(&p, n)"), absl::string_view::npos)
      << status;
  EXPECT_NE(status.message().find("f.cu:7"), absl::string_view::npos)
      << status;
}

TEST(CudaAxpyTest, RejectsNegativeLength) {
  float x = 1, y = 1;
  EXPECT_EQ(CudaAxpy(2.0f, &x, &y, -1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaAxpyTest, EmptyIsNoOp) {
  EXPECT_TRUE(CudaAxpy(2.0f, nullptr, nullptr, 0).ok());
}

TEST(CudaAxpyTest, MatchesCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  // Not a multiple of the block size, and more elements than one grid pass
  // covers, so the grid-stride loop is exercised.
  const int64_t n = 256 * 65535 + 1234;
  std::vector<float> x(n), y(n), expected(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.5f;
    y[i] = static_cast<float>(i % 77) - 3.0f;
  }
  const float a = 1.75f;
  for (int64_t i = 0; i < n; ++i) expected[i] = a * x[i] + y[i];

  const absl::Status status = CudaAxpy(a, x.data(), y.data(), n);
  ASSERT_TRUE(status.ok()) << status;
  for (int64_t i = 0; i < n; ++i) {
    // The device may fuse the multiply-add; allow for the rounding.
    const float tolerance = 1e-6f * (1.0f + std::fabs(expected[i]));
    ASSERT_NEAR(y[i], expected[i], tolerance) << "at i = " << i;
  }
}

TEST(CudaAxpyTest, SmallVector) {
  STRATA_SKIP_WITHOUT_CUDA();
  std::vector<float> x = {1, 2, 3}, y = {10, 20, 30};
  const absl::Status status = CudaAxpy(-2.0f, x.data(), y.data(), 3);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_FLOAT_EQ(y[0], 8);
  EXPECT_FLOAT_EQ(y[1], 16);
  EXPECT_FLOAT_EQ(y[2], 24);
}

}  // namespace
}  // namespace strata

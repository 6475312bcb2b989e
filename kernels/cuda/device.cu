#include "kernels/cuda/device.h"

#include <cuda_runtime.h>

#include <cstddef>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

// Frees a device allocation on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }

  absl::Status Allocate(size_t bytes) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes));
    return absl::OkStatus();
  }
  float* get() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

__global__ void AxpyKernel(float a, const float* __restrict__ x,
                           float* __restrict__ y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    y[i] = a * x[i] + y[i];
  }
}

}  // namespace

absl::Status CudaErrorToStatus(int error, const char* expr, const char* file,
                               int line) {
  const cudaError_t code = static_cast<cudaError_t>(error);
  const std::string message =
      absl::StrCat(expr, " failed: ", cudaGetErrorName(code), ": ",
                   cudaGetErrorString(code), " (", file, ":", line, ")");
  switch (code) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorDevicesUnavailable:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorNoKernelImageForDevice:
      return absl::FailedPreconditionError(message);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    // Clear the sticky "last error" so later calls start clean.
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("no usable CUDA device: ", cudaGetErrorName(error), ": ",
                     cudaGetErrorString(error)));
  }
  if (count == 0) {
    return absl::FailedPreconditionError("no CUDA device is visible");
  }
  return count;
}

absl::Status CudaAxpy(float a, const float* x, float* y, int64_t n) {
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CudaAxpy: n = ", n, " < 0"));
  }
  if (n == 0) return absl::OkStatus();
  if (x == nullptr || y == nullptr) {
    return absl::InvalidArgumentError("CudaAxpy: null x or y");
  }
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  DeviceBuffer dx, dy;
  if (absl::Status s = dx.Allocate(bytes); !s.ok()) return s;
  if (absl::Status s = dy.Allocate(bytes); !s.ok()) return s;
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(dx.get(), x, bytes, cudaMemcpyHostToDevice));
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(dy.get(), y, bytes, cudaMemcpyHostToDevice));

  constexpr int kThreads = 256;
  constexpr int64_t kMaxBlocks = 65535;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
  AxpyKernel<<<blocks, kThreads>>>(a, dx.get(), dy.get(), n);
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetLastError());

  // cudaMemcpy on the default stream waits for the kernel and reports its
  // asynchronous errors.
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(y, dy.get(), bytes, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

}  // namespace strata

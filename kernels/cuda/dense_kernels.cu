#include "kernels/cuda/dense_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device.h"

namespace strata {
namespace {

// A cuBLAS status as a Status naming the call, the cuBLAS error and where.
absl::Status CublasErrorToStatus(cublasStatus_t status, const char* expr,
                                 const char* file, int line) {
  const std::string message = absl::StrCat(
      expr, " failed: ", cublasGetStatusName(status), ": ",
      cublasGetStatusString(status), " (", file, ":", line, ")");
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::FailedPreconditionError(message);
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

#define STRATA_CUBLAS_RETURN_IF_ERROR(expr)                                  \
  do {                                                                       \
    const cublasStatus_t strata_cublas_status_ = (expr);                     \
    if (strata_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                    \
      return CublasErrorToStatus(strata_cublas_status_, #expr, __FILE__,     \
                                 __LINE__);                                  \
    }                                                                        \
  } while (0)

// Checks the launch of the kernel just enqueued.
#define STRATA_CUDA_CHECK_LAUNCH() STRATA_CUDA_RETURN_IF_ERROR(cudaGetLastError())

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

// Blocks for a grid-stride loop over n items (n >= 1).
int BlocksFor(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
}

cudaStream_t StreamOf(const GpuStream& stream) {
  return static_cast<cudaStream_t>(stream.cuda_stream());
}

absl::Status CheckSizes(const char* what, int64_t a, int64_t b = 0,
                        int64_t c = 0) {
  if (a < 0 || b < 0 || c < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative size (", a, ", ", b, ", ", c, ")"));
  }
  return absl::OkStatus();
}

// A matrix element count as used by the grid-stride loops.
__device__ __forceinline__ int64_t GlobalIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridStride() {
  return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

// SplitMix64's finalizer, as common/hash.h's Mix64.
__device__ __forceinline__ uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__global__ void BiasAddKernel(float* z, const float* bias, int64_t rows,
                              int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    z[i] = __fadd_rn(z[i], bias[i % cols]);
  }
}

__global__ void BiasGradKernel(const float* dz, int64_t rows, int64_t cols,
                               float* db) {
  for (int64_t j = GlobalIndex(); j < cols; j += GridStride()) {
    float sum = dz[j];
    for (int64_t r = 1; r < rows; ++r) sum = __fadd_rn(sum, dz[r * cols + j]);
    db[j] = sum;
  }
}

__global__ void ElementwiseActivationKernel(GpuActivation activation,
                                            float* z, int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const float v = z[i];
    switch (activation) {
      case GpuActivation::kRelu:
        z[i] = v > 0.0f ? v : 0.0f;
        break;
      case GpuActivation::kSigmoid:
        z[i] = 1.0f / (expf(-v) + 1.0f);
        break;
      case GpuActivation::kTanh:
        z[i] = tanhf(v);
        break;
      default:
        break;
    }
  }
}

// One thread per row: shift by the row max, exponentiate, normalize.
__global__ void SoftmaxKernel(float* z, int64_t rows, int64_t cols) {
  for (int64_t r = GlobalIndex(); r < rows; r += GridStride()) {
    float* row = z + r * cols;
    float max = row[0];
    for (int64_t j = 1; j < cols; ++j) max = fmaxf(max, row[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      row[j] = expf(row[j] - max);
      sum += row[j];
    }
    for (int64_t j = 0; j < cols; ++j) row[j] = row[j] / sum;
  }
}

__global__ void ElementwiseActivationBackwardKernel(GpuActivation activation,
                                                    const float* a, float* g,
                                                    int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    const float y = a[i];
    switch (activation) {
      case GpuActivation::kRelu:
        g[i] = y > 0.0f ? g[i] : 0.0f * g[i];
        break;
      case GpuActivation::kSigmoid:
        g[i] = __fmul_rn(g[i], __fmul_rn(y, 1.0f - y));
        break;
      case GpuActivation::kTanh:
        g[i] = __fmul_rn(g[i], 1.0f - __fmul_rn(y, y));
        break;
      default:
        break;
    }
  }
}

// One thread per row: g = a * (g - dot(g, a)).
__global__ void SoftmaxBackwardKernel(const float* a, float* g, int64_t rows,
                                      int64_t cols) {
  for (int64_t r = GlobalIndex(); r < rows; r += GridStride()) {
    const float* ar = a + r * cols;
    float* gr = g + r * cols;
    float dot = 0.0f;
    for (int64_t j = 0; j < cols; ++j) dot += gr[j] * ar[j];
    for (int64_t j = 0; j < cols; ++j) gr[j] = __fmul_rn(ar[j], gr[j] - dot);
  }
}

__global__ void DropoutMaskKernel(uint64_t key, uint64_t threshold,
                                  float keep_scale, float* mask, int64_t n) {
  for (int64_t e = GlobalIndex(); e < n; e += GridStride()) {
    const uint64_t bits =
        Mix64(key + static_cast<uint64_t>(e) * 0xd1b54a32d192ed03ULL) >> 40;
    mask[e] = bits >= threshold ? keep_scale : 0.0f;
  }
}

__global__ void MultiplyKernel(const float* a, const float* b, float* out,
                               int64_t n) {
  for (int64_t i = GlobalIndex(); i < n; i += GridStride()) {
    out[i] = __fmul_rn(a[i], b[i]);
  }
}

// One thread per example: its loss, whether it is right, and its gradient
// row, with worker/model.cc's arithmetic (no fused multiply-adds).
__global__ void LossKernel(GpuLoss loss, const float* out,
                           const int32_t* labels, int64_t batch,
                           int64_t classes, float inv, float* grad,
                           double* example_loss, int32_t* example_correct) {
  constexpr double kEpsilon = 1e-7;
  for (int64_t b = GlobalIndex(); b < batch; b += GridStride()) {
    const float* p = out + b * classes;
    const int32_t label = labels[b];
    int32_t right = 0;
    if (classes > 1) {
      int64_t arg = 0;
      float best = p[0];
      for (int64_t k = 1; k < classes; ++k) {
        if (p[k] > best) {
          best = p[k];
          arg = k;
        }
      }
      right = arg == label ? 1 : 0;
    } else {
      right = (p[0] > 0.5f ? 1 : 0) == label ? 1 : 0;
    }
    double value = 0;
    switch (loss) {
      case GpuLoss::kCrossEntropy: {
        const double q =
            fmin(fmax(static_cast<double>(p[label]), kEpsilon), 1.0 - kEpsilon);
        value = -log(q);
        break;
      }
      case GpuLoss::kBinaryCrossEntropy: {
        const double q =
            fmin(fmax(static_cast<double>(p[0]), kEpsilon), 1.0 - kEpsilon);
        value = label == 1 ? -log(q) : -log(1.0 - q);
        break;
      }
      case GpuLoss::kMse: {
        double sum = 0;
        for (int64_t k = 0; k < classes; ++k) {
          const double t = classes > 1 ? (k == label ? 1.0 : 0.0)
                                       : static_cast<double>(label);
          const double d = static_cast<double>(p[k]) - t;
          sum += d * d;
        }
        value = sum / static_cast<double>(classes);
        break;
      }
    }
    example_loss[b] = value;
    example_correct[b] = right;
    if (grad == nullptr) continue;
    float* g = grad + b * classes;
    switch (loss) {
      case GpuLoss::kCrossEntropy:
        for (int64_t k = 0; k < classes; ++k) {
          const float v = __fmul_rn(p[k], inv);
          g[k] = k == label ? __fsub_rn(v, inv) : v;
        }
        break;
      case GpuLoss::kBinaryCrossEntropy:
        g[0] = __fmul_rn(__fsub_rn(p[0], static_cast<float>(label)), inv);
        break;
      case GpuLoss::kMse: {
        const float scale =
            __fdiv_rn(__fmul_rn(2.0f, inv), static_cast<float>(classes));
        for (int64_t k = 0; k < classes; ++k) {
          const float v = __fmul_rn(p[k], scale);
          if (classes > 1) {
            g[k] = k == label ? __fsub_rn(v, scale) : v;
          } else {
            g[k] = __fsub_rn(v, __fmul_rn(scale, static_cast<float>(label)));
          }
        }
        break;
      }
    }
  }
}

// One block: adds the sums of example_loss and example_correct to sums[0]
// and sums[1], in a fixed order (deterministic).
__global__ void SumKernel(const double* example_loss,
                          const int32_t* example_correct, int64_t batch,
                          double* sums) {
  __shared__ double loss_part[kThreads];
  __shared__ double correct_part[kThreads];
  double loss = 0;
  double correct = 0;
  for (int64_t b = threadIdx.x; b < batch; b += blockDim.x) {
    loss += example_loss[b];
    correct += static_cast<double>(example_correct[b]);
  }
  loss_part[threadIdx.x] = loss;
  correct_part[threadIdx.x] = correct;
  __syncthreads();
  for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      loss_part[threadIdx.x] += loss_part[threadIdx.x + half];
      correct_part[threadIdx.x] += correct_part[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums[0] += loss_part[0];
    sums[1] += correct_part[0];
  }
}

}  // namespace

absl::Status CudaCheckDevice(int device) {
  if (device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device index ", device, " < 0"));
  }
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear it for later calls
    return absl::FailedPreconditionError(
        absl::StrCat("no usable CUDA device: ", cudaGetErrorName(error), ": ",
                     cudaGetErrorString(error)));
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        "no usable CUDA device: no CUDA device is visible");
  }
  if (device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", device, ": ", count,
                     " device(s) visible (0 to ", count - 1, ")"));
  }
  // Creates the context, so that a broken driver shows up here.
  absl::Status status = [device]() -> absl::Status {
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    STRATA_CUDA_RETURN_IF_ERROR(cudaFree(nullptr));
    return absl::OkStatus();
  }();
  if (status.ok()) return status;
  cudaGetLastError();
  return absl::Status(status.code(),
                      absl::StrCat("no usable CUDA device ", device, ": ",
                                   status.message()));
}

// GpuStream -------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<GpuStream>> GpuStream::Create(int device) {
  if (absl::Status s = CudaCheckDevice(device); !s.ok()) return s;
  std::unique_ptr<GpuStream> stream(new GpuStream());
  stream->device_ = device;
  cudaStream_t s = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s,
                                                        cudaStreamNonBlocking));
  stream->stream_ = s;
  cublasHandle_t handle = nullptr;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
  stream->blas_ = handle;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, s));
  // Full FP32 products: no TF32 tensor-core rounding.
  STRATA_CUBLAS_RETURN_IF_ERROR(
      cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  return stream;
}

GpuStream::~GpuStream() {
  if (stream_ == nullptr && blas_ == nullptr) return;
  // Errors cannot be reported from here; the process may be exiting.
  (void)cudaSetDevice(device_);
  if (blas_ != nullptr) (void)cublasDestroy(static_cast<cublasHandle_t>(blas_));
  if (stream_ != nullptr) {
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }
  (void)cudaGetLastError();
}

absl::Status GpuStream::Activate() const {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return absl::OkStatus();
}

absl::Status GpuStream::Synchronize() const {
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return absl::OkStatus();
}

// DeviceMemory ----------------------------------------------------------------

DeviceMemory::~DeviceMemory() { Free(); }

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    Free();
    ptr_ = std::exchange(other.ptr_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void DeviceMemory::Free() {
  if (ptr_ != nullptr) {
    // Unified addressing: cudaFree finds the pointer's device itself.
    (void)cudaFree(ptr_);
    (void)cudaGetLastError();
  }
  ptr_ = nullptr;
  capacity_ = 0;
}

absl::Status DeviceMemory::Reserve(size_t bytes) {
  if (bytes <= capacity_) return absl::OkStatus();
  // Grow geometrically so that alternating batch sizes do not reallocate.
  const size_t capacity = bytes > 2 * capacity_ ? bytes : 2 * capacity_;
  Free();
  void* p = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, capacity));
  ptr_ = p;
  capacity_ = capacity;
  return absl::OkStatus();
}

// Copies ----------------------------------------------------------------------

absl::Status CopyToDevice(const GpuStream& stream, void* device_dst,
                          const void* host_src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      device_dst, host_src, bytes, cudaMemcpyHostToDevice, StreamOf(stream)));
  return absl::OkStatus();
}

absl::Status CopyToHost(const GpuStream& stream, void* host_dst,
                        const void* device_src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      host_dst, device_src, bytes, cudaMemcpyDeviceToHost, StreamOf(stream)));
  return absl::OkStatus();
}

absl::Status CopyOnDevice(const GpuStream& stream, void* device_dst,
                          const void* device_src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_dst, device_src, bytes,
                                              cudaMemcpyDeviceToDevice,
                                              StreamOf(stream)));
  return absl::OkStatus();
}

absl::Status ZeroOnDevice(const GpuStream& stream, void* device_dst,
                          size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(device_dst, 0, bytes, StreamOf(stream)));
  return absl::OkStatus();
}

// Kernels ---------------------------------------------------------------------

absl::Status GpuGemm(const GpuStream& stream, bool trans_a, bool trans_b,
                     int64_t m, int64_t n, int64_t k, const float* a,
                     const float* b, float beta, float* c) {
  if (absl::Status s = CheckSizes("GpuGemm", m, n, k); !s.ok()) return s;
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GpuGemm: ", m, " x ", n, " x ", k, " exceeds cuBLAS's int sizes"));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  // Row-major C (m x n) is column-major C^T (n x m) = op(B)^T op(A)^T: hand
  // cuBLAS B first. A row-major matrix stored r x c is its column-major
  // transpose with leading dimension c.
  const int mi = static_cast<int>(m);
  const int ni = static_cast<int>(n);
  const int ki = static_cast<int>(k);
  const int ldb = trans_b ? (ki > 0 ? ki : 1) : ni;
  const int lda = trans_a ? mi : (ki > 0 ? ki : 1);
  const float alpha = 1.0f;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasSgemm(
      static_cast<cublasHandle_t>(stream.cublas_handle()),
      trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      ni, mi, ki, &alpha, b, ldb, a, lda, &beta, c, ni));
  return absl::OkStatus();
}

absl::Status GpuBiasAdd(const GpuStream& stream, float* z, const float* bias,
                        int64_t rows, int64_t cols) {
  if (absl::Status s = CheckSizes("GpuBiasAdd", rows, cols); !s.ok()) return s;
  if (rows == 0 || cols == 0) return absl::OkStatus();
  const int64_t n = rows * cols;
  BiasAddKernel<<<BlocksFor(n), kThreads, 0, StreamOf(stream)>>>(z, bias, rows,
                                                                 cols);
  STRATA_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status GpuBiasGrad(const GpuStream& stream, const float* dz,
                         int64_t rows, int64_t cols, float* db) {
  if (absl::Status s = CheckSizes("GpuBiasGrad", rows, cols); !s.ok()) return s;
  if (cols == 0) return absl::OkStatus();
  if (rows == 0) return ZeroOnDevice(stream, db, cols * sizeof(float));
  BiasGradKernel<<<BlocksFor(cols), kThreads, 0, StreamOf(stream)>>>(
      dz, rows, cols, db);
  STRATA_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status GpuActivationForward(const GpuStream& stream,
                                  GpuActivation activation, float* z,
                                  int64_t rows, int64_t cols) {
  if (absl::Status s = CheckSizes("GpuActivationForward", rows, cols);
      !s.ok()) {
    return s;
  }
  if (rows == 0 || cols == 0 || activation == GpuActivation::kLinear) {
    return absl::OkStatus();
  }
  if (activation == GpuActivation::kSoftmax) {
    SoftmaxKernel<<<BlocksFor(rows), kThreads, 0, StreamOf(stream)>>>(z, rows,
                                                                      cols);
  } else {
    const int64_t n = rows * cols;
    ElementwiseActivationKernel<<<BlocksFor(n), kThreads, 0,
                                  StreamOf(stream)>>>(activation, z, n);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status GpuActivationBackward(const GpuStream& stream,
                                   GpuActivation activation, const float* a,
                                   float* g, int64_t rows, int64_t cols) {
  if (absl::Status s = CheckSizes("GpuActivationBackward", rows, cols);
      !s.ok()) {
    return s;
  }
  if (rows == 0 || cols == 0 || activation == GpuActivation::kLinear) {
    return absl::OkStatus();
  }
  if (activation == GpuActivation::kSoftmax) {
    SoftmaxBackwardKernel<<<BlocksFor(rows), kThreads, 0, StreamOf(stream)>>>(
        a, g, rows, cols);
  } else {
    const int64_t n = rows * cols;
    ElementwiseActivationBackwardKernel<<<BlocksFor(n), kThreads, 0,
                                          StreamOf(stream)>>>(activation, a,
                                                              g, n);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status GpuDropoutMask(const GpuStream& stream, uint64_t seed,
                            uint64_t layer, double rate, float* mask,
                            int64_t n) {
  if (absl::Status s = CheckSizes("GpuDropoutMask", n); !s.ok()) return s;
  if (!(rate >= 0.0 && rate < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GpuDropoutMask: rate ", rate, " is not in [0, 1)"));
  }
  if (n == 0) return absl::OkStatus();
  // The host parts of worker/model.cc's FillDropoutMask, computed the same
  // way here (the device does only integer work and a select).
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  const uint64_t key = mix(seed ^ mix(layer + 0x5bd1e995ULL));
  const float keep_scale = static_cast<float>(1.0 / (1.0 - rate));
  const uint64_t threshold =
      static_cast<uint64_t>(std::ceil(rate * 16777216.0));
  DropoutMaskKernel<<<BlocksFor(n), kThreads, 0, StreamOf(stream)>>>(
      key, threshold, keep_scale, mask, n);
  STRATA_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status GpuMultiply(const GpuStream& stream, const float* a,
                         const float* b, float* out, int64_t n) {
  if (absl::Status s = CheckSizes("GpuMultiply", n); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  MultiplyKernel<<<BlocksFor(n), kThreads, 0, StreamOf(stream)>>>(a, b, out,
                                                                  n);
  STRATA_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

absl::Status GpuLossForward(const GpuStream& stream, GpuLoss loss,
                            const float* out, const int32_t* labels,
                            int64_t batch, int64_t classes, int64_t mean_over,
                            float* grad, double* example_loss,
                            int32_t* example_correct, double* sums) {
  if (absl::Status s = CheckSizes("GpuLossForward", batch, classes, mean_over);
      !s.ok()) {
    return s;
  }
  if (batch == 0) return absl::OkStatus();
  if (classes < 1 || mean_over < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GpuLossForward: classes (", classes, ") and mean_over (",
                     mean_over, ") must be >= 1"));
  }
  const float inv = 1.0f / static_cast<float>(mean_over);
  LossKernel<<<BlocksFor(batch), kThreads, 0, StreamOf(stream)>>>(
      loss, out, labels, batch, classes, inv, grad, example_loss,
      example_correct);
  STRATA_CUDA_CHECK_LAUNCH();
  SumKernel<<<1, kThreads, 0, StreamOf(stream)>>>(example_loss,
                                                  example_correct, batch, sums);
  STRATA_CUDA_CHECK_LAUNCH();
  return absl::OkStatus();
}

}  // namespace strata

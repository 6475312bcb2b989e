// Dense-layer building blocks on a CUDA device: row-major SGEMM through
// cuBLAS, bias add and bias gradient, activations and their backward passes,
// softmax, dropout masks, and the losses with their gradients and accuracy
// counts. Built only with STRATA_WITH_CUDA (library `strata_cuda_dense`).
//
// This header is plain C++ (no CUDA include): host code passes device
// pointers it got from DeviceMemory, and the CUDA handles stay opaque.
//
// Every function below enqueues its work on `stream` and returns without
// waiting; launch and argument errors come back as a Status (file and line
// of the failed CUDA or cuBLAS call), errors of the running kernels at the
// next GpuStream::Synchronize(). Matrices are row-major and dense. Sizes are
// checked (negative: INVALID_ARGUMENT); an empty operation is a no-op.
#ifndef STRATA_KERNELS_CUDA_DENSE_KERNELS_H_
#define STRATA_KERNELS_CUDA_DENSE_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

// As job/job.h's Activation (the kernels do not depend on the job library).
enum class GpuActivation { kLinear, kRelu, kSigmoid, kTanh, kSoftmax };

// The model's loss families: the (sparse) categorical cross-entropy over a
// softmax output, the binary cross-entropy over one sigmoid unit, and the
// mean squared error against one-hot labels (or the label itself for one
// output unit).
enum class GpuLoss { kCrossEntropy, kBinaryCrossEntropy, kMse };

// Checks that CUDA device `device` exists and can be used: a context is
// created on it. Errors: FAILED_PRECONDITION naming the CUDA error ("no
// usable CUDA device: cudaErrorNoDevice: ...") or the number of visible
// devices when `device` is out of range; INVALID_ARGUMENT for device < 0.
absl::Status CudaCheckDevice(int device);

// A CUDA stream and a cuBLAS handle bound to it, on one device. Not
// thread-safe: one per thread (cuBLAS handles must not be shared).
class GpuStream {
 public:
  // Errors: as CudaCheckDevice; RESOURCE_EXHAUSTED or INTERNAL when the
  // stream or the cuBLAS handle cannot be created.
  static absl::StatusOr<std::unique_ptr<GpuStream>> Create(int device);
  ~GpuStream();
  GpuStream(const GpuStream&) = delete;
  GpuStream& operator=(const GpuStream&) = delete;

  int device() const { return device_; }
  // Makes this stream's device current for the calling thread (the CUDA
  // runtime's current device is per thread). Call before a sequence of
  // operations when threads may have switched devices.
  absl::Status Activate() const;
  // Waits for everything enqueued; reports errors of kernels that ran.
  absl::Status Synchronize() const;

  // The opaque handles (cudaStream_t, cublasHandle_t), for kernel files.
  void* cuda_stream() const { return stream_; }
  void* cublas_handle() const { return blas_; }

 private:
  GpuStream() = default;
  int device_ = 0;
  void* stream_ = nullptr;
  void* blas_ = nullptr;
};

// A device allocation (cudaMalloc, never managed memory) that only grows.
// Thread-compatible. Must be destroyed while the device it was allocated on
// is usable (it frees on that device).
class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Ensures at least `bytes` are allocated on the current device; growing
  // loses the contents. Errors: RESOURCE_EXHAUSTED when memory runs out.
  absl::Status Reserve(size_t bytes);
  size_t capacity() const { return capacity_; }
  void* get() const { return ptr_; }
  float* floats() const { return static_cast<float*>(ptr_); }
  double* doubles() const { return static_cast<double*>(ptr_); }
  int32_t* ints() const { return static_cast<int32_t*>(ptr_); }

 private:
  void Free();
  void* ptr_ = nullptr;
  size_t capacity_ = 0;
};

// Asynchronous copies on `stream` (pageable host memory is fine; the host
// buffer must stay valid until the stream is synchronized).
absl::Status CopyToDevice(const GpuStream& stream, void* device_dst,
                          const void* host_src, size_t bytes);
absl::Status CopyToHost(const GpuStream& stream, void* host_dst,
                        const void* device_src, size_t bytes);
absl::Status CopyOnDevice(const GpuStream& stream, void* device_dst,
                          const void* device_src, size_t bytes);
absl::Status ZeroOnDevice(const GpuStream& stream, void* device_dst,
                          size_t bytes);

// c = op(a) * op(b) + beta * c, with op(a) m x k and op(b) k x n (row-major;
// op transposes when trans_*): a is stored m x k, or k x m when trans_a; b
// is stored k x n, or n x k when trans_b; c is m x n. Full FP32 (no TF32).
absl::Status GpuGemm(const GpuStream& stream, bool trans_a, bool trans_b,
                     int64_t m, int64_t n, int64_t k, const float* a,
                     const float* b, float beta, float* c);

// z[r][j] += bias[j] for a rows x cols z.
absl::Status GpuBiasAdd(const GpuStream& stream, float* z, const float* bias,
                        int64_t rows, int64_t cols);

// db[j] = sum over r of dz[r][j], summed in row order (deterministic).
absl::Status GpuBiasGrad(const GpuStream& stream, const float* dz,
                         int64_t rows, int64_t cols, float* db);

// z = activation(z) in place; softmax is per row, shifted by the row max.
absl::Status GpuActivationForward(const GpuStream& stream,
                                  GpuActivation activation, float* z,
                                  int64_t rows, int64_t cols);

// Turns d(loss)/d(output) in g into d(loss)/d(pre-activation) in place,
// given the activation's output a (same shape).
absl::Status GpuActivationBackward(const GpuStream& stream,
                                   GpuActivation activation, const float* a,
                                   float* g, int64_t rows, int64_t cols);

// Inverted-dropout mask of n elements: element e is 1 / (1 - rate) when
// kept, 0 when dropped, a pure function of (seed, layer, e) that equals
// FillDropoutMask's (worker/model.h) bit for bit. rate in [0, 1).
absl::Status GpuDropoutMask(const GpuStream& stream, uint64_t seed,
                            uint64_t layer, double rate, float* mask,
                            int64_t n);

// out[i] = a[i] * b[i] (out may be a or b).
absl::Status GpuMultiply(const GpuStream& stream, const float* a,
                         const float* b, float* out, int64_t n);

// The loss of each example of a batch x classes output `out` against int32
// `labels` (as worker/model.cc computes it, in double, probabilities
// clipped to [1e-7, 1 - 1e-7] for the cross-entropies) into
// example_loss[batch], whether it is classified correctly (argmax, first
// maximum on ties; a 0.5 threshold for one unit) into
// example_correct[batch], and adds their sums to sums[0] (loss) and
// sums[1] (correct count). When `grad` is not null, writes there
// d(loss sum / mean_over)/d(logits) for the cross-entropies (fused with
// their softmax / sigmoid) and d/d(output) for mse. Labels must be valid
// (checked by the caller).
absl::Status GpuLossForward(const GpuStream& stream, GpuLoss loss,
                            const float* out, const int32_t* labels,
                            int64_t batch, int64_t classes, int64_t mean_over,
                            float* grad, double* example_loss,
                            int32_t* example_correct, double* sums);

}  // namespace strata

#endif  // STRATA_KERNELS_CUDA_DENSE_KERNELS_H_

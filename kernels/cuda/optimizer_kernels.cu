#include "kernels/cuda/optimizer_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/cuda/device.h"

// Evaluates `expr` (a cudaError_t); on failure clears the thread's last
// error (so that a later launch check does not report this one) and returns
// the Status naming the expression, the error and this file:line.
#define STRATA_CUDA_CHECK(expr)                                               \
  do {                                                                        \
    const cudaError_t strata_cuda_err_ = (expr);                              \
    if (strata_cuda_err_ != cudaSuccess) {                                    \
      cudaGetLastError();                                                     \
      return ::strata::CudaErrorToStatus(static_cast<int>(strata_cuda_err_),  \
                                         #expr, __FILE__, __LINE__);          \
    }                                                                         \
  } while (0)

namespace strata {
namespace {

// The most slots an optimizer uses (Adam with amsgrad, centered RMSprop with
// momentum), as in kernels/optimizers.cc.
constexpr int kMaxSlots = 3;
constexpr int kThreads = 256;
// Grid-stride loops: a grid never needs more blocks than this to cover any
// size; larger sizes loop.
constexpr int64_t kMaxBlocks = 65535;

int BlocksFor(int64_t elements) {
  return static_cast<int>(
      std::min<int64_t>((elements + kThreads - 1) / kThreads, kMaxBlocks));
}

template <typename T>
struct Slots {
  T* p[kMaxSlots];
};

// Correctly rounded square roots (nvcc's default -prec-sqrt=true), as the
// CPU's.
__device__ inline float Sqrt(float x) { return sqrtf(x); }
__device__ inline double Sqrt(double x) { return sqrt(x); }

// ---------------------------------------------------------------------------
// Element operations. Each mirrors its kernel in kernels/optimizers.cc
// expression by expression (same association order, hyper-parameters cast to
// T where the CPU casts them), so that results agree up to the device's
// fused multiply-adds. `vi` indexes var and the slots, `gi` the gradient.

template <typename T>
struct SgdOp {
  T lr;
  T momentum;
  bool use_momentum;  // momentum > 0: one slot
  bool nesterov;

  __device__ void operator()(T* var, const Slots<T>& s, const T* grad,
                             int64_t vi, int64_t gi) const {
    const T g = grad[gi];
    if (!use_momentum) {
      var[vi] -= lr * g;
      return;
    }
    const T m = momentum * s.p[0][vi] - lr * g;
    s.p[0][vi] = m;
    if (nesterov) {
      var[vi] += momentum * m - lr * g;
    } else {
      var[vi] += m;
    }
  }
};

template <typename T>
struct AdamOp {
  T alpha;  // lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), computed in double
  T one_minus_beta_1;
  T one_minus_beta_2;
  T epsilon;
  bool amsgrad;

  __device__ void operator()(T* var, const Slots<T>& s, const T* grad,
                             int64_t vi, int64_t gi) const {
    const T g = grad[gi];
    T m = s.p[0][vi];
    T v = s.p[1][vi];
    m += (g - m) * one_minus_beta_1;
    v += (g * g - v) * one_minus_beta_2;
    s.p[0][vi] = m;
    s.p[1][vi] = v;
    if (amsgrad) {
      const T old = s.p[2][vi];
      const T vhat = old < v ? v : old;  // Eigen's max(vhat, v)
      s.p[2][vi] = vhat;
      var[vi] -= alpha * m / (Sqrt(vhat) + epsilon);
    } else {
      var[vi] -= alpha * m / (Sqrt(v) + epsilon);
    }
  }
};

template <typename T>
struct AdagradOp {
  T lr;
  T epsilon;

  __device__ void operator()(T* var, const Slots<T>& s, const T* grad,
                             int64_t vi, int64_t gi) const {
    const T g = grad[gi];
    const T acc = s.p[0][vi] + g * g;
    s.p[0][vi] = acc;
    var[vi] -= lr * g / (Sqrt(acc) + epsilon);
  }
};

template <typename T>
struct RmspropOp {
  T lr;
  T rho;
  T one_minus_rho;  // (T)(1.0 - rho), as the CPU computes it
  T momentum;
  T epsilon;
  bool use_momentum;  // momentum > 0
  bool centered;
  int momentum_slot;  // valid when use_momentum
  int average_slot;   // valid when centered

  __device__ void operator()(T* var, const Slots<T>& s, const T* grad,
                             int64_t vi, int64_t gi) const {
    const T g = grad[gi];
    const T velocity = rho * s.p[0][vi] + one_minus_rho * (g * g);
    s.p[0][vi] = velocity;
    T denominator;
    if (centered) {
      const T average = rho * s.p[average_slot][vi] + one_minus_rho * g;
      s.p[average_slot][vi] = average;
      denominator = velocity - average * average + epsilon;
    } else {
      denominator = velocity + epsilon;
    }
    if (use_momentum) {
      const T mom =
          momentum * s.p[momentum_slot][vi] + lr * g / Sqrt(denominator);
      s.p[momentum_slot][vi] = mom;
      var[vi] -= mom;
    } else {
      var[vi] -= lr * g / Sqrt(denominator);
    }
  }
};

template <typename T>
struct AssignAddOp {
  __device__ void operator()(T* var, const Slots<T>& /*s*/, const T* grad,
                             int64_t vi, int64_t gi) const {
    if constexpr (std::is_integral_v<T>) {
      // Wraps on overflow (as TF's integer add) without signed-overflow UB.
      using U = std::make_unsigned_t<T>;
      var[vi] = static_cast<T>(static_cast<U>(var[vi]) +
                               static_cast<U>(grad[gi]));
    } else {
      var[vi] += grad[gi];
    }
  }
};

template <typename T>
struct AssignOp {
  __device__ void operator()(T* var, const Slots<T>& /*s*/, const T* grad,
                             int64_t vi, int64_t gi) const {
    var[vi] = grad[gi];
  }
};

// ---------------------------------------------------------------------------
// Kernels: grid-stride loops over the elements.

template <typename T, typename Op>
__global__ void DenseKernel(Op op, T* var, Slots<T> slots, const T* grad,
                            int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    op(var, slots, grad, i, i);
  }
}

// Element e of the packed rows is column e % width of row ids[e / width].
template <typename T, typename Op>
__global__ void SparseKernel(Op op, T* var, Slots<T> slots,
                             const int64_t* ids, const T* grad,
                             int64_t num_ids, int64_t width) {
  const int64_t total = num_ids * width;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       e < total; e += stride) {
    const int64_t row = e / width;
    const int64_t col = e - row * width;
    op(var, slots, grad, ids[row] * width + col, e);
  }
}

template <typename U>
__global__ void GatherKernel(const U* var, const int64_t* ids, int64_t num_ids,
                             int64_t width, U* out) {
  const int64_t total = num_ids * width;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       e < total; e += stride) {
    const int64_t row = e / width;
    const int64_t col = e - row * width;
    out[e] = var[ids[row] * width + col];
  }
}

absl::Status CheckLaunch(const char* what, const char* file, int line) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return absl::OkStatus();
  return CudaErrorToStatus(static_cast<int>(error), what, file, line);
}

// What one apply call works on (device pointers).
struct Work {
  void* var;
  absl::Span<void* const> slots;
  const void* grad;
  const int64_t* ids;  // null: dense
  int64_t count;       // dense: elements; sparse: rows
  int64_t width;       // sparse: row width
  CudaStreamHandle stream;

  int64_t elements() const { return ids == nullptr ? count : count * width; }
};

template <typename T, typename Op>
absl::Status Launch(const Op& op, const Work& w) {
  Slots<T> s{};
  for (size_t k = 0; k < w.slots.size(); ++k) {
    s.p[k] = static_cast<T*>(w.slots[k]);
  }
  const int64_t total = w.elements();
  if (total == 0) return absl::OkStatus();
  const int blocks = BlocksFor(total);
  if (w.ids == nullptr) {
    DenseKernel<T, Op><<<blocks, kThreads, 0, w.stream>>>(
        op, static_cast<T*>(w.var), s, static_cast<const T*>(w.grad), total);
    return CheckLaunch("DenseKernel<<<...>>>", __FILE__, __LINE__);
  }
  SparseKernel<T, Op><<<blocks, kThreads, 0, w.stream>>>(
      op, static_cast<T*>(w.var), s, w.ids, static_cast<const T*>(w.grad),
      w.count, w.width);
  return CheckLaunch("SparseKernel<<<...>>>", __FILE__, __LINE__);
}

// `c` is validated and has its defaults filled (Optimizer::config()).
template <typename T>
absl::Status LaunchFor(const OptimizerConfig& c, int64_t iterations,
                       const Work& w) {
  constexpr bool kFloat = std::is_floating_point_v<T>;
  switch (c.type) {
    case OptimizerType::kSgd:
      if constexpr (kFloat) {
        return Launch<T>(SgdOp<T>{static_cast<T>(c.learning_rate),
                                  static_cast<T>(c.momentum), c.momentum > 0,
                                  c.nesterov},
                         w);
      } else {
        break;
      }
    case OptimizerType::kAdam:
      if constexpr (kFloat) {
        // As Adam::MakeKernel: in double, then cast.
        const double t = static_cast<double>(iterations) + 1.0;
        const double alpha = c.learning_rate *
                             std::sqrt(1.0 - std::pow(c.beta_2, t)) /
                             (1.0 - std::pow(c.beta_1, t));
        return Launch<T>(
            AdamOp<T>{static_cast<T>(alpha), static_cast<T>(1.0 - c.beta_1),
                      static_cast<T>(1.0 - c.beta_2),
                      static_cast<T>(c.epsilon), c.amsgrad},
            w);
      } else {
        break;
      }
    case OptimizerType::kAdagrad:
      if constexpr (kFloat) {
        return Launch<T>(AdagradOp<T>{static_cast<T>(c.learning_rate),
                                      static_cast<T>(c.epsilon)},
                         w);
      } else {
        break;
      }
    case OptimizerType::kRmsprop:
      if constexpr (kFloat) {
        RmspropOp<T> op{};
        op.lr = static_cast<T>(c.learning_rate);
        op.rho = static_cast<T>(c.rho);
        op.one_minus_rho = static_cast<T>(1.0 - c.rho);
        op.momentum = static_cast<T>(c.momentum);
        op.epsilon = static_cast<T>(c.epsilon);
        op.use_momentum = c.momentum > 0;
        op.centered = c.centered;
        op.momentum_slot = 1;
        op.average_slot = c.momentum > 0 ? 2 : 1;
        return Launch<T>(op, w);
      } else {
        break;
      }
    case OptimizerType::kAssignAdd:
      return Launch<T>(AssignAddOp<T>{}, w);
    case OptimizerType::kAssign:
      return Launch<T>(AssignOp<T>{}, w);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "optimizer ", OptimizerTypeName(c.type), " has no kernel for ",
      kFloat ? "this floating type" : "integers"));
}

// Validates like the CPU optimizers (kernels/optimizers.cc) and dispatches.
absl::Status Apply(const OptimizerConfig& config, DType dtype,
                   int64_t iterations, const Work& w) {
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
      Optimizer::Create(config);
  if (!optimizer.ok()) return optimizer.status();
  const OptimizerConfig& c = (*optimizer)->config();
  const bool integer_ok = c.type == OptimizerType::kAssignAdd ||
                          c.type == OptimizerType::kAssign;
  const bool integer = dtype == DType::kInt32 || dtype == DType::kInt64;
  if (!IsFloating(dtype) && !(integer_ok && integer)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer ", OptimizerTypeName(c.type), " does not support dtype ",
        DTypeName(dtype), "; allowed: ",
        integer_ok ? "float32, float64, int32, int64" : "float32, float64"));
  }
  if (iterations < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("iterations must be >= 0, got ", iterations));
  }
  const size_t num_slots = (*optimizer)->SlotNames().size();
  if (w.slots.size() != num_slots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer ", OptimizerTypeName(c.type), " expects ", num_slots,
        " slot(s), got ", w.slots.size()));
  }
  if (w.count < 0 || w.width < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(w.ids == nullptr ? "element count" : "row count/width",
                     " must be >= 0, got ", w.count, "/", w.width));
  }
  if (w.elements() == 0) return absl::OkStatus();
  if (w.var == nullptr || w.grad == nullptr) {
    return absl::InvalidArgumentError("variable or gradient pointer is null");
  }
  for (size_t k = 0; k < w.slots.size(); ++k) {
    if (w.slots[k] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot pointer ", k, " is null"));
    }
  }
  switch (dtype) {
    case DType::kFloat32:
      return LaunchFor<float>(c, iterations, w);
    case DType::kFloat64:
      return LaunchFor<double>(c, iterations, w);
    case DType::kInt32:
      return LaunchFor<int32_t>(c, iterations, w);
    case DType::kInt64:
      return LaunchFor<int64_t>(c, iterations, w);
    case DType::kInvalid:
      break;
  }
  return absl::InvalidArgumentError("invalid dtype");
}

}  // namespace

// ---------------------------------------------------------------------------
// Devices.

double CudaDeviceInfo::peak_memory_GBps() const {
  return 2.0 * static_cast<double>(memory_clock_khz) * 1e3 *
         (memory_bus_width_bits / 8.0) / 1e9;
}

std::string CudaDeviceInfo::Description() const {
  return absl::StrFormat("cuda:%d (%s, sm_%d%d, %.1f GiB)", index, name,
                         compute_major, compute_minor,
                         static_cast<double>(total_memory_bytes) /
                             (1024.0 * 1024.0 * 1024.0));
}

absl::Status CudaSetDevice(int index) {
  STRATA_ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  if (index < 0 || index >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", index, " does not exist: ", count,
        " device(s) visible (cuda:0 to cuda:", count - 1, ")"));
  }
  STRATA_CUDA_CHECK(cudaSetDevice(index));
  return absl::OkStatus();
}

absl::StatusOr<CudaDeviceInfo> CudaProbeDevice(int index) {
  STRATA_RETURN_IF_ERROR(CudaSetDevice(index));
  // Creates the primary context (the first call that needs one).
  STRATA_CUDA_CHECK(cudaFree(nullptr));
  // The kernels must have an image this device runs (SASS for its
  // architecture, or PTX it can JIT).
  cudaFuncAttributes attributes;
  const cudaError_t image = cudaFuncGetAttributes(
      &attributes, DenseKernel<float, AdamOp<float>>);
  if (image != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", index, " cannot run this build's kernels: ",
        cudaGetErrorName(image), ": ", cudaGetErrorString(image),
        " (set CMAKE_CUDA_ARCHITECTURES to include its architecture)"));
  }
  cudaDeviceProp prop;
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  CudaDeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.multiprocessors = prop.multiProcessorCount;
  int clock_khz = 0, bus_bits = 0;
  STRATA_CUDA_CHECK(
      cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, index));
  STRATA_CUDA_CHECK(cudaDeviceGetAttribute(
      &bus_bits, cudaDevAttrGlobalMemoryBusWidth, index));
  info.memory_clock_khz = clock_khz;
  info.memory_bus_width_bits = bus_bits;
  return info;
}

// ---------------------------------------------------------------------------
// Memory, streams, events.

absl::StatusOr<DeviceArray> DeviceArray::Allocate(size_t bytes) {
  DeviceArray a;
  if (bytes == 0) return a;
  STRATA_CUDA_CHECK(cudaMalloc(&a.ptr_, bytes));
  a.size_ = bytes;
  return a;
}

DeviceArray::DeviceArray(DeviceArray&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

DeviceArray& DeviceArray::operator=(DeviceArray&& other) noexcept {
  if (this != &other) {
    DeviceArray old(std::move(*this));
    ptr_ = std::exchange(other.ptr_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceArray::~DeviceArray() {
  if (ptr_ != nullptr && cudaFree(ptr_) != cudaSuccess) cudaGetLastError();
}

absl::StatusOr<PinnedHostBuffer> PinnedHostBuffer::Allocate(size_t bytes) {
  PinnedHostBuffer b;
  if (bytes == 0) return b;
  void* p = nullptr;
  STRATA_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  b.data_ = static_cast<char*>(p);
  b.size_ = bytes;
  return b;
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(
    PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    PinnedHostBuffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

PinnedHostBuffer::~PinnedHostBuffer() {
  if (data_ != nullptr && cudaFreeHost(data_) != cudaSuccess) {
    cudaGetLastError();
  }
}

absl::StatusOr<HostRegistration> HostRegistration::Register(void* data,
                                                            size_t bytes) {
  HostRegistration r;
  if (data == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("cannot register an empty host range");
  }
  STRATA_CUDA_CHECK(cudaHostRegister(data, bytes, cudaHostRegisterPortable));
  r.data_ = data;
  return r;
}

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)) {}

HostRegistration& HostRegistration::operator=(
    HostRegistration&& other) noexcept {
  if (this != &other) {
    HostRegistration old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

HostRegistration::~HostRegistration() {
  if (data_ != nullptr && cudaHostUnregister(data_) != cudaSuccess) {
    cudaGetLastError();
  }
}

absl::StatusOr<CudaStream> CudaStream::Create() {
  CudaStream s;
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking));
  return s;
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    CudaStream old(std::move(*this));
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr && cudaStreamDestroy(stream_) != cudaSuccess) {
    cudaGetLastError();
  }
}

absl::Status CudaStream::Synchronize() const {
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::StatusOr<CudaEvent> CudaEvent::Create(bool timing) {
  CudaEvent e;
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(
      &e.event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    CudaEvent old(std::move(*this));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr && cudaEventDestroy(event_) != cudaSuccess) {
    cudaGetLastError();
  }
}

absl::Status CudaEvent::Record(CudaStreamHandle stream) const {
  STRATA_CUDA_CHECK(cudaEventRecord(event_, stream));
  return absl::OkStatus();
}

absl::Status CudaEvent::Synchronize() const {
  STRATA_CUDA_CHECK(cudaEventSynchronize(event_));
  return absl::OkStatus();
}

absl::StatusOr<float> CudaEvent::ElapsedMsSince(const CudaEvent& start) const {
  float ms = 0;
  STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

absl::Status CudaCopyToDevice(void* device_dst, const void* host_src,
                              size_t bytes, CudaStreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  STRATA_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes,
                                    cudaMemcpyHostToDevice, stream));
  return absl::OkStatus();
}

absl::Status CudaCopyToHost(void* host_dst, const void* device_src,
                            size_t bytes, CudaStreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  STRATA_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes,
                                    cudaMemcpyDeviceToHost, stream));
  return absl::OkStatus();
}

absl::Status CudaCopyOnDevice(void* device_dst, const void* device_src,
                              size_t bytes, CudaStreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  STRATA_CUDA_CHECK(cudaMemcpyAsync(device_dst, device_src, bytes,
                                    cudaMemcpyDeviceToDevice, stream));
  return absl::OkStatus();
}

absl::Status CudaZero(void* device_dst, size_t bytes, CudaStreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  STRATA_CUDA_CHECK(cudaMemsetAsync(device_dst, 0, bytes, stream));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Optimizer steps.

absl::Status CudaApplyDense(const OptimizerConfig& config, DType dtype,
                            int64_t iterations, void* var,
                            absl::Span<void* const> slots, const void* grad,
                            int64_t n, CudaStreamHandle stream) {
  return Apply(config, dtype, iterations,
               Work{var, slots, grad, nullptr, n, 0, stream});
}

absl::Status CudaApplySparse(const OptimizerConfig& config, DType dtype,
                             int64_t iterations, void* var,
                             absl::Span<void* const> slots, const int64_t* ids,
                             int64_t num_ids, const void* grad,
                             int64_t row_width, CudaStreamHandle stream) {
  if (num_ids > 0 && row_width > 0 && ids == nullptr) {
    return absl::InvalidArgumentError("row id pointer is null");
  }
  if (ids == nullptr) {
    // Nothing to update (num_ids or row_width is 0): still validate.
    return Apply(config, dtype, iterations,
                 Work{var, slots, grad, nullptr, 0, 0, stream});
  }
  return Apply(config, dtype, iterations,
               Work{var, slots, grad, ids, num_ids, row_width, stream});
}

absl::Status CudaGatherRows(DType dtype, const void* var, const int64_t* ids,
                            int64_t num_ids, int64_t row_width, void* out,
                            CudaStreamHandle stream) {
  const size_t elem = DTypeSize(dtype);
  if (elem != 4 && elem != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot gather rows of dtype ", DTypeName(dtype)));
  }
  if (num_ids < 0 || row_width < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row count and width must be >= 0, got ", num_ids, "/", row_width));
  }
  const int64_t total = num_ids * row_width;
  if (total == 0) return absl::OkStatus();
  if (var == nullptr || ids == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("null pointer in CudaGatherRows");
  }
  const int blocks = BlocksFor(total);
  if (elem == 4) {
    GatherKernel<uint32_t><<<blocks, kThreads, 0, stream>>>(
        static_cast<const uint32_t*>(var), ids, num_ids, row_width,
        static_cast<uint32_t*>(out));
  } else {
    GatherKernel<uint64_t><<<blocks, kThreads, 0, stream>>>(
        static_cast<const uint64_t*>(var), ids, num_ids, row_width,
        static_cast<uint64_t*>(out));
  }
  return CheckLaunch("GatherKernel<<<...>>>", __FILE__, __LINE__);
}

}  // namespace strata

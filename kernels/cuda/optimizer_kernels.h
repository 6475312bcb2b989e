// The server-side optimizers (kernels/optimizers.h) as CUDA kernels over
// device memory, and the small CUDA runtime wrappers their users need:
// device memory, pinned host memory, streams and events, all RAII and
// status-checked. Built only with STRATA_WITH_CUDA, in the
// `strata_cuda_optimizers` library.
//
// This header is plain C++ (no CUDA include): host code compiled by the host
// compiler calls it. Every CUDA failure comes back as a Status naming the
// call, the CUDA error and the file:line (see CudaErrorToStatus); the
// thread's "last error" is cleared when a call fails, so a later launch check
// does not report an earlier failure. No managed (unified) memory is used.
//
// Thread-safety: the functions use the calling thread's current device (see
// CudaSetDevice). Objects are thread-compatible; a stream may be used from
// several threads as the CUDA runtime allows.
#ifndef STRATA_KERNELS_CUDA_OPTIMIZER_KERNELS_H_
#define STRATA_KERNELS_CUDA_OPTIMIZER_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "kernels/optimizers.h"

// cudaStream_t and cudaEvent_t are pointers to these opaque types.
struct CUstream_st;
struct CUevent_st;

namespace strata {

using CudaStreamHandle = CUstream_st*;  // a cudaStream_t; nullptr: default

// What the benchmark and the PS log need to know about a device.
struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int64_t total_memory_bytes = 0;
  int64_t memory_clock_khz = 0;  // peak memory clock (0 if unknown)
  int memory_bus_width_bits = 0;
  int multiprocessors = 0;
  // 2 * clock * bus width / 8: the peak DRAM bandwidth the driver reports
  // (double data rate), in GB/s (1e9 bytes); 0 if unknown.
  double peak_memory_GBps() const;
  // "cuda:0 (NVIDIA H200, sm_90, 139.8 GiB)".
  std::string Description() const;
};

// Makes device `index` current for the calling thread.
// Errors: FAILED_PRECONDITION without a usable device or for an index not
// below the device count (naming both).
absl::Status CudaSetDevice(int index);

// Checks that device `index` exists, can be made current, has a context and
// runs this library's kernels (built for its architecture), and describes it.
// Leaves `index` current. Errors: FAILED_PRECONDITION "no usable CUDA
// device: <CUDA error name>: <text>" (no driver, no device), or naming the
// index and the device count, or the missing kernel image.
absl::StatusOr<CudaDeviceInfo> CudaProbeDevice(int index);

// Device memory from cudaMalloc, freed on destruction. Move-only.
class DeviceArray {
 public:
  DeviceArray() = default;
  // `bytes` may be 0 (get() is then null). Errors: RESOURCE_EXHAUSTED when
  // device memory runs out; FAILED_PRECONDITION without a device.
  static absl::StatusOr<DeviceArray> Allocate(size_t bytes);
  DeviceArray(DeviceArray&& other) noexcept;
  DeviceArray& operator=(DeviceArray&& other) noexcept;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray();

  void* get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// Page-locked host memory from cudaHostAlloc (portable), for transfers the
// copy engines can run without an intermediate copy. Move-only.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  // Errors: RESOURCE_EXHAUSTED, FAILED_PRECONDITION without a device.
  static absl::StatusOr<PinnedHostBuffer> Allocate(size_t bytes);
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  ~PinnedHostBuffer();

  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

// Page-locks an existing host range (cudaHostRegister) until destruction,
// which must come before the memory is freed. Move-only.
class HostRegistration {
 public:
  HostRegistration() = default;
  // Errors: those of cudaHostRegister (for example a range overlapping one
  // already registered: INTERNAL naming cudaErrorHostMemoryAlreadyRegistered).
  static absl::StatusOr<HostRegistration> Register(void* data, size_t bytes);
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  ~HostRegistration();

  bool registered() const { return data_ != nullptr; }

 private:
  void* data_ = nullptr;
};

// A non-blocking stream (does not synchronize with the legacy default
// stream), destroyed on destruction. Move-only.
class CudaStream {
 public:
  CudaStream() = default;
  static absl::StatusOr<CudaStream> Create();
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream();

  CudaStreamHandle get() const { return stream_; }
  // Waits for all work queued on the stream; reports its asynchronous errors.
  absl::Status Synchronize() const;

 private:
  CudaStreamHandle stream_ = nullptr;
};

// An event; `timing` enables ElapsedMs. Move-only.
class CudaEvent {
 public:
  CudaEvent() = default;
  static absl::StatusOr<CudaEvent> Create(bool timing = false);
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();

  absl::Status Record(CudaStreamHandle stream) const;
  absl::Status Synchronize() const;
  // Milliseconds between `start` and this event (both recorded, completed,
  // created with timing).
  absl::StatusOr<float> ElapsedMsSince(const CudaEvent& start) const;

 private:
  CUevent_st* event_ = nullptr;
};

// Asynchronous copies on `stream` (synchronous with respect to the host
// when the host side is pageable). `bytes` == 0 is a no-op.
absl::Status CudaCopyToDevice(void* device_dst, const void* host_src,
                              size_t bytes, CudaStreamHandle stream);
absl::Status CudaCopyToHost(void* host_dst, const void* device_src,
                            size_t bytes, CudaStreamHandle stream);
absl::Status CudaCopyOnDevice(void* device_dst, const void* device_src,
                              size_t bytes, CudaStreamHandle stream);
// Sets `bytes` bytes of device memory to zero, on `stream`.
absl::Status CudaZero(void* device_dst, size_t bytes, CudaStreamHandle stream);

// One optimizer step on device memory, with kernels/optimizers.cc's formulas
// (Keras's): `config` as given to Optimizer::Create (it is validated and its
// defaults filled the same way), `iterations` the applies made before this
// one. `var`, each slot (in Optimizer::SlotNames() order, initialized as
// SlotInitialValue says) and `grad` are device pointers to `n` elements of
// `dtype`: float32 or float64; int32 and int64 too for assign_add (which
// wraps on overflow) and assign. The work is queued on `stream`; this call
// does not wait for it.
// Errors: INVALID_ARGUMENT (config, dtype, slot count, n < 0, null pointer
// with n > 0), and the CUDA launch errors.
absl::Status CudaApplyDense(const OptimizerConfig& config, DType dtype,
                            int64_t iterations, void* var,
                            absl::Span<void* const> slots, const void* grad,
                            int64_t n, CudaStreamHandle stream);

// Sparse (row) step on a 2-D variable of `row_width` columns: row ids[i] of
// var and of each slot is updated with row i of `grad` (num_ids rows).
// `ids` is a device pointer; the ids must be unique and in range (the caller
// checks and sums duplicates, as for Optimizer::ApplySparse). Rows not named
// are left untouched. Errors as CudaApplyDense.
absl::Status CudaApplySparse(const OptimizerConfig& config, DType dtype,
                             int64_t iterations, void* var,
                             absl::Span<void* const> slots, const int64_t* ids,
                             int64_t num_ids, const void* grad,
                             int64_t row_width, CudaStreamHandle stream);

// out row i = var row ids[i], for i < num_ids (device pointers; ids in
// range). Errors: INVALID_ARGUMENT for a bad dtype or sizes; launch errors.
absl::Status CudaGatherRows(DType dtype, const void* var, const int64_t* ids,
                            int64_t num_ids, int64_t row_width, void* out,
                            CudaStreamHandle stream);

}  // namespace strata

#endif  // STRATA_KERNELS_CUDA_OPTIMIZER_KERNELS_H_

// collective/nccl.h with CUDA and NCCL (built only where kernels/cuda/nccl.cmake
// found NCCL). No device code: the CUDA runtime and NCCL host APIs only.
#include "collective/nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/nccl_status.h"

namespace strata {
namespace collective {
namespace {

// How long the destructor waits for a rank's stream to drain before it
// leaks that rank's buffers rather than free memory the GPU may still use.
constexpr absl::Duration kDrainLimit = absl::Seconds(10);

bool ToNcclType(DType dtype, ncclDataType_t* out) {
  switch (dtype) {
    case DType::kFloat32:
      *out = ncclFloat32;
      return true;
    case DType::kFloat64:
      *out = ncclFloat64;
      return true;
    case DType::kInt32:
      *out = ncclInt32;
      return true;
    case DType::kInt64:
      *out = ncclInt64;
      return true;
    default:
      return false;
  }
}

// Restores the calling thread's current CUDA device on scope exit.
class DeviceRestorer {
 public:
  DeviceRestorer() {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
  }
  ~DeviceRestorer() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceRestorer(const DeviceRestorer&) = delete;
  DeviceRestorer& operator=(const DeviceRestorer&) = delete;

 private:
  int previous_ = -1;
};

// Waits between polls of a stream: a few yields (a small all-reduce ends in
// microseconds), then short sleeps.
class Backoff {
 public:
  void Wait() {
    if (++polls_ < 64) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(absl::Microseconds(50));
    }
  }

 private:
  int polls_ = 0;
};

class NcclGroupImpl : public NcclGroup {
 public:
  NcclGroupImpl(std::vector<int> devices, const CollectiveOptions& options)
      : devices_(std::move(devices)),
        timeout_(options.timeout),
        ranks_(devices_.size()),
        comms_(devices_.size(), nullptr),
        calls_(devices_.size()) {}
  ~NcclGroupImpl() override;

  // Streams, then the communicators.
  absl::Status Init();

  int size() const override { return static_cast<int>(devices_.size()); }
  int device(int rank) const override {
    return devices_[static_cast<size_t>(rank)];
  }
  absl::Status AllReduce(int rank, DType dtype, void* data, int64_t count,
                         NcclReduce op) override;
  void Abort(const absl::Status& reason) override {
    absl::MutexLock lock(&mu_);
    AbortLocked(reason);
  }

 private:
  // One rank's CUDA resources, used only by that rank's thread (one at a
  // time, per the class contract) and by the destructor.
  struct Rank {
    cudaStream_t stream = nullptr;  // blocking: ordered after the legacy stream
    void* device_buffer = nullptr;  // staging of host data
    size_t device_bytes = 0;
    void* pinned = nullptr;  // page-locked, so copies from it are async
    size_t pinned_bytes = 0;
    int64_t next_op = 0;     // this rank's calls so far
    bool in_flight = false;  // GPU work queued and not yet seen done
  };

  // One rank's arrival at the rendezvous.
  struct Call {
    bool arrived = false;
    DType dtype = DType::kInvalid;
    int64_t count = 0;
    NcclReduce op = NcclReduce::kSum;
    void* device_data = nullptr;  // on the rank's GPU
  };

  absl::Status AllReduceOnRank(int rank, DType dtype, void* data, int64_t count,
                               NcclReduce op, absl::Time deadline);
  // Grows a staging buffer to `bytes` (freeing the old one first).
  absl::Status EnsureBuffers(Rank& r, size_t bytes);
  // Arrives with `call` for op `index` and waits until the last rank
  // launched it, the group aborted, or `deadline`.
  absl::Status Rendezvous(int rank, int64_t index, const Call& call,
                          absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Launches every rank's all-reduce in one NCCL group call.
  absl::Status LaunchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until the rank's stream ran everything queued, checking the
  // communicator for asynchronous errors, until `deadline`.
  absl::Status WaitForStream(int rank, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records the first reason, tears the communicators down (so that no
  // kernel waits for a peer forever) and wakes every waiter.
  void AbortLocked(const absl::Status& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AbortedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Aborts the group with `error` (unless it is already aborted) and
  // returns `error`.
  absl::Status Fail(absl::Status error) ABSL_LOCKS_EXCLUDED(mu_) {
    Abort(error);
    return error;
  }

  const std::vector<int> devices_;
  const absl::Duration timeout_;
  std::vector<Rank> ranks_;

  mutable absl::Mutex mu_;
  absl::CondVar launched_cv_;
  // Null once aborted. Every NCCL call on them is made under mu_, so an
  // abort never races a launch or an error query.
  std::vector<ncclComm_t> comms_ ABSL_GUARDED_BY(mu_);
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  // All-reduces launched so far (the index of the one ranks arrive for).
  int64_t launched_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

absl::Status NcclGroupImpl::Init() {
  DeviceRestorer restore;
  for (size_t i = 0; i < devices_.size(); ++i) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices_[i]));
    STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreate(&ranks_[i].stream));
  }
  std::vector<ncclComm_t> comms(devices_.size(), nullptr);
  STRATA_NCCL_RETURN_IF_ERROR(ncclCommInitAll(
      comms.data(), static_cast<int>(devices_.size()), devices_.data()));
  absl::MutexLock lock(&mu_);
  comms_ = std::move(comms);
  return absl::OkStatus();
}

NcclGroupImpl::~NcclGroupImpl() {
  DeviceRestorer restore;
  // Every rank's thread has returned (the owner destroys the group after
  // them), but an aborted call may have left GPU work queued on its stream.
  bool drained = true;
  std::vector<bool> rank_drained(ranks_.size(), true);
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    if (r.stream == nullptr || !r.in_flight) continue;
    if (cudaSetDevice(devices_[i]) != cudaSuccess) {
      cudaGetLastError();
      rank_drained[i] = false;
      continue;
    }
    const absl::Time until = absl::Now() + kDrainLimit;
    Backoff backoff;
    while (true) {
      const cudaError_t q = cudaStreamQuery(r.stream);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady || absl::Now() >= until) {
        cudaGetLastError();
        rank_drained[i] = false;
        break;
      }
      backoff.Wait();
    }
    drained = drained && rank_drained[i];
  }
  {
    absl::MutexLock lock(&mu_);
    const bool clean = aborted_.ok() && drained;
    for (size_t i = 0; i < comms_.size(); ++i) {
      if (comms_[i] == nullptr) continue;
      // ncclCommDestroy waits for the communicator's work; ncclCommAbort
      // does not, which is what a group with stuck work needs.
      if (clean) {
        ncclCommDestroy(comms_[i]);
      } else {
        ncclCommAbort(comms_[i]);
      }
      comms_[i] = nullptr;
    }
  }
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    // A stream that did not drain may still write into these buffers:
    // leaking them is the safe choice.
    if (!rank_drained[i]) continue;
    if (cudaSetDevice(devices_[i]) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    if (r.device_buffer != nullptr) cudaFree(r.device_buffer);
    if (r.pinned != nullptr) cudaFreeHost(r.pinned);
    if (r.stream != nullptr) cudaStreamDestroy(r.stream);
  }
}

void NcclGroupImpl::AbortLocked(const absl::Status& reason) {
  if (!aborted_.ok()) return;
  aborted_ = reason.ok() ? absl::AbortedError("aborted") : reason;
  for (ncclComm_t& comm : comms_) {
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }
  launched_cv_.SignalAll();
}

absl::Status NcclGroupImpl::AbortedLocked() const {
  if (aborted_.code() == absl::StatusCode::kAborted) return aborted_;
  return absl::AbortedError(
      absl::StrCat("NCCL group aborted: ", aborted_.ToString()));
}

absl::Status NcclGroupImpl::EnsureBuffers(Rank& r, size_t bytes) {
  if (r.device_bytes < bytes) {
    if (r.device_buffer != nullptr) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaFree(r.device_buffer));
      r.device_buffer = nullptr;
      r.device_bytes = 0;
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(&r.device_buffer, bytes));
    r.device_bytes = bytes;
  }
  if (r.pinned_bytes < bytes) {
    if (r.pinned != nullptr) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaFreeHost(r.pinned));
      r.pinned = nullptr;
      r.pinned_bytes = 0;
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaMallocHost(&r.pinned, bytes));
    r.pinned_bytes = bytes;
  }
  return absl::OkStatus();
}

absl::Status NcclGroupImpl::LaunchLocked() {
  const Call& first = calls_[0];
  for (size_t i = 1; i < calls_.size(); ++i) {
    const Call& c = calls_[i];
    if (c.dtype != first.dtype || c.count != first.count || c.op != first.op) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NCCL all-reduce: rank ", i, " called with ", DTypeName(c.dtype),
          " x ", c.count, c.op == NcclReduce::kMean ? " (mean)" : " (sum)",
          ", rank 0 with ", DTypeName(first.dtype), " x ", first.count,
          first.op == NcclReduce::kMean ? " (mean)" : " (sum)"));
    }
  }
  if (first.count == 0) return absl::OkStatus();
  ncclDataType_t type = ncclFloat32;
  ToNcclType(first.dtype, &type);  // validated by every rank
  const ncclRedOp_t op = first.op == NcclReduce::kMean ? ncclAvg : ncclSum;
  STRATA_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  absl::Status status;
  for (size_t i = 0; i < calls_.size() && status.ok(); ++i) {
    const ncclResult_t result = ncclAllReduce(
        calls_[i].device_data, calls_[i].device_data,
        static_cast<size_t>(first.count), type, op, comms_[i],
        ranks_[i].stream);
    if (result != ncclSuccess) {
      status = NcclErrorToStatus(result, "ncclAllReduce(...)", __FILE__,
                                 __LINE__);
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (status.ok() && ended != ncclSuccess) {
    status = NcclErrorToStatus(ended, "ncclGroupEnd()", __FILE__, __LINE__);
  }
  return status;
}

absl::Status NcclGroupImpl::Rendezvous(int rank, int64_t index,
                                       const Call& call, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (!aborted_.ok()) return AbortedLocked();
  Call& mine = calls_[static_cast<size_t>(rank)];
  mine = call;
  mine.arrived = true;
  if (++arrived_ == size()) {
    absl::Status launched = LaunchLocked();
    arrived_ = 0;
    for (Call& c : calls_) c = Call();
    if (!launched.ok()) {
      AbortLocked(launched);
      return launched;
    }
    ++launched_;
    launched_cv_.SignalAll();
    return absl::OkStatus();
  }
  while (launched_ <= index && aborted_.ok()) {
    if (launched_cv_.WaitWithDeadline(&mu_, deadline) &&
        launched_ <= index && aborted_.ok()) {
      std::vector<int> missing;
      for (size_t i = 0; i < calls_.size(); ++i) {
        if (!calls_[i].arrived) missing.push_back(static_cast<int>(i));
      }
      const absl::Status timed_out = absl::DeadlineExceededError(absl::StrCat(
          "NCCL all-reduce #", index, ": rank ", rank, " waited ",
          absl::FormatDuration(timeout_), " for rank(s) ",
          absl::StrJoin(missing, ", "), " to arrive"));
      AbortLocked(timed_out);
      return timed_out;
    }
  }
  if (launched_ > index) return absl::OkStatus();
  return AbortedLocked();
}

absl::Status NcclGroupImpl::WaitForStream(int rank, absl::Time deadline) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  Backoff backoff;
  while (true) {
    const cudaError_t q = cudaStreamQuery(r.stream);
    if (q == cudaSuccess) {
      r.in_flight = false;
      return absl::OkStatus();
    }
    if (q != cudaErrorNotReady) {
      return Fail(CudaErrorToStatus(q, "cudaStreamQuery(stream)", __FILE__,
                                    __LINE__));
    }
    {
      absl::MutexLock lock(&mu_);
      if (!aborted_.ok()) return AbortedLocked();
      ncclResult_t async = ncclSuccess;
      ncclComm_t comm = comms_[static_cast<size_t>(rank)];
      const ncclResult_t queried = ncclCommGetAsyncError(comm, &async);
      if (queried != ncclSuccess || async != ncclSuccess) {
        const absl::Status error =
            queried != ncclSuccess
                ? NcclErrorToStatus(queried, "ncclCommGetAsyncError(comm)",
                                    __FILE__, __LINE__)
                : NcclErrorToStatus(async, "NCCL all-reduce (async error)",
                                    __FILE__, __LINE__);
        AbortLocked(error);
        return error;
      }
    }
    if (absl::Now() >= deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          "NCCL all-reduce: rank ", rank, " (cuda:", device(rank),
          ") did not finish within ", absl::FormatDuration(timeout_))));
    }
    backoff.Wait();
  }
}

absl::Status NcclGroupImpl::AllReduce(int rank, DType dtype, void* data,
                                      int64_t count, NcclReduce op) {
  const absl::Time deadline = absl::Now() + timeout_;
  if (rank < 0 || rank >= size()) {
    // Not a rank of this group: nothing to abort on its behalf.
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL all-reduce: rank ", rank, " is outside [0, ", size(), ")"));
  }
  DeviceRestorer restore;
  return AllReduceOnRank(rank, dtype, data, count, op, deadline);
}

absl::Status NcclGroupImpl::AllReduceOnRank(int rank, DType dtype, void* data,
                                            int64_t count, NcclReduce op,
                                            absl::Time deadline) {
  ncclDataType_t type = ncclFloat32;
  if (!ToNcclType(dtype, &type)) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("NCCL all-reduce: invalid dtype ", DTypeName(dtype))));
  }
  if (count < 0 || (count > 0 && data == nullptr)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "NCCL all-reduce: count ", count, count < 0 ? " < 0" : " with null data")));
  }
  if (op == NcclReduce::kMean && dtype != DType::kFloat32 &&
      dtype != DType::kFloat64) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "NCCL all-reduce: the mean of ", DTypeName(dtype),
        " is not defined (float32 and float64 only)")));
  }
  {
    // Before touching the staging buffers: after a failure the stream may
    // still hold copies into them.
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) return AbortedLocked();
  }
  Rank& r = ranks_[static_cast<size_t>(rank)];
  const int64_t index = r.next_op++;
  const int gpu = device(rank);
  if (absl::Status s = [&]() -> absl::Status {
        STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(gpu));
        return absl::OkStatus();
      }();
      !s.ok()) {
    return Fail(s);
  }
  const size_t bytes = static_cast<size_t>(count) * DTypeSize(dtype);

  Call call;
  call.dtype = dtype;
  call.count = count;
  call.op = op;
  bool staged = false;
  if (count > 0) {
    cudaPointerAttributes attributes;
    const cudaError_t got = cudaPointerGetAttributes(&attributes, data);
    if (got != cudaSuccess) {
      return Fail(CudaErrorToStatus(got, "cudaPointerGetAttributes(data)",
                                    __FILE__, __LINE__));
    }
    switch (attributes.type) {
      case cudaMemoryTypeUnregistered:
      case cudaMemoryTypeHost:
        staged = true;
        break;
      case cudaMemoryTypeDevice:
        if (attributes.device != gpu) {
          return Fail(absl::InvalidArgumentError(absl::StrCat(
              "NCCL all-reduce: rank ", rank, " runs on cuda:", gpu,
              " but its data is on cuda:", attributes.device)));
        }
        call.device_data = data;
        break;
      default:
        return Fail(absl::InvalidArgumentError(absl::StrCat(
            "NCCL all-reduce: rank ", rank,
            ": managed (unified) memory is not supported; pass host memory "
            "or device memory of cuda:", gpu)));
    }
  }
  if (staged) {
    // Through page-locked memory, so that every copy is asynchronous and
    // the wait below stays bounded (a copy to pageable memory would block
    // this thread for as long as the all-reduce takes).
    if (absl::Status s = EnsureBuffers(r, bytes); !s.ok()) return Fail(s);
    std::memcpy(r.pinned, data, bytes);
    r.in_flight = true;
    const cudaError_t copied = cudaMemcpyAsync(
        r.device_buffer, r.pinned, bytes, cudaMemcpyHostToDevice, r.stream);
    if (copied != cudaSuccess) {
      return Fail(CudaErrorToStatus(copied, "cudaMemcpyAsync(host to device)",
                                    __FILE__, __LINE__));
    }
    call.device_data = r.device_buffer;
  }

  STRATA_RETURN_IF_ERROR(Rendezvous(rank, index, call, deadline));
  if (count == 0) return absl::OkStatus();
  r.in_flight = true;
  // The launch (by whichever rank arrived last) may have switched this
  // thread's device.
  if (absl::Status s = [&]() -> absl::Status {
        STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(gpu));
        if (staged) {
          STRATA_CUDA_RETURN_IF_ERROR(
              cudaMemcpyAsync(r.pinned, r.device_buffer, bytes,
                              cudaMemcpyDeviceToHost, r.stream));
        }
        return absl::OkStatus();
      }();
      !s.ok()) {
    return Fail(s);
  }
  STRATA_RETURN_IF_ERROR(WaitForStream(rank, deadline));
  if (staged) std::memcpy(data, r.pinned, bytes);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Create(
    std::vector<int> devices, const CollectiveOptions& options) {
  STRATA_RETURN_IF_ERROR(ValidateNcclDevices(devices));
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL group: timeout must be > 0, got ",
                     absl::FormatDuration(options.timeout)));
  }
  STRATA_ASSIGN_OR_RETURN(const int visible, NcclVisibleDevices());
  for (int d : devices) {
    if (d >= visible) {
      return absl::FailedPreconditionError(absl::StrCat(
          "NCCL group: cuda:", d, " was asked for, but this machine has ",
          visible, " visible GPU", visible == 1 ? "" : "s"));
    }
  }
  auto group = std::make_unique<NcclGroupImpl>(std::move(devices), options);
  STRATA_RETURN_IF_ERROR(group->Init());
  return std::unique_ptr<NcclGroup>(std::move(group));
}

absl::StatusOr<int> NcclVisibleDevices() {
  // FAILED_PRECONDITION naming the CUDA error where no device is usable.
  return CudaDeviceCount();
}

}  // namespace collective
}  // namespace strata

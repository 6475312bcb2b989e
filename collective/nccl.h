// All-reduce between the GPUs of this machine through NCCL, for the Mirrored
// strategy: its replicas are threads of one process, replica r driving GPU
// devices[r] (tf.distribute.MirroredStrategy's NcclAllReduce).
//
// This header is plain C++ (no CUDA or NCCL include), so every build can use
// it. Builds with CUDA and NCCL (STRATA_WITH_CUDA, kernels/cuda/nccl.cmake)
// implement it in collective/nccl.cc; other builds in collective/nccl_stub.cc,
// whose NcclGroup::Create and NcclVisibleDevices fail FAILED_PRECONDITION
// saying so.
#ifndef STRATA_COLLECTIVE_NCCL_H_
#define STRATA_COLLECTIVE_NCCL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "common/tensor.h"

namespace strata {
namespace collective {

enum class NcclReduce {
  kSum,
  kMean,  // the sum divided by size(); float32 and float64 only
};

// A clique of NCCL communicators, one rank per local GPU
// (ncclCommInitAll), and the all-reduce between them.
//
// Thread-safety: each rank is driven by one thread at a time (its replica's
// thread); different ranks call concurrently. Abort may be called from any
// thread. An all-reduce is a rendezvous: the ranks' calls meet on the host,
// the last one to arrive launches the collective for every rank in one NCCL
// group call, and each rank then waits (polling, bounded by the options'
// timeout) for its own GPU stream. A rank that never arrives therefore fails
// the others on the host, at their deadline, without a GPU kernel waiting
// for it.
//
// Once a call failed (or Abort was called), the group is aborted: its
// communicators are torn down (ncclCommAbort) and every later call fails
// ABORTED with the first reason; a new group has to be created.
class NcclGroup {
 public:
  virtual ~NcclGroup() = default;

  // Communicators for `devices` (CUDA ordinals; rank i runs on devices[i]).
  // One device is a valid group. options.timeout bounds each AllReduce call
  // from its start; pack_bytes is not used (NCCL chooses its own chunks).
  // Errors: INVALID_ARGUMENT for no device, a negative or repeated ordinal,
  // timeout <= 0; FAILED_PRECONDITION when this build has no CUDA/NCCL
  // support, no CUDA device is usable, or an ordinal is not visible (the
  // message names both numbers); NCCL/CUDA errors (with file and line).
  static absl::StatusOr<std::unique_ptr<NcclGroup>> Create(
      std::vector<int> devices, const CollectiveOptions& options = {});

  virtual int size() const = 0;
  // The CUDA ordinal of `rank`.
  virtual int device(int rank) const = 0;

  // In-place all-reduce of `count` elements of `dtype` at `data`, as rank
  // `rank`. Every rank must make the same sequence of calls, with the same
  // dtype, count and op. `data` is either host memory (pageable or pinned;
  // staged through this rank's pinned and device buffers) or device memory
  // on this rank's GPU (reduced in place; work queued before the call on the
  // device's legacy default stream is ordered before it, work on other
  // streams must be synchronized by the caller). Managed memory is refused.
  // On return the result is in `data` and the GPU work of the call has ended.
  // Integer sums wrap around on overflow.
  // Errors: INVALID_ARGUMENT for a rank outside [0, size), an invalid dtype,
  // a negative count, null data with count > 0, kMean of an integer dtype,
  // managed memory or device memory of another GPU, or ranks calling with
  // different dtype/count/op (every rank gets it); DEADLINE_EXCEEDED when
  // the other ranks do not arrive, or the GPU work does not end, within the
  // timeout; ABORTED when the group was aborted (with the first reason);
  // NCCL/CUDA errors (with file and line). Any error aborts the group.
  virtual absl::Status AllReduce(int rank, DType dtype, void* data,
                                 int64_t count, NcclReduce op) = 0;

  // Aborts the group: waiting and later calls fail ABORTED with `reason`.
  // The first reason wins; later calls do nothing.
  virtual void Abort(const absl::Status& reason) = 0;
};

// The number of CUDA devices this process sees (> 0).
// Errors: FAILED_PRECONDITION when this build has no CUDA/NCCL support or no
// device is usable (the message says which).
absl::StatusOr<int> NcclVisibleDevices();

// The ordinals first, first+1, ... of `count` GPUs (count < 0: every visible
// GPU from `first` on).
// Errors: INVALID_ARGUMENT for first < 0 or count == 0; FAILED_PRECONDITION
// as NcclVisibleDevices, when `first` is not visible, or when fewer than
// `count` GPUs are visible from `first` on (naming both numbers).
absl::StatusOr<std::vector<int>> LocalGpus(int first, int count);

// Checks a device list for NcclGroup::Create without touching CUDA.
// Errors: INVALID_ARGUMENT for an empty list, a negative or repeated ordinal.
absl::Status ValidateNcclDevices(const std::vector<int>& devices);

}  // namespace collective
}  // namespace strata

#endif  // STRATA_COLLECTIVE_NCCL_H_

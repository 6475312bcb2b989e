// Where a parameter server keeps its variables: host memory (the CPU
// optimizers of kernels/optimizers.h) or one CUDA device.
//
// Plain C++: no CUDA header. The CUDA implementation
// (device_state_cuda.cc) is compiled only when the build has the CUDA
// optimizer kernels (STRATA_WITH_CUDA); otherwise device_state_nocuda.cc
// answers every CUDA request with FAILED_PRECONDITION.
#ifndef STRATA_SERVER_DEVICE_STATE_H_
#define STRATA_SERVER_DEVICE_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "kernels/optimizers.h"

namespace strata {

// A PS device: host memory, or CUDA device `cuda_index`.
struct PsDevice {
  int cuda_index = -1;  // -1: host memory and the CPU optimizers

  bool is_cuda() const { return cuda_index >= 0; }
  // "cpu" or "cuda:N".
  std::string Name() const;
};

// Parses a device as --device gives it: "cpu", "cuda" (device 0) or
// "cuda:N" (N in 0..9999). Errors: INVALID_ARGUMENT naming `what` (the flag)
// and the allowed forms.
absl::StatusOr<PsDevice> ParsePsDevice(absl::string_view text,
                                       absl::string_view what = "--device");

// Whether this build has the CUDA path (configured with STRATA_WITH_CUDA
// where nvcc was found).
bool PsBuiltWithCuda();

// Checks that `device` can hold variables now and describes it: "cpu", or
// "cuda:0 (NVIDIA H200, sm_90, 139.8 GiB)". Errors: FAILED_PRECONDITION
// "strata-ps was built without CUDA (...)" in a build without CUDA, or "no
// usable CUDA device: <CUDA error>" / naming the missing index otherwise.
absl::StatusOr<std::string> CheckPsDevice(const PsDevice& device);

// The device-resident state of one variable: its value and optimizer slots
// live in device memory (authoritative); the host keeps a copy of the value,
// in page-locked memory where possible, that pulls are served from without a
// copy (see Variable's snapshots).
//
// Host copies: every method that changes the value takes `host_value`, the
// variable's current host copy, and leaves there the copy of the new value.
// The old buffer is written in place only when the caller holds the only
// reference (`use_count() == 1`: no snapshot refers to it); otherwise a
// fresh (or a recycled, no longer referenced) buffer is used, so a snapshot
// never changes under a reader.
//
// Thread-compatible: the owning Variable serializes calls under its mutex
// (ReadSlots, being const, may run beside other const calls). Errors of
// every method: the CUDA failures as Status with file:line (INTERNAL,
// RESOURCE_EXHAUSTED when device memory runs out, FAILED_PRECONDITION when
// the device went away). After an error the device state may be partly
// updated; the variable reports the error and does not count the apply.
class VariableDevice {
 public:
  virtual ~VariableDevice() = default;

  // Uploads the initial value and the slots (each byte_size bytes, in
  // Optimizer::SlotNames() order). `*host_value` in: the initial value;
  // out: the host copy pulls are served from (possibly the same buffer,
  // page-locked).
  virtual absl::Status Init(std::shared_ptr<Buffer>* host_value,
                            absl::Span<const std::shared_ptr<Buffer>> slots) = 0;

  // One optimizer step with a dense gradient (a host pointer to byte_size
  // bytes), the learning rate times `lr_scale`; `iterations` counts the
  // applies before this one.
  virtual absl::Status ApplyDense(int64_t iterations, double lr_scale,
                                  const char* grad,
                                  std::shared_ptr<Buffer>* host_value) = 0;

  // One sparse step: rows ids[i] (unique, in range) get row i of `rows`.
  virtual absl::Status ApplyRows(int64_t iterations,
                                 absl::Span<const int64_t> ids,
                                 const char* rows,
                                 std::shared_ptr<Buffer>* host_value) = 0;

  // Replaces the value with `data` (byte_size bytes); slots are kept.
  virtual absl::Status Assign(const char* data,
                              std::shared_ptr<Buffer>* host_value) = 0;

  // Reads the slots back from the device (for checkpoints).
  virtual absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> ReadSlots()
      const = 0;

  // "cuda:0".
  virtual std::string device_name() const = 0;
};

// The state of one variable of `num_elements` elements of `dtype`
// (`row_width` columns for row pushes) on `device`, which must be a CUDA
// device. `optimizer` is the variable's validated config (defaults filled).
// Nothing is uploaded until Init. Errors: FAILED_PRECONDITION in a build
// without CUDA or without a usable device; RESOURCE_EXHAUSTED when device
// memory runs out; INVALID_ARGUMENT for a host device or bad sizes.
absl::StatusOr<std::unique_ptr<VariableDevice>> NewVariableDevice(
    const PsDevice& device, const OptimizerConfig& optimizer, DType dtype,
    int64_t num_elements, int64_t row_width);

}  // namespace strata

#endif  // STRATA_SERVER_DEVICE_STATE_H_

// server/device_state.h with CUDA: variables resident in device memory,
// updated by the kernels of kernels/cuda/optimizer_kernels.h. Compiled only
// when the build has them (server/CMakeLists.txt); plain C++ (the CUDA
// runtime is reached through optimizer_kernels.h).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/optimizer_kernels.h"
#include "server/device_state.h"

namespace strata {
namespace {

// Gradients go to the device through two page-locked staging areas of this
// size (the host copy into one overlaps the device's work on the other), so
// a push needs no device buffer as large as the variable.
constexpr size_t kStageBytes = size_t{4} << 20;
// Host copies of the value at least this large are page-locked
// (cudaHostRegister); smaller ones are copied from pageable memory, where
// page locking costs more than it saves.
constexpr size_t kMinRegisterBytes = size_t{256} << 10;

// A host Buffer and its page-lock, released before the memory is freed
// (members are destroyed in reverse order).
struct RegisteredBuffer {
  std::shared_ptr<Buffer> buffer;
  HostRegistration registration;
};

// Returns `buffer` page-locked for as long as any reference to it lives (an
// aliasing pointer to a RegisteredBuffer), or unchanged when it is small or
// cannot be registered (copies from it are then staged by the driver:
// slower, equally correct).
std::shared_ptr<Buffer> PinHostBuffer(std::shared_ptr<Buffer> buffer) {
  if (buffer == nullptr || buffer->size() < kMinRegisterBytes) return buffer;
  absl::StatusOr<HostRegistration> registration =
      HostRegistration::Register(buffer->data(), buffer->size());
  if (!registration.ok()) return buffer;
  Buffer* raw = buffer.get();
  auto holder = std::make_shared<RegisteredBuffer>(
      RegisteredBuffer{std::move(buffer), std::move(*registration)});
  return std::shared_ptr<Buffer>(std::move(holder), raw);
}

// use_count() is a relaxed load: when it says this is the only reference,
// the released reads of the last other holder must happen before our writes
// (as in Variable::UnshareLocked).
bool SoleOwner(const std::shared_ptr<Buffer>& buffer) {
  if (buffer.use_count() != 1) return false;
  std::atomic_thread_fence(std::memory_order_acquire);
  return true;
}

class CudaVariableDevice final : public VariableDevice {
 public:
  static absl::StatusOr<std::unique_ptr<VariableDevice>> Create(
      const PsDevice& device, const OptimizerConfig& config, DType dtype,
      int64_t num_elements, int64_t row_width) {
    const size_t elem = DTypeSize(dtype);
    if (elem == 0 || num_elements < 0 || row_width < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device variable: bad dtype ", DTypeName(dtype), ", ", num_elements,
          " elements or row width ", row_width));
    }
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                            Optimizer::Create(config));
    STRATA_RETURN_IF_ERROR(CudaSetDevice(device.cuda_index));
    std::unique_ptr<CudaVariableDevice> d(new CudaVariableDevice(
        device, optimizer->config(), dtype, num_elements, row_width));
    STRATA_ASSIGN_OR_RETURN(d->stream_, CudaStream::Create());
    STRATA_ASSIGN_OR_RETURN(d->var_, DeviceArray::Allocate(d->bytes_));
    const size_t num_slots = optimizer->SlotNames().size();
    for (size_t k = 0; k < num_slots; ++k) {
      STRATA_ASSIGN_OR_RETURN(DeviceArray slot,
                              DeviceArray::Allocate(d->bytes_));
      d->slots_.push_back(std::move(slot));
    }
    // A stage holds a chunk of a dense gradient, or at least one row push
    // entry (its id and its row).
    const size_t row_entry = sizeof(int64_t) + d->row_bytes_;
    size_t stage = std::max(std::min(d->bytes_, kStageBytes), row_entry);
    stage = (stage + 7) / 8 * 8;
    d->stage_bytes_ = stage;
    for (Stage& s : d->stages_) {
      STRATA_ASSIGN_OR_RETURN(s.host, PinnedHostBuffer::Allocate(stage));
      STRATA_ASSIGN_OR_RETURN(s.device, DeviceArray::Allocate(stage));
      STRATA_ASSIGN_OR_RETURN(s.done, CudaEvent::Create());
    }
    return std::unique_ptr<VariableDevice>(std::move(d));
  }

  absl::Status Init(std::shared_ptr<Buffer>* host_value,
                    absl::Span<const std::shared_ptr<Buffer>> slots) override {
    if (slots.size() != slots_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device variable: ", slots.size(),
                       " slots given, the optimizer has ", slots_.size()));
    }
    if (*host_value == nullptr || (*host_value)->size() != bytes_) {
      return absl::InvalidArgumentError(
          "device variable: initial value has the wrong size");
    }
    for (const auto& slot : slots) {
      if (slot == nullptr || slot->size() != bytes_) {
        return absl::InvalidArgumentError(
            "device variable: a slot has the wrong size");
      }
    }
    STRATA_RETURN_IF_ERROR(Select());
    std::shared_ptr<Buffer> pinned = PinHostBuffer(*host_value);
    absl::Status s = CudaCopyToDevice(var_.get(), pinned->data(), bytes_,
                                      stream_.get());
    for (size_t k = 0; k < slots.size() && s.ok(); ++k) {
      s = CudaCopyToDevice(slots_[k].get(), slots[k]->data(), bytes_,
                           stream_.get());
    }
    if (s.ok()) s = stream_.Synchronize();
    if (!s.ok()) return Fail(s);
    *host_value = std::move(pinned);
    return absl::OkStatus();
  }

  absl::Status ApplyDense(int64_t iterations, double lr_scale,
                          const char* grad,
                          std::shared_ptr<Buffer>* host_value) override {
    if (n_ == 0) return absl::OkStatus();
    OptimizerConfig config = config_;
    config.learning_rate *= lr_scale;
    STRATA_RETURN_IF_ERROR(Select());
    std::shared_ptr<Buffer> out = Writable(*host_value, /*keep=*/false);
    const int64_t chunk = static_cast<int64_t>(stage_bytes_ / elem_);
    char* const var = static_cast<char*>(var_.get());
    int64_t k = 0;
    for (int64_t off = 0; off < n_; off += chunk, ++k) {
      Stage& stage = stages_[k % 2];
      if (stage.in_use) {
        // Its previous chunk has been copied to the device and used.
        if (absl::Status s = stage.done.Synchronize(); !s.ok()) return Fail(s);
      }
      const int64_t len = std::min(chunk, n_ - off);
      const size_t offset = static_cast<size_t>(off) * elem_;
      const size_t bytes = static_cast<size_t>(len) * elem_;
      // The host copy into this stage overlaps the device's work on the
      // other one.
      std::memcpy(stage.host.data(), grad + offset, bytes);
      const std::array<void*, 3> slots = SlotsAt(offset);
      absl::Status s = CudaCopyToDevice(stage.device.get(), stage.host.data(),
                                        bytes, stream_.get());
      if (s.ok()) {
        s = CudaApplyDense(config, dtype_, iterations, var + offset,
                           absl::MakeConstSpan(slots.data(), slots_.size()),
                           stage.device.get(), len, stream_.get());
      }
      if (s.ok()) {
        s = CudaCopyToHost(out->data() + offset, var + offset, bytes,
                           stream_.get());
      }
      if (s.ok()) s = stage.done.Record(stream_.get());
      if (!s.ok()) return Fail(s);
      stage.in_use = true;
    }
    if (absl::Status s = stream_.Synchronize(); !s.ok()) return Fail(s);
    for (Stage& stage : stages_) stage.in_use = false;
    *host_value = std::move(out);
    return absl::OkStatus();
  }

  absl::Status ApplyRows(int64_t iterations, absl::Span<const int64_t> ids,
                         const char* rows,
                         std::shared_ptr<Buffer>* host_value) override {
    if (ids.empty() || n_ == 0) return absl::OkStatus();
    STRATA_RETURN_IF_ERROR(Select());
    std::shared_ptr<Buffer> out = Writable(*host_value, /*keep=*/true);
    // A stage holds `per_chunk` ids, then (8-byte aligned) their rows.
    const size_t per_chunk = stage_bytes_ / (sizeof(int64_t) + row_bytes_);
    const size_t rows_offset = per_chunk * sizeof(int64_t);
    Stage& stage = stages_[0];
    char* const var = static_cast<char*>(var_.get());
    for (size_t first = 0; first < ids.size(); first += per_chunk) {
      const size_t count = std::min(per_chunk, ids.size() - first);
      std::memcpy(stage.host.data(), ids.data() + first,
                  count * sizeof(int64_t));
      std::memcpy(stage.host.data() + rows_offset, rows + first * row_bytes_,
                  count * row_bytes_);
      const auto* device_ids = static_cast<const int64_t*>(stage.device.get());
      char* const device_rows =
          static_cast<char*>(stage.device.get()) + rows_offset;
      const std::array<void*, 3> slots = SlotsAt(0);
      absl::Status s =
          CudaCopyToDevice(stage.device.get(), stage.host.data(),
                           rows_offset + count * row_bytes_, stream_.get());
      if (s.ok()) {
        s = CudaApplySparse(config_, dtype_, iterations, var,
                            absl::MakeConstSpan(slots.data(), slots_.size()),
                            device_ids, static_cast<int64_t>(count),
                            device_rows, row_width_, stream_.get());
      }
      // The updated rows, packed over the gradient rows, back to the stage
      // (stream order: after the update has read them).
      if (s.ok()) {
        s = CudaGatherRows(dtype_, var, device_ids,
                           static_cast<int64_t>(count), row_width_,
                           device_rows, stream_.get());
      }
      if (s.ok()) {
        s = CudaCopyToHost(stage.host.data() + rows_offset, device_rows,
                           count * row_bytes_, stream_.get());
      }
      if (s.ok()) s = stream_.Synchronize();
      if (!s.ok()) return Fail(s);
      for (size_t j = 0; j < count; ++j) {
        std::memcpy(out->data() + ids[first + j] * row_bytes_,
                    stage.host.data() + rows_offset + j * row_bytes_,
                    row_bytes_);
      }
    }
    *host_value = std::move(out);
    return absl::OkStatus();
  }

  absl::Status Assign(const char* data,
                      std::shared_ptr<Buffer>* host_value) override {
    if (n_ == 0) return absl::OkStatus();
    STRATA_RETURN_IF_ERROR(Select());
    std::shared_ptr<Buffer> out = Writable(*host_value, /*keep=*/false);
    std::memcpy(out->data(), data, bytes_);
    absl::Status s =
        CudaCopyToDevice(var_.get(), out->data(), bytes_, stream_.get());
    if (s.ok()) s = stream_.Synchronize();
    if (!s.ok()) return Fail(s);
    *host_value = std::move(out);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> ReadSlots()
      const override {
    STRATA_RETURN_IF_ERROR(Select());
    std::vector<std::shared_ptr<Buffer>> out;
    for (const DeviceArray& slot : slots_) {
      std::shared_ptr<Buffer> host = Buffer::Allocate(bytes_, /*zero=*/false);
      STRATA_RETURN_IF_ERROR(
          CudaCopyToHost(host->data(), slot.get(), bytes_, stream_.get()));
      out.push_back(std::move(host));
    }
    STRATA_RETURN_IF_ERROR(stream_.Synchronize());
    return out;
  }

  std::string device_name() const override { return device_.Name(); }

 private:
  struct Stage {
    PinnedHostBuffer host;
    DeviceArray device;
    CudaEvent done;       // recorded after the stage's chunk was used
    bool in_use = false;  // `done` is pending
  };

  CudaVariableDevice(const PsDevice& device, const OptimizerConfig& config,
                     DType dtype, int64_t num_elements, int64_t row_width)
      : device_(device),
        config_(config),
        dtype_(dtype),
        n_(num_elements),
        row_width_(row_width),
        elem_(DTypeSize(dtype)),
        bytes_(static_cast<size_t>(num_elements) * DTypeSize(dtype)),
        row_bytes_(static_cast<size_t>(row_width) * DTypeSize(dtype)) {}

  // Every call runs on the variable's device, whatever the thread's
  // current device was.
  absl::Status Select() const { return CudaSetDevice(device_.cuda_index); }

  // After a failure: waits for whatever is still queued (so no stage is
  // reused under a pending copy) and returns `status`.
  absl::Status Fail(absl::Status status) {
    (void)stream_.Synchronize();
    for (Stage& stage : stages_) stage.in_use = false;
    return status;
  }

  std::array<void*, 3> SlotsAt(size_t offset) const {
    std::array<void*, 3> p{};
    for (size_t k = 0; k < slots_.size() && k < p.size(); ++k) {
      p[k] = static_cast<char*>(slots_[k].get()) + offset;
    }
    return p;
  }

  // The host buffer the new value goes to: `current` itself when no
  // snapshot refers to it; else the spare (an older copy) once no snapshot
  // refers to it any more, else a new page-locked buffer. `current` then
  // becomes the spare. With `keep`, the result starts as a copy of
  // `current` (for row updates, which write only the rows they touch).
  std::shared_ptr<Buffer> Writable(const std::shared_ptr<Buffer>& current,
                                   bool keep) {
    // `current` is the variable's own reference: no other means no snapshot.
    if (SoleOwner(current)) return current;
    std::shared_ptr<Buffer> out;
    if (spare_ != nullptr && spare_->size() == bytes_ && SoleOwner(spare_)) {
      out = std::move(spare_);
    } else {
      out = PinHostBuffer(Buffer::Allocate(bytes_, /*zero=*/false));
    }
    spare_ = current;
    if (keep) std::memcpy(out->data(), current->data(), bytes_);
    return out;
  }

  const PsDevice device_;
  const OptimizerConfig config_;
  const DType dtype_;
  const int64_t n_;
  const int64_t row_width_;
  const size_t elem_;
  const size_t bytes_;
  const size_t row_bytes_;
  CudaStream stream_;
  DeviceArray var_;
  std::vector<DeviceArray> slots_;
  std::array<Stage, 2> stages_;
  size_t stage_bytes_ = 0;
  // An earlier host copy of the value, recycled once no snapshot holds it.
  std::shared_ptr<Buffer> spare_;
};

}  // namespace

bool PsBuiltWithCuda() { return true; }

absl::StatusOr<std::string> CheckPsDevice(const PsDevice& device) {
  if (!device.is_cuda()) return device.Name();
  absl::StatusOr<CudaDeviceInfo> info = CudaProbeDevice(device.cuda_index);
  if (!info.ok()) {
    return absl::FailedPreconditionError(info.status().message());
  }
  return info->Description();
}

absl::StatusOr<std::unique_ptr<VariableDevice>> NewVariableDevice(
    const PsDevice& device, const OptimizerConfig& optimizer, DType dtype,
    int64_t num_elements, int64_t row_width) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(
        "NewVariableDevice: the host device keeps variables in host memory");
  }
  return CudaVariableDevice::Create(device, optimizer, dtype, num_elements,
                                    row_width);
}

}  // namespace strata

#include "server/variable.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/variable_internal.h"

// ThreadSanitizer does not model std::atomic_thread_fence (gcc warns that it
// is unsupported), so UnshareLocked's fence cannot order anything for it:
// its builds copy on every write instead, which needs no fence.
#if defined(__SANITIZE_THREAD__)
#define STRATA_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRATA_TSAN_BUILD 1
#endif
#endif
#ifndef STRATA_TSAN_BUILD
#define STRATA_TSAN_BUILD 0
#endif

namespace strata {
namespace {

using variable_internal::AddInto;
using variable_internal::Quote;

constexpr bool kAlwaysCopyOnWrite = STRATA_TSAN_BUILD;

}  // namespace

Variable::Variable(const v1::VariableSpec& spec, DType dtype, Shape shape,
                   std::unique_ptr<Optimizer> optimizer, const PsDevice& device)
    : spec_(spec),
      dtype_(dtype),
      shape_(std::move(shape)),
      num_elements_(NumElements(shape_)),
      byte_size_(num_elements_ * DTypeSize(dtype)),
      row_width_(shape_.empty() || shape_[0] == 0
                     ? 1
                     : num_elements_ / shape_[0]),
      optimizer_(std::move(optimizer)),
      mode_(spec.update_mode().kind()),
      num_replicas_(spec.update_mode().num_replicas()),
      staleness_(spec.update_mode().staleness()),
      scale_by_staleness_(spec.update_mode().scale_by_staleness()),
      staleness_tolerance_(spec.update_mode().staleness_tolerance()),
      dc_(DelayCompensationFromProto(
          spec.update_mode().delay_compensation())),
      dc_versions_(
          DelayCompensationVersions(spec.update_mode().delay_compensation())),
      device_(device),
      pending_(dtype_, num_elements_, row_width_, num_replicas_) {}

Variable::~Variable() {
  // Readers of a mirror of this variable pull instead from now on.
  absl::MutexLock lock(&mu_);
  mirrors_.Retire();
}

void Variable::RetireMirrors() {
  absl::MutexLock lock(&mu_);
  mirrors_.Retire();
}

// Apart from AddMirror so that a request naming several variables adds none
// when one would fail.
absl::Status Variable::CheckMirror(const MappedRegion& region,
                                   uint64_t offset) const {
  STRATA_RETURN_IF_ERROR(
      VariableMirrors::CheckPlace(name(), region, offset, byte_size_));
  absl::ReaderMutexLock lock(&mu_);
  return mirrors_.CheckRoom(name(), &region, offset);
}

absl::Status Variable::AddMirror(const std::shared_ptr<MappedRegion>& region,
                                 uint64_t offset) {
  STRATA_RETURN_IF_ERROR(CheckMirror(*region, offset));
  absl::MutexLock lock(&mu_);
  STRATA_RETURN_IF_ERROR(mirrors_.Add(name(), region, offset));
  mirrors_.Write(changes_, version_, value_->data(), byte_size_);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Variable>> Variable::Create(
    const v1::VariableSpec& spec, uint64_t max_bytes, const PsDevice& device) {
  STRATA_ASSIGN_OR_RETURN(
      std::shared_ptr<Variable> v,
      CreateOnHost(spec, max_bytes, device, /*zero_value=*/false));
  if (device.is_cuda()) {
    absl::MutexLock lock(&v->mu_);
    STRATA_RETURN_IF_ERROR(v->AttachDeviceLocked());
  }
  return v;
}

// From here the optimizer steps run in device memory; every update
// refreshes value_, the host copy, under the lock, and snapshots, row reads
// and checkpoints are served from it as on the host device.
absl::Status Variable::AttachDeviceLocked() {
  const std::string where =
      absl::StrCat("variable ", Quote(name()), ": device ", device_.Name());
  absl::StatusOr<std::unique_ptr<VariableDevice>> state = NewVariableDevice(
      device_, optimizer_->config(), dtype_, num_elements_, row_width_);
  if (!state.ok()) {
    return absl::Status(state.status().code(),
                        absl::StrCat(where, ": ", state.status().message()));
  }
  absl::Status s = (*state)->Init(&value_, slots_);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
  }
  slots_.clear();
  on_device_ = std::move(*state);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Variable>> Variable::CreateOnHost(
    const v1::VariableSpec& spec, uint64_t max_bytes, const PsDevice& device,
    bool zero_value) {
  const v1::VariableSpec* checked = &spec;
  v1::VariableSpec zeroed;
  if (zero_value) {
    zeroed = spec;
    zeroed.mutable_initializer()->Clear();
    checked = &zeroed;
  }
  STRATA_ASSIGN_OR_RETURN(ValidatedVariableSpec valid,
                          ValidateVariableSpec(*checked, max_bytes));
  std::shared_ptr<Variable> v(new Variable(
      spec, valid.dtype, valid.shape, std::move(valid.optimizer), device));
  auto value = Buffer::Allocate(v->byte_size_, /*zero=*/false);
  Shape full = spec.full_shape_size() == 0
                   ? valid.shape
                   : Shape(spec.full_shape().begin(), spec.full_shape().end());
  const std::string& init_name =
      spec.full_name().empty() ? spec.name() : spec.full_name();
  absl::Status filled = FillInitializer(valid.initializer, init_name,
                                        valid.dtype, full, spec.row_offset(),
                                        value->data(), v->num_elements_);
  if (!filled.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable ", Quote(spec.name()),
                     ": initializer: ", filled.message()));
  }
  if (v->delay_compensated() && device.is_cuda()) {
    return absl::UnimplementedError(absl::StrCat(
        "variable ", Quote(spec.name()),
        ": update_mode.delay_compensation runs on the host; this PS holds "
        "its variables on ", device.Name()));
  }
  absl::MutexLock lock(&v->mu_);
  v->value_ = std::move(value);
  if (v->delay_compensated()) {
    v->dc_scratch_ = Buffer::Allocate(v->byte_size_, /*zero=*/false);
    if (v->dc_.adaptive) v->dc_mean_square_ = Buffer::Allocate(v->byte_size_);
  }
  std::vector<std::string> slot_names = v->optimizer_->SlotNames();
  for (size_t i = 0; i < slot_names.size(); ++i) {
    auto slot = Buffer::Allocate(v->byte_size_);
    double init_value = v->optimizer_->SlotInitialValue(i);
    if (init_value != 0) {
      InitializerSpec c;
      c.type = InitializerType::kConstant;
      c.value = init_value;
      STRATA_RETURN_IF_ERROR(FillInitializer(c, init_name, valid.dtype, full,
                                             spec.row_offset(), slot->data(),
                                             v->num_elements_));
    }
    v->slots_.push_back(std::move(slot));
  }
  if (v->mode_ == v1::UpdateMode::STALENESS) {
    v->clocks_.assign(v->num_replicas_, 0);
  }
  // A SYNC variable's version is the next step it applies.
  if (v->mode_ == v1::UpdateMode::SYNC) {
    v->version_ = spec.update_mode().first_step();
  }
  return v;
}

absl::Status Variable::CheckPushMeta(const PushMeta& meta) const {
  if (meta.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": step ", meta.step, " is negative"));
  }
  if (meta.step == std::numeric_limits<int64_t>::max()) {
    // step + 1 (the next clock, the window's floor) must not overflow.
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": step ", meta.step, " is out of range"));
  }
  if (mode_ == v1::UpdateMode::ASYNC) return absl::OkStatus();
  if (!meta.tagged) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), " is ", v1::UpdateMode::Kind_Name(mode_),
        ": its pushes need a tag (PushTag.worker and PushTag.step say which "
        "replica and step the gradient belongs to)"));
  }
  if (meta.group_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": group_size ", meta.group_size,
        " is negative"));
  }
  if (mode_ == v1::UpdateMode::SYNC && meta.group_size > 0) {
    if (meta.worker < 0 || meta.worker >= meta.group_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable ", Quote(name()), ": worker ", meta.worker,
          " is outside [0, ", meta.group_size, ") for group ", meta.group,
          " of ", meta.group_size, " replicas"));
    }
    return absl::OkStatus();
  }
  if (meta.worker < 0 || meta.worker >= num_replicas_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": worker ", meta.worker,
        " is outside [0, ", num_replicas_, ") for ",
        v1::UpdateMode::Kind_Name(mode_), " with ", num_replicas_,
        " replicas"));
  }
  return absl::OkStatus();
}

void Variable::UnshareLocked() {
  if (kAlwaysCopyOnWrite || value_.use_count() > 1) {
    value_ = Buffer::Copy(*value_);
  }
  for (auto& slot : slots_) {
    if (kAlwaysCopyOnWrite || slot.use_count() > 1) slot = Buffer::Copy(*slot);
  }
#if !STRATA_TSAN_BUILD
  // use_count() is a relaxed load. When it reports this variable as the only
  // owner, the last snapshot holder's reads of the buffer (released by its
  // reference decrement) must still happen before the writes that follow:
  // this fence makes them so; without it they are a data race (reported by
  // ThreadSanitizer in variable_store_concurrency_test).
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
}

std::vector<void*> Variable::UnsharedSlotsLocked() {
  UnshareLocked();
  std::vector<void*> slots;
  for (auto& s : slots_) slots.push_back(s->data());
  return slots;
}

absl::Status Variable::ApplyDenseLocked(const char* grad, double lr_scale) {
  if (on_device_ != nullptr) {
    STRATA_RETURN_IF_ERROR(
        on_device_->ApplyDense(iterations_, lr_scale, grad, &value_));
  } else {
    std::vector<void*> slots = UnsharedSlotsLocked();
    STRATA_RETURN_IF_ERROR(optimizer_->ApplyDenseScaled(
        dtype_, iterations_, lr_scale, value_->data(), slots, grad,
        num_elements_));
  }
  ++iterations_;
  ++changes_;
  return absl::OkStatus();
}

absl::Status Variable::ApplyRowsLocked(absl::Span<const int64_t> ids,
                                       const char* values) {
  if (on_device_ != nullptr) {
    STRATA_RETURN_IF_ERROR(
        on_device_->ApplyRows(iterations_, ids, values, &value_));
  } else {
    std::vector<void*> slots = UnsharedSlotsLocked();
    STRATA_RETURN_IF_ERROR(optimizer_->ApplySparse(
        dtype_, iterations_, value_->data(), slots, ids, values, row_width_));
  }
  ++iterations_;
  ++changes_;
  return absl::OkStatus();
}

void Variable::AdvanceClockLocked(const PushMeta& meta) {
  if (mode_ != v1::UpdateMode::STALENESS) return;
  int64_t& c = clocks_[meta.worker];
  c = std::max(c, meta.step + 1);
}

absl::StatusOr<PushOutcome> Variable::PushDense(const PushMeta& meta,
                                                const char* grad, size_t size,
                                                StagedDense* staged) {
  if (size != byte_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": gradient has ", size,
        " bytes, expected ", byte_size_, " (", DTypeName(dtype_), " ",
        ShapeString(shape_), ")"));
  }
  STRATA_RETURN_IF_ERROR(CheckPushMeta(meta));
  STRATA_RETURN_IF_ERROR(
      CheckFinite(dtype_, grad, num_elements_,
                  absl::StrCat("gradient for variable ", Quote(name()))));
  return TakePush(meta, grad, {}, nullptr, staged);
}

absl::StatusOr<PushOutcome> Variable::PushCheckedDense(
    const PushMeta& meta, const char* grad, StagedDense* staged,
    const ReplicatedCorrection* replicated) {
  // The core's PushSession checked the bytes as they arrived; a backup's
  // primary checked the entry it took.
  return TakePush(meta, grad, {}, nullptr, staged, replicated);
}

double Variable::LrScaleLocked(const PushMeta& meta,
                               int64_t* staleness) const {
  *staleness = -1;
  if (meta.base_version < 0) return 1.0;
  // A restore may have put the variable below the version read.
  *staleness = std::max<int64_t>(0, version_ - meta.base_version);
  if (!scale_by_staleness_) return 1.0;
  return 1.0 / static_cast<double>(
                   1 + std::max<int64_t>(0, *staleness - staleness_tolerance_));
}

absl::Status Variable::CheckRowShape(const char* what) const {
  if (shape_.size() == 2) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("variable ", Quote(name()), ": row ", what,
                   " needs a 2-D variable, it is ", ShapeString(shape_)));
}

absl::Status Variable::CheckRowIds(absl::Span<const int64_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= shape_[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable ", Quote(name()), ": row id ", ids[i], " (position ", i,
          ") is outside [0, ", shape_[0], ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PushOutcome> Variable::PushRows(const PushMeta& meta,
                                               absl::Span<const int64_t> ids,
                                               const char* values,
                                               size_t size) {
  STRATA_RETURN_IF_ERROR(CheckRowShape("push"));
  const size_t row_bytes = row_width_ * DTypeSize(dtype_);
  if (size != ids.size() * row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": row gradient has ", size,
        " bytes, expected ", ids.size(), " rows x ", row_width_, " ",
        DTypeName(dtype_), " = ", ids.size() * row_bytes));
  }
  STRATA_RETURN_IF_ERROR(CheckRowIds(ids));
  STRATA_RETURN_IF_ERROR(CheckPushMeta(meta));
  STRATA_RETURN_IF_ERROR(CheckFinite(
      dtype_, values, ids.size() * row_width_,
      absl::StrCat("row gradient for variable ", Quote(name()))));
  // Sum duplicate ids.
  std::vector<int64_t> unique_ids;
  std::unordered_map<int64_t, size_t> index;
  index.reserve(ids.size());
  for (int64_t id : ids) {
    if (index.emplace(id, unique_ids.size()).second) unique_ids.push_back(id);
  }
  if (unique_ids.size() == ids.size()) {
    return TakePush(meta, nullptr, unique_ids, values);
  }
  std::shared_ptr<Buffer> summed =
      Buffer::Allocate(unique_ids.size() * row_bytes);
  for (size_t i = 0; i < ids.size(); ++i) {
    AddInto(dtype_, summed->data() + index[ids[i]] * row_bytes,
            values + i * row_bytes, row_width_);
  }
  return TakePush(meta, nullptr, unique_ids, summed->data());
}

absl::StatusOr<PushOutcome> Variable::TakePush(
    const PushMeta& meta, const char* dense, absl::Span<const int64_t> ids,
    const char* rows, StagedDense* staged,
    const ReplicatedCorrection* replicated) {
  Ready ready;
  PushOutcome out;
  uint64_t ticket = 0;
  const char* compensated = nullptr;
  {
    absl::MutexLock lock(&mu_);
    STRATA_ASSIGN_OR_RETURN(bool seen, dedup_.SeenBefore(meta, name()));
    // A duplicate that landed during the staging is acknowledged; its copy
    // is dropped without being counted (nothing is applied again).
    if (staged != nullptr && !seen) {
      out.staged = PushOutcome::Staged::kDiscarded;
    }
    if (seen) {
      out.version = version_;
      out.duplicate = true;
      // The first copy may still be on its way to the backup.
      if (sink_ != nullptr) ticket = sink_->Tail();
    } else {
      if (mode_ == v1::UpdateMode::SYNC) {
        STRATA_RETURN_IF_ERROR(
            pending_.Add(name(), version_, meta, dense, ids, rows));
        // Taken: its gradient is in its step's sum.
        dedup_.Record(meta);
        STRATA_ASSIGN_OR_RETURN(out.applied, ApplyCompleteStepsLocked());
      } else {
        // Delay compensation keeps the value this push replaces.
        std::shared_ptr<Buffer> before =
            delay_compensated() ? value_ : nullptr;
        if (dense == nullptr) {
          STRATA_RETURN_IF_ERROR(ApplyRowsLocked(ids, rows));
        } else {
          const double lr_scale = LrScaleLocked(meta, &out.staleness);
          const bool published = PublishStagedLocked(staged, lr_scale);
          NoteStagedLocked(staged, published);
          if (published) {
            // The staged copy is this step: value and slots were stepped
            // from exactly the state they replace.
            ++iterations_;
            ++changes_;
            out.staged = PushOutcome::Staged::kPublished;
          } else {
            const char* apply = dense;
            if (delay_compensated()) {
              bool corrected = false;
              STRATA_ASSIGN_OR_RETURN(
                  apply, CompensateLocked(meta, dense, replicated, &corrected));
              if (corrected) compensated = apply;
            }
            STRATA_RETURN_IF_ERROR(ApplyDenseLocked(apply, lr_scale));
          }
        }
        if (before != nullptr) RememberVersionLocked(version_, std::move(before));
        ++version_;
        dedup_.Record(meta);
        AdvanceClockLocked(meta);
        out.applied = true;
      }
      out.version = version_;
      ticket = ReplicatePushLocked(meta, dense, ids, rows, compensated);
      PublishLocked(&ready);
    }
  }
  for (auto& fn : ready) fn(absl::OkStatus());
  STRATA_RETURN_IF_ERROR(WaitReplicated(ticket));
  return out;
}

uint64_t Variable::ReplicatePushLocked(const PushMeta& meta,
                                       const char* dense,
                                       absl::Span<const int64_t> ids,
                                       const char* rows,
                                       const char* compensated) {
  if (sink_ == nullptr || !sink_->active()) return 0;
  VariableChange c;
  c.variable = name();
  c.meta = meta;
  if (dense != nullptr) {
    c.kind = VariableChange::Kind::kPushDense;
    c.data = dense;
    c.size = byte_size_;
    c.compensated = compensated;
  } else {
    c.kind = VariableChange::Kind::kPushRows;
    c.ids = ids;
    c.data = rows;
    c.size = ids.size() * row_width_ * DTypeSize(dtype_);
  }
  return sink_->AppendChange(c);
}

absl::Status Variable::WaitReplicated(uint64_t ticket) const {
  if (ticket == 0 || sink_ == nullptr) return absl::OkStatus();
  return sink_->Wait(ticket);
}

absl::StatusOr<bool> Variable::ApplyCompleteStepsLocked() {
  bool applied = false;
  while (std::optional<SyncAccumulator::Averaged> step =
             pending_.CompleteStep(version_)) {
    STRATA_RETURN_IF_ERROR(
        step->dense != nullptr
            ? ApplyDenseLocked(step->dense, 1.0)
            : ApplyRowsLocked(step->rows, step->packed->data()));
    pending_.Forget(version_);
    ++version_;
    applied = true;
  }
  return applied;
}

absl::StatusOr<int64_t> Variable::Assign(const char* data, size_t size) {
  if (size != byte_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": assigned value has ", size,
        " bytes, expected ", byte_size_, " (", DTypeName(dtype_), " ",
        ShapeString(shape_), ")"));
  }
  STRATA_RETURN_IF_ERROR(CheckFinite(
      dtype_, data, num_elements_,
      absl::StrCat("value assigned to variable ", Quote(name()))));
  // On the host the copy is made before taking the lock; on a device it is
  // uploaded under it.
  std::shared_ptr<Buffer> fresh;
  if (!device_.is_cuda()) {
    fresh = Buffer::Allocate(size, false);
    std::memcpy(fresh->data(), data, size);
  }
  Ready ready;
  int64_t version;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Buffer> before = delay_compensated() ? value_ : nullptr;
    if (on_device_ != nullptr) {
      STRATA_RETURN_IF_ERROR(on_device_->Assign(data, &value_));
    } else {
      value_ = std::move(fresh);
    }
    if (before != nullptr) RememberVersionLocked(version_, std::move(before));
    // A sync variable's version counts steps; an assignment does not move it.
    if (mode_ != v1::UpdateMode::SYNC) ++version_;
    ++changes_;
    version = version_;
    if (sink_ != nullptr && sink_->active()) {
      VariableChange c;
      c.kind = VariableChange::Kind::kAssign;
      c.variable = name();
      c.data = data;
      c.size = size;
      ticket = sink_->AppendChange(c);
    }
    PublishLocked(&ready);
  }
  for (auto& fn : ready) fn(absl::OkStatus());
  STRATA_RETURN_IF_ERROR(WaitReplicated(ticket));
  return version;
}

void Variable::PublishLocked(Ready* ready) {
  mirrors_.Write(changes_, version_, value_->data(), byte_size_);
  waiters_.TakeReady(PullStateLocked(), ready);
}

VariableSnapshot Variable::Snapshot() const {
  absl::ReaderMutexLock lock(&mu_);
  return VariableSnapshot{dtype_, shape_, value_, version_};
}

absl::StatusOr<VariableSnapshot> Variable::ReadRows(
    absl::Span<const int64_t> ids) const {
  STRATA_RETURN_IF_ERROR(CheckRowShape("pull"));
  STRATA_RETURN_IF_ERROR(CheckRowIds(ids));
  const size_t row_bytes = row_width_ * DTypeSize(dtype_);
  auto out = Buffer::Allocate(ids.size() * row_bytes, false);
  std::shared_ptr<const Buffer> value;
  int64_t version;
  {
    absl::ReaderMutexLock lock(&mu_);
    value = value_;
    version = version_;
  }
  // The snapshot is immutable, so the gather runs outside the lock.
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(out->data() + i * row_bytes,
                value->data() + ids[i] * row_bytes, row_bytes);
  }
  return VariableSnapshot{
      dtype_, Shape{static_cast<int64_t>(ids.size()), row_width_},
      std::move(out), version};
}

PullState Variable::PullStateLocked() const {
  PullState state;
  state.version = version_;
  if (mode_ == v1::UpdateMode::STALENESS) {
    state.bounded = true;
    state.staleness = staleness_;
    state.slowest_clock = *std::min_element(clocks_.begin(), clocks_.end());
  }
  return state;
}

bool Variable::PullReady(int64_t min_version, int64_t clock) const {
  absl::ReaderMutexLock lock(&mu_);
  return PullStateLocked().Ready(min_version, clock);
}

std::string Variable::WaitDescription(int64_t min_version,
                                      int64_t clock) const {
  absl::ReaderMutexLock lock(&mu_);
  const PullState state = PullStateLocked();
  std::string out = absl::StrCat("variable ", Quote(name()), " is at version ",
                                 version_, " (pull needs >= ", min_version, ")");
  if (state.bounded) {
    absl::StrAppend(&out, "; staleness bound ", staleness_,
                    ": pull at clock ", clock,
                    " needs the slowest worker at >= ", clock - staleness_,
                    ", it is at ", state.slowest_clock);
  }
  return out;
}

int64_t Variable::WaitForPull(int64_t min_version, int64_t clock,
                              std::function<void(absl::Status)> done) {
  {
    absl::MutexLock lock(&mu_);
    if (!PullStateLocked().Ready(min_version, clock)) {
      return waiters_.Add(min_version, clock, std::move(done));
    }
  }
  done(absl::OkStatus());
  return 0;
}

void Variable::ExpireWaiter(int64_t id, absl::Status status) {
  std::function<void(absl::Status)> fn;
  {
    absl::MutexLock lock(&mu_);
    fn = waiters_.Take(id);
  }
  if (fn != nullptr) fn(std::move(status));
}

void Variable::CancelWaiters(absl::Status status) {
  Ready all;
  {
    absl::MutexLock lock(&mu_);
    all = waiters_.TakeAll();
  }
  for (auto& fn : all) fn(status);
}

int64_t Variable::version() const {
  absl::ReaderMutexLock lock(&mu_);
  return version_;
}

int64_t Variable::iterations() const {
  absl::ReaderMutexLock lock(&mu_);
  return iterations_;
}

}  // namespace strata

// Staged dense pushes (StagedDense, server/variable.h): a Lane push's
// optimizer step run chunk by chunk on a copy of the value and slots, and
// published whole by Variable::PushDense.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "server/variable.h"

namespace strata {

std::unique_ptr<StagedDense> Variable::StageDense(const PushMeta& meta,
                                                  BufferPool* pool,
                                                  uint64_t max_bytes) {
  // No staging for a SYNC variable (its pushes are summed, not stepped) or
  // one with delay compensation (its correction needs the value at the
  // push's apply, not at the staging's start).
  if (mode_ == v1::UpdateMode::SYNC || device_.is_cuda() ||
      delay_compensated() ||
      num_elements_ == 0 || pool == nullptr || byte_size_ > max_bytes) {
    return nullptr;
  }
  // One staging at a time (`live`); after a staged copy lost to another
  // update, the next `skip` pushes are not staged (see NoteStagedLocked).
  StageGate& gate = *stage_gate_;
  if (gate.skip.load() > 0) {
    gate.skip.fetch_sub(1);
    return nullptr;
  }
  if (gate.live.exchange(true)) return nullptr;
  // From here the gate is released by the staging's destructor.
  std::unique_ptr<StagedDense> staged(new StagedDense());
  staged->gate_ = stage_gate_;
  staged->variable_ = this;
  {
    absl::ReaderMutexLock lock(&mu_);
    const uint64_t copy_bytes =
        static_cast<uint64_t>(byte_size_) * (1 + slots_.size());
    if (copy_bytes > max_bytes) return nullptr;
    absl::StatusOr<bool> seen = dedup_.SeenBefore(meta, name());
    if (!seen.ok() || *seen) return nullptr;
    staged->base_value_ = value_;
    staged->base_slots_ = slots_;
    staged->iterations_ = iterations_;
    staged->version_ = version_;
    int64_t staleness;
    staged->lr_scale_ = LrScaleLocked(meta, &staleness);
  }
  // Every element of the copy is written by Apply before it is published.
  staged->value_ = pool->Acquire(byte_size_);
  for (size_t i = 0; i < staged->base_slots_.size(); ++i) {
    staged->slots_.push_back(pool->Acquire(byte_size_));
    staged->slot_data_.push_back(staged->slots_.back()->data());
  }
  return staged;
}

void StagedDense::Apply(const char* grad, int64_t available) {
  const Variable& v = *variable_;
  const size_t elem = DTypeSize(v.dtype_);
  // The kernels run over 64-byte-aligned buffers in vector lanes from the
  // start; ranges cut at 64-byte boundaries split no lane, so every
  // element takes the same instructions as in the whole step.
  const int64_t run = std::max<int64_t>(1, 64 / static_cast<int64_t>(elem));
  const int64_t end = available >= v.num_elements_
                          ? v.num_elements_
                          : available - available % run;
  if (!status_.ok() || end <= done_) return;
  // Copied and stepped a block at a time, so that the step reads the copy
  // from cache (the base buffers are not written while this holds them).
  constexpr int64_t kBlock = 4096;  // elements, a multiple of every run
  std::vector<void*> slots(slot_data_.size());
  while (done_ < end && status_.ok()) {
    const int64_t b = done_;
    const int64_t e = std::min(end, (b / kBlock + 1) * kBlock);
    const size_t at = static_cast<size_t>(b) * elem;
    const size_t bytes = static_cast<size_t>(e - b) * elem;
    std::memcpy(value_->data() + at, base_value_->data() + at, bytes);
    for (size_t i = 0; i < slot_data_.size(); ++i) {
      std::memcpy(slots_[i]->data() + at, base_slots_[i]->data() + at, bytes);
      slots[i] = static_cast<char*>(slot_data_[i]) + at;
    }
    status_ = v.optimizer_->ApplyDenseScaled(v.dtype_, iterations_,
                                             lr_scale_, value_->data() + at,
                                             slots, grad + at, e - b);
    if (status_.ok()) done_ = e;
  }
}

// Touches the gate only, never variable_: a staging may outlive its
// variable (a Lane frame drops its variables first).
StagedDense::~StagedDense() {
  if (gate_ != nullptr) gate_->live.store(false);
}

// The staging holds base_value_ and base_slots_, so the variable copies them
// before writing (UnshareLocked): it is unchanged since the staging began
// exactly when they are still its buffers.
bool Variable::PublishStagedLocked(StagedDense* staged, double lr_scale) {
  if (staged == nullptr || on_device_ != nullptr || !staged->status_.ok() ||
      staged->variable_ != this || staged->done_ != num_elements_ ||
      staged->value_ == nullptr || staged->base_value_ != value_ ||
      staged->base_slots_ != slots_ ||
      staged->iterations_ != iterations_ || staged->version_ != version_ ||
      staged->lr_scale_ != lr_scale) {
    return false;
  }
  value_ = std::move(staged->value_);
  slots_ = std::move(staged->slots_);
  staged->slot_data_.clear();
  return true;
}

void Variable::NoteStagedLocked(StagedDense* staged, bool published) {
  if (staged == nullptr) return;
  StageGate& gate = *stage_gate_;
  if (published) {
    gate.backoff.store(0);
  } else if (staged->status_.ok() && staged->done_ == num_elements_) {
    // Complete, yet another update came first: skip the next 1, 3, 7, ...
    // up to 63 pushes, so that a variable many workers push at once does not
    // keep copying for nothing.
    const int next = std::min(2 * gate.backoff.load() + 1, 63);
    gate.backoff.store(next);
    gate.skip.store(next);
  }
}

}  // namespace strata

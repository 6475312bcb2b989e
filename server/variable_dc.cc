// Delay compensation of a Variable's stale dense pushes (DC-ASGD;
// kernels/delay_compensation.h): the values of the last versions, and the
// correction of a push from the value at its base version.
#include <memory>
#include <utility>

#include "common/status_macros.h"
#include "server/variable.h"

namespace strata {

absl::StatusOr<const char*> Variable::CompensateLocked(
    const PushMeta& meta, const char* grad,
    const ReplicatedCorrection* replicated, bool* corrected) {
  *corrected = false;
  void* mean_square =
      dc_mean_square_ != nullptr ? dc_mean_square_->data() : nullptr;
  if (replicated != nullptr) {
    // A backup applies what its primary applied, never correcting on its
    // own, so that its value stays equal to the primary's to the bit; the
    // adaptive variant's mean square moves with the push's own gradient, as
    // the primary's.
    if (mean_square != nullptr) {
      STRATA_RETURN_IF_ERROR(DelayCompensate(dtype_, dc_, grad, nullptr,
                                             nullptr, mean_square,
                                             dc_scratch_->data(),
                                             num_elements_));
    }
    if (replicated->compensated == nullptr) return grad;
    *corrected = true;
    return replicated->compensated;
  }
  // The value the gradient was computed from: that of its base version, or
  // the oldest kept after it when that one is gone (a restore or an
  // assignment also count as versions; a variable rebuilt from a checkpoint
  // or a state transfer keeps none from before).
  const Buffer* then = nullptr;
  if (meta.base_version >= 0 && meta.base_version < version_) {
    for (const auto& [version, value] : dc_history_) {
      if (version >= meta.base_version) {
        then = value.get();
        break;
      }
    }
  }
  if (then == nullptr && mean_square == nullptr) return grad;
  STRATA_RETURN_IF_ERROR(DelayCompensate(
      dtype_, dc_, grad, value_->data(),
      then != nullptr ? then->data() : nullptr, mean_square,
      dc_scratch_->data(), num_elements_));
  if (then == nullptr) return grad;
  // A correction that overflowed is dropped: the gradient, which passed
  // its checks, is applied as it came.
  if (!CheckFinite(dtype_, dc_scratch_->data(), num_elements_, "").ok()) {
    return grad;
  }
  *corrected = true;
  return dc_scratch_->data();
}

void Variable::RememberVersionLocked(int64_t version,
                                     std::shared_ptr<Buffer> value) {
  dc_history_.emplace_back(version, std::move(value));
  while (dc_history_.size() > static_cast<size_t>(dc_versions_)) {
    dc_history_.pop_front();
  }
}

}  // namespace strata

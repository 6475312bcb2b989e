#include "tools/restart_policy.h"

#include <algorithm>

namespace strata {

void RestartPolicy::Started(absl::Time now, bool ready) {
  started_ = now;
  ready_ = ready;
}

void RestartPolicy::BackOff(absl::Time now) {
  restart_at_ = now + pause_;
  pause_ = std::min(kMaxPause,
                    std::max(absl::Milliseconds(500), pause_ * 2));
}

bool RestartPolicy::StartFailed(absl::Time now) {
  ready_ = false;
  if (++failed_starts_ >= kMaxFailedStarts) return false;
  BackOff(now);
  return true;
}

bool RestartPolicy::Exited(absl::Time now) {
  const bool served = ready_ || now - started_ >= kSoonAfterStart;
  if (served) {
    failed_starts_ = 0;
    pause_ = absl::ZeroDuration();
    restart_at_ = now;
    return true;
  }
  if (++failed_starts_ >= kMaxFailedStarts) return false;
  BackOff(now);
  return true;
}

}  // namespace strata

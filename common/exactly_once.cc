#include "common/exactly_once.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<bool> ExactlyOnceWindow::SeenBefore(
    const PushMeta& meta, const std::string& variable) const {
  if (!meta.tagged) return false;
  auto it = windows_.find(std::make_pair(meta.job, meta.worker));
  if (it == windows_.end()) return false;
  const Steps& w = it->second;
  if (meta.step < w.floor) {
    return absl::AbortedError(absl::StrCat(
        "variable '", variable, "': step ", meta.step,
        " of worker ", meta.worker,
        " is older than the exactly-once window (oldest step "
        "remembered: ",
        w.floor, "); cannot tell whether it was applied"));
  }
  return w.steps.count(meta.step) > 0;
}

void ExactlyOnceWindow::Record(const PushMeta& meta) {
  if (!meta.tagged) return;
  Steps& w = windows_[{meta.job, meta.worker}];
  w.steps.insert(meta.step);
  while (static_cast<int64_t>(w.steps.size()) > kDedupWindow) {
    w.floor = *w.steps.begin() + 1;
    w.steps.erase(w.steps.begin());
  }
}

}  // namespace strata

// Exactly-once bookkeeping of a variable or a table: the window of steps
// remembered per (job, worker), from which a re-sent push is recognised and
// acknowledged without being applied again. A thread-compatible class that
// its Variable or TableStore owns and guards.
#ifndef STRATA_COMMON_EXACTLY_ONCE_H_
#define STRATA_COMMON_EXACTLY_ONCE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/push_id.h"

namespace strata {

// Steps remembered per (job, worker) for exactly-once detection.
inline constexpr int64_t kDedupWindow = 4096;

// The tagged pushes a variable has taken, per (job, worker): the last
// kDedupWindow steps, and the floor below which steps are forgotten.
// Thread-compatible: the owning Variable guards it with its mutex.
class ExactlyOnceWindow {
 public:
  using Key = std::pair<std::string, int64_t>;  // (job, worker)
  struct Steps {
    std::set<int64_t> steps;
    int64_t floor = 0;  // steps below this are forgotten
  };

  // Whether the tagged push `meta` was recorded (false for an untagged
  // push). Records nothing. Errors: ABORTED, naming `variable`, for a step
  // below the floor of its (job, worker): it may or may not have been taken.
  absl::StatusOr<bool> SeenBefore(const PushMeta& meta,
                                  const std::string& variable) const;

  // Remembers the taken tagged push `meta` (nothing for an untagged one);
  // beyond kDedupWindow steps of its (job, worker), forgets the oldest and
  // raises the floor above it.
  void Record(const PushMeta& meta);

  // Everything remembered, for a checkpoint.
  const std::map<Key, Steps>& windows() const { return windows_; }

  // Replaces what is remembered for `key` (restoring a checkpoint).
  void Restore(Key key, Steps steps) {
    windows_[std::move(key)] = std::move(steps);
  }

 private:
  std::map<Key, Steps> windows_;
};

}  // namespace strata

#endif  // STRATA_COMMON_EXACTLY_ONCE_H_

// StepSet: the set of step numbers a job has completed (or a checkpoint
// covers), stored as sorted, disjoint half-open ranges so that millions of
// steps cost a few entries. A value type; not thread-safe (its owner locks).
#ifndef STRATA_COORDINATOR_STEP_SET_H_
#define STRATA_COORDINATOR_STEP_SET_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace strata {

// A set of step numbers stored as sorted, disjoint half-open ranges.
class StepSet {
 public:
  bool Contains(int64_t step) const;
  // Adds `step`; false when it was already there.
  bool Insert(int64_t step);
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The smallest step >= `from` that is not in the set.
  int64_t NextAbsent(int64_t from) const;
  // [begin, end) ranges in increasing order.
  std::vector<std::pair<int64_t, int64_t>> Ranges() const;
  // Replaces the contents; INVALID_ARGUMENT for unsorted, overlapping,
  // empty or negative ranges.
  absl::Status SetRanges(const std::vector<std::pair<int64_t, int64_t>>& r);
  // Every step in *this that is not in `other`.
  std::vector<int64_t> Minus(const StepSet& other) const;
  void Clear() {
    ranges_.clear();
    size_ = 0;
  }
  bool operator==(const StepSet& o) const { return ranges_ == o.ranges_; }

 private:
  std::map<int64_t, int64_t> ranges_;  // begin -> end
  int64_t size_ = 0;
};

}  // namespace strata

#endif  // STRATA_COORDINATOR_STEP_SET_H_

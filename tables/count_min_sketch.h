// A bounded frequency counter over int64 keys: a count-min sketch with
// conservative update, used by DynamicTable to admit an id after it has been
// seen a minimum number of times without keeping a counter per id.
//
// Estimates never undercount (a key added k times estimates >= k) and may
// overcount when keys collide in every row; memory is width * depth 32-bit
// counters whatever the number of keys. Counters saturate at 2^32 - 1.
// Hashing is seeded and platform-independent (SplitMix64), so two sketches
// with the same seed and the same additions hold the same counts.
// Thread-compatible.
#ifndef STRATA_TABLES_COUNT_MIN_SKETCH_H_
#define STRATA_TABLES_COUNT_MIN_SKETCH_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/hash.h"

namespace strata {

class CountMinSketch {
 public:
  // `width` counters per row (>= 1), `depth` rows (>= 1); the caller
  // validates both.
  CountMinSketch(int64_t width, int depth, uint64_t seed)
      : width_(static_cast<uint64_t>(width)),
        depth_(depth),
        counters_(static_cast<size_t>(width) * static_cast<size_t>(depth), 0) {
    row_seeds_.reserve(static_cast<size_t>(depth));
    for (int d = 0; d < depth; ++d) {
      row_seeds_.push_back(Mix64(seed + 0x632be59bd9b4e019ULL * (d + 1)));
    }
  }

  // Counts one more occurrence of `key` and returns its new estimate.
  uint32_t Add(int64_t key) {
    const uint32_t estimate = Estimate(key);
    if (estimate == std::numeric_limits<uint32_t>::max()) return estimate;
    const uint32_t next = estimate + 1;
    // Conservative update: raise only the counters below the new estimate.
    for (int d = 0; d < depth_; ++d) {
      uint32_t& c = counters_[Index(d, key)];
      c = std::max(c, next);
    }
    return next;
  }

  // The number of times `key` was added, or more.
  uint32_t Estimate(int64_t key) const {
    uint32_t estimate = std::numeric_limits<uint32_t>::max();
    for (int d = 0; d < depth_; ++d) {
      estimate = std::min(estimate, counters_[Index(d, key)]);
    }
    return estimate;
  }

  size_t bytes() const { return counters_.size() * sizeof(uint32_t); }

 private:
  size_t Index(int d, int64_t key) const {
    const uint64_t h =
        Mix64(static_cast<uint64_t>(key) ^ row_seeds_[static_cast<size_t>(d)]);
    return static_cast<size_t>(d) * static_cast<size_t>(width_) +
           static_cast<size_t>(h % width_);
  }

  const uint64_t width_;
  const int depth_;
  std::vector<uint64_t> row_seeds_;
  std::vector<uint32_t> counters_;
};

}  // namespace strata

#endif  // STRATA_TABLES_COUNT_MIN_SKETCH_H_

// A pool of reusable Buffers, so that large receive buffers are not mapped,
// faulted in and unmapped on every request (PERF_NOTES: the allocator is the
// largest single cost of 64 MB messages).
#ifndef STRATA_COMMON_BUFFER_POOL_H_
#define STRATA_COMMON_BUFFER_POOL_H_

#include <cstddef>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor.h"

namespace strata {

// Thread-safe. Buffers handed out return to the pool when their last
// reference drops, if the pool still exists and holds fewer than
// `max_cached_bytes`; otherwise they are freed. Contents are not cleared.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  static std::shared_ptr<BufferPool> Create(size_t max_cached_bytes);

  // A buffer of exactly `bytes` bytes (uninitialized contents).
  std::shared_ptr<Buffer> Acquire(size_t bytes);

  size_t cached_bytes() const;

 private:
  explicit BufferPool(size_t max_cached_bytes)
      : max_cached_bytes_(max_cached_bytes) {}
  void Release(std::shared_ptr<Buffer> buffer);

  const size_t max_cached_bytes_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, std::shared_ptr<Buffer>> free_ ABSL_GUARDED_BY(mu_);
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_COMMON_BUFFER_POOL_H_

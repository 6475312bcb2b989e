#include "common/buffer_pool.h"

#include <utility>

namespace strata {

std::shared_ptr<BufferPool> BufferPool::Create(size_t max_cached_bytes) {
  return std::shared_ptr<BufferPool>(new BufferPool(max_cached_bytes));
}

std::shared_ptr<Buffer> BufferPool::Acquire(size_t bytes) {
  std::shared_ptr<Buffer> inner;
  {
    absl::MutexLock lock(&mu_);
    auto it = free_.find(bytes);
    if (it != free_.end()) {
      inner = std::move(it->second);
      free_.erase(it);
      cached_bytes_ -= bytes;
    }
  }
  if (inner == nullptr) inner = Buffer::Allocate(bytes, /*zero=*/false);
  // The handle shares ownership of `inner`; when the handle dies, `inner`
  // goes back to the pool (if the pool is still alive).
  std::weak_ptr<BufferPool> weak = weak_from_this();
  Buffer* raw = inner.get();
  return std::shared_ptr<Buffer>(
      raw, [weak, inner = std::move(inner)](Buffer*) mutable {
        if (auto pool = weak.lock()) {
          pool->Release(std::move(inner));
        }
      });
}

void BufferPool::Release(std::shared_ptr<Buffer> buffer) {
  absl::MutexLock lock(&mu_);
  if (cached_bytes_ + buffer->size() > max_cached_bytes_) return;
  cached_bytes_ += buffer->size();
  free_.emplace(buffer->size(), std::move(buffer));
}

size_t BufferPool::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_bytes_;
}

}  // namespace strata

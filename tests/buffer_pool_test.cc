#include "common/buffer_pool.h"

#include "gtest/gtest.h"

namespace strata {
namespace {

TEST(BufferPoolTest, ReleasedBuffersAreReused) {
  auto pool = BufferPool::Create(1 << 20);
  const char* first;
  {
    auto b = pool->Acquire(4096);
    ASSERT_EQ(b->size(), 4096u);
    first = b->data();
  }
  EXPECT_EQ(pool->cached_bytes(), 4096u);
  auto again = pool->Acquire(4096);
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(pool->cached_bytes(), 0u);
  auto other = pool->Acquire(100);
  EXPECT_NE(other->data(), first);
}

TEST(BufferPoolTest, CacheIsBounded) {
  auto pool = BufferPool::Create(6000);
  {
    auto a = pool->Acquire(4000);
    auto b = pool->Acquire(4000);
  }
  EXPECT_EQ(pool->cached_bytes(), 4000u);
}

TEST(BufferPoolTest, BuffersOutliveThePool) {
  auto pool = BufferPool::Create(1 << 20);
  auto b = pool->Acquire(64);
  pool.reset();
  b->data()[0] = 1;  // still valid; freed when `b` goes
  EXPECT_EQ(b->size(), 64u);
}

}  // namespace
}  // namespace strata

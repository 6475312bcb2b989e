// A fixed-size pool of threads for fanning calls out in parallel.
#ifndef STRATA_COMMON_THREAD_POOL_H_
#define STRATA_COMMON_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace strata {

// Thread-safe. The destructor runs every task already scheduled, then joins.
class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> fn);

  // Runs fn(0..n-1) on the pool (the caller runs one share too) and returns
  // when all are done.
  void ParallelFor(int n, const std::function<void(int)>& fn);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata

#endif  // STRATA_COMMON_THREAD_POOL_H_

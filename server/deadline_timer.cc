#include "server/deadline_timer.h"

#include <vector>

namespace strata {

DeadlineTimer::DeadlineTimer() : thread_([this] { Loop(); }) {}

DeadlineTimer::~DeadlineTimer() { Stop(); }

void DeadlineTimer::Schedule(absl::Time when, std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      pending_.emplace(when, std::move(fn));
      return;
    }
  }
  fn();
}

void DeadlineTimer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void DeadlineTimer::Loop() {
  while (true) {
    std::vector<std::function<void()>> due;
    bool stop;
    {
      absl::MutexLock lock(&mu_);
      absl::Time wake = pending_.empty() ? absl::Now() + absl::Seconds(1)
                                         : pending_.begin()->first;
      // Wakes early when stopping or when an earlier deadline arrives.
      auto ready = [this, wake]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ ||
               (!pending_.empty() && pending_.begin()->first < wake);
      };
      mu_.AwaitWithDeadline(absl::Condition(&ready), wake);
      stop = stopping_;
      absl::Time now = absl::Now();
      while (!pending_.empty() && (stop || pending_.begin()->first <= now)) {
        due.push_back(std::move(pending_.begin()->second));
        pending_.erase(pending_.begin());
      }
    }
    for (auto& fn : due) fn();
    if (stop) {
      absl::MutexLock lock(&mu_);
      if (pending_.empty()) return;
    }
  }
}

}  // namespace strata

#include "server/pull_waiters.h"

#include <utility>

namespace strata {

int64_t PullWaiters::Add(int64_t min_version, int64_t clock, Done done) {
  const int64_t id = next_id_++;
  waiters_.emplace(id, Waiter{min_version, clock, std::move(done)});
  return id;
}

PullWaiters::Done PullWaiters::Take(int64_t id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return nullptr;
  Done done = std::move(it->second.done);
  waiters_.erase(it);
  return done;
}

std::vector<PullWaiters::Done> PullWaiters::TakeAll() {
  std::vector<Done> all;
  all.reserve(waiters_.size());
  for (auto& [id, w] : waiters_) all.push_back(std::move(w.done));
  waiters_.clear();
  return all;
}

void PullWaiters::TakeReady(const PullState& state, std::vector<Done>* ready) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (state.Ready(it->second.min_version, it->second.clock)) {
      ready->push_back(std::move(it->second.done));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace strata

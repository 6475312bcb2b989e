// Barriers: named waits released when `count` distinct tasks arrived, and
// aborted when a waiting task fails or leaves (see coordinator_internal.h).
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_internal.h"

namespace strata {
namespace coordinator_internal {

absl::Status ValidateBarrier(const std::string& name, int count) {
  if (name.empty()) {
    return absl::InvalidArgumentError("name: a barrier needs a name");
  }
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("count: must be >= 1, got ", count));
  }
  return absl::OkStatus();
}

absl::Status Arrive(CoordinatorCore& core, const std::string& name,
                    const TaskKey& task, int count, int64_t ticket,
                    CoordinatorState::BarrierDone done, Callbacks* callbacks) {
  Barrier& barrier = core.barriers[name];
  if (barrier.waiters.empty()) {
    barrier.count = count;
  } else if (barrier.count != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "barrier '", name, "': count ", count, " differs from the ",
        barrier.count, " its waiting tasks use"));
  }
  auto it = barrier.waiters.find(task);
  if (it != barrier.waiters.end()) {
    callbacks->emplace_back(
        std::move(it->second.done),
        absl::AbortedError(absl::StrCat("barrier '", name,
                                        "': superseded by a new arrival of ",
                                        Name(task))));
  }
  barrier.waiters[task] = BarrierWaiter{ticket, std::move(done)};
  if (static_cast<int>(barrier.waiters.size()) >= barrier.count) {
    for (auto& [waiter, w] : barrier.waiters) {
      callbacks->emplace_back(std::move(w.done), absl::OkStatus());
    }
    core.logger->Info("barrier_released",
                      {{"barrier", name}, {"count", barrier.count}});
    core.barriers.erase(name);
  }
  return absl::OkStatus();
}

bool CancelWait(CoordinatorCore& core, int64_t ticket) {
  for (auto it = core.barriers.begin(); it != core.barriers.end(); ++it) {
    for (auto w = it->second.waiters.begin(); w != it->second.waiters.end();
         ++w) {
      if (w->second.ticket == ticket) {
        it->second.waiters.erase(w);
        if (it->second.waiters.empty()) core.barriers.erase(it);
        return true;
      }
    }
  }
  return false;
}

void CancelAll(CoordinatorCore& core, const absl::Status& status,
               Callbacks* callbacks) {
  for (auto& [name, barrier] : core.barriers) {
    for (auto& [task, w] : barrier.waiters) {
      callbacks->emplace_back(std::move(w.done), status);
    }
  }
  core.barriers.clear();
}

void AbortBarriersOf(CoordinatorCore& core, const TaskKey& task,
                     const char* reason, Callbacks* callbacks) {
  for (auto it = core.barriers.begin(); it != core.barriers.end();) {
    if (it->second.waiters.count(task) == 0) {
      ++it;
      continue;
    }
    absl::Status aborted = absl::AbortedError(
        absl::StrCat("barrier '", it->first, "': task ", Name(task), " ",
                     reason, " while waiting"));
    for (auto& [waiter, w] : it->second.waiters) {
      callbacks->emplace_back(std::move(w.done), aborted);
    }
    core.logger->Warning(
        "barrier_aborted",
        {{"barrier", it->first}, {"member", Name(task)}, {"reason", reason}});
    it = core.barriers.erase(it);
  }
}

}  // namespace coordinator_internal
}  // namespace strata

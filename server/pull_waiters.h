// Pulls waiting for a variable to reach a version (and, in STALENESS mode,
// for its slowest worker to catch up), and the condition they wait for.
// Thread-compatible; a Variable owns them and guards them with its mutex.
#ifndef STRATA_SERVER_PULL_WAITERS_H_
#define STRATA_SERVER_PULL_WAITERS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/status/status.h"

namespace strata {

// The state of a variable a pull's condition is judged on.
struct PullState {
  int64_t version = 0;
  // STALENESS mode: the bound, and the clock of the slowest worker.
  bool bounded = false;
  int staleness = 0;
  int64_t slowest_clock = 0;

  // Whether a pull may proceed: version >= min_version and, when bounded
  // and `clock` > 0, slowest_clock >= clock - staleness.
  bool Ready(int64_t min_version, int64_t clock) const {
    if (version < min_version) return false;
    return !bounded || clock <= 0 || slowest_clock >= clock - staleness;
  }
};

// The waiting pulls of one variable, by id. Thread-compatible: the owning
// Variable guards it with its mutex and runs what it hands out after
// releasing that mutex.
class PullWaiters {
 public:
  using Done = std::function<void(absl::Status)>;

  // Keeps `done` until taken; returns its id (>= 1).
  int64_t Add(int64_t min_version, int64_t clock, Done done);
  // The `done` of waiter `id`, no longer waiting; null when it is not.
  Done Take(int64_t id);
  // Every waiter's `done` in id order; none waits any more.
  std::vector<Done> TakeAll();
  // Appends to `ready`, in id order, the `done` of every waiter whose
  // condition `state` meets; those stop waiting.
  void TakeReady(const PullState& state, std::vector<Done>* ready);

 private:
  struct Waiter {
    int64_t min_version;
    int64_t clock;
    Done done;
  };
  std::map<int64_t, Waiter> waiters_;
  int64_t next_id_ = 1;
};

}  // namespace strata

#endif  // STRATA_SERVER_PULL_WAITERS_H_

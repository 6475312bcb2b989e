// Retrier: runs a call again while it fails with UNAVAILABLE, waiting an
// exponential backoff between attempts. Time is injected: the wait goes
// through a SleepFunction (real time by default), so tests can step it.
//
// Thread-safe: a Retrier is immutable after construction; Run may be called
// from many threads at once when the SleepFunction may.
#ifndef STRATA_CLIENT_RETRY_H_
#define STRATA_CLIENT_RETRY_H_

#include <functional>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace strata {

// Blocks the calling thread for a duration.
using SleepFunction = std::function<void(absl::Duration)>;

// Sleeps on the real clock, in whole milliseconds.
void RealSleep(absl::Duration d);

struct RetryPolicy {
  // Attempts per call (at least one is always made).
  int max_attempts = 5;
  // Wait after attempt n: initial_backoff * 2^(n-1), at most max_backoff.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
};

class Retrier {
 public:
  // A null `sleep` means RealSleep.
  explicit Retrier(const RetryPolicy& policy, SleepFunction sleep = nullptr);

  // The wait after failed attempt `attempt` (1-based).
  absl::Duration Backoff(int attempt) const;

  // For a loop of its own (where a lambda would hide the locks held): after
  // attempt `attempt` ended with `status`, waits the backoff and returns
  // true when another attempt is due (as Run decides).
  bool WaitToRetry(const absl::Status& status, int attempt) const {
    if (!ShouldRetry(status, attempt)) return false;
    sleep_(Backoff(attempt));
    return true;
  }

  // Calls fn(attempt) for attempt = 1, 2, ... until it returns OK, fails
  // with a code other than UNAVAILABLE, or max_attempts is reached; returns
  // the last result. `fn` returns absl::Status or absl::StatusOr<T>.
  template <typename Fn>
  std::invoke_result_t<Fn&, int> Run(Fn&& fn) const {
    for (int attempt = 1;; ++attempt) {
      std::invoke_result_t<Fn&, int> result = fn(attempt);
      if (!ShouldRetry(StatusOf(result), attempt)) return result;
      sleep_(Backoff(attempt));
    }
  }

 private:
  static const absl::Status& StatusOf(const absl::Status& s) { return s; }
  template <typename T>
  static const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
    return s.status();
  }
  bool ShouldRetry(const absl::Status& status, int attempt) const;

  const RetryPolicy policy_;
  const SleepFunction sleep_;
};

}  // namespace strata

#endif  // STRATA_CLIENT_RETRY_H_

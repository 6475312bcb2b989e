#include "client/retry.h"

#include <algorithm>
#include <thread>

namespace strata {

void RealSleep(absl::Duration d) {
  std::this_thread::sleep_for(absl::ToChronoMilliseconds(d));
}

Retrier::Retrier(const RetryPolicy& policy, SleepFunction sleep)
    : policy_(policy),
      sleep_(sleep != nullptr ? std::move(sleep) : SleepFunction(RealSleep)) {}

absl::Duration Retrier::Backoff(int attempt) const {
  absl::Duration d = policy_.initial_backoff;
  for (int i = 1; i < attempt && d < policy_.max_backoff; ++i) d *= 2;
  return std::min(d, policy_.max_backoff);
}

bool Retrier::ShouldRetry(const absl::Status& status, int attempt) const {
  return !status.ok() && status.code() == absl::StatusCode::kUnavailable &&
         attempt < policy_.max_attempts;
}

}  // namespace strata

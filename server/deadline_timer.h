// Runs callbacks at deadlines on one background thread.
#ifndef STRATA_SERVER_DEADLINE_TIMER_H_
#define STRATA_SERVER_DEADLINE_TIMER_H_

#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace strata {

// Thread-safe. Callbacks run on the timer thread, outside its lock; after
// Stop() (or destruction) every callback still pending runs once, at once.
class DeadlineTimer {
 public:
  DeadlineTimer();
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  void Schedule(absl::Time when, std::function<void()> fn);
  void Stop();

 private:
  void Loop();

  absl::Mutex mu_;
  std::multimap<absl::Time, std::function<void()>> pending_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_SERVER_DEADLINE_TIMER_H_

// WorkFeed: a worker's local queue of leased work items, shared by its step
// threads and kept filled by a feeder thread of its own. Reports go back in
// batches with each request for more items (ReportWorkBatch), so that no
// step waits for a coordinator round trip and the coordinator answers one
// call per several steps.
#ifndef STRATA_WORKER_WORK_FEED_H_
#define STRATA_WORKER_WORK_FEED_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"

namespace strata {

struct WorkFeedOptions {
  // Items asked for per call (the lease); at most 64.
  int lease = 4;
  // A call is made once this many reports wait (or any while nothing is
  // queued), or fewer items than low_water are queued.
  int report_every = 2;
  int low_water = 2;
  // How long Next waits for an item before answering WAIT (so that its
  // caller can check for a stop).
  absl::Duration max_wait = absl::Milliseconds(100);
  // Pause after a NOT_FOUND answer (the task re-registers meanwhile), and
  // the first and longest pauses after a call that failed for a while
  // (UNAVAILABLE, DEADLINE_EXCEEDED: retried; other errors end the feed).
  absl::Duration not_found_pause = absl::Milliseconds(200);
  absl::Duration min_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
};

// Thread-safe. Starts its feeder thread in the constructor; the destructor
// stops it.
class WorkFeed {
 public:
  WorkFeed(Coordinator* coordinator, v1::TaskId task,
           std::string incarnation, WorkFeedOptions options);
  ~WorkFeed();
  WorkFeed(const WorkFeed&) = delete;
  WorkFeed& operator=(const WorkFeed&) = delete;

  // Queues `done` (the report of the caller's last item, when it has one)
  // and returns the caller's next item. EVALUATE reports and failed steps
  // are sent at once. WAIT means nothing came within max_wait (ask again);
  // DONE that the job is over (after the last reports were sent). Errors:
  // a coordinator error other than NOT_FOUND, UNAVAILABLE or
  // DEADLINE_EXCEEDED (the feeder stops then).
  absl::StatusOr<v1::WorkItem> Next(std::optional<v1::ReportWorkRequest> done);

  // Calls made so far (tests).
  int64_t calls() const;

 private:
  void FeederLoop();
  // Reports to send now; items to ask for now (not during a WAIT pause).
  bool ReportsDueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ItemsDueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Conditions: the feeder has a call to make (or must stop); a step
  // thread has an answer.
  bool FeederWakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ItemReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes one call (releasing mu_ meanwhile).
  absl::Status CallLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Coordinator* const coordinator_;
  const v1::TaskId task_;
  const std::string incarnation_;
  const WorkFeedOptions options_;

  mutable absl::Mutex mu_;
  std::deque<v1::WorkItem> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportWorkRequest> pending_ ABSL_GUARDED_BY(mu_);
  // TRAIN steps and EVALUATE epochs handed to step threads and not yet
  // reported.
  std::set<int64_t> running_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> running_evaluations_ ABSL_GUARDED_BY(mu_);
  bool urgent_ ABSL_GUARDED_BY(mu_) = false;  // a report to send at once
  // No call for items before this time (after WAIT).
  absl::Time next_call_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // No call at all before this time (after a failed call), and the pause
  // after the next failure.
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // the coordinator said DONE
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread feeder_;
};

}  // namespace strata

#endif  // STRATA_WORKER_WORK_FEED_H_

// WorkFeed: a worker's local queue of leased work items, shared by its step
// threads. Reports are sent in batches together with a request for more
// items (ReportWorkBatch), so that a step does not wait for a coordinator
// round trip and the coordinator answers one call per several steps.
#ifndef STRATA_WORKER_WORK_FEED_H_
#define STRATA_WORKER_WORK_FEED_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
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
  // A call is made once this many reports wait, even with items queued.
  int report_every = 2;
};

// Thread-safe. One call to the coordinator at a time.
class WorkFeed {
 public:
  WorkFeed(CoordinatorClient* coordinator, v1::TaskId task,
           std::string incarnation, WorkFeedOptions options);

  // Queues `done` (the report of the caller's last item, when it has one)
  // and returns the caller's next item: a queued one, or one from a call
  // made now (or by another thread). EVALUATE reports, failed steps and an
  // empty queue are sent at once. WAIT means nothing is available now (ask
  // again after retry_after_ms); DONE that the job is over. Errors: those
  // of ReportWorkBatch (NOT_FOUND: the task must re-register); the reports
  // not sent stay queued for the next call.
  absl::StatusOr<v1::WorkItem> Next(std::optional<v1::ReportWorkRequest> done);

  // Calls made so far (tests).
  int64_t calls() const;

 private:
  // Whether a call is due before handing out a queued item.
  bool CallDueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes one call (releasing mu_ meanwhile).
  absl::Status CallLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::WorkItem PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CoordinatorClient* const coordinator_;
  const v1::TaskId task_;
  const std::string incarnation_;
  const WorkFeedOptions options_;

  mutable absl::Mutex mu_;
  std::deque<v1::WorkItem> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportWorkRequest> pending_ ABSL_GUARDED_BY(mu_);
  // TRAIN steps handed to step threads and not yet reported.
  std::set<int64_t> running_ ABSL_GUARDED_BY(mu_);
  bool urgent_ ABSL_GUARDED_BY(mu_) = false;  // a report to send at once
  bool calling_ ABSL_GUARDED_BY(mu_) = false;
  // WAIT or DONE from the last call, given out while the queue is empty.
  std::optional<v1::WorkItem> terminal_ ABSL_GUARDED_BY(mu_);
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_WORKER_WORK_FEED_H_

// GroupReporter: a group trainer's step and evaluation reports, sent to the
// coordinator in order by a thread of its own (ReportWorkBatch), so that no
// step waits for a coordinator round trip. A coordinator restart used to
// stall every step of a central_storage group for the whole outage (3.6 s
// a kill); now the replicas train on and the reports follow.
//
// Thread-safe. Starts its thread in the constructor; the destructor sends
// what is queued (bounded by options.drain) and stops it.
#ifndef STRATA_WORKER_GROUP_REPORTER_H_
#define STRATA_WORKER_GROUP_REPORTER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "common/logging.h"
#include "strata/v1/coordinator.pb.h"

namespace strata {

struct GroupReporterOptions {
  // Reports per call, at most 1024 (ReportWorkBatchRequest's limit).
  int max_batch = 256;
  // Pauses after a failed call: the first, doubling up to the longest.
  absl::Duration min_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Milliseconds(250);
  // A report refused NOT_FOUND (the task is not registered: the
  // coordinator restarted or declared it failed, and its agent registers
  // it again) is retried this long, then dropped.
  absl::Duration not_found_retry = absl::Seconds(10);
  // How long the destructor waits for the queue to empty (then for the
  // call in flight, bounded by the coordinator client's retry_for).
  absl::Duration drain = absl::Seconds(2);
};

class GroupReporter {
 public:
  // `on_group` receives the newest group id of each answer (from the
  // reporter's thread). `coordinator` and `logger` are borrowed.
  GroupReporter(Coordinator* coordinator, Logger* logger,
                std::function<void(int64_t)> on_group,
                GroupReporterOptions options = {});
  ~GroupReporter();
  GroupReporter(const GroupReporter&) = delete;
  GroupReporter& operator=(const GroupReporter&) = delete;

  // Queues `report` (of this process's task and incarnation) behind the
  // others; returns at once.
  void Add(v1::ReportWorkRequest report);
  // Waits until every queued report was answered (or dropped), at most
  // `timeout`; whether the queue is empty.
  bool Flush(absl::Duration timeout);
  // Reports answered so far (tests).
  int64_t sent() const;

 private:
  void Loop();

  Coordinator* const coordinator_;
  Logger* const logger_;
  const std::function<void(int64_t)> on_group_;
  const GroupReporterOptions options_;

  mutable absl::Mutex mu_;
  std::deque<v1::ReportWorkRequest> queue_ ABSL_GUARDED_BY(mu_);
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_WORKER_GROUP_REPORTER_H_

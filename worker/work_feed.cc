#include "worker/work_feed.h"

#include <algorithm>
#include <utility>

namespace strata {

WorkFeed::WorkFeed(Coordinator* coordinator, v1::TaskId task,
                   std::string incarnation, WorkFeedOptions options)
    : coordinator_(coordinator),
      task_(std::move(task)),
      incarnation_(std::move(incarnation)),
      options_(options) {
  feeder_ = std::thread([this] { FeederLoop(); });
}

WorkFeed::~WorkFeed() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  feeder_.join();
}

int64_t WorkFeed::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

bool WorkFeed::ReportsDueLocked() const {
  // With nothing queued the step threads are idle: whatever they reported
  // may be what the coordinator waits for (the end of an epoch).
  return urgent_ ||
         static_cast<int>(pending_.size()) >=
             std::max(1, options_.report_every) ||
         (!pending_.empty() && queue_.empty());
}

bool WorkFeed::ItemsDueLocked() const {
  return !done_ &&
         static_cast<int>(queue_.size()) < std::max(1, options_.low_water) &&
         absl::Now() >= next_call_;
}

bool WorkFeed::FeederWakeLocked() const {
  return stop_ || (absl::Now() >= retry_at_ &&
                   (ReportsDueLocked() || ItemsDueLocked()));
}

bool WorkFeed::ItemReadyLocked() const {
  return !queue_.empty() || !error_.ok() || (done_ && pending_.empty());
}

void WorkFeed::FeederLoop() {
  absl::MutexLock lock(&mu_);
  while (!stop_ && error_.ok()) {
    // Sleep until a call is due (and allowed), or a stop.
    const absl::Time now = absl::Now();
    absl::Time wake = now + absl::Seconds(1);
    for (absl::Time t : {next_call_, retry_at_}) {
      if (t > now) wake = std::min(wake, t);
    }
    mu_.AwaitWithDeadline(absl::Condition(this, &WorkFeed::FeederWakeLocked),
                          wake);
    if (stop_) break;
    if (absl::Now() < retry_at_ || (!ReportsDueLocked() && !ItemsDueLocked())) {
      continue;
    }
    absl::Status s = CallLocked();
    if (s.ok()) {
      backoff_ = absl::ZeroDuration();
    } else if (s.code() == absl::StatusCode::kNotFound) {
      // Declared failed or unknown after a coordinator restart: the
      // membership agent registers again; the reports stay queued.
      retry_at_ = absl::Now() + options_.not_found_pause;
    } else if (s.code() == absl::StatusCode::kUnavailable ||
               s.code() == absl::StatusCode::kDeadlineExceeded) {
      // The coordinator is slow or away (its client already retried
      // UNAVAILABLE for a while): keep the reports, try again later.
      backoff_ = std::clamp(2 * backoff_, options_.min_backoff,
                            options_.max_backoff);
      retry_at_ = absl::Now() + backoff_;
    } else {
      error_ = s;
    }
  }
}

absl::Status WorkFeed::CallLocked() {
  v1::ReportWorkBatchRequest request;
  *request.mutable_task() = task_;
  request.set_incarnation(incarnation_);
  for (auto& r : pending_) *request.add_reports() = std::move(r);
  pending_.clear();
  urgent_ = false;
  for (const v1::WorkItem& item : queue_) {
    if (item.kind() == v1::WorkItem::TRAIN) {
      request.add_holding(item.step());
    } else {
      request.add_holding_evaluations(item.epoch());
    }
  }
  for (int64_t step : running_) request.add_holding(step);
  for (int64_t epoch : running_evaluations_) {
    request.add_holding_evaluations(static_cast<int32_t>(epoch));
  }
  const int lease = std::clamp(options_.lease, 1, 64);
  request.set_max_items(
      done_ ? 0 : std::max(0, lease - static_cast<int>(queue_.size())));
  mu_.Unlock();
  absl::StatusOr<v1::ReportWorkBatchResponse> response =
      coordinator_->ReportWorkBatch(request);
  mu_.Lock();
  ++calls_;
  if (!response.ok()) {
    // Keep the reports for the next call (a report applied twice counts
    // once).
    std::vector<v1::ReportWorkRequest> unsent(
        request.mutable_reports()->begin(), request.mutable_reports()->end());
    for (auto& r : pending_) unsent.push_back(std::move(r));
    pending_ = std::move(unsent);
    return response.status();
  }
  for (v1::WorkItem& item : *response->mutable_items()) {
    switch (item.kind()) {
      case v1::WorkItem::TRAIN:
      case v1::WorkItem::EVALUATE:
        queue_.push_back(std::move(item));
        break;
      case v1::WorkItem::DONE:
        done_ = true;
        break;
      default:  // WAIT: ask again after the coordinator's pause
        next_call_ = absl::Now() + absl::Milliseconds(std::max<int64_t>(
                                       1, item.retry_after_ms()));
        break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::WorkItem> WorkFeed::Next(
    std::optional<v1::ReportWorkRequest> done) {
  absl::MutexLock lock(&mu_);
  if (done.has_value()) {
    if (done->item().kind() == v1::WorkItem::TRAIN) {
      running_.erase(done->item().step());
    } else {
      running_evaluations_.erase(done->item().epoch());
    }
    // Evaluations and failures matter to others (the epoch gate, the
    // re-queue): send them at once.
    if (done->item().kind() != v1::WorkItem::TRAIN || !done->error().empty()) {
      urgent_ = true;
    }
    pending_.push_back(*std::move(done));
  }
  mu_.AwaitWithTimeout(absl::Condition(this, &WorkFeed::ItemReadyLocked),
                       options_.max_wait);
  if (!queue_.empty()) {
    v1::WorkItem item = std::move(queue_.front());
    queue_.pop_front();
    if (item.kind() == v1::WorkItem::TRAIN) {
      running_.insert(item.step());
    } else {
      running_evaluations_.insert(item.epoch());
    }
    return item;
  }
  if (!error_.ok()) return error_;
  v1::WorkItem item;
  if (done_ && pending_.empty()) {
    item.set_kind(v1::WorkItem::DONE);
  } else {
    item.set_kind(v1::WorkItem::WAIT);
    item.set_retry_after_ms(0);
  }
  return item;
}

}  // namespace strata

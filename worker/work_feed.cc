#include "worker/work_feed.h"

#include <algorithm>
#include <utility>

namespace strata {

WorkFeed::WorkFeed(CoordinatorClient* coordinator, v1::TaskId task,
                   std::string incarnation, WorkFeedOptions options)
    : coordinator_(coordinator),
      task_(std::move(task)),
      incarnation_(std::move(incarnation)),
      options_(options) {}

int64_t WorkFeed::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

bool WorkFeed::CallDueLocked() const {
  return urgent_ ||
         static_cast<int>(pending_.size()) >= std::max(1, options_.report_every);
}

v1::WorkItem WorkFeed::PopLocked() {
  v1::WorkItem item = std::move(queue_.front());
  queue_.pop_front();
  if (item.kind() == v1::WorkItem::TRAIN) running_.insert(item.step());
  return item;
}

absl::Status WorkFeed::CallLocked() {
  calling_ = true;
  v1::ReportWorkBatchRequest request;
  *request.mutable_task() = task_;
  request.set_incarnation(incarnation_);
  for (auto& r : pending_) *request.add_reports() = std::move(r);
  pending_.clear();
  urgent_ = false;
  for (const v1::WorkItem& item : queue_) {
    if (item.kind() == v1::WorkItem::TRAIN) request.add_holding(item.step());
  }
  for (int64_t step : running_) request.add_holding(step);
  const int lease = std::clamp(options_.lease, 1, 64);
  request.set_max_items(
      std::max(0, lease - static_cast<int>(queue_.size())));
  if (!terminal_.has_value() || terminal_->kind() != v1::WorkItem::DONE) {
    terminal_.reset();
  }
  mu_.Unlock();
  absl::StatusOr<v1::ReportWorkBatchResponse> response =
      coordinator_->ReportWorkBatch(request);
  mu_.Lock();
  calling_ = false;
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
    if (item.kind() == v1::WorkItem::TRAIN ||
        item.kind() == v1::WorkItem::EVALUATE) {
      queue_.push_back(std::move(item));
    } else {
      terminal_ = std::move(item);
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
    }
    // Evaluations and failures matter to others (the epoch gate, the
    // re-queue): send them at once.
    if (done->item().kind() != v1::WorkItem::TRAIN || !done->error().empty()) {
      urgent_ = true;
    }
    pending_.push_back(*std::move(done));
  }
  while (true) {
    if (!calling_ && (queue_.empty() || CallDueLocked())) {
      if (queue_.empty() && pending_.empty() && terminal_.has_value() &&
          terminal_->kind() == v1::WorkItem::DONE) {
        return *terminal_;
      }
      absl::Status s = CallLocked();
      if (!s.ok()) return s;
      if (queue_.empty()) {
        if (terminal_.has_value()) return *terminal_;
        v1::WorkItem wait;
        wait.set_kind(v1::WorkItem::WAIT);
        wait.set_retry_after_ms(5);
        return wait;
      }
    }
    if (!queue_.empty()) return PopLocked();
    // Another thread's call is in flight: its items may serve this one.
    const int64_t seen = calls_;
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](bool* calling) { return !*calling; },
                             &calling_),
                         absl::Minutes(2));
    if (calls_ != seen && queue_.empty() && terminal_.has_value()) {
      return *terminal_;
    }
  }
}

}  // namespace strata

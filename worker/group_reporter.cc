#include "worker/group_reporter.h"

#include <algorithm>
#include <utility>

namespace strata {

GroupReporter::GroupReporter(Coordinator* coordinator, Logger* logger,
                             std::function<void(int64_t)> on_group,
                             GroupReporterOptions options)
    : coordinator_(coordinator),
      logger_(logger),
      on_group_(std::move(on_group)),
      options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

GroupReporter::~GroupReporter() {
  if (!Flush(options_.drain)) {
    absl::MutexLock lock(&mu_);
    logger_->Log(LogLevel::kWarning, "reports_dropped",
                 {{"reports", static_cast<int64_t>(queue_.size())},
                  {"reason", "the coordinator did not answer while stopping"}});
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void GroupReporter::Add(v1::ReportWorkRequest report) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(report));
}

bool GroupReporter::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.empty() || stop_;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&drained), timeout) &&
         queue_.empty();
}

int64_t GroupReporter::sent() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

void GroupReporter::Loop() {
  absl::Duration backoff = options_.min_backoff;
  absl::Time not_found_since = absl::InfinitePast();
  const size_t max_batch =
      static_cast<size_t>(std::clamp(options_.max_batch, 1, 1024));
  mu_.Lock();
  while (true) {
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || !queue_.empty();
    };
    mu_.Await(absl::Condition(&ready));
    if (stop_) break;
    // Sent in order, oldest first; popped only once answered (a report is
    // idempotent, so a batch that failed half-way is sent again whole).
    const size_t n = std::min(queue_.size(), max_batch);
    v1::ReportWorkBatchRequest request;
    *request.mutable_task() = queue_.front().task();
    request.set_incarnation(queue_.front().incarnation());
    for (size_t i = 0; i < n; ++i) *request.add_reports() = queue_[i];
    mu_.Unlock();
    absl::StatusOr<v1::ReportWorkBatchResponse> response =
        coordinator_->ReportWorkBatch(request);
    if (response.ok()) on_group_(response->group());
    mu_.Lock();
    const absl::StatusCode code =
        response.ok() ? absl::StatusCode::kOk : response.status().code();
    bool drop = response.ok();
    bool retry = false;
    if (code == absl::StatusCode::kNotFound) {
      // Not registered (yet): the membership agent registers the task
      // again with the same incarnation; the reports count then.
      const absl::Time now = absl::Now();
      if (not_found_since == absl::InfinitePast()) not_found_since = now;
      retry = now - not_found_since < options_.not_found_retry;
      drop = !retry;
    } else if (code == absl::StatusCode::kUnavailable ||
               code == absl::StatusCode::kDeadlineExceeded ||
               code == absl::StatusCode::kAborted) {
      retry = true;
    } else if (code != absl::StatusCode::kOk) {
      drop = true;
    }
    if (code != absl::StatusCode::kNotFound) {
      not_found_since = absl::InfinitePast();
    }
    if (!response.ok() && !retry) {
      logger_->Log(LogLevel::kWarning, "report_failed",
                   {{"reports", static_cast<int64_t>(n)},
                    {"first_step", request.reports(0).item().step()},
                    {"error", response.status().ToString()}});
    }
    if (drop) {
      // The next NOT_FOUND is retried again for not_found_retry.
      not_found_since = absl::InfinitePast();
      queue_.erase(queue_.begin(),
                   queue_.begin() + static_cast<std::ptrdiff_t>(n));
      if (response.ok()) sent_ += static_cast<int64_t>(n);
      backoff = options_.min_backoff;
      continue;
    }
    // Retried after a pause (cut short by the destructor).
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&stopping), backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  mu_.Unlock();
}

}  // namespace strata

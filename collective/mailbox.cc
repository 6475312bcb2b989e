#include "collective/mailbox.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace strata {
namespace collective {
namespace internal {
namespace {

// Charged per kept message on top of its bytes, so that many tiny early
// messages are bounded too.
constexpr int64_t kMessageOverhead = 256;

}  // namespace

Mailbox::Mailbox(const WorkerServerOptions& options, Logger* logger)
    : options_(options), logger_(logger) {}

absl::Status Mailbox::Deliver(DecodedMessage msg) {
  std::shared_ptr<GrpcGroup> group;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) {
      return absl::UnavailableError("worker server is shutting down");
    }
    if (newest_.has_value() && msg.group < *newest_) {
      return absl::AbortedError(absl::StrCat(
          "group ", msg.group, " is older than group ", *newest_,
          ", the newest opened on this worker"));
    }
    if (newest_.has_value() && msg.group == *newest_) {
      group = current_.lock();
      if (group == nullptr) {
        return absl::AbortedError(
            absl::StrCat("group ", msg.group, " is closed on this worker"));
      }
    } else {
      const int64_t bytes =
          static_cast<int64_t>(msg.data_size + msg.key.size()) +
          kMessageOverhead;
      if (early_bytes_ + bytes > options_.max_early_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "message '", msg.key, "' for group ", msg.group,
            ", not opened on this worker yet: messages kept for unopened "
            "groups would exceed max_early_bytes ",
            options_.max_early_bytes));
      }
      early_bytes_ += bytes;
      Early& early = early_[msg.group];
      early.bytes += bytes;
      early.messages.push_back(std::move(msg));
      return absl::OkStatus();
    }
  }
  return group->Deliver(std::move(msg));
}

void Mailbox::AbortGroup(int64_t group_id, int from_rank,
                         const std::string& reason) {
  std::shared_ptr<GrpcGroup> group;
  {
    absl::MutexLock lock(&mu_);
    if (newest_.has_value() && group_id < *newest_) return;
    if (newest_.has_value() && group_id == *newest_) {
      group = current_.lock();
    } else {
      // Kept until the group opens, counted in the same bound as early
      // messages (dropped beyond it: notices are best effort).
      auto it = early_.find(group_id);
      if (it != early_.end() && it->second.aborted) return;
      const int64_t bytes =
          static_cast<int64_t>(reason.size()) + kMessageOverhead;
      if (early_bytes_ + bytes > options_.max_early_bytes) return;
      early_bytes_ += bytes;
      Early& early = early_[group_id];
      early.bytes += bytes;
      early.aborted = true;
      early.abort_rank = from_rank;
      early.abort_reason = reason;
    }
  }
  if (group != nullptr) group->Abort(from_rank, reason, /*tell_peers=*/false);
}

absl::StatusOr<std::shared_ptr<GrpcGroup>> Mailbox::Open(
    int64_t group_id, int rank, std::vector<std::string> peers,
    const CollectiveOptions& options, const PeerLinks* links,
    grpc::CompletionQueue* cq) {
  auto group = std::make_shared<GrpcGroup>(group_id, rank, std::move(peers),
                                           options, options_, links, cq,
                                           weak_from_this(), logger_);
  std::shared_ptr<GrpcGroup> previous;
  Early early;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) {
      return absl::FailedPreconditionError(
          "worker server is shut down: cannot open a group");
    }
    if (newest_.has_value() && group_id <= *newest_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "group ", group_id, " is not newer than group ", *newest_,
          " already opened on this worker"));
    }
    previous = current_.lock();
    newest_ = group_id;
    current_ = group;
    // Keep this group's early messages; drop those of older groups.
    for (auto it = early_.begin();
         it != early_.end() && it->first <= group_id;) {
      early_bytes_ -= it->second.bytes;
      if (it->first == group_id) early = std::move(it->second);
      it = early_.erase(it);
    }
  }
  if (previous != nullptr) {
    previous->Abort(previous->rank(),
                    absl::StrCat("ABORTED: superseded by group ", group_id),
                    /*tell_peers=*/true);
  }
  for (auto& msg : early.messages) {
    absl::Status s = group->Deliver(std::move(msg));
    if (!s.ok() && logger_ != nullptr) {
      logger_->Warning("collective_early_message_dropped",
                       {{"group", group_id}, {"error", s.ToString()}});
    }
  }
  if (early.aborted) {
    group->Abort(early.abort_rank, early.abort_reason, /*tell_peers=*/false);
  }
  if (logger_ != nullptr) {
    logger_->Info("collective_group_opened", {{"group", group_id},
                                              {"rank", rank},
                                              {"size", group->size()}});
  }
  return group;
}

void Mailbox::Forget(int64_t group_id, const GrpcGroup* group) {
  absl::MutexLock lock(&mu_);
  auto current = current_.lock();
  if (current.get() == group || current == nullptr) current_.reset();
}

void Mailbox::Shutdown(const std::string& address) {
  std::shared_ptr<GrpcGroup> group;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    group = current_.lock();
    early_.clear();
    early_bytes_ = 0;
  }
  if (group != nullptr) {
    group->Abort(group->rank(),
                 absl::StrCat("UNAVAILABLE: worker server ", address,
                              " is shutting down"),
                 /*tell_peers=*/true);
  }
}

}  // namespace internal
}  // namespace collective
}  // namespace strata

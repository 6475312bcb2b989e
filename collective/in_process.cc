#include "collective/in_process.h"

#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace strata {
namespace collective {
namespace {

// State shared by the ranks of one group. Thread-safe.
class Group {
 public:
  explicit Group(int size)
      : size_(size), boxes_(size), outstanding_(size), cv_(size) {}

  int size() const { return size_; }

  absl::Status Send(int from, int to, const std::string& key,
                    absl::Span<const char> data) {
    if (to < 0 || to >= size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "send '", key, "': peer ", to, " outside [0, ", size_, ")"));
    }
    absl::MutexLock lock(&mu_);
    if (!abort_.ok()) return Aborted();
    auto [it, inserted] =
        boxes_[to].try_emplace({from, key}, Entry{data.data(), data.size()});
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("send '", key, "' to rank ", to, " from rank ", from,
                       ": the key is already queued"));
    }
    ++outstanding_[from];
    cv_[to].SignalAll();
    return absl::OkStatus();
  }

  absl::Status Recv(int to, int from, const std::string& key,
                    absl::Span<char> out, absl::Time deadline) {
    if (from < 0 || from >= size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "recv '", key, "': peer ", from, " outside [0, ", size_, ")"));
    }
    const std::pair<int, std::string> id(from, key);
    Entry entry;
    {
      absl::MutexLock lock(&mu_);
      auto& box = boxes_[to];
      for (;;) {
        if (!abort_.ok()) return Aborted();
        auto it = box.find(id);
        if (it != box.end() && !it->second.claimed) {
          it->second.claimed = true;
          entry = it->second;
          break;
        }
        if (absl::Now() >= deadline) {
          return absl::DeadlineExceededError(
              absl::StrCat("rank ", to, " waiting for '", key, "' from rank ",
                           from, ": deadline exceeded"));
        }
        cv_[to].WaitWithDeadline(&mu_, deadline);
      }
    }
    absl::Status status;
    if (entry.size != out.size()) {
      status = absl::InvalidArgumentError(
          absl::StrCat("recv '", key, "' from rank ", from, ": message has ",
                       entry.size, " bytes, the destination ", out.size()));
    } else if (entry.size > 0) {
      // Outside the lock: the sender keeps the bytes until the entry is gone.
      std::memcpy(out.data(), entry.data, entry.size);
    }
    absl::MutexLock lock(&mu_);
    boxes_[to].erase(id);
    --outstanding_[from];
    cv_[from].SignalAll();
    return status;
  }

  absl::Status Flush(int from, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    for (;;) {
      if (!abort_.ok()) {
        // Messages being copied right now still read the sender's memory;
        // the copies are short, so wait for them whatever the deadline.
        while (outstanding_[from] > 0) cv_[from].Wait(&mu_);
        return Aborted();
      }
      if (outstanding_[from] == 0) return absl::OkStatus();
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("flush of rank ", from, ": ", outstanding_[from],
                         " message(s) not taken by their receivers"));
      }
      cv_[from].WaitWithDeadline(&mu_, deadline);
    }
  }

  void Abort(int from, const absl::Status& reason) {
    absl::MutexLock lock(&mu_);
    if (!abort_.ok()) return;
    abort_ = reason.ok() ? absl::UnknownError("aborted with an OK status")
                         : reason;
    abort_rank_ = from;
    // Drop what nobody took; entries being copied finish on their own.
    for (auto& box : boxes_) {
      for (auto it = box.begin(); it != box.end();) {
        if (it->second.claimed) {
          ++it;
        } else {
          --outstanding_[it->first.first];
          it = box.erase(it);
        }
      }
    }
    for (auto& cv : cv_) cv.SignalAll();
  }

  // Withdraws `from`'s untaken messages and waits for those being copied.
  void Close(int from) {
    absl::MutexLock lock(&mu_);
    for (auto& box : boxes_) {
      for (auto it = box.begin(); it != box.end();) {
        if (it->first.first == from && !it->second.claimed) {
          --outstanding_[from];
          it = box.erase(it);
        } else {
          ++it;
        }
      }
    }
    while (outstanding_[from] > 0) cv_[from].Wait(&mu_);
  }

 private:
  struct Entry {
    const char* data = nullptr;
    size_t size = 0;
    bool claimed = false;  // a receiver is copying it
  };

  absl::Status Aborted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::AbortedError(absl::StrCat("group aborted by rank ",
                                           abort_rank_, ": ",
                                           abort_.ToString()));
  }

  const int size_;
  absl::Mutex mu_;
  // boxes_[to][(from, key)]: messages waiting for rank `to`.
  std::vector<std::map<std::pair<int, std::string>, Entry>> boxes_
      ABSL_GUARDED_BY(mu_);
  // outstanding_[from]: messages sent by `from` and not yet taken.
  std::vector<int64_t> outstanding_ ABSL_GUARDED_BY(mu_);
  absl::Status abort_ ABSL_GUARDED_BY(mu_);
  int abort_rank_ ABSL_GUARDED_BY(mu_) = -1;
  // cv_[r]: signalled when rank r has a new message, when one of r's
  // messages was taken, and on abort.
  std::vector<absl::CondVar> cv_;
};

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  ~InProcessTransport() override { group_->Close(rank_); }

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  absl::Status Send(int peer, const std::string& key,
                    absl::Span<const char> data) override {
    return group_->Send(rank_, peer, key, data);
  }
  absl::Status Recv(int peer, const std::string& key, absl::Span<char> out,
                    absl::Time deadline) override {
    return group_->Recv(rank_, peer, key, out, deadline);
  }
  absl::Status Flush(absl::Time deadline) override {
    return group_->Flush(rank_, deadline);
  }
  void Abort(const absl::Status& reason) override {
    group_->Abort(rank_, reason);
  }

 private:
  const std::shared_ptr<Group> group_;
  const int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> NewInProcessGroup(int size) {
  std::vector<std::unique_ptr<Transport>> out;
  if (size < 1) return out;
  auto group = std::make_shared<Group>(size);
  out.reserve(size);
  for (int r = 0; r < size; ++r) {
    out.push_back(std::make_unique<InProcessTransport>(group, r));
  }
  return out;
}

}  // namespace collective
}  // namespace strata

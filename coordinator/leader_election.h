// Leader election of coordinator replicas on an etcd lease (the pattern of
// etcd's own concurrency.Election): each candidate holds a lease; the one
// whose transaction creates the leader key (attached to its lease) leads,
// and the key's create revision is its epoch, larger for every new leader.
// Standbys poll the key and campaign again once it is gone (the leader's
// lease expired or was revoked). A leader renews its lease several times
// per TTL and counts itself leading only while its last renewal, timed
// from when it was sent, is younger than the TTL: a paused (SIGSTOP)
// leader knows it lost as soon as it runs again, before etcd is asked.
#ifndef STRATA_COORDINATOR_LEADER_ELECTION_H_
#define STRATA_COORDINATOR_LEADER_ELECTION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "coordinator/etcd_client.h"

namespace strata {

struct LeaderElectionOptions {
  // The leader key ("<prefix>/leader"); its value is the leader's
  // `candidate` string (the address its clients reach it at).
  std::string key;
  std::string candidate;
  // The lease's TTL: how long a dead leader keeps the key.
  absl::Duration ttl = absl::Seconds(3);
  // How often a standby looks at the key.
  absl::Duration poll = absl::Milliseconds(200);
  // The clock of the local lease check (injected in tests): monotonic by
  // default (only differences matter; a wall clock stepped back would
  // stretch the lease).
  std::function<absl::Time()> now = [] {
    return absl::FromUnixNanos(
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::steady_clock::now().time_since_epoch())
            .count());
  };
};

// Thread-safe. The client and logger must outlive it.
class LeaderElection {
 public:
  using LostFn = std::function<void(const std::string& reason)>;

  LeaderElection(EtcdClient* etcd, LeaderElectionOptions options,
                 Logger* logger);
  // Resigns when leading.
  ~LeaderElection();

  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // Blocks until this candidate leads, and returns its epoch; `stop`
  // notified: CANCELLED. etcd being unreachable is retried (logged) until
  // then.
  absl::StatusOr<int64_t> Campaign(absl::Notification* stop);

  // Once leading: renews the lease on a thread of its own; `on_lost`
  // runs once, on that thread, when leadership is lost (the lease expired
  // or could not be renewed within the TTL, or the key is gone or another
  // candidate's).
  void KeepLeading(LostFn on_lost);

  // Leading by the local lease check (see the file comment).
  bool Leading() const;
  int64_t epoch() const { return epoch_.load(); }

  // The current leader's `candidate` string and epoch, "" and 0 when none.
  absl::StatusOr<std::pair<std::string, int64_t>> CurrentLeader();

  // Stops renewing and revokes the lease (deleting the key), so that a
  // standby takes over at once. Idempotent.
  void Resign();

 private:
  // Grants a lease when there is none or it expired; returns its id.
  absl::StatusOr<int64_t> EnsureLease();
  void RenewLoop(LostFn on_lost);
  // One renewal: OK, or why leadership is lost.
  absl::Status RenewOnce();

  EtcdClient* const etcd_;
  const LeaderElectionOptions options_;
  Logger* const logger_;

  std::atomic<int64_t> lease_{0};
  std::atomic<int64_t> lease_ttl_ms_{0};
  std::atomic<int64_t> epoch_{0};
  std::atomic<bool> lost_{false};
  // When the last successful renewal was sent, plus the lease's TTL.
  mutable absl::Mutex mu_;
  absl::Time valid_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  absl::Notification stop_;
  std::thread renew_thread_;
  std::atomic<bool> resigned_{false};
};

}  // namespace strata

#endif  // STRATA_COORDINATOR_LEADER_ELECTION_H_

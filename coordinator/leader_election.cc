#include "coordinator/leader_election.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata {

LeaderElection::LeaderElection(EtcdClient* etcd,
                               LeaderElectionOptions options, Logger* logger)
    : etcd_(etcd), options_(std::move(options)), logger_(logger) {}

LeaderElection::~LeaderElection() { Resign(); }

absl::StatusOr<int64_t> LeaderElection::EnsureLease() {
  const int64_t lease = lease_.load();
  if (lease != 0) {
    const absl::Time sent = options_.now();
    absl::StatusOr<int64_t> ttl = etcd_->KeepAliveOnce(lease);
    if (!ttl.ok()) return ttl.status();
    if (*ttl > 0) {
      absl::MutexLock lock(&mu_);
      valid_until_ = sent + absl::Seconds(*ttl);
      return lease;
    }
    logger_->Warning("election_lease_expired", {{"lease", lease}});
  }
  const absl::Time sent = options_.now();
  absl::StatusOr<EtcdLease> granted = etcd_->GrantLease(options_.ttl);
  if (!granted.ok()) return granted.status();
  lease_ = granted->id;
  lease_ttl_ms_ = granted->ttl_seconds * 1000;
  absl::MutexLock lock(&mu_);
  valid_until_ = sent + absl::Seconds(granted->ttl_seconds);
  return granted->id;
}

absl::StatusOr<int64_t> LeaderElection::Campaign(absl::Notification* stop) {
  std::string last_seen;
  absl::Time last_error_log = absl::InfinitePast();
  while (!stop->HasBeenNotified()) {
    absl::Status failed;
    absl::StatusOr<int64_t> lease = EnsureLease();
    if (lease.ok()) {
      etcdserverpb::TxnRequest txn;
      *txn.add_compare() = CreateRevisionIs(options_.key, 0);
      *txn.add_success() = PutOp(options_.key, options_.candidate, *lease);
      *txn.add_failure() = GetOp(options_.key);
      absl::StatusOr<etcdserverpb::TxnResponse> resp = etcd_->Txn(txn);
      if (resp.ok() && resp->succeeded()) {
        epoch_ = resp->header().revision();
        lost_ = false;
        logger_->Info("election_won", {{"key", options_.key},
                                       {"epoch", epoch_.load()},
                                       {"lease", *lease}});
        return epoch_.load();
      }
      if (resp.ok()) {
        std::string leader;
        if (resp->responses_size() > 0 &&
            resp->responses(0).response_range().kvs_size() > 0) {
          const etcdserverpb::KeyValue& kv =
              resp->responses(0).response_range().kvs(0);
          if (kv.lease() == *lease) {
            // Our own key: an earlier attempt won but its answer was lost
            // (a retry on another endpoint, a deadline). Leading since.
            epoch_ = kv.create_revision();
            lost_ = false;
            logger_->Info("election_won", {{"key", options_.key},
                                           {"epoch", epoch_.load()},
                                           {"lease", *lease},
                                           {"answer_lost", true}});
            return epoch_.load();
          }
          leader = kv.value();
        }
        // Someone else leads: wait for the key to go.
        if (leader != last_seen) {
          logger_->Info("election_standby",
                        {{"key", options_.key}, {"leader", leader}});
          last_seen = leader;
        }
      } else {
        failed = resp.status();
      }
    } else {
      failed = lease.status();
    }
    if (!failed.ok() && options_.now() - last_error_log > absl::Seconds(5)) {
      logger_->Warning("election_etcd_unavailable",
                       {{"error", failed.ToString()}});
      last_error_log = options_.now();
    }
    stop->WaitForNotificationWithTimeout(options_.poll);
  }
  return absl::CancelledError("stopped before leading");
}

bool LeaderElection::Leading() const {
  if (epoch_.load() == 0 || lost_.load() || resigned_.load()) return false;
  absl::MutexLock lock(&mu_);
  return options_.now() < valid_until_;
}

absl::Status LeaderElection::RenewOnce() {
  {
    absl::MutexLock lock(&mu_);
    if (options_.now() >= valid_until_) {
      return absl::DeadlineExceededError(
          "the lease was not renewed within its TTL");
    }
  }
  const absl::Time sent = options_.now();
  absl::StatusOr<int64_t> ttl = etcd_->KeepAliveOnce(lease_.load());
  if (!ttl.ok()) return absl::OkStatus();  // etcd unreachable: try again
  if (*ttl <= 0) {
    return absl::FailedPreconditionError("the lease expired in etcd");
  }
  {
    absl::MutexLock lock(&mu_);
    valid_until_ = sent + absl::Seconds(*ttl);
  }
  absl::StatusOr<std::optional<EtcdKeyValue>> key = etcd_->Get(options_.key);
  if (!key.ok()) return absl::OkStatus();
  if (!key->has_value()) {
    return absl::FailedPreconditionError("the leader key is gone");
  }
  if ((*key)->create_revision != epoch_.load()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the leader key belongs to '", (*key)->value,
                     "' (epoch ", (*key)->create_revision, ")"));
  }
  return absl::OkStatus();
}

void LeaderElection::RenewLoop(LostFn on_lost) {
  const absl::Duration period = std::max(
      absl::Milliseconds(50), absl::Milliseconds(lease_ttl_ms_.load()) / 4);
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    absl::Status s = RenewOnce();
    if (s.ok()) continue;
    if (lost_.exchange(true)) return;
    logger_->Error("election_lost",
                   {{"epoch", epoch_.load()}, {"reason", s.ToString()}});
    if (on_lost) on_lost(std::string(s.message()));
    return;
  }
}

void LeaderElection::KeepLeading(LostFn on_lost) {
  renew_thread_ = std::thread(
      [this, on_lost = std::move(on_lost)] { RenewLoop(on_lost); });
}

absl::StatusOr<std::pair<std::string, int64_t>>
LeaderElection::CurrentLeader() {
  absl::StatusOr<std::optional<EtcdKeyValue>> key = etcd_->Get(options_.key);
  if (!key.ok()) return key.status();
  if (!key->has_value()) return std::make_pair(std::string(), int64_t{0});
  return std::make_pair((*key)->value, (*key)->create_revision);
}

void LeaderElection::Resign() {
  if (resigned_.exchange(true)) return;
  stop_.Notify();
  if (renew_thread_.joinable()) {
    // From on_lost, on the renewing thread itself: it is ending.
    if (renew_thread_.get_id() == std::this_thread::get_id()) {
      renew_thread_.detach();
    } else {
      renew_thread_.join();
    }
  }
  const int64_t lease = lease_.exchange(0);
  if (lease != 0) {
    absl::Status s = etcd_->RevokeLease(lease);
    if (!s.ok()) {
      logger_->Warning("election_revoke_failed", {{"error", s.ToString()}});
    }
  }
}

}  // namespace strata

// A small client of etcd's v3 gRPC API (proto/etcd/rpc.proto): the key
// reads, writes and transactions, and the leases, that the elected
// coordinator (coordinator/leader_election.h) and its state in etcd
// (coordinator/etcd_state_file_system.h) are built on.
#ifndef STRATA_COORDINATOR_ETCD_CLIENT_H_
#define STRATA_COORDINATOR_ETCD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "etcd/rpc.grpc.pb.h"

namespace strata {

// One key as etcd holds it.
struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

// A granted lease.
struct EtcdLease {
  int64_t id = 0;
  int64_t ttl_seconds = 0;
};

// Thread-safe. `endpoints`: "host:port[,host:port...]" (plaintext, the
// client URLs of the etcd members); a call that finds one UNAVAILABLE is
// tried on the next before it fails. Each call has `deadline`. Errors are
// etcd's gRPC statuses, their messages prefixed with "etcd <method>: ".
class EtcdClient {
 public:
  static std::unique_ptr<EtcdClient> Connect(
      const std::string& endpoints, absl::Duration deadline = absl::Seconds(5));

  // The key, or nullopt when absent.
  absl::StatusOr<std::optional<EtcdKeyValue>> Get(const std::string& key);
  // Returns the revision of the write.
  absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value,
                              int64_t lease = 0);
  // Returns how many keys were deleted (0 or 1).
  absl::StatusOr<int64_t> Delete(const std::string& key);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(
      const etcdserverpb::TxnRequest& request);

  // A lease of `ttl`, rounded up to whole seconds (etcd may grant more:
  // its minimum is about 1.5 election timeouts).
  absl::StatusOr<EtcdLease> GrantLease(absl::Duration ttl);
  // Renews a lease once; returns its new TTL in seconds, 0 when it expired
  // or was revoked.
  absl::StatusOr<int64_t> KeepAliveOnce(int64_t lease);
  // Revokes a lease, deleting the keys attached to it.
  absl::Status RevokeLease(int64_t lease);

  const std::string& endpoints() const { return endpoints_; }

 private:
  EtcdClient(std::string endpoints, absl::Duration deadline);
  // Runs `fn(ctx, endpoint index)` on the current endpoint, then on the
  // others while the answer is UNAVAILABLE.
  template <typename Fn>
  absl::Status Call(const char* method, Fn fn);

  const std::string endpoints_;
  const absl::Duration deadline_;
  std::vector<std::unique_ptr<etcdserverpb::KV::Stub>> kv_;
  std::vector<std::unique_ptr<etcdserverpb::Lease::Stub>> lease_;
  std::atomic<size_t> current_{0};
};

// Txn building blocks.
// `key`'s create revision compared with `revision` (0: the key is absent).
etcdserverpb::Compare CreateRevisionIs(const std::string& key,
                                       int64_t revision);
etcdserverpb::RequestOp PutOp(const std::string& key, const std::string& value,
                              int64_t lease = 0);
etcdserverpb::RequestOp GetOp(const std::string& key);

}  // namespace strata

#endif  // STRATA_COORDINATOR_ETCD_CLIENT_H_

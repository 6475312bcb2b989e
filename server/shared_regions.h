// Shared-memory regions that same-host clients hand the parameter server
// (AttachSharedRegion in parameter_server.proto): each is a sealed memfd of
// the client's, mapped here so that ExchangeShared reads gradients from it
// and writes pulled values into it, with only headers on the wire.
#ifndef STRATA_SERVER_SHARED_REGIONS_H_
#define STRATA_SERVER_SHARED_REGIONS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shared_layout.h"

namespace strata {

// One mapped region; unmapped when the last holder lets go (a detach while
// an exchange still uses it waits for that exchange).
class MappedRegion {
 public:
  MappedRegion(char* data, size_t size, std::string job)
      : data_(data), size_(size), job_(std::move(job)) {}
  ~MappedRegion();
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  // The nonce matched: the destructor marks the region gone.
  void set_verified() { verified_ = true; }

  char* data() const { return data_; }
  size_t size() const { return size_; }
  // The job of the caller that attached it ("" without credentials).
  const std::string& job() const { return job_; }

  // OK when [offset, offset + bytes) lies inside the region, after the
  // nonce; INVALID_ARGUMENT naming `what` otherwise.
  absl::Status CheckRange(uint64_t offset, uint64_t bytes,
                          const char* what) const;

 private:
  char* const data_;
  const size_t size_;
  const std::string job_;
  bool verified_ = false;
};

struct SharedRegionOptions {
  // Regions held at once, and their total bytes.
  int max_regions = 256;
  uint64_t max_total_bytes = uint64_t{32} << 30;
  // Largest single region.
  uint64_t max_region_bytes = uint64_t{8} << 30;
  // A region unused this long may be dropped to make room for a new one
  // (its client attaches again, or falls back to streaming calls).
  absl::Duration idle_timeout = absl::Seconds(60);
  // Regions served through a doorbell (a server thread each).
  int max_doorbells = 64;
};

// True for a gRPC peer string of a loopback connection ("ipv4:127.x.y.z:p",
// "ipv6:[::1]:p", "ipv6:[::ffff:127.x.y.z]:p", "unix:...").
bool IsLoopbackPeer(const std::string& peer);

// Thread-safe table of mapped regions.
class SharedRegionTable {
 public:
  explicit SharedRegionTable(SharedRegionOptions options = {});

  // Maps memfd `fd` of process `pid` (through /proc/<pid>/fd/<fd>) for a
  // caller of `job` connected from `peer`. Checks, each failing with a
  // status naming it: the peer is loopback (PERMISSION_DENIED); 64 <= bytes
  // <= max_region_bytes and a nonce of kSharedRegionNonceBytes
  // (INVALID_ARGUMENT); the file opens, is a regular file of this user
  // (PERMISSION_DENIED otherwise) whose size is `bytes`, sealed against
  // shrinking, and starts with `nonce` (INVALID_ARGUMENT); room in the
  // table after dropping regions idle since `now - idle_timeout`
  // (RESOURCE_EXHAUSTED). Returns the region's id (random, never 0).
  absl::StatusOr<uint64_t> Attach(const std::string& peer, int64_t pid,
                                  int fd, uint64_t bytes,
                                  const std::string& nonce,
                                  const std::string& job, absl::Time now);

  // The region `id` for a caller of `job` (an empty job matches any: no
  // credentials, or an admin). Errors: FAILED_PRECONDITION naming
  // the id when it is not attached; PERMISSION_DENIED when it belongs to
  // another job.
  absl::StatusOr<std::shared_ptr<MappedRegion>> Get(uint64_t id,
                                                    const std::string& job,
                                                    absl::Time now);

  // Whether region `id` is attached (without marking it used).
  bool Contains(uint64_t id) const;

  // Drops region `id` (errors as Get).
  absl::Status Detach(uint64_t id, const std::string& job);

  int size() const;
  uint64_t total_bytes() const;

 private:
  struct Entry {
    std::shared_ptr<MappedRegion> region;
    absl::Time last_used;
  };
  // Drops entries unused since `cutoff`.
  void DropIdleLocked(absl::Time cutoff) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SharedRegionOptions options_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, Entry> regions_ ABSL_GUARDED_BY(mu_);
  uint64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_SERVER_SHARED_REGIONS_H_

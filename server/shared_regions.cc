#include "server/shared_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/fd_closer.h"

namespace strata {
namespace {

std::string Errno() { return std::strerror(errno); }


}  // namespace

MappedRegion::~MappedRegion() {
  // Tell readers of mirrors in it that nobody writes them any more (only in
  // a region whose nonce proved it the caller's).
  if (verified_) {
    reinterpret_cast<std::atomic<uint64_t>*>(data_)->store(
        kMirrorGone, std::memory_order_release);
  }
  ::munmap(data_, size_);
}

absl::Status MappedRegion::CheckRange(uint64_t offset, uint64_t bytes,
                                      const char* what) const {
  if (offset < kSharedRegionNonceBytes || offset > size_ ||
      bytes > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": bytes [", offset, ", ", offset, " + ", bytes,
        ") do not lie inside the shared region of ", size_,
        " bytes (after its ", kSharedRegionNonceBytes, "-byte nonce)"));
  }
  return absl::OkStatus();
}

bool IsLoopbackPeer(const std::string& peer) {
  // gRPC writes an IPv6 peer's brackets percent-encoded.
  return absl::StartsWith(peer, "ipv4:127.") ||
         absl::StartsWith(peer, "ipv6:%5B::1%5D:") ||
         absl::StartsWith(peer, "ipv6:%5B::ffff:127.") ||
         absl::StartsWith(peer, "ipv6:[::1]:") ||
         absl::StartsWith(peer, "unix:");
}

SharedRegionTable::SharedRegionTable(SharedRegionOptions options)
    : options_(options) {}

absl::StatusOr<uint64_t> SharedRegionTable::Attach(
    const std::string& peer, int64_t pid, int fd, uint64_t bytes,
    const std::string& nonce, const std::string& job, absl::Time now) {
  if (!IsLoopbackPeer(peer)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "AttachSharedRegion: caller '", peer,
        "' is not on this host's loopback; shared memory is for same-host "
        "clients only"));
  }
  if (bytes < 64 || bytes > options_.max_region_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("AttachSharedRegion: bytes ", bytes,
                     " is outside [64, ", options_.max_region_bytes, "]"));
  }
  if (nonce.size() != kSharedRegionNonceBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("AttachSharedRegion: nonce has ", nonce.size(),
                     " bytes, expected ", kSharedRegionNonceBytes));
  }
  if (pid <= 0 || fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AttachSharedRegion: pid ", pid, " and fd ", fd, " must be positive"));
  }
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd);
  const int file = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (file < 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "AttachSharedRegion: cannot open ", path, ": ", Errno()));
  }
  FdCloser closer(file);
  struct stat st;
  if (::fstat(file, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AttachSharedRegion: ", path, " is not a regular file"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(
        absl::StrCat("AttachSharedRegion: ", path, " belongs to uid ",
                     st.st_uid, ", not this server's ", ::geteuid()));
  }
  if (static_cast<uint64_t>(st.st_size) != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("AttachSharedRegion: ", path, " has ", st.st_size,
                     " bytes, the request says ", bytes));
  }
  const int seals = ::fcntl(file, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AttachSharedRegion: ", path,
        " is not a memfd sealed against shrinking (F_SEAL_SHRINK)"));
  }
  void* data =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "AttachSharedRegion: mapping ", bytes, " bytes: ", Errno()));
  }
  auto region = std::make_shared<MappedRegion>(static_cast<char*>(data),
                                               bytes, job);
  if (std::memcmp(region->data(), nonce.data(), kSharedRegionNonceBytes) !=
      0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AttachSharedRegion: ", path, " does not start with the nonce"));
  }

  absl::MutexLock lock(&mu_);
  if (static_cast<int>(regions_.size()) >= options_.max_regions ||
      total_bytes_ + bytes > options_.max_total_bytes) {
    DropIdleLocked(now - options_.idle_timeout);
  }
  if (static_cast<int>(regions_.size()) >= options_.max_regions ||
      total_bytes_ + bytes > options_.max_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "AttachSharedRegion: the server holds ", regions_.size(),
        " regions of ", total_bytes_, " bytes (limits ", options_.max_regions,
        " and ", options_.max_total_bytes, ")"));
  }
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t id = 0;
  while (id == 0 || regions_.count(id) > 0) id = rng();
  region->set_verified();  // in the table: its unmapping marks it gone
  regions_[id] = Entry{std::move(region), now};
  total_bytes_ += bytes;
  return id;
}

absl::StatusOr<std::shared_ptr<MappedRegion>> SharedRegionTable::Get(
    uint64_t id, const std::string& job, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(id);
  if (it == regions_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared region ", id, " is not attached (attach it again)"));
  }
  const std::string& owner = it->second.region->job();
  if (!job.empty() && owner != job) {
    return absl::PermissionDeniedError(absl::StrCat(
        "shared region ", id, " belongs to another job than '", job, "'"));
  }
  it->second.last_used = now;
  return it->second.region;
}

absl::Status SharedRegionTable::Detach(uint64_t id, const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(id);
  if (it == regions_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared region ", id, " is not attached"));
  }
  const std::string& owner = it->second.region->job();
  if (!job.empty() && owner != job) {
    return absl::PermissionDeniedError(absl::StrCat(
        "shared region ", id, " belongs to another job than '", job, "'"));
  }
  total_bytes_ -= it->second.region->size();
  regions_.erase(it);
  return absl::OkStatus();
}

void SharedRegionTable::DropIdleLocked(absl::Time cutoff) {
  for (auto it = regions_.begin(); it != regions_.end();) {
    if (it->second.last_used <= cutoff) {
      total_bytes_ -= it->second.region->size();
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
}

bool SharedRegionTable::Contains(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  return regions_.count(id) > 0;
}

int SharedRegionTable::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(regions_.size());
}

uint64_t SharedRegionTable::total_bytes() const {
  absl::MutexLock lock(&mu_);
  return total_bytes_;
}

}  // namespace strata

// PsCluster's reads of same-host PS tasks' mirrors (PullLatest): the
// MirrorVariables regions, set up per task and read without a call, with
// PushPullMany as the fallback.
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/ps_cluster.h"
#include "common/shared_layout.h"
#include "common/status_macros.h"

namespace strata {

std::shared_ptr<const PsCluster::MirrorSet> PsCluster::MirrorsFor(
    int ps, const PerPs& part) {
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    if (mirror_refused_[ps]) return nullptr;
    const auto& m = mirrors_[ps];
    if (m != nullptr && m->epoch == failures_[ps] && m->names == part.names) {
      return m;
    }
  }
  absl::MutexLock setup(mirror_setup_mu_[ps].get());
  std::shared_ptr<const MirrorSet> old;
  {
    absl::MutexLock lock(&mu_);
    const auto& m = mirrors_[ps];
    if (m != nullptr && m->epoch == failures_[ps] && m->names == part.names) {
      return m;  // set up by another lane meanwhile
    }
    old = m;
    epoch = failures_[ps];
  }
  PsClient* client = clients_[ps].get();
  if (old != nullptr) (void)client->DetachSharedRegion(old->id);
  auto set = std::make_shared<MirrorSet>();
  set->names = part.names;
  set->epoch = epoch;
  size_t bytes = SharedRegion::kHeaderBytes;
  for (size_t size : part.sizes) {
    set->offsets.push_back(bytes);
    bytes += kMirrorHeaderBytes + RoundUp64(size);
  }
  absl::Status status;
  absl::StatusOr<std::unique_ptr<SharedRegion>> region =
      SharedRegion::Create(bytes);
  if (region.ok()) {
    set->region = *std::move(region);
    absl::StatusOr<uint64_t> id =
        client->AttachSharedRegion(*set->region, &set->server_pid);
    status = id.status();
    if (id.ok()) {
      set->id = *id;
      status = client->MirrorVariables(set->id, set->names, set->offsets);
      if (!status.ok()) (void)client->DetachSharedRegion(set->id);
    }
  } else {
    status = region.status();
  }
  absl::MutexLock lock(&mu_);
  if (!status.ok()) {
    mirrors_[ps] = nullptr;
    // A server that is down or lost the variables may serve mirrors
    // later; one that refuses them will not.
    if (status.code() != absl::StatusCode::kUnavailable &&
        status.code() != absl::StatusCode::kDeadlineExceeded &&
        status.code() != absl::StatusCode::kNotFound) {
      mirror_refused_[ps] = true;
    }
    return nullptr;
  }
  mirrors_[ps] = set;
  return set;
}

bool PsCluster::ReadMirrors(const MirrorSet& set, const PerPs& part,
                            std::vector<int64_t>* versions) {
  char* base = set.region->data();
  // The server unmapped the region (it overwrites the nonce then), or its
  // process is gone: nobody writes these mirrors any more.
  const std::string& nonce = set.region->nonce();
  if (std::memcmp(base, nonce.data(), nonce.size()) != 0 ||
      (set.server_pid > 0 &&
       ::kill(static_cast<pid_t>(set.server_pid), 0) != 0 && errno == ESRCH)) {
    return false;
  }
  versions->assign(part.names.size(), -1);
  for (size_t i = 0; i < part.names.size(); ++i) {
    char* header = base + set.offsets[i];
    auto* seq = reinterpret_cast<std::atomic<uint64_t>*>(header);
    bool copied = false;
    for (int attempt = 0; attempt < 1000 && !copied; ++attempt) {
      const uint64_t before = seq->load(std::memory_order_acquire);
      if (before == kMirrorGone) return false;
      if (before % 2 != 0 || before == 0) {
        std::this_thread::yield();
        continue;
      }
      // Read under the sequence number as the value is.
      std::memcpy(&(*versions)[i], header + 8, sizeof(int64_t));
      std::memcpy(part.dsts[i], header + kMirrorHeaderBytes, part.sizes[i]);
      // A release read-modify-write (not a fence, which ThreadSanitizer
      // builds refuse): the copy cannot move below it.
      copied = seq->fetch_add(0, std::memory_order_acq_rel) == before;
    }
    if (!copied) return false;
  }
  return true;
}

absl::Status PsCluster::PullLatest(int lane,
                                   const std::vector<std::string>& names,
                                   const std::vector<void*>& dsts,
                                   const PullOptions& options) {
  if (options.min_version > 0 || options.clock > 0) {
    return PushPullMany(lane, names, {}, {}, dsts, options);
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<PerPs> per_ps,
                          SplitPerPs(names, {}, dsts));
  std::vector<absl::Status> status(clients_.size());
  RunPerPs([&](int i) {
    const PerPs& part = per_ps[i];
    if (part.names.empty()) return;
    std::shared_ptr<const MirrorSet> set = MirrorsFor(i, part);
    std::vector<int64_t> versions;
    const bool read = set != nullptr && ReadMirrors(*set, part, &versions);
    if (read) {
      SharedLane* shared_lane = Lane(lane, i);
      for (size_t k = 0; k < part.names.size(); ++k) {
        shared_lane->delivered[part.names[k]] = versions[k];
      }
    }
    bool drop = false;
    {
      absl::MutexLock lock(&mu_);
      read_mirror_[i] = read;
      // A gone or torn mirror is set up again next time.
      drop = !read && set != nullptr && mirrors_[i] == set;
      if (drop) mirrors_[i] = nullptr;
    }
    if (drop) (void)clients_[i]->DetachSharedRegion(set->id);
    if (!read) status[i] = PushPullOne(lane, i, part, {}, options);
  });
  for (const auto& s : status) STRATA_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

bool PsCluster::ReadsMirror(int ps) const {
  absl::MutexLock lock(&mu_);
  return read_mirror_[ps];
}

}  // namespace strata

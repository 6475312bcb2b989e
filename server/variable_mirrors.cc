#include "server/variable_mirrors.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/shared_layout.h"
#include "server/variable_internal.h"

namespace strata {
namespace {

using variable_internal::Quote;

// The sequence number at the start of a mirror (see kMirrorGone).
std::atomic<uint64_t>* MirrorSeq(char* header) {
  return reinterpret_cast<std::atomic<uint64_t>*>(header);
}

absl::Status TooManyMirrors(const std::string& variable, size_t live) {
  return absl::ResourceExhaustedError(
      absl::StrCat("variable ", Quote(variable), " already has ", live,
                   " mirrors (at most ", kMaxMirrorsPerVariable, ")"));
}

}  // namespace

absl::Status VariableMirrors::CheckPlace(const std::string& variable,
                                         const MappedRegion& region,
                                         uint64_t offset, size_t value_bytes) {
  if (offset % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mirror of variable ", Quote(variable), ": offset ", offset,
        " is not a multiple of 8"));
  }
  return region.CheckRange(
      offset, kMirrorHeaderBytes + value_bytes,
      absl::StrCat("mirror of variable ", Quote(variable)).c_str());
}

absl::Status VariableMirrors::CheckRoom(const std::string& variable,
                                        const MappedRegion* region,
                                        uint64_t offset) const {
  int live = 0;
  for (const Mirror& m : mirrors_) {
    auto r = m.region.lock();
    live += r != nullptr && !(r.get() == region && m.offset == offset);
  }
  if (live >= kMaxMirrorsPerVariable) return TooManyMirrors(variable, live);
  return absl::OkStatus();
}

absl::Status VariableMirrors::Add(const std::string& variable,
                                  const std::shared_ptr<MappedRegion>& region,
                                  uint64_t offset) {
  mirrors_.erase(std::remove_if(mirrors_.begin(), mirrors_.end(),
                                [&](const Mirror& m) {
                                  auto r = m.region.lock();
                                  return r == nullptr ||
                                         (r == region && m.offset == offset);
                                }),
                 mirrors_.end());
  if (static_cast<int>(mirrors_.size()) >= kMaxMirrorsPerVariable) {
    return TooManyMirrors(variable, mirrors_.size());
  }
  mirrors_.push_back(Mirror{region, offset, -1});
  return absl::OkStatus();
}

void VariableMirrors::Write(int64_t changes, int64_t version,
                            const char* value, size_t value_bytes) {
  for (Mirror& m : mirrors_) {
    if (m.changes == changes) continue;
    std::shared_ptr<MappedRegion> region = m.region.lock();
    if (region == nullptr) continue;
    char* header = region->data() + m.offset;
    std::atomic<uint64_t>* seq = MirrorSeq(header);
    uint64_t s = seq->load(std::memory_order_relaxed);
    // The client may have written anything here: restart from an even
    // number below the sentinel.
    if (s == kMirrorGone || s % 2 != 0) s = 0;
    // An acquire exchange (not a store and a fence, which ThreadSanitizer
    // builds refuse): the writes below cannot move above it.
    seq->exchange(s + 1, std::memory_order_acq_rel);
    std::memcpy(header + 8, &version, sizeof(version));
    std::memcpy(header + kMirrorHeaderBytes, value, value_bytes);
    seq->store(s + 2, std::memory_order_release);
    m.changes = changes;
  }
}

void VariableMirrors::Retire() {
  for (const Mirror& m : mirrors_) {
    if (auto region = m.region.lock()) {
      MirrorSeq(region->data() + m.offset)
          ->store(kMirrorGone, std::memory_order_release);
    }
  }
  mirrors_.clear();
}

}  // namespace strata

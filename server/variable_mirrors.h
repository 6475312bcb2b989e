// The live mirrors of one variable: copies of its value that the server
// keeps in clients' shared-memory regions (MirrorVariables; layout in
// common/shared_layout.h), rewritten after every change. Thread-compatible;
// a Variable owns them and guards them with its mutex.
#ifndef STRATA_SERVER_VARIABLE_MIRRORS_H_
#define STRATA_SERVER_VARIABLE_MIRRORS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/shared_regions.h"

namespace strata {

// Live mirrors (MirrorVariables; layout in common/shared_layout.h) one
// variable keeps at most.
inline constexpr int kMaxMirrorsPerVariable = 64;

// Thread-compatible: the owning Variable guards it with its mutex. Holds
// the regions weakly: a mirror of a region the server dropped is skipped
// and forgotten.
class VariableMirrors {
 public:
  // Whether a mirror of `value_bytes` value bytes fits at `offset` of
  // `region`. Errors: INVALID_ARGUMENT (naming `variable`) for an offset
  // not a multiple of 8, or a header and value that do not fit after the
  // region's nonce.
  static absl::Status CheckPlace(const std::string& variable,
                                 const MappedRegion& region, uint64_t offset,
                                 size_t value_bytes);
  // Errors: RESOURCE_EXHAUSTED (naming `variable`) when there are already
  // kMaxMirrorsPerVariable live mirrors besides one at (region, offset).
  absl::Status CheckRoom(const std::string& variable,
                         const MappedRegion* region, uint64_t offset) const;
  // Forgets the mirrors of dropped regions and one at (region, offset),
  // then adds a mirror there, not yet written. Errors: those of CheckRoom.
  absl::Status Add(const std::string& variable,
                   const std::shared_ptr<MappedRegion>& region,
                   uint64_t offset);
  // Writes `version` and the `value_bytes` bytes of `value` into every
  // live mirror last written before the value's `changes`-th change.
  void Write(int64_t changes, int64_t version, const char* value,
             size_t value_bytes);
  // Marks every mirror kMirrorGone and forgets them.
  void Retire();

 private:
  struct Mirror {
    std::weak_ptr<MappedRegion> region;
    uint64_t offset = 0;
    int64_t changes = -1;  // the value's changes when last written
  };
  std::vector<Mirror> mirrors_;
};

}  // namespace strata

#endif  // STRATA_SERVER_VARIABLE_MIRRORS_H_

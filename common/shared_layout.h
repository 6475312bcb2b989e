// Layout constants of the same-host shared-memory regions that parameter
// server clients hand the server (AttachSharedRegion, MirrorVariables in
// parameter_server.proto), shared by both sides.
#ifndef STRATA_COMMON_SHARED_LAYOUT_H_
#define STRATA_COMMON_SHARED_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace strata {

// Bytes at the start of a region holding the client's nonce.
inline constexpr size_t kSharedRegionNonceBytes = 16;

// A variable's mirror: a header of this size (uint64 sequence number, odd
// while the server writes; int64 version at byte 8), then the value.
inline constexpr size_t kMirrorHeaderBytes = 64;
// The sequence number of a mirror whose variable was replaced or dropped.
inline constexpr uint64_t kMirrorGone = ~uint64_t{0};

}  // namespace strata

#endif  // STRATA_COMMON_SHARED_LAYOUT_H_

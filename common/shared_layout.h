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
// When the server unmaps a region (detached, dropped, shut down) it writes
// kMirrorGone (a uint64) over the nonce's first 8 bytes: a client whose
// nonce changed knows its mirrors are no longer written.

// A variable's mirror: a header of this size (uint64 sequence number, odd
// while the server writes; int64 version at byte 8), then the value.
inline constexpr size_t kMirrorHeaderBytes = 64;
// The sequence number of a mirror whose variable was replaced or dropped.
inline constexpr uint64_t kMirrorGone = ~uint64_t{0};

// `n` rounded up to a multiple of 64 (the places of a region's parts).
inline constexpr size_t RoundUp64(size_t n) {
  return (n + 63) & ~size_t{63};
}

// The doorbell of a served region (ServeSharedRegion): at its control
// offset a block of kDoorbellControlBytes: a uint32 state word (a futex:
// kDoorbellIdle, kDoorbellRequest, kDoorbellAnswer) at byte 0, the request's
// bytes (uint32) at 4, the answer's bytes (uint32) at 8, the answer's status
// code (int32, absl::StatusCode) at 12. The server sets kDoorbellClosed
// when it stops serving the region (detached, dropped, shut down): attach a
// new region. The request (a serialized
// SharedExchangeRequest) follows the block; the answer (a serialized
// SharedExchangeResponse, or the error's message) follows the request area.
inline constexpr size_t kDoorbellControlBytes = 64;
inline constexpr uint32_t kDoorbellIdle = 0;
inline constexpr uint32_t kDoorbellRequest = 1;
inline constexpr uint32_t kDoorbellAnswer = 2;
inline constexpr uint32_t kDoorbellClosed = 3;

}  // namespace strata

#endif  // STRATA_COMMON_SHARED_LAYOUT_H_

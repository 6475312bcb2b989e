// Protobuf wire primitives over gRPC slices, shared by the hand-written
// zero-copy codecs (proto/chunk_codec.h, the collectives' CollectiveMessage).
// Encoding writes tags and lengths by hand and sends payloads as slices that
// alias the caller's memory; decoding walks the received slices and exposes
// length-delimited fields as views into them, so a payload is copied once,
// straight into its destination.
//
// Stateless functions; thread-compatible. Views returned by
// ParseWireMessage point into the slices it stores in `*slices`, which the
// caller owns and must keep while it uses them.
#ifndef STRATA_PROTO_SLICE_CODEC_H_
#define STRATA_PROTO_SLICE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace strata {

// Appends `v` as a base-128 varint.
void PutVarint(std::string* out, uint64_t v);

// A slice of `size` bytes at `data`, without a copy. When `keepalive` is
// non-null the slice holds it until gRPC releases the slice; when null the
// caller guarantees the memory outlives every use of the slice.
grpc::Slice AliasingSlice(const char* data, size_t size,
                          std::shared_ptr<const void> keepalive);

// Copies `views`, in order, to `dst` (their total size in bytes).
void CopyViewsTo(const std::vector<absl::string_view>& views, char* dst);

// One varint (wire type 0) or length-delimited (wire type 2) field.
struct WireField {
  uint64_t number = 0;  // tag >> 3, unchecked beyond the caller's check
  uint32_t wire_type = 0;
  uint64_t varint = 0;  // wire type 0
  uint64_t length = 0;  // wire type 2: bytes in `views`
  std::vector<absl::string_view> views;  // wire type 2
};

// INVALID_ARGUMENT "malformed <message>: <what>".
absl::Status MalformedWire(absl::string_view message, absl::string_view what);

// Dumps `buffer` into `*slices` and walks its fields: for each, runs
// `check_number` on the field number before reading the value, then
// `on_field` for varint and length-delimited fields (fixed-width ones are
// skipped). Stops at the first error of a callback and returns it. Errors:
// INVALID_ARGUMENT "malformed <message>: ..." for a buffer that cannot be
// dumped, a truncated tag, varint, length or fixed-width field, a length
// beyond the end, or an unsupported wire type.
absl::Status ParseWireMessage(
    const grpc::ByteBuffer& buffer, absl::string_view message,
    std::vector<grpc::Slice>* slices,
    absl::FunctionRef<absl::Status(uint64_t number)> check_number,
    absl::FunctionRef<absl::Status(WireField* field)> on_field);

}  // namespace strata

#endif  // STRATA_PROTO_SLICE_CODEC_H_

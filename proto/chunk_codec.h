// Zero-copy encoding of the TensorChunk wire layout (strata/v1/tensor.proto):
//   field 1 (bytes)  header, first message of a stream only
//   field 2 (int64)  byte offset of `data` within the whole payload
//   field 3 (bytes)  payload bytes
// Encoding writes the tags and lengths by hand into a small slice and sends
// the payload as a slice that aliases the caller's memory, so gRPC hands the
// tensor bytes to the kernel without a user-space copy. Decoding walks the
// received slices and exposes the payload as views into them, so the caller
// copies it once, straight into its destination. Both directions are
// wire-compatible with the protobuf message TensorChunk. The wire primitives
// are those of proto/slice_codec.h.
#ifndef STRATA_PROTO_CHUNK_CODEC_H_
#define STRATA_PROTO_CHUNK_CODEC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/slice.h"

namespace strata {

// Default payload bytes per chunk: large enough to amortize per-message
// costs, far below gRPC's 4 MiB message limit.
inline constexpr size_t kDefaultChunkBytes = 1 << 20;

// Builds one chunk message. `data` must stay valid and unchanged until gRPC
// releases the slice: when `keepalive` is non-null the slice holds a
// reference to it until then; when null the caller guarantees the memory
// outlives the call.
grpc::ByteBuffer EncodeChunk(absl::string_view header, int64_t offset,
                             const char* data, size_t size,
                             std::shared_ptr<const void> keepalive);

// A decoded chunk. `data` views point into `slices`, which hold references
// to the received message's memory.
struct DecodedChunk {
  bool has_header = false;
  std::string header;
  int64_t offset = 0;
  std::vector<grpc::Slice> slices;
  std::vector<absl::string_view> data;
  size_t data_size = 0;

  // Copies the payload pieces, in order, to `dst` (data_size bytes).
  void CopyDataTo(char* dst) const;
};

// Parses `buffer`. Unknown fields are skipped. Errors: INVALID_ARGUMENT for
// a malformed message (truncated varint or length, bad wire type, negative
// offset, a repeated header or data field).
absl::Status DecodeChunk(const grpc::ByteBuffer& buffer, DecodedChunk* out);

// Channel arguments for the tensor data plane, applied on both ends: larger
// HTTP/2 frames and read-ahead so that 1 MiB chunks are not cut into 16 KiB
// frames nor stalled by the initial flow-control window.
void ApplyDataPlaneChannelArgs(grpc::ChannelArguments* args);
// The same arguments as (name, value) pairs, for grpc::ServerBuilder.
std::vector<std::pair<std::string, int>> DataPlaneChannelArgs();

// Serializes/parses small protobuf messages to/from a ByteBuffer (for the
// raw methods' requests and responses).
grpc::ByteBuffer StringToByteBuffer(std::string bytes);
std::string ByteBufferToString(const grpc::ByteBuffer& buffer);

}  // namespace strata

#endif  // STRATA_PROTO_CHUNK_CODEC_H_

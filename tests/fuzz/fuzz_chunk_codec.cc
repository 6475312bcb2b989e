// Fuzzes the TensorChunk decoder (DecodeChunk), which reads every Push,
// Assign and PushVariables message straight off the wire. The first input
// byte picks how the rest is cut into slices (a received ByteBuffer is a
// list of slices, and fields may span them); the rest is the message.
// Invariants: the payload views add up to data_size; a decoded chunk
// encodes (EncodeChunk) and decodes back to the same header, offset and
// payload; and where protobuf's own parser also accepts the bytes as a
// TensorChunk it reads the same fields (wire compatibility).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/chunk_codec.h"
#include "strata/v1/tensor.pb.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/quiet_protobuf.h"

namespace {

using namespace strata;

std::string Payload(const DecodedChunk& chunk) {
  std::string out(chunk.data_size, '\0');
  chunk.CopyDataTo(out.data());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::QuietProtobuf();
  fuzz::FuzzInput in(data, size);
  const uint8_t cuts = in.Byte();
  const std::string message = in.Rest();

  // Up to 4 slices; cut points from the first byte.
  std::vector<grpc::Slice> slices;
  size_t pos = 0;
  for (int i = 0; i < 3 && pos < message.size(); ++i) {
    size_t len = ((cuts >> (2 * i)) & 3) * (message.size() / 4 + 1) / 2;
    if (len > message.size() - pos) len = message.size() - pos;
    slices.emplace_back(message.data() + pos, len);
    pos += len;
  }
  slices.emplace_back(message.data() + pos, message.size() - pos);
  grpc::ByteBuffer buffer(slices.data(), slices.size());

  DecodedChunk chunk;
  absl::Status status = DecodeChunk(buffer, &chunk);
  FUZZ_TRACE("decode (%zu slices): %s", slices.size(),
             status.ToString().c_str());
  if (!status.ok()) return 0;
  size_t viewed = 0;
  for (absl::string_view v : chunk.data) viewed += v.size();
  FUZZ_CHECK(viewed == chunk.data_size, "views do not add up to data_size");
  const std::string payload = Payload(chunk);

  grpc::ByteBuffer encoded = EncodeChunk(chunk.header, chunk.offset,
                                         payload.data(), payload.size(),
                                         nullptr);
  DecodedChunk back;
  absl::Status decoded = DecodeChunk(encoded, &back);
  FUZZ_CHECK(decoded.ok(), decoded.ToString());
  FUZZ_CHECK(back.header == chunk.header && back.offset == chunk.offset &&
                 Payload(back) == payload,
             "encode/decode round trip changed the chunk");
  FUZZ_CHECK(back.has_header == !chunk.header.empty(), "header presence");

  v1::TensorChunk proto;
  if (proto.ParseFromString(message)) {
    FUZZ_CHECK(proto.header() == chunk.header && proto.offset() == chunk.offset &&
                   proto.data() == payload,
               "protobuf reads the message differently");
  }
  return 0;
}

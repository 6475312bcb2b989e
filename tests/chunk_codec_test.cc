#include "proto/chunk_codec.h"

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "strata/v1/tensor.pb.h"

namespace strata {
namespace {

std::string Flatten(const grpc::ByteBuffer& b) { return ByteBufferToString(b); }

TEST(ChunkCodecTest, EncodedChunkParsesAsProtobufTensorChunk) {
  std::vector<char> data(3000);
  std::iota(data.begin(), data.end(), 0);
  auto keep = std::make_shared<std::vector<char>>(data);
  grpc::ByteBuffer bb =
      EncodeChunk("hdr-bytes", 1234567, keep->data(), keep->size(), keep);
  v1::TensorChunk msg;
  ASSERT_TRUE(msg.ParseFromString(Flatten(bb)));
  EXPECT_EQ(msg.header(), "hdr-bytes");
  EXPECT_EQ(msg.offset(), 1234567);
  EXPECT_EQ(msg.data(), std::string(data.begin(), data.end()));
}

TEST(ChunkCodecTest, DecodesProtobufSerializedChunk) {
  v1::TensorChunk msg;
  msg.set_header("h");
  msg.set_offset(42);
  msg.set_data(std::string(100000, 'x'));
  grpc::ByteBuffer bb = StringToByteBuffer(msg.SerializeAsString());
  DecodedChunk chunk;
  ASSERT_TRUE(DecodeChunk(bb, &chunk).ok());
  EXPECT_TRUE(chunk.has_header);
  EXPECT_EQ(chunk.header, "h");
  EXPECT_EQ(chunk.offset, 42);
  ASSERT_EQ(chunk.data_size, 100000u);
  std::string out(chunk.data_size, '\0');
  chunk.CopyDataTo(out.data());
  EXPECT_EQ(out, msg.data());
}

TEST(ChunkCodecTest, RoundTripWithoutHeaderOrOffset) {
  const char data[] = "payload";
  grpc::ByteBuffer bb = EncodeChunk("", 0, data, 7, nullptr);
  DecodedChunk chunk;
  ASSERT_TRUE(DecodeChunk(bb, &chunk).ok());
  EXPECT_FALSE(chunk.has_header);
  EXPECT_EQ(chunk.offset, 0);
  std::string out(chunk.data_size, '\0');
  chunk.CopyDataTo(out.data());
  EXPECT_EQ(out, "payload");
}

TEST(ChunkCodecTest, DataSpanningSlicesIsReassembled) {
  // Two slices: the hand-written prefix and the aliased payload.
  std::string payload(5000, 'a');
  payload[4999] = 'z';
  grpc::ByteBuffer bb = EncodeChunk("hh", 7, payload.data(), payload.size(),
                                    nullptr);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(bb.Dump(&slices).ok());
  EXPECT_EQ(slices.size(), 2u);
  DecodedChunk chunk;
  ASSERT_TRUE(DecodeChunk(bb, &chunk).ok());
  std::string out(chunk.data_size, '\0');
  chunk.CopyDataTo(out.data());
  EXPECT_EQ(out, payload);
}

TEST(ChunkCodecTest, PayloadIsNotCopiedOnEncode) {
  std::string payload(1 << 20, 'q');
  grpc::ByteBuffer bb = EncodeChunk("", 0, payload.data(), payload.size(),
                                    nullptr);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(bb.Dump(&slices).ok());
  ASSERT_EQ(slices.size(), 2u);
  // The data slice aliases the caller's memory.
  EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()), payload.data());
}

TEST(ChunkCodecTest, KeepaliveIsReleasedWithTheMessage) {
  auto keep = std::make_shared<std::string>(100, 'k');
  std::weak_ptr<std::string> weak = keep;
  {
    grpc::ByteBuffer bb = EncodeChunk("", 0, keep->data(), keep->size(), keep);
    keep.reset();
    EXPECT_FALSE(weak.expired());
  }
  EXPECT_TRUE(weak.expired());
}

TEST(ChunkCodecTest, MalformedMessagesAreRejected) {
  DecodedChunk chunk;
  // Truncated varint.
  EXPECT_EQ(DecodeChunk(StringToByteBuffer(std::string("\x10\xff", 2)), &chunk)
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Length beyond the end.
  EXPECT_EQ(DecodeChunk(StringToByteBuffer(std::string("\x1a\x10" "abc", 5)),
                        &chunk)
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Wire type 3 (groups) is not supported.
  EXPECT_EQ(
      DecodeChunk(StringToByteBuffer(std::string("\x0b", 1)), &chunk).code(),
      absl::StatusCode::kInvalidArgument);
  // Negative offset.
  v1::TensorChunk msg;
  msg.set_offset(-5);
  EXPECT_EQ(DecodeChunk(StringToByteBuffer(msg.SerializeAsString()), &chunk)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ChunkCodecTest, UnknownFieldsAreSkipped) {
  // field 9 varint, field 10 fixed64, field 11 fixed32, then data.
  std::string raw;
  raw += '\x48';
  raw += '\x05';
  raw += '\x51';
  raw += std::string(8, '\x01');
  raw += '\x5d';
  raw += std::string(4, '\x02');
  raw += "\x1a\x02ok";
  DecodedChunk chunk;
  ASSERT_TRUE(DecodeChunk(StringToByteBuffer(raw), &chunk).ok());
  std::string out(chunk.data_size, '\0');
  chunk.CopyDataTo(out.data());
  EXPECT_EQ(out, "ok");
}

}  // namespace
}  // namespace strata

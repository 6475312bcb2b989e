#include "proto/chunk_codec.h"

#include <utility>

#include "proto/slice_codec.h"

namespace strata {
namespace {

constexpr uint32_t kHeaderTag = (1 << 3) | 2;  // field 1, length-delimited
constexpr uint32_t kOffsetTag = (2 << 3) | 0;  // field 2, varint
constexpr uint32_t kDataTag = (3 << 3) | 2;    // field 3, length-delimited
constexpr uint64_t kMaxFieldNumber = (uint64_t{1} << 29) - 1;

constexpr char kMessageName[] = "tensor chunk";

absl::Status Malformed(absl::string_view what) {
  return MalformedWire(kMessageName, what);
}

}  // namespace

grpc::ByteBuffer EncodeChunk(absl::string_view header, int64_t offset,
                             const char* data, size_t size,
                             std::shared_ptr<const void> keepalive) {
  std::string prefix;
  prefix.reserve(header.size() + 32);
  if (!header.empty()) {
    PutVarint(&prefix, kHeaderTag);
    PutVarint(&prefix, header.size());
    prefix.append(header.data(), header.size());
  }
  if (offset != 0) {
    PutVarint(&prefix, kOffsetTag);
    PutVarint(&prefix, static_cast<uint64_t>(offset));
  }
  if (size > 0) {
    PutVarint(&prefix, kDataTag);
    PutVarint(&prefix, size);
  }
  grpc::Slice slices[2] = {grpc::Slice(prefix), grpc::Slice()};
  size_t n = 1;
  if (size > 0) {
    slices[1] = AliasingSlice(data, size, std::move(keepalive));
    n = 2;
  }
  return grpc::ByteBuffer(slices, n);
}

void DecodedChunk::CopyDataTo(char* dst) const { CopyViewsTo(data, dst); }

absl::Status DecodeChunk(const grpc::ByteBuffer& buffer, DecodedChunk* out) {
  *out = DecodedChunk();
  bool has_offset = false;
  bool has_data = false;
  // Field numbers are 1..2^29-1; a longer tag must not be truncated into one
  // of ours.
  auto check_number = [](uint64_t number) {
    if (number == 0 || number > kMaxFieldNumber) {
      return Malformed("field number out of range");
    }
    return absl::OkStatus();
  };
  auto on_field = [&](WireField* f) {
    const uint32_t field = static_cast<uint32_t>(f->number);
    if (f->wire_type == 0) {
      if (field == 2) {
        if (has_offset) return Malformed("repeated offset field");
        has_offset = true;
        int64_t offset = static_cast<int64_t>(f->varint);
        if (offset < 0) return Malformed("negative offset");
        out->offset = offset;
      }
    } else if (field == 1) {
      if (out->has_header) return Malformed("repeated header field");
      out->has_header = true;
      out->header.reserve(f->length);
      for (absl::string_view v : f->views) {
        out->header.append(v.data(), v.size());
      }
    } else if (field == 3) {
      if (has_data) return Malformed("repeated data field");
      has_data = true;
      out->data = std::move(f->views);
      out->data_size = f->length;
    }
    return absl::OkStatus();
  };
  return ParseWireMessage(buffer, kMessageName, &out->slices, check_number,
                          on_field);
}

std::vector<std::pair<std::string, int>> DataPlaneChannelArgs() {
  return {{GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 4 << 20},
          {GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 20}};
}

void ApplyDataPlaneChannelArgs(grpc::ChannelArguments* args) {
  for (const auto& [name, value] : DataPlaneChannelArgs()) {
    args->SetInt(name, value);
  }
}

grpc::ByteBuffer StringToByteBuffer(std::string bytes) {
  grpc::Slice slice(std::move(bytes));
  return grpc::ByteBuffer(&slice, 1);
}

std::string ByteBufferToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  out.reserve(buffer.Length());
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

}  // namespace strata

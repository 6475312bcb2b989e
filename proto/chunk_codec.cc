#include "proto/chunk_codec.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpc/slice.h"

namespace strata {
namespace {

constexpr uint32_t kHeaderTag = (1 << 3) | 2;  // field 1, length-delimited
constexpr uint32_t kOffsetTag = (2 << 3) | 0;  // field 2, varint
constexpr uint32_t kDataTag = (3 << 3) | 2;    // field 3, length-delimited
constexpr uint64_t kMaxFieldNumber = (uint64_t{1} << 29) - 1;

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

struct KeepAlive {
  std::shared_ptr<const void> ref;
};

void ReleaseKeepAlive(void* p) { delete static_cast<KeepAlive*>(p); }

// Sequential reader over a list of slices.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {
    Skip0();
  }

  bool done() const { return index_ >= slices_.size(); }

  bool ReadByte(uint8_t* b) {
    if (done()) return false;
    *b = slices_[index_].begin()[pos_];
    Advance(1);
    return true;
  }

  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  // Returns views of the next n bytes (spanning slices as needed).
  bool ReadViews(uint64_t n, std::vector<absl::string_view>* views) {
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& s = slices_[index_];
      size_t avail = s.size() - pos_;
      size_t take = n < avail ? static_cast<size_t>(n) : avail;
      views->emplace_back(reinterpret_cast<const char*>(s.begin()) + pos_,
                          take);
      Advance(take);
      n -= take;
    }
    return true;
  }

 private:
  void Advance(size_t n) {
    pos_ += n;
    Skip0();
  }
  // Moves past exhausted (or empty) slices.
  void Skip0() {
    while (index_ < slices_.size() && pos_ >= slices_[index_].size()) {
      ++index_;
      pos_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t pos_ = 0;
};

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed tensor chunk: ", what));
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
    grpc_slice raw;
    if (keepalive != nullptr) {
      raw = grpc_slice_new_with_user_data(
          const_cast<char*>(data), size, &ReleaseKeepAlive,
          new KeepAlive{std::move(keepalive)});
    } else {
      raw = grpc_slice_from_static_buffer(data, size);
    }
    slices[1] = grpc::Slice(raw, grpc::Slice::STEAL_REF);
    n = 2;
  }
  return grpc::ByteBuffer(slices, n);
}

void DecodedChunk::CopyDataTo(char* dst) const {
  for (absl::string_view v : data) {
    std::memcpy(dst, v.data(), v.size());
    dst += v.size();
  }
}

absl::Status DecodeChunk(const grpc::ByteBuffer& buffer, DecodedChunk* out) {
  *out = DecodedChunk();
  grpc::Status dumped = buffer.Dump(&out->slices);
  if (!dumped.ok()) return Malformed(dumped.error_message());
  SliceReader reader(out->slices);
  bool has_offset = false;
  bool has_data = false;
  while (!reader.done()) {
    uint64_t tag;
    if (!reader.ReadVarint(&tag)) return Malformed("truncated tag");
    // Field numbers are 1..2^29-1; a longer tag must not be truncated into
    // one of ours.
    if (tag >> 3 == 0 || tag >> 3 > kMaxFieldNumber) {
      return Malformed("field number out of range");
    }
    uint32_t field = static_cast<uint32_t>(tag >> 3);
    uint32_t wire = static_cast<uint32_t>(tag & 7);
    if (wire == 0) {
      uint64_t v;
      if (!reader.ReadVarint(&v)) return Malformed("truncated varint");
      if (field == 2) {
        if (has_offset) return Malformed("repeated offset field");
        has_offset = true;
        int64_t offset = static_cast<int64_t>(v);
        if (offset < 0) return Malformed("negative offset");
        out->offset = offset;
      }
    } else if (wire == 2) {
      uint64_t len;
      if (!reader.ReadVarint(&len)) return Malformed("truncated length");
      std::vector<absl::string_view> views;
      if (len > buffer.Length() || !reader.ReadViews(len, &views)) {
        return Malformed("length beyond the end of the message");
      }
      if (field == 1) {
        if (out->has_header) return Malformed("repeated header field");
        out->has_header = true;
        out->header.reserve(len);
        for (absl::string_view v : views) out->header.append(v.data(), v.size());
      } else if (field == 3) {
        if (has_data) return Malformed("repeated data field");
        has_data = true;
        out->data = std::move(views);
        out->data_size = len;
      }
    } else if (wire == 1 || wire == 5) {
      std::vector<absl::string_view> skipped;
      if (!reader.ReadViews(wire == 1 ? 8 : 4, &skipped)) {
        return Malformed("truncated fixed-width field");
      }
    } else {
      return Malformed(absl::StrCat("unsupported wire type ", wire));
    }
  }
  return absl::OkStatus();
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

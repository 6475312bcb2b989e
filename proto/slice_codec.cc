#include "proto/slice_codec.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpc/slice.h"

namespace strata {
namespace {

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

}  // namespace

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

grpc::Slice AliasingSlice(const char* data, size_t size,
                          std::shared_ptr<const void> keepalive) {
  grpc_slice raw;
  if (keepalive != nullptr) {
    raw = grpc_slice_new_with_user_data(const_cast<char*>(data), size,
                                        &ReleaseKeepAlive,
                                        new KeepAlive{std::move(keepalive)});
  } else {
    raw = grpc_slice_from_static_buffer(data, size);
  }
  return grpc::Slice(raw, grpc::Slice::STEAL_REF);
}

void CopyViewsTo(const std::vector<absl::string_view>& views, char* dst) {
  for (absl::string_view v : views) {
    std::memcpy(dst, v.data(), v.size());
    dst += v.size();
  }
}

absl::Status MalformedWire(absl::string_view message, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ", message, ": ", what));
}

absl::Status ParseWireMessage(
    const grpc::ByteBuffer& buffer, absl::string_view message,
    std::vector<grpc::Slice>* slices,
    absl::FunctionRef<absl::Status(uint64_t number)> check_number,
    absl::FunctionRef<absl::Status(WireField* field)> on_field) {
  grpc::Status dumped = buffer.Dump(slices);
  if (!dumped.ok()) return MalformedWire(message, dumped.error_message());
  const uint64_t total = buffer.Length();
  SliceReader reader(*slices);
  while (!reader.done()) {
    uint64_t tag;
    if (!reader.ReadVarint(&tag)) {
      return MalformedWire(message, "truncated tag");
    }
    if (absl::Status s = check_number(tag >> 3); !s.ok()) return s;
    WireField field;
    field.number = tag >> 3;
    field.wire_type = static_cast<uint32_t>(tag & 7);
    if (field.wire_type == 0) {
      if (!reader.ReadVarint(&field.varint)) {
        return MalformedWire(message, "truncated varint");
      }
    } else if (field.wire_type == 2) {
      if (!reader.ReadVarint(&field.length)) {
        return MalformedWire(message, "truncated length");
      }
      if (field.length > total ||
          !reader.ReadViews(field.length, &field.views)) {
        return MalformedWire(message, "length beyond the end of the message");
      }
    } else if (field.wire_type == 1 || field.wire_type == 5) {
      std::vector<absl::string_view> skipped;
      if (!reader.ReadViews(field.wire_type == 1 ? 8 : 4, &skipped)) {
        return MalformedWire(message, "truncated fixed-width field");
      }
      continue;
    } else {
      return MalformedWire(
          message, absl::StrCat("unsupported wire type ", field.wire_type));
    }
    if (absl::Status s = on_field(&field); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace strata

#include "collective/collective_message.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "collective/collective.h"
#include "common/status_macros.h"
#include "proto/slice_codec.h"

namespace strata {
namespace collective {
namespace internal {
namespace {

// Payloads up to this size are copied into the header slice: cheaper than a
// separate aliasing slice and its release callback.
constexpr size_t kInlineBytes = 4096;

constexpr char kMessageName[] = "CollectiveMessage";

absl::Status Malformed(absl::string_view what) {
  return MalformedWire(kMessageName, what);
}

}  // namespace

std::shared_ptr<const void> SliceCounter::Hold(
    const std::shared_ptr<SliceCounter>& counter) {
  counter->Add();
  return std::shared_ptr<const void>(
      counter.get(), [counter](const void*) { counter->Release(); });
}

void SliceCounter::Add() {
  absl::MutexLock lock(&mu_);
  ++held_;
}

void SliceCounter::Release() {
  absl::MutexLock lock(&mu_);
  if (--held_ == 0) cv_.SignalAll();
}

bool SliceCounter::WaitZero(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (held_ > 0) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) return held_ == 0;
  }
  return true;
}

grpc::ByteBuffer EncodeMessage(int64_t group, int from_rank,
                               const std::string& key,
                               absl::Span<const char> data,
                               const std::shared_ptr<SliceCounter>& counter) {
  std::string prefix;
  prefix.reserve(key.size() + 40 +
                 (data.size() <= kInlineBytes ? data.size() : 0));
  PutVarint(&prefix, (1 << 3) | 0);
  PutVarint(&prefix, static_cast<uint64_t>(group));
  PutVarint(&prefix, (2 << 3) | 0);
  PutVarint(&prefix, static_cast<uint64_t>(static_cast<int64_t>(from_rank)));
  PutVarint(&prefix, (3 << 3) | 2);
  PutVarint(&prefix, key.size());
  prefix.append(key);
  PutVarint(&prefix, (4 << 3) | 2);
  PutVarint(&prefix, data.size());
  if (data.size() <= kInlineBytes) {
    prefix.append(data.data(), data.size());
    grpc::Slice slice(prefix);
    return grpc::ByteBuffer(&slice, 1);
  }
  grpc::Slice slices[2] = {
      grpc::Slice(prefix),
      AliasingSlice(data.data(), data.size(), SliceCounter::Hold(counter))};
  return grpc::ByteBuffer(slices, 2);
}

void DecodedMessage::CopyDataTo(char* dst) const { CopyViewsTo(data, dst); }

void DecodedMessage::AddDataTo(DType dtype, char* inout) const {
  const size_t esize = DTypeSize(dtype);
  if (esize == 0) return;
  // The bytes of an element split across pieces, gathered until it is whole.
  char pending[sizeof(uint64_t)];
  size_t have = 0;
  char* out = inout;
  for (absl::string_view piece : data) {
    const char* p = piece.data();
    size_t left = piece.size();
    if (have > 0) {
      const size_t take = std::min(esize - have, left);
      std::memcpy(pending + have, p, take);
      have += take;
      p += take;
      left -= take;
      if (have < esize) continue;
      AddInto(dtype, out, pending, 1);
      out += esize;
      have = 0;
    }
    const size_t whole = left / esize;
    AddInto(dtype, out, p, static_cast<int64_t>(whole));
    out += whole * esize;
    p += whole * esize;
    left -= whole * esize;
    if (left > 0) std::memcpy(pending, p, left);
    have = left;
  }
}

absl::Status DecodeMessage(const grpc::ByteBuffer& buffer,
                           DecodedMessage* out) {
  auto check_number = [](uint64_t number) {
    if (static_cast<uint32_t>(number) == 0) return Malformed("field number 0");
    return absl::OkStatus();
  };
  auto on_field = [out](WireField* f) {
    const uint32_t field = static_cast<uint32_t>(f->number);
    if (f->wire_type == 0) {
      if (field == 1) out->group = static_cast<int64_t>(f->varint);
      if (field == 2) out->from_rank = static_cast<int32_t>(f->varint);
    } else if (field == 3) {
      out->key.clear();
      for (absl::string_view v : f->views) out->key.append(v.data(), v.size());
    } else if (field == 4) {
      out->data = std::move(f->views);
      out->data_size = static_cast<size_t>(f->length);
    }
    return absl::OkStatus();
  };
  STRATA_RETURN_IF_ERROR(ParseWireMessage(buffer, kMessageName, &out->slices,
                                         check_number, on_field));
  if (out->key.empty()) return Malformed("empty key");
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace collective
}  // namespace strata

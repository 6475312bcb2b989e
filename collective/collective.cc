#include "collective/collective.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace strata {
namespace collective {
namespace {

// How long the error path waits for cancelled sends to end, so that no send
// still reads the caller's buffer when the collective returns.
constexpr absl::Duration kAbortFlushGrace = absl::Seconds(5);

absl::Status ValidateCommon(Transport* t, const std::string& op,
                            const CollectiveOptions& options) {
  if (op.empty()) {
    return absl::InvalidArgumentError("collective: empty op name");
  }
  if (options.pack_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective '", op, "': pack_bytes must be positive, got ",
                     options.pack_bytes));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective '", op, "': timeout must be positive, got ",
                     absl::FormatDuration(options.timeout)));
  }
  if (t->size() < 1 || t->rank() < 0 || t->rank() >= t->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective '", op, "': transport has rank ", t->rank(),
                     " of size ", t->size()));
  }
  return absl::OkStatus();
}

// Adds `n` elements of `src` into `dst`, computing in U: integers as their
// unsigned type, so that a sum wraps (defined behaviour) rather than
// overflowing. Loads and stores go through memcpy, so neither side needs to
// be aligned (a received slice starts anywhere), and blocks of kAddBlock
// elements let the compiler use vector adds without a runtime alias check;
// each element is still one addition, so sums stay bit-identical.
constexpr int64_t kAddBlock = 16;

template <typename U>
void AddTyped(char* dst, const char* src, int64_t n) {
  int64_t i = 0;
  for (; i + kAddBlock <= n; i += kAddBlock) {
    U d[kAddBlock];
    U s[kAddBlock];
    std::memcpy(d, dst + i * sizeof(U), sizeof(d));
    std::memcpy(s, src + i * sizeof(U), sizeof(s));
    for (int64_t j = 0; j < kAddBlock; ++j) d[j] += s[j];
    std::memcpy(dst + i * sizeof(U), d, sizeof(d));
  }
  for (; i < n; ++i) {
    U d;
    U s;
    std::memcpy(&d, dst + i * sizeof(U), sizeof(U));
    std::memcpy(&s, src + i * sizeof(U), sizeof(U));
    d += s;
    std::memcpy(dst + i * sizeof(U), &d, sizeof(U));
  }
}

// The default RecvReduce's receive buffer is kept per thread and reused up
// to this size, so that a ring's packs do not allocate one each; larger
// messages get a buffer of their own.
constexpr size_t kMaxKeptScratch = 4 << 20;

// A buffer of at least `bytes` for the calling thread: the kept one, or
// `*owned` (allocated here) beyond kMaxKeptScratch.
char* Scratch(size_t bytes, std::unique_ptr<char[]>* owned) {
  if (bytes > kMaxKeptScratch) {
    owned->reset(new char[bytes]);
    return owned->get();
  }
  thread_local std::unique_ptr<char[]> kept;
  thread_local size_t kept_bytes = 0;
  if (kept_bytes < bytes) {
    kept.reset(new char[bytes]);
    kept_bytes = bytes;
  }
  return kept.get();
}

template <typename T>
void DivideBy(void* data, int64_t count, int n) {
  T* p = static_cast<T*>(data);
  const T d = static_cast<T>(n);
  for (int64_t i = 0; i < count; ++i) p[i] /= d;
}

// The ring all-reduce proper; the caller validated the arguments and handles
// errors. Numbering the ring steps t = 0 .. 2(n-1)-1 (reduce-scatter, then
// all-gather), rank r sends segment (r - t) mod n to its right neighbour and
// receives segment (r - t - 1) mod n from its left at step t. A received pack
// is added into `data` by the transport as it is taken (RecvReduce: no
// scratch copy on the gRPC transport) or, in the all-gather, written in
// place, and forwarded at once as the same pack of step t+1, so packs stream
// around the ring.
absl::Status RingAllReduce(Transport* t, DType dtype, char* data,
                           int64_t count, const std::string& op,
                           const CollectiveOptions& options,
                           absl::Time deadline) {
  const int n = t->size();
  const int r = t->rank();
  const int left = (r + n - 1) % n;
  const int right = (r + 1) % n;
  const size_t esize = DTypeSize(dtype);
  const int64_t pack_elems =
      std::max<int64_t>(1, options.pack_bytes / static_cast<int64_t>(esize));
  const int steps = 2 * (n - 1);

  auto key = [&op](int step, int64_t pack) {
    return absl::StrCat(op, "/ar", step, ".", pack);
  };
  auto seg_of = [n, r](int step) { return ((r - step) % n + n) % n; };
  auto send_segment_pack = [&](int step, int64_t p,
                               const Segment& seg) -> absl::Status {
    const int64_t begin = seg.begin + p * pack_elems;
    const int64_t len = std::min(pack_elems, seg.begin + seg.count - begin);
    return t->Send(right, key(step, p),
                   absl::Span<const char>(data + begin * esize, len * esize));
  };

  // Step 0: this rank's own segment r, every pack at once.
  {
    const Segment seg = RingSegment(count, n, r);
    const int64_t packs = (seg.count + pack_elems - 1) / pack_elems;
    for (int64_t p = 0; p < packs; ++p) {
      STRATA_RETURN_IF_ERROR(send_segment_pack(0, p, seg));
    }
  }

  for (int step = 0; step < steps; ++step) {
    const bool reduce = step < n - 1;
    const int seg_index = seg_of(step + 1);
    const Segment seg = RingSegment(count, n, seg_index);
    const int64_t packs = (seg.count + pack_elems - 1) / pack_elems;
    for (int64_t p = 0; p < packs; ++p) {
      const int64_t begin = seg.begin + p * pack_elems;
      const int64_t len = std::min(pack_elems, seg.begin + seg.count - begin);
      const absl::Span<char> dst(data + begin * esize,
                                 static_cast<size_t>(len) * esize);
      if (reduce) {
        STRATA_RETURN_IF_ERROR(
            t->RecvReduce(left, key(step, p), dtype, dst, deadline));
      } else {
        STRATA_RETURN_IF_ERROR(t->Recv(left, key(step, p), dst, deadline));
      }
      if (step + 1 < steps) {
        STRATA_RETURN_IF_ERROR(send_segment_pack(step + 1, p, seg));
      }
    }
  }
  return t->Flush(deadline);
}

absl::Status ValidateAllReduce(Transport* t, DType dtype, void* data,
                               int64_t count, const std::string& op,
                               const CollectiveOptions& options) {
  STRATA_RETURN_IF_ERROR(ValidateCommon(t, op, options));
  const size_t esize = DTypeSize(dtype);
  if (esize == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce '", op, "': invalid dtype ",
                     static_cast<int>(dtype)));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-reduce '", op, "': negative element count ", count));
  }
  if (count > std::numeric_limits<int64_t>::max() /
                  static_cast<int64_t>(esize)) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce '", op, "': element count ", count,
                     " of ", DTypeName(dtype), " overflows a byte size"));
  }
  if (data == nullptr && count > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-reduce '", op, "': null data for ", count, " elements"));
  }
  return absl::OkStatus();
}

// Aborts the group with `error`, waits (briefly) for the cancelled sends to
// end, and returns `error`.
absl::Status FailCollective(Transport* t, absl::Status error) {
  t->Abort(error);
  (void)t->Flush(absl::Now() + kAbortFlushGrace);
  return error;
}

}  // namespace

void AddInto(DType dtype, char* inout, const char* src, int64_t count) {
  if (count <= 0) return;
  switch (dtype) {
    case DType::kFloat32:
      AddTyped<float>(inout, src, count);
      break;
    case DType::kFloat64:
      AddTyped<double>(inout, src, count);
      break;
    case DType::kInt32:
      AddTyped<uint32_t>(inout, src, count);
      break;
    case DType::kInt64:
      AddTyped<uint64_t>(inout, src, count);
      break;
    case DType::kInvalid:
      break;
  }
}

absl::Status CheckRecvReduceArgs(const std::string& key, DType dtype,
                                 size_t bytes) {
  const size_t esize = DTypeSize(dtype);
  if (esize == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recv-reduce '", key, "': invalid dtype ", static_cast<int>(dtype)));
  }
  if (bytes % esize != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("recv-reduce '", key, "': ", bytes,
                     " bytes are not a whole number of ", DTypeName(dtype),
                     " elements"));
  }
  return absl::OkStatus();
}

absl::Status Transport::RecvReduce(int peer, const std::string& key,
                                   DType dtype, absl::Span<char> inout,
                                   absl::Time deadline) {
  STRATA_RETURN_IF_ERROR(CheckRecvReduceArgs(key, dtype, inout.size()));
  const size_t esize = DTypeSize(dtype);
  std::unique_ptr<char[]> owned;
  char* const scratch = Scratch(inout.size(), &owned);
  STRATA_RETURN_IF_ERROR(
      Recv(peer, key, absl::Span<char>(scratch, inout.size()), deadline));
  AddInto(dtype, inout.data(), scratch,
          static_cast<int64_t>(inout.size() / esize));
  return absl::OkStatus();
}

Segment RingSegment(int64_t count, int size, int index) {
  Segment s;
  if (size <= 0 || index < 0 || index >= size || count <= 0) return s;
  const int64_t base = count / size;
  const int64_t extra = count % size;
  s.count = base + (index < extra ? 1 : 0);
  s.begin = base * index + std::min<int64_t>(index, extra);
  return s;
}

double RingBusBandwidth(double algorithm_bandwidth, int size) {
  if (size < 1) return 0;
  return algorithm_bandwidth * 2.0 * (size - 1) / size;
}

absl::Status AllReduceSum(Transport* t, DType dtype, void* data, int64_t count,
                          const std::string& op,
                          const CollectiveOptions& options) {
  if (t == nullptr) {
    return absl::InvalidArgumentError("all-reduce: null transport");
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::Status s = ValidateAllReduce(t, dtype, data, count, op, options);
  if (s.ok() && t->size() > 1) {
    s = RingAllReduce(t, dtype, static_cast<char*>(data), count, op, options,
                      deadline);
  }
  if (!s.ok()) return FailCollective(t, std::move(s));
  return absl::OkStatus();
}

absl::Status AllReduceMean(Transport* t, DType dtype, void* data,
                           int64_t count, const std::string& op,
                           const CollectiveOptions& options) {
  if (t == nullptr) {
    return absl::InvalidArgumentError("all-reduce: null transport");
  }
  if (DTypeSize(dtype) != 0 && !IsFloating(dtype)) {
    return FailCollective(
        t, absl::InvalidArgumentError(absl::StrCat(
               "all-reduce mean '", op, "': ", DTypeName(dtype),
               " is not a floating-point type")));
  }
  STRATA_RETURN_IF_ERROR(AllReduceSum(t, dtype, data, count, op, options));
  if (t->size() > 1) {
    if (dtype == DType::kFloat32) {
      DivideBy<float>(data, count, t->size());
    } else {
      DivideBy<double>(data, count, t->size());
    }
  }
  return absl::OkStatus();
}

absl::Status Broadcast(Transport* t, int root, void* data, size_t bytes,
                       const std::string& op,
                       const CollectiveOptions& options) {
  if (t == nullptr) {
    return absl::InvalidArgumentError("broadcast: null transport");
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  absl::Status s = ValidateCommon(t, op, options);
  const int n = t->size();
  if (s.ok() && (root < 0 || root >= n)) {
    s = absl::InvalidArgumentError(absl::StrCat(
        "broadcast '", op, "': root ", root, " outside [0, ", n, ")"));
  }
  if (s.ok() && data == nullptr && bytes > 0) {
    s = absl::InvalidArgumentError(absl::StrCat(
        "broadcast '", op, "': null data for ", bytes, " bytes"));
  }
  if (s.ok() && n > 1) {
    // Position along the chain root, root+1, ...; the last one only receives.
    const int r = t->rank();
    const int pos = (r - root + n) % n;
    const int prev = (r + n - 1) % n;
    const int next = (r + 1) % n;
    const size_t pack = static_cast<size_t>(options.pack_bytes);
    char* p = static_cast<char*>(data);
    for (size_t off = 0, i = 0; s.ok() && off < bytes; off += pack, ++i) {
      const size_t len = std::min(pack, bytes - off);
      const std::string key = absl::StrCat(op, "/bc.", i);
      if (pos > 0) {
        s = t->Recv(prev, key, absl::Span<char>(p + off, len), deadline);
      }
      if (s.ok() && pos < n - 1) {
        s = t->Send(next, key, absl::Span<const char>(p + off, len));
      }
    }
    if (s.ok()) s = t->Flush(deadline);
  }
  if (!s.ok()) return FailCollective(t, std::move(s));
  return absl::OkStatus();
}

}  // namespace collective
}  // namespace strata

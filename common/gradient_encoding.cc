#include "common/gradient_encoding.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

void Store16(char* dst, size_t i, uint16_t v) {
  std::memcpy(dst + 2 * i, &v, sizeof(v));
}

uint16_t Load16(const char* src, size_t i) {
  uint16_t v;
  std::memcpy(&v, src + 2 * i, sizeof(v));
  return v;
}

}  // namespace

absl::string_view GradientEncodingName(GradientEncoding e) {
  switch (e) {
    case GradientEncoding::kNone:
      return "none";
    case GradientEncoding::kBfloat16:
      return "bf16";
    case GradientEncoding::kFloat16:
      return "fp16";
  }
  return "invalid";
}

absl::StatusOr<GradientEncoding> ParseGradientEncoding(absl::string_view name) {
  for (GradientEncoding e :
       {GradientEncoding::kNone, GradientEncoding::kBfloat16,
        GradientEncoding::kFloat16}) {
    if (name == GradientEncodingName(e)) return e;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "gradient compression '", name, "' is not one of none, bf16, fp16"));
}

size_t EncodedBytes(GradientEncoding e, size_t n) {
  return e == GradientEncoding::kNone ? n * sizeof(float) : n * 2;
}

namespace {

// The conversions as branch-free functions of the bits (every case computed,
// then selected with masks), so that the blocked loops below vectorize; the
// scalar API calls the same functions, so both give the same bits.
inline uint32_t Select(uint32_t mask, uint32_t a, uint32_t b) {
  return (a & mask) | (b & ~mask);
}
inline uint32_t MaskIf(bool c) { return 0u - static_cast<uint32_t>(c); }

// x: a float's bits; returns its bfloat16 bits (nearest even; NaN kept
// quiet, +-Inf kept, a finite value rounded past the largest finite
// bfloat16 clamped to it).
inline uint32_t Bf16FromBits(uint32_t x) {
  const uint32_t ax = x & 0x7FFFFFFFu;
  const uint32_t rounded = x + 0x7FFFu + ((x >> 16) & 1u);
  const uint32_t finite = Select(MaskIf((rounded & 0x7FFFFFFFu) >= 0x7F800000u),
                                 ((x >> 16) & 0x8000u) | 0x7F7Fu,
                                 rounded >> 16);
  const uint32_t special =
      Select(MaskIf(ax > 0x7F800000u), (x >> 16) | 0x0040u, x >> 16);
  return Select(MaskIf(ax >= 0x7F800000u), special, finite) & 0xFFFFu;
}

inline uint32_t BitsFromBf16(uint32_t h) { return h << 16; }

// x: a float's bits; returns its IEEE binary16 bits (nearest even).
inline uint32_t F16FromBits(uint32_t x) {
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  // Inf, or NaN (kept quiet, with its top bits).
  const uint32_t special =
      0x7C00u |
      (MaskIf(ax > 0x7F800000u) & (0x0200u | ((ax >> 13) & 0x03FFu)));
  // Subnormal or zero: adding 0.5 lets the FPU round the low bits to
  // nearest even, leaving the half's mantissa at the bottom.
  const float magic = FromBits(126u << 23);
  const uint32_t subnormal = Bits(FromBits(ax) + magic) - Bits(magic);
  // Normal: re-bias the exponent (127 -> 15) and round to nearest even.
  const uint32_t normal = (ax + 0xC8000FFFu + ((ax >> 13) & 1u)) >> 13;
  uint32_t out = Select(MaskIf(ax < 0x38800000u), subnormal, normal);
  out = Select(MaskIf(ax > 0x477FE000u), 0x7BFFu, out);  // beyond 65504
  out = Select(MaskIf(ax >= 0x7F800000u), special, out);
  return (sign | out) & 0xFFFFu;
}

inline uint32_t BitsFromF16(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x03FFu;
  // Zero or subnormal: mant x 2^-24, exact in float.
  const uint32_t small =
      Bits(static_cast<float>(static_cast<int32_t>(mant)) *
           5.9604644775390625e-8f);
  const uint32_t special = 0x7F800000u | (mant << 13);
  const uint32_t normal = ((exp + 112u) << 23) | (mant << 13);
  uint32_t out = Select(MaskIf(exp == 0), small, normal);
  out = Select(MaskIf(exp == 31), special, out);
  return sign | out;
}

// Elements per block of the loops below: a fixed trip count, which gcc's
// -O2 vectorizer needs (it adds no epilogue of its own).
constexpr size_t kBlock = 64;

template <uint32_t (*kToHalf)(uint32_t)>
void EncodeLoop(const float* src, size_t n, char* dst) {
  size_t i = 0;
  uint16_t block[kBlock];
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) {
      block[j] = static_cast<uint16_t>(kToHalf(Bits(src[i + j])));
    }
    std::memcpy(dst + 2 * i, block, sizeof(block));
  }
  for (; i < n; ++i) {
    Store16(dst, i, static_cast<uint16_t>(kToHalf(Bits(src[i]))));
  }
}

template <uint32_t (*kToFloat)(uint32_t)>
void DecodeLoop(const char* src, size_t n, float* dst) {
  size_t i = 0;
  uint16_t block[kBlock];
  for (; i + kBlock <= n; i += kBlock) {
    std::memcpy(block, src + 2 * i, sizeof(block));
    for (size_t j = 0; j < kBlock; ++j) {
      dst[i + j] = FromBits(kToFloat(block[j]));
    }
  }
  for (; i < n; ++i) dst[i] = FromBits(kToFloat(Load16(src, i)));
}

// One element of ErrorFeedback::Encode: v = grad + residual is sent and the
// rounding error kept; a non-finite v sends grad as it is (the server
// refuses it) and keeps the residual. Returns the half's bits and sets
// *next to the new residual.
template <uint32_t (*kToHalf)(uint32_t), uint32_t (*kToFloat)(uint32_t)>
inline uint32_t FeedbackElement(float grad, float residual, float* next) {
  const float v = grad + residual;
  const uint32_t finite = MaskIf((Bits(v) & 0x7F800000u) != 0x7F800000u);
  const uint32_t q = kToHalf(Select(finite, Bits(v), Bits(grad)));
  const float error = v - FromBits(kToFloat(q));
  *next = FromBits(Select(finite, Bits(error), Bits(residual)));
  return q;
}

template <uint32_t (*kToHalf)(uint32_t), uint32_t (*kToFloat)(uint32_t)>
void FeedbackLoop(const float* __restrict grad, float* __restrict residual,
                  size_t n, char* dst) {
  size_t i = 0;
  uint16_t block[kBlock];
  float next[kBlock];
  for (; i + kBlock <= n; i += kBlock) {
    for (size_t j = 0; j < kBlock; ++j) {
      block[j] = static_cast<uint16_t>(FeedbackElement<kToHalf, kToFloat>(
          grad[i + j], residual[i + j], &next[j]));
    }
    std::memcpy(residual + i, next, sizeof(next));
    std::memcpy(dst + 2 * i, block, sizeof(block));
  }
  for (; i < n; ++i) {
    float r = 0;
    Store16(dst, i,
            static_cast<uint16_t>(FeedbackElement<kToHalf, kToFloat>(
                grad[i], residual[i], &r)));
    residual[i] = r;
  }
}

}  // namespace

uint16_t FloatToBfloat16(float f) {
  return static_cast<uint16_t>(Bf16FromBits(Bits(f)));
}

float Bfloat16ToFloat(uint16_t h) { return FromBits(BitsFromBf16(h)); }

uint16_t FloatToFloat16(float f) {
  return static_cast<uint16_t>(F16FromBits(Bits(f)));
}

float Float16ToFloat(uint16_t h) { return FromBits(BitsFromF16(h)); }

void EncodeFloat32(GradientEncoding e, const float* src, size_t n, char* dst) {
  switch (e) {
    case GradientEncoding::kNone:
      if (n > 0) std::memcpy(dst, src, n * sizeof(float));
      return;
    case GradientEncoding::kBfloat16:
      EncodeLoop<Bf16FromBits>(src, n, dst);
      return;
    case GradientEncoding::kFloat16:
      EncodeLoop<F16FromBits>(src, n, dst);
      return;
  }
}

void DecodeToFloat32(GradientEncoding e, const char* src, size_t n,
                     float* dst) {
  switch (e) {
    case GradientEncoding::kNone:
      if (n > 0) std::memcpy(dst, src, n * sizeof(float));
      return;
    case GradientEncoding::kBfloat16:
      DecodeLoop<BitsFromBf16>(src, n, dst);
      return;
    case GradientEncoding::kFloat16:
      DecodeLoop<BitsFromF16>(src, n, dst);
      return;
  }
}

struct ErrorFeedback::Entry {
  absl::Mutex mu;
  std::vector<float> residual ABSL_GUARDED_BY(mu);
};

ErrorFeedback::ErrorFeedback(GradientEncoding encoding)
    : encoding_(encoding) {}

ErrorFeedback::~ErrorFeedback() = default;

std::shared_ptr<ErrorFeedback::Entry> ErrorFeedback::EntryFor(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Entry>& e = entries_[name];
  if (e == nullptr) e = std::make_shared<Entry>();
  return e;
}

void ErrorFeedback::Encode(const std::string& name, const float* grad,
                           size_t n, char* dst) {
  if (encoding_ == GradientEncoding::kNone) {
    EncodeFloat32(encoding_, grad, n, dst);
    return;
  }
  std::shared_ptr<Entry> entry = EntryFor(name);
  absl::MutexLock lock(&entry->mu);
  std::vector<float>& r = entry->residual;
  if (r.size() != n) r.assign(n, 0.0f);
  if (encoding_ == GradientEncoding::kBfloat16) {
    FeedbackLoop<Bf16FromBits, BitsFromBf16>(grad, r.data(), n, dst);
  } else {
    FeedbackLoop<F16FromBits, BitsFromF16>(grad, r.data(), n, dst);
  }
}

std::vector<float> ErrorFeedback::Residual(const std::string& name) const {
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return {};
    entry = it->second;
  }
  absl::MutexLock lock(&entry->mu);
  return entry->residual;
}

}  // namespace strata

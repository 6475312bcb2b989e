#include "common/gradient_encoding.h"

#include <cmath>
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

uint16_t FloatToBfloat16(float f) {
  uint32_t x = Bits(f);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // a quiet NaN
  }
  if (ax == 0x7F800000u) return static_cast<uint16_t>(x >> 16);  // +-Inf
  x += 0x7FFFu + ((x >> 16) & 1u);
  if ((x & 0x7FFFFFFFu) >= 0x7F800000u) {
    // A finite value rounded past the largest finite bfloat16.
    return static_cast<uint16_t>(((Bits(f) >> 16) & 0x8000u) | 0x7F7Fu);
  }
  return static_cast<uint16_t>(x >> 16);
}

float Bfloat16ToFloat(uint16_t h) {
  return FromBits(static_cast<uint32_t>(h) << 16);
}

uint16_t FloatToFloat16(float f) {
  const uint32_t x = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) {  // Inf, or NaN (kept quiet, with its top bits)
    return static_cast<uint16_t>(
        sign | 0x7C00u |
        (ax > 0x7F800000u ? 0x0200u | ((ax >> 13) & 0x03FFu) : 0u));
  }
  if (ax > 0x477FE000u) return sign | 0x7BFFu;  // beyond 65504: clamped
  if (ax < 0x38800000u) {
    // The result is subnormal or zero: adding 0.5 lets the FPU round the
    // low bits to nearest even, leaving the half's mantissa at the bottom.
    const float magic = FromBits(126u << 23);
    const uint32_t r = Bits(FromBits(ax) + magic) - Bits(magic);
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: re-bias the exponent (127 -> 15) and round to nearest even.
  const uint32_t odd = (ax >> 13) & 1u;
  ax += 0xC8000FFFu + odd;
  return static_cast<uint16_t>(sign | (ax >> 13));
}

float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x03FFu;
  if (exp == 0) {
    // Zero or subnormal: mant x 2^-24, exact in float.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return FromBits(sign | Bits(v));
  }
  if (exp == 31) return FromBits(sign | 0x7F800000u | (mant << 13));
  return FromBits(sign | ((exp + 112u) << 23) | (mant << 13));
}

void EncodeFloat32(GradientEncoding e, const float* src, size_t n, char* dst) {
  switch (e) {
    case GradientEncoding::kNone:
      if (n > 0) std::memcpy(dst, src, n * sizeof(float));
      return;
    case GradientEncoding::kBfloat16:
      for (size_t i = 0; i < n; ++i) Store16(dst, i, FloatToBfloat16(src[i]));
      return;
    case GradientEncoding::kFloat16:
      for (size_t i = 0; i < n; ++i) Store16(dst, i, FloatToFloat16(src[i]));
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
      for (size_t i = 0; i < n; ++i) dst[i] = Bfloat16ToFloat(Load16(src, i));
      return;
    case GradientEncoding::kFloat16:
      for (size_t i = 0; i < n; ++i) dst[i] = Float16ToFloat(Load16(src, i));
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
  const bool bf16 = encoding_ == GradientEncoding::kBfloat16;
  for (size_t i = 0; i < n; ++i) {
    const float v = grad[i] + r[i];
    if (!std::isfinite(v)) {
      // Sent as it is (the server refuses it); the residual stays.
      Store16(dst, i, bf16 ? FloatToBfloat16(grad[i]) : FloatToFloat16(grad[i]));
      continue;
    }
    const uint16_t q = bf16 ? FloatToBfloat16(v) : FloatToFloat16(v);
    Store16(dst, i, q);
    r[i] = v - (bf16 ? Bfloat16ToFloat(q) : Float16ToFloat(q));
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

// SplitMix64 and the rejection-inversion Zipf sampler
// (tools/zipf_sampler.h).
#include "tools/zipf_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace {

// log1p(x) / x and expm1(x) / x, continuous at 0 (for ZipfSampler).
double Helper1(double x) {
  if (std::abs(x) > 1e-8) return std::log1p(x) / x;
  return 1 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
double Helper2(double x) {
  if (std::abs(x) > 1e-8) return std::expm1(x) / x;
  return 1 + x * 0.5 * (1 + x * (1.0 / 3.0) * (1 + 0.25 * x));
}

}  // namespace

uint64_t SplitMix64::Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::Next() {
  state_ += 0x9e3779b97f4a7c15ULL;
  return Mix(state_);
}

double SplitMix64::NextDouble() {
  return static_cast<double>(Next() >> 11) * 0x1.0p-53;
}

// ---- ZipfSampler: rejection-inversion, as Apache Commons RNG's
// RejectionInversionZipfSampler. h(x) = x^-e; H(x) = (x^(1-e) - 1) / (1 - e)
// is its integral from 1 (log x when e = 1), computed stably for e near 1.

absl::StatusOr<ZipfSampler> ZipfSampler::Create(uint64_t n, double exponent) {
  if (n < 1 || n > (uint64_t{1} << 53)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Zipf: n must be in [1, 2^53], got ", n));
  }
  if (!(exponent > 0) || !std::isfinite(exponent)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Zipf: exponent must be finite and > 0, got ", exponent));
  }
  return ZipfSampler(n, exponent);
}

ZipfSampler::ZipfSampler(uint64_t n, double exponent)
    : n_(n), exponent_(exponent) {
  h_integral_x1_ = H(1.5) - 1.0;
  h_integral_n_ = H(static_cast<double>(n) + 0.5);
  s_ = 2.0 - HInverse(H(2.5) - h(2.0));
}

double ZipfSampler::h(double x) const {
  return std::exp(-exponent_ * std::log(x));
}

double ZipfSampler::H(double x) const {
  const double log_x = std::log(x);
  return Helper2((1.0 - exponent_) * log_x) * log_x;
}

double ZipfSampler::HInverse(double x) const {
  double t = x * (1.0 - exponent_);
  if (t < -1.0) t = -1.0;  // rounding at the far end
  return std::exp(Helper1(t) * x);
}

uint64_t ZipfSampler::Sample(SplitMix64* rng) const {
  const double n = static_cast<double>(n_);
  while (true) {
    // Uniform in (H(1.5) - 1, H(n + 1/2)].
    const double u =
        h_integral_n_ + rng->NextDouble() * (h_integral_x1_ - h_integral_n_);
    const double x = HInverse(u);
    const double k = std::clamp(std::floor(x + 0.5), 1.0, n);
    // Accept at once in the region where the hat fits under the pmf, else
    // compare with the exact bound.
    if (k - x <= s_ || u >= H(k + 0.5) - h(k)) {
      return static_cast<uint64_t>(k);
    }
  }
}

}  // namespace strata

// Random draws for the synthetic data generator (tools/datagen.h): a
// counter-based 64-bit generator and a Zipf sampler that needs no table, so
// that draws over 10^8 (or 2^53) ranks cost O(1) time and memory.
#ifndef STRATA_TOOLS_ZIPF_SAMPLER_H_
#define STRATA_TOOLS_ZIPF_SAMPLER_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace strata {

// SplitMix64 (Steele, Lea, Flood 2014): a counter-based generator, its
// output the mix of a state advanced by a fixed odd constant. Cheap to key
// per example. Thread-compatible.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next();
  // Uniform in [0, 1) with 53 random bits.
  double NextDouble();

  // The SplitMix64 finalizer: a bijective mix of 64 bits.
  static uint64_t Mix(uint64_t z);

 private:
  uint64_t state_;
};

// Draws ranks in [1, n] with P(k) proportional to k^-exponent, by
// rejection-inversion (Hormann and Derflinger, "Rejection-inversion to
// generate variates from monotone discrete distributions", 1996): O(1)
// expected time per draw and O(1) memory whatever n (up to 2^53). A value
// type; thread-safe for concurrent draws from distinct generators.
class ZipfSampler {
 public:
  // Errors: INVALID_ARGUMENT unless 1 <= n <= 2^53 and exponent is finite
  // and > 0.
  static absl::StatusOr<ZipfSampler> Create(uint64_t n, double exponent);

  uint64_t Sample(SplitMix64* rng) const;

  uint64_t n() const { return n_; }
  double exponent() const { return exponent_; }

 private:
  ZipfSampler(uint64_t n, double exponent);

  double H(double x) const;            // the integral of h
  double HInverse(double x) const;
  double h(double x) const;            // x^-exponent

  uint64_t n_;
  double exponent_;
  double h_integral_x1_;
  double h_integral_n_;
  double s_;
};

}  // namespace strata

#endif  // STRATA_TOOLS_ZIPF_SAMPLER_H_

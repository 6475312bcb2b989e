// Wire compression of gradients (common/gradient_encoding.h): the rounding
// of both 16-bit formats against hand-computed values, their edge cases,
// and error feedback keeping the sum of what was sent on the sum of the
// true gradients.
#include "common/gradient_encoding.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

float Pow2(int e) { return std::ldexp(1.0f, e); }

TEST(GradientEncodingTest, NamesParseBackAndUnknownNamesAreRefused) {
  for (GradientEncoding e : {GradientEncoding::kNone,
                             GradientEncoding::kBfloat16,
                             GradientEncoding::kFloat16}) {
    auto parsed = ParseGradientEncoding(GradientEncodingName(e));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, e);
  }
  auto bad = ParseGradientEncoding("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'int8' is not one of none, bf16, fp16"),
            std::string::npos)
      << bad.status();
  EXPECT_EQ(EncodedBytes(GradientEncoding::kNone, 10), 40u);
  EXPECT_EQ(EncodedBytes(GradientEncoding::kBfloat16, 10), 20u);
  EXPECT_EQ(EncodedBytes(GradientEncoding::kFloat16, 10), 20u);
}

TEST(GradientEncodingTest, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBfloat16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBfloat16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBfloat16(-0.0f), 0x8000);
  // bfloat16 keeps 7 mantissa bits: 1 + 2^-8 is halfway between 1 and
  // 1 + 2^-7 and goes to the even one (1); 1 + 3*2^-8 goes up to 1 + 2^-6.
  EXPECT_EQ(FloatToBfloat16(1.0f + Pow2(-8)), 0x3F80);
  EXPECT_EQ(FloatToBfloat16(1.0f + 3 * Pow2(-8)), 0x3F82);
  // Just above halfway rounds up.
  EXPECT_EQ(FloatToBfloat16(1.0f + Pow2(-8) + Pow2(-20)), 0x3F81);
  EXPECT_EQ(Bfloat16ToFloat(0x3F81), 1.0f + Pow2(-7));
  // 3.14159274 (0x40490FDB) -> 0x4049 (3.140625).
  EXPECT_EQ(FloatToBfloat16(3.14159274f), 0x4049);
  EXPECT_EQ(Bfloat16ToFloat(0x4049), 3.140625f);
}

TEST(GradientEncodingTest, Bfloat16KeepsNonFiniteAndClampsOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToBfloat16(inf), 0x7F80);
  EXPECT_EQ(FloatToBfloat16(-inf), 0xFF80);
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(
      FloatToBfloat16(std::numeric_limits<float>::quiet_NaN()))));
  // A signalling NaN whose payload is only in the low bits stays a NaN.
  float snan;
  const uint32_t snan_bits = 0x7F800001u;
  std::memcpy(&snan, &snan_bits, sizeof(snan));
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(snan))));
  // FLT_MAX would round up to infinity: the largest finite bfloat16.
  EXPECT_EQ(FloatToBfloat16(std::numeric_limits<float>::max()), 0x7F7F);
  EXPECT_EQ(FloatToBfloat16(-std::numeric_limits<float>::max()), 0xFF7F);
}

TEST(GradientEncodingTest, Float16RoundsToNearestEven) {
  EXPECT_EQ(FloatToFloat16(1.0f), 0x3C00);
  EXPECT_EQ(FloatToFloat16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToFloat16(0.5f), 0x3800);
  EXPECT_EQ(FloatToFloat16(-0.0f), 0x8000);
  // 10 mantissa bits: 1 + 2^-11 is halfway, to even (1); 1 + 3*2^-11 up.
  EXPECT_EQ(FloatToFloat16(1.0f + Pow2(-11)), 0x3C00);
  EXPECT_EQ(FloatToFloat16(1.0f + 3 * Pow2(-11)), 0x3C02);
  EXPECT_EQ(FloatToFloat16(1.0f + Pow2(-11) + Pow2(-20)), 0x3C01);
  // 0.1f -> 0x2E66 (0.0999755859375).
  EXPECT_EQ(FloatToFloat16(0.1f), 0x2E66);
  EXPECT_EQ(Float16ToFloat(0x2E66), 0.0999755859375f);
  // The largest finite half, and the smallest normal.
  EXPECT_EQ(FloatToFloat16(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToFloat16(Pow2(-14)), 0x0400);
  EXPECT_EQ(Float16ToFloat(0x0400), Pow2(-14));
}

TEST(GradientEncodingTest, Float16SubnormalsUnderflowAndOverflow) {
  // Subnormals are multiples of 2^-24.
  EXPECT_EQ(FloatToFloat16(Pow2(-24)), 0x0001);
  EXPECT_EQ(Float16ToFloat(0x0001), Pow2(-24));
  EXPECT_EQ(FloatToFloat16(3 * Pow2(-24)), 0x0003);
  EXPECT_EQ(FloatToFloat16(-5 * Pow2(-24)), 0x8005);
  // Halfway cases to even: 2^-25 -> 0, 3*2^-25 -> 2*2^-24.
  EXPECT_EQ(FloatToFloat16(Pow2(-25)), 0x0000);
  EXPECT_EQ(FloatToFloat16(3 * Pow2(-25)), 0x0002);
  EXPECT_EQ(FloatToFloat16(Pow2(-30)), 0x0000);
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(FloatToFloat16(Pow2(-14) - Pow2(-26)), 0x0400);
  // Finite values beyond 65504 are clamped, not made infinite.
  EXPECT_EQ(FloatToFloat16(65520.0f), 0x7BFF);
  EXPECT_EQ(FloatToFloat16(1e9f), 0x7BFF);
  EXPECT_EQ(FloatToFloat16(-1e9f), 0xFBFF);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToFloat16(inf), 0x7C00);
  EXPECT_EQ(FloatToFloat16(-inf), 0xFC00);
  EXPECT_EQ(Float16ToFloat(0x7C00), inf);
  EXPECT_TRUE(std::isnan(Float16ToFloat(
      FloatToFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

// Every non-NaN half decodes to a float that encodes back to it, and the
// decoded values are ordered as the halves are (so the rounding is
// monotonic across the whole range).
TEST(GradientEncodingTest, EveryFloat16RoundTrips) {
  float previous = -std::numeric_limits<float>::infinity();
  for (int i = 0xFC00; i >= 0x8000; --i) {  // -inf up to -0
    const float f = Float16ToFloat(static_cast<uint16_t>(i));
    EXPECT_EQ(FloatToFloat16(f), i) << std::hex << i;
    if (i != 0xFC00) {
      EXPECT_GT(f, previous) << std::hex << i;
    }
    previous = f;
  }
  for (int i = 0; i <= 0x7C00; ++i) {  // +0 up to +inf
    const float f = Float16ToFloat(static_cast<uint16_t>(i));
    EXPECT_EQ(FloatToFloat16(f), i) << std::hex << i;
    if (i > 0) {
      EXPECT_GT(f, previous) << std::hex << i;
    }
    previous = f;
  }
  for (int i = 0; i < 0x10000; ++i) {
    if ((i & 0x7FFF) > 0x7F80) continue;  // NaN
    const float f = Bfloat16ToFloat(static_cast<uint16_t>(i));
    EXPECT_EQ(FloatToBfloat16(f), i) << std::hex << i;
  }
}

// Randomly drawn floats: the encoding is the nearest representable value
// (ties aside), checked by comparing with both neighbours.
TEST(GradientEncodingTest, EncodingIsTheNearestValue) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-20.0f, 15.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(1.0f, 0) * std::exp2(mag(rng)) *
                    ((rng() & 1) ? 1.0f : -1.0f);
    for (bool bf16 : {true, false}) {
      const uint16_t q = bf16 ? FloatToBfloat16(x) : FloatToFloat16(x);
      auto dec = [bf16](uint16_t h) {
        return bf16 ? Bfloat16ToFloat(h) : Float16ToFloat(h);
      };
      const double err = std::fabs(static_cast<double>(dec(q)) - x);
      for (int d : {-1, 1}) {
        const uint16_t n = static_cast<uint16_t>(q + d);
        if ((n & 0x7FFF) >= (bf16 ? 0x7F80 : 0x7C00)) continue;
        if (((n ^ q) & 0x8000) != 0) continue;  // crossed the sign
        EXPECT_LE(err, std::fabs(static_cast<double>(dec(n)) - x))
            << x << (bf16 ? " bf16" : " fp16");
      }
    }
  }
}

TEST(GradientEncodingTest, EncodeAndDecodeAnyAlignment) {
  const std::vector<float> src = {1.0f, -0.5f, 3.0f, 0.25f, -8.0f};
  for (GradientEncoding e :
       {GradientEncoding::kNone, GradientEncoding::kBfloat16,
        GradientEncoding::kFloat16}) {
    std::vector<char> wire(EncodedBytes(e, src.size()) + 1);
    EncodeFloat32(e, src.data(), src.size(), wire.data() + 1);  // unaligned
    std::vector<float> back(src.size());
    DecodeToFloat32(e, wire.data() + 1, src.size(), back.data());
    EXPECT_EQ(back, src) << GradientEncodingName(e);  // all exact in 16 bits
  }
}

// The loops run in blocks of 64 with a scalar tail: at every size around
// the block edges, with specials (NaN, +-Inf, -0, subnormals, overflow)
// anywhere, unaligned wire bytes, they give the scalar conversions' bits,
// and error feedback gives the per-element reference's bits and residuals.
TEST(GradientEncodingTest, BlockedLoopsMatchTheScalarConversionsAtEverySize) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-1e5f, 1e5f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            -0.0f,
                            Pow2(-20),
                            Pow2(-140),
                            3.4e38f,
                            65520.0f};
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
  };
  for (size_t n : {0u, 1u, 63u, 64u, 65u, 127u, 128u, 129u, 200u}) {
    std::vector<float> src(n);
    for (size_t i = 0; i < n; ++i) {
      src[i] = rng() % 5 == 0 ? specials[rng() % 8] : wide(rng) * Pow2(-(rng() % 30));
    }
    for (GradientEncoding e :
         {GradientEncoding::kBfloat16, GradientEncoding::kFloat16}) {
      const bool bf16 = e == GradientEncoding::kBfloat16;
      std::vector<char> wire(2 * n + 1);
      EncodeFloat32(e, src.data(), n, wire.data() + 1);
      std::vector<float> back(n);
      DecodeToFloat32(e, wire.data() + 1, n, back.data());
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, wire.data() + 1 + 2 * i, sizeof(h));
        const uint16_t want = bf16 ? FloatToBfloat16(src[i]) : FloatToFloat16(src[i]);
        ASSERT_EQ(h, want) << GradientEncodingName(e) << " n " << n << " i " << i;
        ASSERT_EQ(bits(back[i]),
                  bits(bf16 ? Bfloat16ToFloat(h) : Float16ToFloat(h)))
            << GradientEncodingName(e) << " n " << n << " i " << i;
      }
      // Error feedback, two rounds (the second starts from residuals).
      ErrorFeedback feedback(e);
      std::vector<float> residual(n, 0.0f);
      for (int round = 0; round < 2; ++round) {
        feedback.Encode("v", src.data(), n, wire.data() + 1);
        for (size_t i = 0; i < n; ++i) {
          const float v = src[i] + residual[i];
          const float sent = std::isfinite(v) ? v : src[i];
          const uint16_t want = bf16 ? FloatToBfloat16(sent) : FloatToFloat16(sent);
          uint16_t h;
          std::memcpy(&h, wire.data() + 1 + 2 * i, sizeof(h));
          ASSERT_EQ(h, want) << "n " << n << " i " << i << " round " << round;
          if (std::isfinite(v)) {
            residual[i] = v - (bf16 ? Bfloat16ToFloat(h) : Float16ToFloat(h));
          }
        }
        const std::vector<float> kept = feedback.Residual("v");
        ASSERT_EQ(kept.size(), n);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(bits(kept[i]), bits(residual[i]))
              << "n " << n << " i " << i << " round " << round;
        }
      }
    }
  }
}

// Error feedback: after K steps of the same small gradient (below one
// bfloat16 quantum of the values around it), the sum of what was sent is
// within one quantum of K times the gradient, where plain rounding would
// have sent the same rounded value K times.
TEST(GradientEncodingTest, ErrorFeedbackTracksTheSumOfTheGradients) {
  for (GradientEncoding e :
       {GradientEncoding::kBfloat16, GradientEncoding::kFloat16}) {
    ErrorFeedback feedback(e);
    const std::vector<float> grad = {1.0f + Pow2(-9), 0.3f, -1e-3f, 7.77f};
    std::vector<double> sent(grad.size(), 0.0);
    std::vector<char> wire(EncodedBytes(e, grad.size()));
    const int steps = 1000;
    for (int k = 0; k < steps; ++k) {
      feedback.Encode("w", grad.data(), grad.size(), wire.data());
      std::vector<float> got(grad.size());
      DecodeToFloat32(e, wire.data(), grad.size(), got.data());
      for (size_t i = 0; i < grad.size(); ++i) sent[i] += got[i];
    }
    const std::vector<float> residual = feedback.Residual("w");
    ASSERT_EQ(residual.size(), grad.size());
    for (size_t i = 0; i < grad.size(); ++i) {
      const double want = static_cast<double>(grad[i]) * steps;
      // What was sent plus what is still owed is exactly the total (up to
      // float rounding of the residual's additions).
      EXPECT_NEAR(sent[i] + residual[i], want, 1e-4 * std::fabs(want))
          << GradientEncodingName(e) << " element " << i;
      // The residual is at most half a quantum of the value it rode on.
      const float scale = std::fabs(grad[i]) * 2;
      EXPECT_LE(std::fabs(residual[i]),
                scale * (e == GradientEncoding::kBfloat16 ? Pow2(-8)
                                                          : Pow2(-11)));
    }
    // Without feedback, 1 + 2^-9 rounds to 1 in bfloat16 every step.
    if (e == GradientEncoding::kBfloat16) {
      EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(grad[0])), 1.0f);
      EXPECT_NEAR(sent[0], grad[0] * static_cast<double>(steps), 1.0);
    }
  }
}

TEST(GradientEncodingTest, ErrorFeedbackLeavesTheResidualOfNonFiniteValues) {
  ErrorFeedback feedback(GradientEncoding::kBfloat16);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> grad = {1.0f + Pow2(-9), 2.0f};
  std::vector<char> wire(4);
  feedback.Encode("w", grad.data(), 2, wire.data());
  const std::vector<float> before = feedback.Residual("w");
  EXPECT_EQ(before[0], Pow2(-9));
  grad = {nan, 2.0f};
  feedback.Encode("w", grad.data(), 2, wire.data());
  std::vector<float> got(2);
  DecodeToFloat32(GradientEncoding::kBfloat16, wire.data(), 2, got.data());
  EXPECT_TRUE(std::isnan(got[0]));  // sent as is: the server refuses it
  EXPECT_EQ(feedback.Residual("w")[0], before[0]);
  // A different size restarts the variable's residual; other names are
  // independent.
  std::vector<float> three = {1.0f, 1.0f, 1.0f};
  std::vector<char> wire3(6);
  feedback.Encode("w", three.data(), 3, wire3.data());
  EXPECT_EQ(feedback.Residual("w"), (std::vector<float>{0, 0, 0}));
  EXPECT_TRUE(feedback.Residual("other").empty());
}

}  // namespace
}  // namespace strata

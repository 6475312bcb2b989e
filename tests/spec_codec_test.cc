// codec/spec_codec.h: every DType, initializer and optimizer survives a
// round trip through its proto; zeros read back as the defaults; unknown
// names and dtypes are refused naming them.
#include "codec/spec_codec.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace strata {
namespace {

TEST(SpecCodecTest, EveryDTypeRoundTrips) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32,
                  DType::kInt64}) {
    absl::StatusOr<DType> back = DTypeFromProto(DTypeToProto(d));
    STRATA_ASSERT_OK(back);
    EXPECT_EQ(*back, d);
  }
  absl::StatusOr<DType> bad = DTypeFromProto(static_cast<v1::DType>(77));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("dtype 77 is not one of"),
            std::string::npos);
}

TEST(SpecCodecTest, EveryInitializerRoundTrips) {
  for (const char* name :
       {"zeros", "ones", "constant", "random_uniform", "random_normal",
        "truncated_normal", "glorot_uniform", "glorot_normal", "he_normal",
        "he_uniform"}) {
    SCOPED_TRACE(name);
    InitializerSpec s;
    s.type = *ParseInitializerType(name);
    s.seed = 12345678901ULL;
    s.value = 0.25;
    s.minval = -0.3;
    s.maxval = 0.7;
    s.mean = 0.1;
    s.stddev = 0.02;
    absl::StatusOr<InitializerSpec> back =
        InitializerFromProto(InitializerToProto(s));
    STRATA_ASSERT_OK(back);
    EXPECT_EQ(back->type, s.type);
    EXPECT_EQ(back->seed, s.seed);
    EXPECT_EQ(back->value, s.value);
    EXPECT_EQ(back->minval, s.minval);
    EXPECT_EQ(back->maxval, s.maxval);
    EXPECT_EQ(back->mean, s.mean);
    EXPECT_EQ(back->stddev, s.stddev);
  }
  // Zeros (proto3's unset) are the defaults.
  v1::Initializer empty;
  absl::StatusOr<InitializerSpec> defaults = InitializerFromProto(empty);
  STRATA_ASSERT_OK(defaults);
  const InitializerSpec d;
  EXPECT_EQ(defaults->type, d.type);
  EXPECT_EQ(defaults->minval, d.minval);
  EXPECT_EQ(defaults->maxval, d.maxval);
  EXPECT_EQ(defaults->stddev, d.stddev);
  v1::Initializer bad;
  bad.set_type("orthogonal");
  absl::StatusOr<InitializerSpec> refused = InitializerFromProto(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("orthogonal"), std::string::npos)
      << refused.status();
}

TEST(SpecCodecTest, EveryOptimizerRoundTrips) {
  for (const char* name :
       {"sgd", "adam", "adagrad", "rmsprop", "assign_add", "assign"}) {
    SCOPED_TRACE(name);
    OptimizerConfig c;
    c.type = *ParseOptimizerType(name);
    c.learning_rate = 0.125;
    c.momentum = 0.5;
    c.nesterov = true;
    c.beta_1 = 0.8;
    c.beta_2 = 0.99;
    c.epsilon = 1e-5;
    c.amsgrad = true;
    c.initial_accumulator_value = 0.3;
    c.rho = 0.7;
    c.centered = true;
    absl::StatusOr<OptimizerConfig> back =
        OptimizerFromProto(OptimizerToProto(c));
    STRATA_ASSERT_OK(back);
    EXPECT_EQ(back->type, c.type);
    EXPECT_EQ(back->learning_rate, c.learning_rate);
    EXPECT_EQ(back->momentum, c.momentum);
    EXPECT_EQ(back->nesterov, c.nesterov);
    EXPECT_EQ(back->beta_1, c.beta_1);
    EXPECT_EQ(back->beta_2, c.beta_2);
    EXPECT_EQ(back->epsilon, c.epsilon);
    EXPECT_EQ(back->amsgrad, c.amsgrad);
    EXPECT_EQ(back->initial_accumulator_value, c.initial_accumulator_value);
    EXPECT_EQ(back->rho, c.rho);
    EXPECT_EQ(back->centered, c.centered);
  }
  // The default learning rate (<= 0) travels as 0 and stays the default.
  OptimizerConfig d;
  d.type = OptimizerType::kAdam;
  v1::OptimizerSpec p = OptimizerToProto(d);
  EXPECT_EQ(p.learning_rate(), 0);
  absl::StatusOr<OptimizerConfig> back = OptimizerFromProto(p);
  STRATA_ASSERT_OK(back);
  EXPECT_EQ(back->learning_rate, d.learning_rate);
  v1::OptimizerSpec bad;
  bad.set_type("lamb");
  absl::StatusOr<OptimizerConfig> refused = OptimizerFromProto(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("lamb"), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace strata

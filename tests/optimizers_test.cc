#include "kernels/optimizers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  return DType::kInt64;
}

// Tolerance of hand-computed expectations: float keeps ~7 digits.
template <typename T>
constexpr double Tol() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-12;
}

std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerConfig& config) {
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(config);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? std::move(opt).value() : nullptr;
}

// A variable of T with its slots, initialized as the optimizer says.
template <typename T>
struct State {
  std::vector<T> var;
  std::vector<std::vector<T>> slots;

  State(const Optimizer& opt, const std::vector<double>& w) {
    for (double x : w) var.push_back(static_cast<T>(x));
    const size_t num_slots = opt.SlotNames().size();
    for (size_t k = 0; k < num_slots; ++k) {
      slots.emplace_back(w.size(), static_cast<T>(opt.SlotInitialValue(k)));
    }
  }

  std::vector<void*> SlotPtrs() {
    std::vector<void*> p;
    for (auto& s : slots) p.push_back(s.data());
    return p;
  }

  absl::Status Apply(const Optimizer& opt, int64_t iterations,
                     const std::vector<double>& grad) {
    std::vector<T> g;
    for (double x : grad) g.push_back(static_cast<T>(x));
    std::vector<void*> p = SlotPtrs();
    return opt.ApplyDense(DTypeOf<T>(), iterations, var.data(), p, g.data(),
                          static_cast<int64_t>(var.size()));
  }
};

// Applies `grads` in turn from `w0` and checks the variable after each step
// against `expected` (one row per step).
template <typename T>
void ExpectSteps(const OptimizerConfig& config, const std::vector<double>& w0,
                 const std::vector<std::vector<double>>& grads,
                 const std::vector<std::vector<double>>& expected) {
  SCOPED_TRACE(DTypeName(DTypeOf<T>()));
  std::unique_ptr<Optimizer> opt = MakeOptimizer(config);
  ASSERT_NE(opt, nullptr);
  State<T> st(*opt, w0);
  for (size_t step = 0; step < grads.size(); ++step) {
    ASSERT_TRUE(st.Apply(*opt, static_cast<int64_t>(step), grads[step]).ok());
    for (size_t i = 0; i < w0.size(); ++i) {
      EXPECT_NEAR(static_cast<double>(st.var[i]), expected[step][i],
                  Tol<T>() * std::max(1.0, std::fabs(expected[step][i])))
          << "step " << step + 1 << " element " << i;
    }
  }
}

void ExpectStepsBothTypes(const OptimizerConfig& config,
                          const std::vector<double>& w0,
                          const std::vector<std::vector<double>>& grads,
                          const std::vector<std::vector<double>>& expected) {
  ExpectSteps<float>(config, w0, grads, expected);
  ExpectSteps<double>(config, w0, grads, expected);
}

// All tests start from w = {1.0, -2.0} with g1 = {0.5, -1.0}, g2 = {0.25, 2.0}
// unless they say otherwise.
const std::vector<double> kW0 = {1.0, -2.0};
const std::vector<std::vector<double>> kGrads = {{0.5, -1.0}, {0.25, 2.0}};

TEST(OptimizerTest, SgdPlainMatchesHandComputation) {
  OptimizerConfig c;
  c.type = OptimizerType::kSgd;
  c.learning_rate = 0.1;
  // w -= 0.1 * g.
  // e0: 1.0 - 0.05 = 0.95;  0.95 - 0.025 = 0.925
  // e1: -2.0 + 0.1 = -1.9;  -1.9 - 0.2 = -2.1
  ExpectStepsBothTypes(c, kW0, kGrads, {{0.95, -1.9}, {0.925, -2.1}});
}

TEST(OptimizerTest, SgdMomentumMatchesHandComputation) {
  OptimizerConfig c;
  c.type = OptimizerType::kSgd;
  c.learning_rate = 0.1;
  c.momentum = 0.9;
  // m = 0.9 * m - 0.1 * g; w += m.
  // e0: m1 = -0.05, w1 = 0.95; m2 = -0.045 - 0.025 = -0.07, w2 = 0.88
  // e1: m1 = 0.1, w1 = -1.9;   m2 = 0.09 - 0.2 = -0.11,    w2 = -2.01
  ExpectStepsBothTypes(c, kW0, kGrads, {{0.95, -1.9}, {0.88, -2.01}});
}

TEST(OptimizerTest, SgdNesterovMatchesHandComputation) {
  OptimizerConfig c;
  c.type = OptimizerType::kSgd;
  c.learning_rate = 0.1;
  c.momentum = 0.9;
  c.nesterov = true;
  // m as above; w += 0.9 * m - 0.1 * g.
  // e0: w1 = 1.0 - 0.045 - 0.05 = 0.905;  w2 = 0.905 - 0.063 - 0.025 = 0.817
  // e1: w1 = -2.0 + 0.09 + 0.1 = -1.81;   w2 = -1.81 - 0.099 - 0.2 = -2.109
  ExpectStepsBothTypes(c, kW0, kGrads, {{0.905, -1.81}, {0.817, -2.109}});
}

TEST(OptimizerTest, SgdMomentumSlotHoldsVelocity) {
  OptimizerConfig c;
  c.type = OptimizerType::kSgd;
  c.learning_rate = 0.1;
  c.momentum = 0.9;
  std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
  ASSERT_NE(opt, nullptr);
  EXPECT_THAT(opt->SlotNames(), ::testing::ElementsAre("momentum"));
  State<double> st(*opt, kW0);
  ASSERT_TRUE(st.Apply(*opt, 0, kGrads[0]).ok());
  ASSERT_TRUE(st.Apply(*opt, 1, kGrads[1]).ok());
  EXPECT_NEAR(st.slots[0][0], -0.07, 1e-12);
  EXPECT_NEAR(st.slots[0][1], -0.11, 1e-12);
}

TEST(OptimizerTest, AdamMatchesHandComputation) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  c.learning_rate = 0.1;  // beta_1 0.9, beta_2 0.999, epsilon 1e-7
  // t = 1: alpha1 = 0.1 * sqrt(1 - 0.999) / (1 - 0.9) = sqrt(0.001).
  const double alpha1 = std::sqrt(0.001);
  // e0: m = 0.5 * 0.1 = 0.05, v = 0.25 * 0.001 = 0.00025
  const double w1_0 = 1.0 - alpha1 * 0.05 / (std::sqrt(0.00025) + 1e-7);
  // e1: m = -1.0 * 0.1 = -0.1, v = 1.0 * 0.001 = 0.001
  const double w1_1 = -2.0 - alpha1 * -0.1 / (std::sqrt(0.001) + 1e-7);
  // t = 2: alpha2 = 0.1 * sqrt(1 - 0.999^2) / (1 - 0.9^2)
  //               = 0.1 * sqrt(0.001999) / 0.19.
  const double alpha2 = 0.1 * std::sqrt(0.001999) / 0.19;
  // e0: m = 0.05 + (0.25 - 0.05) * 0.1 = 0.07
  //     v = 0.00025 + (0.0625 - 0.00025) * 0.001 = 0.00031225
  const double w2_0 = w1_0 - alpha2 * 0.07 / (std::sqrt(0.00031225) + 1e-7);
  // e1: m = -0.1 + (2.0 + 0.1) * 0.1 = 0.11
  //     v = 0.001 + (4.0 - 0.001) * 0.001 = 0.004999
  const double w2_1 = w1_1 - alpha2 * 0.11 / (std::sqrt(0.004999) + 1e-7);
  ExpectStepsBothTypes(c, kW0, kGrads, {{w1_0, w1_1}, {w2_0, w2_1}});

  std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
  ASSERT_NE(opt, nullptr);
  EXPECT_THAT(opt->SlotNames(), ::testing::ElementsAre("m", "v"));
  State<double> st(*opt, kW0);
  ASSERT_TRUE(st.Apply(*opt, 0, kGrads[0]).ok());
  ASSERT_TRUE(st.Apply(*opt, 1, kGrads[1]).ok());
  EXPECT_NEAR(st.slots[0][0], 0.07, 1e-15);
  EXPECT_NEAR(st.slots[0][1], 0.11, 1e-15);
  EXPECT_NEAR(st.slots[1][0], 0.00031225, 1e-15);
  EXPECT_NEAR(st.slots[1][1], 0.004999, 1e-15);
}

TEST(OptimizerTest, AdamAmsgradUsesMaximumSecondMoment) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  c.learning_rate = 0.1;
  c.beta_1 = 0.5;
  c.beta_2 = 0.5;  // so v visibly shrinks after a small gradient
  c.amsgrad = true;
  const std::vector<std::vector<double>> grads = {{0.5, -1.0}, {0.25, 0.1}};
  // t = 1: alpha1 = 0.1 * sqrt(1 - 0.5) / (1 - 0.5) = 0.2 * sqrt(0.5).
  const double alpha1 = 0.2 * std::sqrt(0.5);
  // e0: m = 0.25, v = vhat = 0.125.   e1: m = -0.5, v = vhat = 0.5.
  const double w1_0 = 1.0 - alpha1 * 0.25 / (std::sqrt(0.125) + 1e-7);
  const double w1_1 = -2.0 - alpha1 * -0.5 / (std::sqrt(0.5) + 1e-7);
  // t = 2: alpha2 = 0.1 * sqrt(1 - 0.25) / (1 - 0.25) = 0.1 / sqrt(0.75).
  const double alpha2 = 0.1 / std::sqrt(0.75);
  // e0: m = 0.25 + (0.25 - 0.25) * 0.5 = 0.25
  //     v = 0.125 + (0.0625 - 0.125) * 0.5 = 0.09375; vhat = 0.125
  const double w2_0 = w1_0 - alpha2 * 0.25 / (std::sqrt(0.125) + 1e-7);
  // e1: m = -0.5 + (0.1 + 0.5) * 0.5 = -0.2
  //     v = 0.5 + (0.01 - 0.5) * 0.5 = 0.255; vhat = 0.5
  const double w2_1 = w1_1 - alpha2 * -0.2 / (std::sqrt(0.5) + 1e-7);
  ExpectStepsBothTypes(c, kW0, grads, {{w1_0, w1_1}, {w2_0, w2_1}});

  std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
  ASSERT_NE(opt, nullptr);
  EXPECT_THAT(opt->SlotNames(), ::testing::ElementsAre("m", "v", "vhat"));
  State<double> st(*opt, kW0);
  ASSERT_TRUE(st.Apply(*opt, 0, grads[0]).ok());
  ASSERT_TRUE(st.Apply(*opt, 1, grads[1]).ok());
  EXPECT_NEAR(st.slots[1][0], 0.09375, 1e-15);
  EXPECT_NEAR(st.slots[1][1], 0.255, 1e-15);
  EXPECT_NEAR(st.slots[2][0], 0.125, 1e-15);
  EXPECT_NEAR(st.slots[2][1], 0.5, 1e-15);
}

TEST(OptimizerTest, AdagradMatchesHandComputation) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdagrad;
  c.learning_rate = 0.1;  // initial_accumulator_value 0.1, epsilon 1e-7
  // e0: acc = 0.1 + 0.25 = 0.35;  then 0.35 + 0.0625 = 0.4125
  const double w1_0 = 1.0 - 0.1 * 0.5 / (std::sqrt(0.35) + 1e-7);
  const double w2_0 = w1_0 - 0.1 * 0.25 / (std::sqrt(0.4125) + 1e-7);
  // e1: acc = 0.1 + 1.0 = 1.1;    then 1.1 + 4.0 = 5.1
  const double w1_1 = -2.0 - 0.1 * -1.0 / (std::sqrt(1.1) + 1e-7);
  const double w2_1 = w1_1 - 0.1 * 2.0 / (std::sqrt(5.1) + 1e-7);
  ExpectStepsBothTypes(c, kW0, kGrads, {{w1_0, w1_1}, {w2_0, w2_1}});

  std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
  ASSERT_NE(opt, nullptr);
  EXPECT_THAT(opt->SlotNames(), ::testing::ElementsAre("accumulator"));
  EXPECT_EQ(opt->SlotInitialValue(0), 0.1);
}

TEST(OptimizerTest, RmspropPlainMatchesHandComputation) {
  OptimizerConfig c;
  c.type = OptimizerType::kRmsprop;
  c.learning_rate = 0.1;  // rho 0.9, epsilon 1e-7
  // e0: vel = 0.1 * 0.25 = 0.025;  then 0.9 * 0.025 + 0.1 * 0.0625 = 0.02875
  const double w1_0 = 1.0 - 0.1 * 0.5 / std::sqrt(0.025 + 1e-7);
  const double w2_0 = w1_0 - 0.1 * 0.25 / std::sqrt(0.02875 + 1e-7);
  // e1: vel = 0.1 * 1.0 = 0.1;     then 0.9 * 0.1 + 0.1 * 4.0 = 0.49
  const double w1_1 = -2.0 - 0.1 * -1.0 / std::sqrt(0.1 + 1e-7);
  const double w2_1 = w1_1 - 0.1 * 2.0 / std::sqrt(0.49 + 1e-7);
  ExpectStepsBothTypes(c, kW0, kGrads, {{w1_0, w1_1}, {w2_0, w2_1}});
}

TEST(OptimizerTest, RmspropMomentumMatchesHandComputation) {
  OptimizerConfig c;
  c.type = OptimizerType::kRmsprop;
  c.learning_rate = 0.1;
  c.momentum = 0.5;
  // Increments as in the plain case; mom = 0.5 * mom + increment; w -= mom.
  const double inc1_0 = 0.1 * 0.5 / std::sqrt(0.025 + 1e-7);
  const double inc2_0 = 0.1 * 0.25 / std::sqrt(0.02875 + 1e-7);
  const double inc1_1 = 0.1 * -1.0 / std::sqrt(0.1 + 1e-7);
  const double inc2_1 = 0.1 * 2.0 / std::sqrt(0.49 + 1e-7);
  const double w1_0 = 1.0 - inc1_0;
  const double w2_0 = w1_0 - (0.5 * inc1_0 + inc2_0);
  const double w1_1 = -2.0 - inc1_1;
  const double w2_1 = w1_1 - (0.5 * inc1_1 + inc2_1);
  ExpectStepsBothTypes(c, kW0, kGrads, {{w1_0, w1_1}, {w2_0, w2_1}});

  std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
  ASSERT_NE(opt, nullptr);
  EXPECT_THAT(opt->SlotNames(), ::testing::ElementsAre("velocity", "momentum"));
}

TEST(OptimizerTest, RmspropCenteredMatchesHandComputation) {
  OptimizerConfig c;
  c.type = OptimizerType::kRmsprop;
  c.learning_rate = 0.1;
  c.centered = true;
  // e0: vel = 0.025, avg = 0.1 * 0.5 = 0.05, denom = 0.025 - 0.0025
  //     vel = 0.02875, avg = 0.045 + 0.025 = 0.07, denom = 0.02875 - 0.0049
  const double w1_0 = 1.0 - 0.1 * 0.5 / std::sqrt(0.0225 + 1e-7);
  const double w2_0 = w1_0 - 0.1 * 0.25 / std::sqrt(0.02385 + 1e-7);
  // e1: vel = 0.1, avg = -0.1, denom = 0.1 - 0.01
  //     vel = 0.49, avg = -0.09 + 0.2 = 0.11, denom = 0.49 - 0.0121
  const double w1_1 = -2.0 - 0.1 * -1.0 / std::sqrt(0.09 + 1e-7);
  const double w2_1 = w1_1 - 0.1 * 2.0 / std::sqrt(0.4779 + 1e-7);
  ExpectStepsBothTypes(c, kW0, kGrads, {{w1_0, w1_1}, {w2_0, w2_1}});

  std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
  ASSERT_NE(opt, nullptr);
  EXPECT_THAT(opt->SlotNames(),
              ::testing::ElementsAre("velocity", "average_gradient"));
}

TEST(OptimizerTest, RmspropCenteredMomentumUsesSlotOrder) {
  OptimizerConfig c;
  c.type = OptimizerType::kRmsprop;
  c.learning_rate = 0.1;
  c.centered = true;
  c.momentum = 0.5;
  std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
  ASSERT_NE(opt, nullptr);
  EXPECT_THAT(opt->SlotNames(), ::testing::ElementsAre("velocity", "momentum",
                                                       "average_gradient"));
  const double inc1_0 = 0.1 * 0.5 / std::sqrt(0.0225 + 1e-7);
  const double inc2_0 = 0.1 * 0.25 / std::sqrt(0.02385 + 1e-7);
  const double inc1_1 = 0.1 * -1.0 / std::sqrt(0.09 + 1e-7);
  const double inc2_1 = 0.1 * 2.0 / std::sqrt(0.4779 + 1e-7);
  ExpectStepsBothTypes(c, kW0, kGrads,
                       {{1.0 - inc1_0, -2.0 - inc1_1},
                        {1.0 - inc1_0 - (0.5 * inc1_0 + inc2_0),
                         -2.0 - inc1_1 - (0.5 * inc1_1 + inc2_1)}});

  State<double> st(*opt, kW0);
  ASSERT_TRUE(st.Apply(*opt, 0, kGrads[0]).ok());
  ASSERT_TRUE(st.Apply(*opt, 1, kGrads[1]).ok());
  EXPECT_NEAR(st.slots[0][0], 0.02875, 1e-15);                // velocity
  EXPECT_NEAR(st.slots[1][0], 0.5 * inc1_0 + inc2_0, 1e-12);  // momentum
  EXPECT_NEAR(st.slots[2][0], 0.07, 1e-15);                   // average
}

TEST(OptimizerTest, AssignAddFloatIgnoresLearningRate) {
  OptimizerConfig c;
  c.type = OptimizerType::kAssignAdd;
  c.learning_rate = 0.5;
  // w += g: {1.0 + 0.5, -2.0 - 1.0} = {1.5, -3.0}; then {1.75, -1.0}.
  ExpectStepsBothTypes(c, kW0, kGrads, {{1.5, -3.0}, {1.75, -1.0}});
}

template <typename T>
void ExpectIntegerAssignAdd() {
  SCOPED_TRACE(DTypeName(DTypeOf<T>()));
  OptimizerConfig c;
  c.type = OptimizerType::kAssignAdd;
  std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
  ASSERT_NE(opt, nullptr);
  EXPECT_TRUE(opt->SlotNames().empty());
  std::vector<T> w = {5, -7, std::numeric_limits<T>::max()};
  std::vector<T> g = {3, 10, 1};
  ASSERT_TRUE(opt->ApplyDense(DTypeOf<T>(), 0, w.data(), {}, g.data(), 3).ok());
  // 5 + 3 = 8; -7 + 10 = 3; max + 1 wraps to min.
  EXPECT_THAT(w, ::testing::ElementsAre(8, 3, std::numeric_limits<T>::min()));
  g = {-20, 0, 0};
  ASSERT_TRUE(opt->ApplyDense(DTypeOf<T>(), 1, w.data(), {}, g.data(), 3).ok());
  EXPECT_THAT(w, ::testing::ElementsAre(-12, 3, std::numeric_limits<T>::min()));
}

TEST(OptimizerTest, AssignAddIntegers) {
  ExpectIntegerAssignAdd<int32_t>();
  ExpectIntegerAssignAdd<int64_t>();
}

TEST(OptimizerTest, DefaultLearningRates) {
  struct Case {
    OptimizerType type;
    double lr;
    double want;
  };
  for (const Case& k :
       {Case{OptimizerType::kSgd, -1, 0.01}, Case{OptimizerType::kSgd, 0, 0.01},
        Case{OptimizerType::kSgd, 0.5, 0.5},
        Case{OptimizerType::kAdam, -1, 0.001},
        Case{OptimizerType::kAdagrad, 0, 0.001},
        Case{OptimizerType::kRmsprop, -3, 0.001}}) {
    OptimizerConfig c;
    c.type = k.type;
    c.learning_rate = k.lr;
    std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
    ASSERT_NE(opt, nullptr);
    EXPECT_EQ(opt->config().learning_rate, k.want)
        << OptimizerTypeName(k.type) << " lr " << k.lr;
  }
}

TEST(OptimizerTest, DefaultLearningRateIsUsedByApply) {
  OptimizerConfig c;  // SGD, lr 0.01
  // 1.0 - 0.01 * 0.5 = 0.995; -2.0 + 0.01 = -1.99
  ExpectStepsBothTypes(c, kW0, {kGrads[0]}, {{0.995, -1.99}});
}

TEST(OptimizerTest, LargeDenseApplyMatchesElementwiseApply) {
  // Crosses the internal block size with a ragged tail.
  constexpr int64_t kN = 5000;
  for (OptimizerType type :
       {OptimizerType::kSgd, OptimizerType::kAdam, OptimizerType::kRmsprop}) {
    OptimizerConfig c;
    c.type = type;
    c.momentum = 0.5;
    c.centered = true;
    std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
    ASSERT_NE(opt, nullptr);
    std::vector<double> w0(kN);
    std::vector<double> g(kN);
    for (int64_t i = 0; i < kN; ++i) {
      w0[i] = std::sin(0.1 * static_cast<double>(i));
      g[i] = std::cos(0.37 * static_cast<double>(i));
    }
    State<float> whole(*opt, w0);
    State<float> single(*opt, w0);
    ASSERT_TRUE(whole.Apply(*opt, 3, g).ok());
    for (int64_t i = 0; i < kN; ++i) {
      std::vector<void*> p;
      for (auto& s : single.slots) p.push_back(s.data() + i);
      const float gi = static_cast<float>(g[i]);
      ASSERT_TRUE(
          opt->ApplyDense(DType::kFloat32, 3, single.var.data() + i, p, &gi, 1)
              .ok());
    }
    for (int64_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(whole.var[i], single.var[i], 1e-6)
          << OptimizerTypeName(type) << " element " << i;
    }
  }
}

// Every optimizer variant, for the sparse tests.
std::vector<OptimizerConfig> AllVariants() {
  std::vector<OptimizerConfig> v;
  OptimizerConfig c;
  c.learning_rate = 0.1;
  c.type = OptimizerType::kSgd;
  v.push_back(c);
  c.momentum = 0.9;
  v.push_back(c);
  c.nesterov = true;
  v.push_back(c);
  c = OptimizerConfig();
  c.learning_rate = 0.1;
  c.type = OptimizerType::kAdam;
  v.push_back(c);
  c.amsgrad = true;
  v.push_back(c);
  c.type = OptimizerType::kAdagrad;
  v.push_back(c);
  c.type = OptimizerType::kRmsprop;
  v.push_back(c);
  c.momentum = 0.5;
  v.push_back(c);
  c.centered = true;
  v.push_back(c);
  c.type = OptimizerType::kAssignAdd;
  v.push_back(c);
  return v;
}

template <typename T>
void ExpectSparseMatchesDense(const OptimizerConfig& config) {
  SCOPED_TRACE(OptimizerTypeName(config.type) + " " + DTypeName(DTypeOf<T>()));
  std::unique_ptr<Optimizer> opt = MakeOptimizer(config);
  ASSERT_NE(opt, nullptr);
  constexpr int64_t kRows = 5;
  constexpr int64_t kWidth = 3;
  std::vector<double> w0(kRows * kWidth);
  for (size_t i = 0; i < w0.size(); ++i) w0[i] = 0.1 * (i + 1) - 0.7;
  State<T> sparse(*opt, w0);
  // Make the slots non-trivial first with a dense step.
  std::vector<double> warm(w0.size(), 0.3);
  ASSERT_TRUE(sparse.Apply(*opt, 0, warm).ok());
  const State<T> before = sparse;

  const std::vector<int64_t> ids = {3, 0};
  const std::vector<T> grad = {0.5, -1.0, 2.0, 0.25, 0.125, -0.75};
  std::vector<void*> p = sparse.SlotPtrs();
  ASSERT_TRUE(opt->ApplySparse(DTypeOf<T>(), 1, sparse.var.data(), p, ids,
                               grad.data(), kWidth)
                  .ok());

  for (int64_t row = 0; row < kRows; ++row) {
    const auto it = std::find(ids.begin(), ids.end(), row);
    if (it == ids.end()) {
      // Untouched, bit for bit.
      for (int64_t j = 0; j < kWidth; ++j) {
        EXPECT_EQ(sparse.var[row * kWidth + j], before.var[row * kWidth + j]);
        for (size_t k = 0; k < before.slots.size(); ++k) {
          EXPECT_EQ(sparse.slots[k][row * kWidth + j],
                    before.slots[k][row * kWidth + j]);
        }
      }
      continue;
    }
    // Dense apply of the matching grad row on a copy of the row.
    const int64_t i = it - ids.begin();
    State<T> dense = before;
    std::vector<void*> q;
    for (auto& s : dense.slots) q.push_back(s.data() + row * kWidth);
    ASSERT_TRUE(opt->ApplyDense(DTypeOf<T>(), 1,
                                dense.var.data() + row * kWidth, q,
                                grad.data() + i * kWidth, kWidth)
                    .ok());
    for (int64_t j = 0; j < kWidth; ++j) {
      EXPECT_EQ(sparse.var[row * kWidth + j], dense.var[row * kWidth + j])
          << "row " << row;
      EXPECT_NE(sparse.var[row * kWidth + j], before.var[row * kWidth + j])
          << "row " << row;
      for (size_t k = 0; k < before.slots.size(); ++k) {
        EXPECT_EQ(sparse.slots[k][row * kWidth + j],
                  dense.slots[k][row * kWidth + j]);
      }
    }
  }
}

TEST(OptimizerTest, SparseApplyTouchesOnlyNamedRowsAndMatchesDense) {
  for (const OptimizerConfig& c : AllVariants()) {
    ExpectSparseMatchesDense<float>(c);
    ExpectSparseMatchesDense<double>(c);
  }
}

TEST(OptimizerTest, SparseAssignAddOnIntegers) {
  OptimizerConfig c;
  c.type = OptimizerType::kAssignAdd;
  std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
  ASSERT_NE(opt, nullptr);
  std::vector<int64_t> w = {1, 2, 3, 4, 5, 6};  // 3 rows of 2
  const std::vector<int64_t> ids = {2};
  const std::vector<int64_t> g = {10, 20};
  ASSERT_TRUE(
      opt->ApplySparse(DType::kInt64, 0, w.data(), {}, ids, g.data(), 2).ok());
  EXPECT_THAT(w, ::testing::ElementsAre(1, 2, 3, 4, 15, 26));
}

TEST(OptimizerTest, SparseRejectsNegativeIds) {
  std::unique_ptr<Optimizer> opt = MakeOptimizer(OptimizerConfig());
  ASSERT_NE(opt, nullptr);
  std::vector<float> w(4, 1.0f);
  const std::vector<float> g(2, 1.0f);
  const std::vector<int64_t> ids = {-1};
  absl::Status s =
      opt->ApplySparse(DType::kFloat32, 0, w.data(), {}, ids, g.data(), 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("-1"));
}

// An optimizer without its own sparse path, to test the base class's.
class HalveOptimizer : public Optimizer {
 public:
  HalveOptimizer() : Optimizer(OptimizerConfig()) {}
  std::vector<std::string> SlotNames() const override { return {"count"}; }
  absl::Status ApplyDense(DType dtype, int64_t iterations, void* var,
                          absl::Span<void* const> slots, const void* grad,
                          int64_t n) const override {
    if (dtype != DType::kFloat64 || slots.size() != 1) {
      return absl::InvalidArgumentError("float64 with one slot only");
    }
    double* w = static_cast<double*>(var);
    double* count = static_cast<double*>(slots[0]);
    const double* g = static_cast<const double*>(grad);
    for (int64_t i = 0; i < n; ++i) {
      w[i] = w[i] / 2 + g[i];
      count[i] += 1;
    }
    return absl::OkStatus();
  }
};

TEST(OptimizerTest, BaseApplySparseAppliesDenseToEachNamedRow) {
  HalveOptimizer opt;
  std::vector<double> w = {2, 4, 6, 8, 10, 12};  // 3 rows of 2
  std::vector<double> count(6, 0);
  const std::vector<int64_t> ids = {2, 0};
  const std::vector<double> g = {1, 2, 3, 4};
  std::vector<void*> slots = {count.data()};
  ASSERT_TRUE(
      opt.ApplySparse(DType::kFloat64, 0, w.data(), slots, ids, g.data(), 2)
          .ok());
  // Row 2 gets grad row 0: {10/2 + 1, 12/2 + 2}; row 0 gets grad row 1.
  EXPECT_THAT(w, ::testing::ElementsAre(4, 6, 6, 8, 6, 8));
  EXPECT_THAT(count, ::testing::ElementsAre(1, 1, 0, 0, 1, 1));
  EXPECT_EQ(
      opt.ApplySparse(DType::kFloat32, 0, w.data(), slots, ids, g.data(), 2)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

absl::Status CreateStatus(const OptimizerConfig& c) {
  return Optimizer::Create(c).status();
}

TEST(OptimizerTest, CreateRejectsOutOfRangeFieldsNamingThem) {
  struct Case {
    OptimizerType type;
    void (*set)(OptimizerConfig*);
    const char* field;
  };
  const Case cases[] = {
      {OptimizerType::kSgd, [](OptimizerConfig* c) { c->momentum = 1.5; },
       "momentum"},
      {OptimizerType::kSgd, [](OptimizerConfig* c) { c->momentum = -0.1; },
       "momentum"},
      {OptimizerType::kSgd,
       [](OptimizerConfig* c) {
         c->learning_rate = std::numeric_limits<double>::quiet_NaN();
       },
       "learning_rate"},
      {OptimizerType::kAdam,
       [](OptimizerConfig* c) {
         c->learning_rate = std::numeric_limits<double>::infinity();
       },
       "learning_rate"},
      {OptimizerType::kAdam, [](OptimizerConfig* c) { c->beta_1 = 1.0; },
       "beta_1"},
      {OptimizerType::kAdam, [](OptimizerConfig* c) { c->beta_2 = -0.5; },
       "beta_2"},
      {OptimizerType::kAdam, [](OptimizerConfig* c) { c->epsilon = -1e-7; },
       "epsilon"},
      {OptimizerType::kAdagrad,
       [](OptimizerConfig* c) { c->initial_accumulator_value = -0.1; },
       "initial_accumulator_value"},
      {OptimizerType::kAdagrad, [](OptimizerConfig* c) { c->epsilon = -1; },
       "epsilon"},
      {OptimizerType::kRmsprop, [](OptimizerConfig* c) { c->rho = 1.0; },
       "rho"},
      {OptimizerType::kRmsprop, [](OptimizerConfig* c) { c->momentum = 2.0; },
       "momentum"},
      {OptimizerType::kRmsprop,
       [](OptimizerConfig* c) {
         c->epsilon = std::numeric_limits<double>::quiet_NaN();
       },
       "epsilon"},
  };
  for (const Case& k : cases) {
    OptimizerConfig c;
    c.type = k.type;
    k.set(&c);
    absl::Status s = CreateStatus(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.field;
    EXPECT_THAT(s.message(), HasSubstr(k.field));
    EXPECT_THAT(s.message(), HasSubstr(OptimizerTypeName(k.type)));
  }
}

TEST(OptimizerTest, CreateAcceptsRangeBoundaries) {
  OptimizerConfig c;
  c.momentum = 1.0;
  EXPECT_TRUE(CreateStatus(c).ok());
  c.type = OptimizerType::kAdam;
  c.beta_1 = 0.0;
  c.beta_2 = 0.0;
  c.epsilon = 0.0;
  EXPECT_TRUE(CreateStatus(c).ok());
  // Fields an optimizer does not use are ignored.
  c.type = OptimizerType::kSgd;
  c.momentum = 0;
  c.beta_1 = 7;
  EXPECT_TRUE(CreateStatus(c).ok());
  c.type = OptimizerType::kAssignAdd;
  c.learning_rate = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(CreateStatus(c).ok());
}

TEST(OptimizerTest, ErrorMessagesRangeIsReadable) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  c.beta_1 = 1.5;
  EXPECT_THAT(CreateStatus(c).message(), HasSubstr("[0, 1)"));
}

TEST(OptimizerTest, ApplyRejectsIntegerDtypes) {
  for (OptimizerType type :
       {OptimizerType::kSgd, OptimizerType::kAdam, OptimizerType::kAdagrad,
        OptimizerType::kRmsprop}) {
    OptimizerConfig c;
    c.type = type;
    std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
    ASSERT_NE(opt, nullptr);
    State<int32_t> st(*opt, {1, 2});
    absl::Status s = st.Apply(*opt, 0, {1, 1});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("int32"));
    EXPECT_THAT(s.message(), HasSubstr(OptimizerTypeName(type)));
  }
}

TEST(OptimizerTest, ApplyRejectsWrongSlotCount) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
  ASSERT_NE(opt, nullptr);
  std::vector<float> w(2), m(2), g(2);
  std::vector<void*> slots = {m.data()};
  absl::Status s =
      opt->ApplyDense(DType::kFloat32, 0, w.data(), slots, g.data(), 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("expects 2"));
  EXPECT_THAT(s.message(), HasSubstr("m, v"));

  OptimizerConfig sgd;
  opt = MakeOptimizer(sgd);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(
      opt->ApplyDense(DType::kFloat32, 0, w.data(), slots, g.data(), 2).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(OptimizerTest, ApplyRejectsNegativeIterations) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  std::unique_ptr<Optimizer> opt = MakeOptimizer(c);
  ASSERT_NE(opt, nullptr);
  State<float> st(*opt, {1.0});
  absl::Status s = st.Apply(*opt, -1, {1.0});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("iterations"));
}

TEST(OptimizerTest, ParseAndNameRoundTrip) {
  for (OptimizerType type :
       {OptimizerType::kSgd, OptimizerType::kAdam, OptimizerType::kAdagrad,
        OptimizerType::kRmsprop, OptimizerType::kAssignAdd}) {
    absl::StatusOr<OptimizerType> parsed =
        ParseOptimizerType(OptimizerTypeName(type));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, type);
  }
  absl::StatusOr<OptimizerType> bad = ParseOptimizerType("adamw");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("adamw"));
  EXPECT_THAT(bad.status().message(),
              HasSubstr("sgd, adam, adagrad, rmsprop, assign_add"));
}

}  // namespace
}  // namespace strata

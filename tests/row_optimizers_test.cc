#include "kernels/row_optimizers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace strata {
namespace {

// Float storage between steps against a double reference.
void ExpectClose(float actual, double expected) {
  EXPECT_NEAR(actual, expected, 1e-6 * std::max(1.0, std::abs(expected)));
}

std::unique_ptr<RowOptimizer> Make(const RowOptimizerConfig& config) {
  auto optimizer = RowOptimizer::Create(config);
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  return optimizer.ok() ? std::move(optimizer).value() : nullptr;
}

TEST(RowOptimizerTest, SgdMatchesHandComputedSteps) {
  RowOptimizerConfig config;
  config.type = RowOptimizerType::kSgd;
  config.learning_rate = 0.1;
  auto sgd = Make(config);
  ASSERT_NE(sgd, nullptr);
  EXPECT_EQ(sgd->num_slots(), 0);

  std::vector<float> w = {1.0f, -2.0f};
  int64_t step = 0;
  STRATA_ASSERT_OK(sgd->ApplyRow(absl::MakeSpan(w), {}, &step,
                                 std::vector<float>{0.5f, -1.0f}));
  // w = 1 - 0.1 * 0.5 = 0.95; -2 - 0.1 * -1 = -1.9
  ExpectClose(w[0], 1.0 - 0.1 * 0.5);
  ExpectClose(w[1], -2.0 - 0.1 * -1.0);
  STRATA_ASSERT_OK(sgd->ApplyRow(absl::MakeSpan(w), {}, &step,
                                 std::vector<float>{0.25f, 2.0f}));
  ExpectClose(w[0], 1.0 - 0.1 * 0.5 - 0.1 * 0.25);   // 0.925
  ExpectClose(w[1], -2.0 - 0.1 * -1.0 - 0.1 * 2.0);  // -2.1
  EXPECT_EQ(step, 2);
  // A null step is fine for SGD.
  STRATA_ASSERT_OK(sgd->ApplyRow(absl::MakeSpan(w), {}, nullptr,
                                 std::vector<float>{0.0f, 0.0f}));
}

TEST(RowOptimizerTest, DefaultsAreKeras) {
  RowOptimizerConfig config;
  config.type = RowOptimizerType::kSgd;
  EXPECT_DOUBLE_EQ(Make(config)->config().learning_rate, 0.01);
  for (RowOptimizerType type :
       {RowOptimizerType::kAdagrad, RowOptimizerType::kLazyAdam,
        RowOptimizerType::kFtrl}) {
    config.type = type;
    EXPECT_DOUBLE_EQ(Make(config)->config().learning_rate, 0.001);
  }
}

TEST(RowOptimizerTest, AdagradMatchesHandComputedSteps) {
  RowOptimizerConfig config;
  config.type = RowOptimizerType::kAdagrad;
  config.learning_rate = 0.1;  // initial_accumulator_value 0.1, eps 1e-7
  auto adagrad = Make(config);
  ASSERT_NE(adagrad, nullptr);
  ASSERT_EQ(adagrad->num_slots(), 1);

  std::vector<float> w = {1.0f};
  std::vector<float> slots(1, -1.0f);
  adagrad->InitSlots(absl::MakeSpan(slots), 1);
  ExpectClose(slots[0], 0.1);
  int64_t step = 0;
  STRATA_ASSERT_OK(adagrad->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                                     &step, std::vector<float>{0.5f}));
  const double acc1 = 0.1 + 0.5 * 0.5;  // 0.35
  const double w1 = 1.0 - 0.1 * 0.5 / (std::sqrt(acc1) + 1e-7);
  ExpectClose(slots[0], acc1);
  ExpectClose(w[0], w1);
  STRATA_ASSERT_OK(adagrad->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                                     &step, std::vector<float>{-1.0f}));
  const double acc2 = acc1 + 1.0;  // 1.35
  const double w2 = w1 - 0.1 * -1.0 / (std::sqrt(acc2) + 1e-7);
  ExpectClose(slots[0], acc2);
  ExpectClose(w[0], w2);
}

TEST(RowOptimizerTest, LazyAdamMatchesHandComputedStepsWithTheRowsOwnStep) {
  RowOptimizerConfig config;
  config.type = RowOptimizerType::kLazyAdam;
  config.learning_rate = 0.01;  // beta_1 0.9, beta_2 0.999, eps 1e-7
  auto adam = Make(config);
  ASSERT_NE(adam, nullptr);
  ASSERT_EQ(adam->num_slots(), 2);

  std::vector<float> w = {0.5f};
  std::vector<float> slots(2);
  adam->InitSlots(absl::MakeSpan(slots), 1);
  int64_t step = 0;
  STRATA_ASSERT_OK(adam->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                                  &step, std::vector<float>{0.5f}));
  // t = 1
  const double m1 = 0.9 * 0.0 + 0.1 * 0.5;                 // 0.05
  const double v1 = 0.999 * 0.0 + 0.001 * 0.5 * 0.5;       // 0.00025
  const double lr1 = 0.01 * std::sqrt(1 - 0.999) / (1 - 0.9);
  const double w1 = 0.5 - lr1 * m1 / (std::sqrt(v1) + 1e-7);
  ExpectClose(slots[0], m1);
  ExpectClose(slots[1], v1);
  ExpectClose(w[0], w1);
  EXPECT_EQ(step, 1);
  STRATA_ASSERT_OK(adam->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                                  &step, std::vector<float>{-1.0f}));
  // t = 2
  const double m2 = 0.9 * m1 + 0.1 * -1.0;            // -0.055
  const double v2 = 0.999 * v1 + 0.001 * 1.0;         // 0.00124975
  const double lr2 = 0.01 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
  const double w2 = w1 - lr2 * m2 / (std::sqrt(v2) + 1e-7);
  ExpectClose(slots[0], m2);
  ExpectClose(slots[1], v2);
  ExpectClose(w[0], w2);
  EXPECT_EQ(step, 2);

  // Another row's first update uses t = 1 whatever other rows have done.
  std::vector<float> other = {0.5f};
  std::vector<float> other_slots(2, 0.0f);
  int64_t other_step = 0;
  STRATA_ASSERT_OK(adam->ApplyRow(absl::MakeSpan(other),
                                  absl::MakeSpan(other_slots), &other_step,
                                  std::vector<float>{0.5f}));
  ExpectClose(other[0], w1);

  // Adam needs the step count.
  EXPECT_THAT(adam->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                             nullptr, std::vector<float>{1.0f}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(RowOptimizerTest, FtrlMatchesHandComputedSteps) {
  RowOptimizerConfig config;
  config.type = RowOptimizerType::kFtrl;
  config.learning_rate = 0.1;  // learning_rate_power -0.5, init acc 0.1
  config.l1_regularization_strength = 0.001;
  config.l2_regularization_strength = 0.01;
  config.l2_shrinkage_regularization_strength = 0.05;
  auto ftrl = Make(config);
  ASSERT_NE(ftrl, nullptr);
  ASSERT_EQ(ftrl->num_slots(), 2);

  std::vector<float> w = {0.5f};
  std::vector<float> slots(2, -1.0f);
  ftrl->InitSlots(absl::MakeSpan(slots), 1);
  ExpectClose(slots[0], 0.1);  // accumulator n
  ExpectClose(slots[1], 0.0);  // linear z
  int64_t step = 0;
  STRATA_ASSERT_OK(ftrl->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                                  &step, std::vector<float>{0.5f}));
  // Step 1: g = 0.5, w = 0.5, n = 0.1, z = 0.
  const double gs1 = 0.5 + 2 * 0.05 * 0.5;               // g' = 0.55
  const double n1 = 0.1 + 0.5 * 0.5;                     // raw g: 0.35
  const double sigma1 = (std::sqrt(n1) - std::sqrt(0.1)) / 0.1;
  const double z1 = 0.0 + gs1 - sigma1 * 0.5;
  const double q1 = std::sqrt(n1) / 0.1 + 2 * 0.01;
  ASSERT_GT(std::abs(z1), 0.001);
  const double w1 = ((z1 > 0 ? 0.001 : -0.001) - z1) / q1;
  ExpectClose(slots[0], n1);
  ExpectClose(slots[1], z1);
  ExpectClose(w[0], w1);
  STRATA_ASSERT_OK(ftrl->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                                  &step, std::vector<float>{-1.0f}));
  // Step 2: g = -1.
  const double gs2 = -1.0 + 2 * 0.05 * w1;
  const double n2 = n1 + 1.0;
  const double sigma2 = (std::sqrt(n2) - std::sqrt(n1)) / 0.1;
  const double z2 = z1 + gs2 - sigma2 * w1;
  const double q2 = std::sqrt(n2) / 0.1 + 2 * 0.01;
  ASSERT_GT(std::abs(z2), 0.001);
  const double w2 = ((z2 > 0 ? 0.001 : -0.001) - z2) / q2;
  ExpectClose(slots[0], n2);
  ExpectClose(slots[1], z2);
  ExpectClose(w[0], w2);
}

TEST(RowOptimizerTest, FtrlWithOtherPowerAndLargeL1) {
  RowOptimizerConfig config;
  config.type = RowOptimizerType::kFtrl;
  config.learning_rate = 0.2;
  config.learning_rate_power = -1.0;  // n^1: the pow path
  auto ftrl = Make(config);
  ASSERT_NE(ftrl, nullptr);
  std::vector<float> w = {0.0f};
  std::vector<float> slots(2);
  ftrl->InitSlots(absl::MakeSpan(slots), 1);
  int64_t step = 0;
  STRATA_ASSERT_OK(ftrl->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                                  &step, std::vector<float>{0.3f}));
  // n1 = 0.19; z1 = 0.3 - (0.19 - 0.1) / 0.2 * 0 = 0.3; w = -z / (n1 / lr).
  ExpectClose(w[0], -0.3 / (0.19 / 0.2));

  // |z| <= l1 sets the weight to exactly zero.
  config.learning_rate_power = -0.5;
  config.l1_regularization_strength = 10.0;
  auto sparse = Make(config);
  std::vector<float> v = {0.7f};
  std::vector<float> v_slots(2);
  sparse->InitSlots(absl::MakeSpan(v_slots), 1);
  STRATA_ASSERT_OK(sparse->ApplyRow(absl::MakeSpan(v), absl::MakeSpan(v_slots),
                                    &step, std::vector<float>{0.3f}));
  EXPECT_EQ(v[0], 0.0f);
}

TEST(RowOptimizerTest, BadRowsAndNonFiniteGradientsChangeNothing) {
  RowOptimizerConfig config;
  config.type = RowOptimizerType::kAdagrad;
  auto adagrad = Make(config);
  ASSERT_NE(adagrad, nullptr);
  std::vector<float> w = {1.0f, 2.0f};
  std::vector<float> slots = {0.1f, 0.1f};
  int64_t step = 3;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THAT(adagrad->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                                &step, std::vector<float>{0.5f, nan}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "not finite"));
  EXPECT_THAT(adagrad->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                                &step, std::vector<float>{-inf, 0.5f}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(adagrad->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                                &step, std::vector<float>{0.5f}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "gradient has 1"));
  EXPECT_THAT(adagrad->ApplyRow(absl::MakeSpan(w),
                                absl::MakeSpan(slots).subspan(0, 1), &step,
                                std::vector<float>{0.5f, 0.5f}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "slot floats"));
  int64_t negative = -1;
  EXPECT_THAT(adagrad->ApplyRow(absl::MakeSpan(w), absl::MakeSpan(slots),
                                &negative, std::vector<float>{0.5f, 0.5f}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(w, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(slots, (std::vector<float>{0.1f, 0.1f}));
  EXPECT_EQ(step, 3);
}

TEST(RowOptimizerTest, InvalidHyperParametersAreNamed) {
  struct Case {
    RowOptimizerType type;
    void (*set)(RowOptimizerConfig*);
    const char* field;
  };
  const Case cases[] = {
      {RowOptimizerType::kSgd,
       [](RowOptimizerConfig* c) {
         c->learning_rate = std::numeric_limits<double>::quiet_NaN();
       },
       "learning_rate"},
      {RowOptimizerType::kAdagrad,
       [](RowOptimizerConfig* c) { c->epsilon = -1; }, "epsilon"},
      {RowOptimizerType::kAdagrad,
       [](RowOptimizerConfig* c) { c->initial_accumulator_value = -0.1; },
       "initial_accumulator_value"},
      {RowOptimizerType::kLazyAdam,
       [](RowOptimizerConfig* c) { c->beta_1 = 1.0; }, "beta_1"},
      {RowOptimizerType::kLazyAdam,
       [](RowOptimizerConfig* c) { c->beta_2 = -0.5; }, "beta_2"},
      {RowOptimizerType::kFtrl,
       [](RowOptimizerConfig* c) { c->learning_rate_power = 0.5; },
       "learning_rate_power"},
      {RowOptimizerType::kFtrl,
       [](RowOptimizerConfig* c) { c->l1_regularization_strength = -1; },
       "l1_regularization_strength"},
      {RowOptimizerType::kFtrl,
       [](RowOptimizerConfig* c) { c->l2_regularization_strength = -1; },
       "l2_regularization_strength"},
      {RowOptimizerType::kFtrl,
       [](RowOptimizerConfig* c) {
         c->l2_shrinkage_regularization_strength = -1;
       },
       "l2_shrinkage_regularization_strength"},
      {RowOptimizerType::kFtrl, [](RowOptimizerConfig* c) { c->beta = -1; },
       "beta"},
  };
  for (const Case& c : cases) {
    RowOptimizerConfig config;
    config.type = c.type;
    c.set(&config);
    EXPECT_THAT(RowOptimizer::Create(config),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    c.field))
        << c.field;
  }
}

TEST(RowOptimizerTest, ParsesAndNamesTypes) {
  for (RowOptimizerType type :
       {RowOptimizerType::kSgd, RowOptimizerType::kAdagrad,
        RowOptimizerType::kLazyAdam, RowOptimizerType::kFtrl}) {
    auto parsed = ParseRowOptimizerType(RowOptimizerTypeName(type));
    STRATA_ASSERT_OK(parsed);
    EXPECT_EQ(*parsed, type);
  }
  EXPECT_THAT(ParseRowOptimizerType("adamw"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "lazy_adam"));
}

}  // namespace
}  // namespace strata

// BinaryMetrics (worker/auc.h): exact AUC against a brute-force pair count
// with ties, the extreme rankings, log loss by hand, Merge and bad input.
#include "worker/auc.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace strata {
namespace {

// sum over (positive, negative) pairs of [p > n] + [p == n] / 2, over the
// number of pairs.
double BruteForceAuc(const std::vector<float>& scores,
                     const std::vector<float>& labels) {
  double wins = 0;
  int64_t pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (labels[i] != 1.0f) continue;
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[j] != 0.0f) continue;
      ++pairs;
      if (scores[i] > scores[j]) wins += 1;
      if (scores[i] == scores[j]) wins += 0.5;
    }
  }
  return wins / static_cast<double>(pairs);
}

TEST(BinaryMetricsTest, AucMatchesBruteForceWithTies) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<float> scores, labels;
    // Scores on a coarse grid of 21 values: many ties.
    for (int i = 0; i < 1500; ++i) {
      const int level = static_cast<int>(rng() % 21);
      scores.push_back(static_cast<float>(level) / 20.0f);
      // Positives more likely at higher scores.
      const bool positive = (rng() % 20) < static_cast<uint64_t>(level);
      labels.push_back(positive ? 1.0f : 0.0f);
    }
    BinaryMetrics metrics;
    STRATA_ASSERT_OK(metrics.Add(scores, labels));
    EXPECT_NEAR(metrics.Auc(), BruteForceAuc(scores, labels), 1e-12);
    EXPECT_EQ(metrics.count(), 1500);
    EXPECT_LE(metrics.distinct_scores(), 21);
  }
}

TEST(BinaryMetricsTest, AucMatchesBruteForceOnDistinctScores) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> scores, labels;
  for (int i = 0; i < 2000; ++i) {
    scores.push_back(uniform(rng));
    labels.push_back(uniform(rng) < scores.back() ? 1.0f : 0.0f);
  }
  BinaryMetrics metrics;
  // In uneven pieces: the order of Add calls does not matter.
  STRATA_ASSERT_OK(metrics.Add(absl::MakeConstSpan(scores).subspan(0, 3),
                               absl::MakeConstSpan(labels).subspan(0, 3)));
  STRATA_ASSERT_OK(metrics.Add(absl::MakeConstSpan(scores).subspan(3),
                               absl::MakeConstSpan(labels).subspan(3)));
  EXPECT_NEAR(metrics.Auc(), BruteForceAuc(scores, labels), 1e-12);
}

TEST(BinaryMetricsTest, PerfectReversedAndAllTied) {
  const std::vector<float> labels = {0, 0, 1, 1, 0, 1};
  const std::vector<float> perfect = {0.1f, 0.2f, 0.8f, 0.9f, 0.3f, 0.7f};
  const std::vector<float> reversed = {0.9f, 0.8f, 0.2f, 0.1f, 0.7f, 0.3f};
  const std::vector<float> tied(6, 0.5f);
  BinaryMetrics a, b, c;
  STRATA_ASSERT_OK(a.Add(perfect, labels));
  STRATA_ASSERT_OK(b.Add(reversed, labels));
  STRATA_ASSERT_OK(c.Add(tied, labels));
  EXPECT_EQ(a.Auc(), 1.0);
  EXPECT_EQ(b.Auc(), 0.0);
  EXPECT_EQ(c.Auc(), 0.5);
}

TEST(BinaryMetricsTest, NegativeZeroTiesWithZero) {
  BinaryMetrics metrics;
  STRATA_ASSERT_OK(metrics.Add({-0.0f, 0.0f}, {1.0f, 0.0f}));
  EXPECT_EQ(metrics.Auc(), 0.5);
  EXPECT_EQ(metrics.distinct_scores(), 1);
}

TEST(BinaryMetricsTest, OneClassOrEmptyIsNan) {
  BinaryMetrics metrics;
  EXPECT_TRUE(std::isnan(metrics.Auc()));
  EXPECT_TRUE(std::isnan(metrics.LogLoss()));
  STRATA_ASSERT_OK(metrics.Add({0.3f, 0.6f}, {1.0f, 1.0f}));
  EXPECT_TRUE(std::isnan(metrics.Auc()));
  EXPECT_FALSE(std::isnan(metrics.LogLoss()));
}

TEST(BinaryMetricsTest, LogLossByHand) {
  BinaryMetrics metrics;
  // -(log 0.8 + log(1 - 0.25) + log 0.5) / 3, plus two clipped terms:
  // p = 1 for a negative and p = 0 for a positive each cost -log(1e-7).
  STRATA_ASSERT_OK(metrics.Add({0.8f, 0.25f, 0.5f}, {1.0f, 0.0f, 1.0f}));
  const double three =
      -(std::log(double{0.8f}) + std::log(1.0 - double{0.25f}) +
        std::log(0.5)) /
      3.0;
  EXPECT_NEAR(metrics.LogLoss(), three, 1e-12);
  STRATA_ASSERT_OK(metrics.Add({1.0f, 0.0f}, {0.0f, 1.0f}));
  const double clipped = -std::log(1e-7);
  EXPECT_NEAR(metrics.LogLoss(), (3.0 * three + 2.0 * clipped) / 5.0, 1e-9);
  // A perfect confident prediction costs about 1e-7, not 0 or -inf.
  BinaryMetrics sure;
  STRATA_ASSERT_OK(sure.Add({1.0f, 0.0f}, {1.0f, 0.0f}));
  EXPECT_NEAR(sure.LogLoss(), 1e-7, 1e-12);
}

TEST(BinaryMetricsTest, MergeEqualsAddingEverything) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> scores, labels;
  for (int i = 0; i < 600; ++i) {
    scores.push_back(std::round(uniform(rng) * 50.0f) / 50.0f);
    labels.push_back(uniform(rng) < scores.back() ? 1.0f : 0.0f);
  }
  BinaryMetrics whole, first, second;
  STRATA_ASSERT_OK(whole.Add(scores, labels));
  auto s = absl::MakeConstSpan(scores);
  auto l = absl::MakeConstSpan(labels);
  STRATA_ASSERT_OK(first.Add(s.subspan(0, 250), l.subspan(0, 250)));
  STRATA_ASSERT_OK(second.Add(s.subspan(250), l.subspan(250)));
  first.Merge(second);
  EXPECT_EQ(first.count(), whole.count());
  EXPECT_EQ(first.positives(), whole.positives());
  EXPECT_EQ(first.Auc(), whole.Auc());
  EXPECT_NEAR(first.LogLoss(), whole.LogLoss(), 1e-12);

  // Merging with itself doubles every count: the same AUC and log loss.
  BinaryMetrics twice = whole;
  twice.Merge(twice);
  EXPECT_EQ(twice.count(), 2 * whole.count());
  EXPECT_EQ(twice.Auc(), whole.Auc());
  EXPECT_NEAR(twice.LogLoss(), whole.LogLoss(), 1e-12);

  twice.Clear();
  EXPECT_EQ(twice.count(), 0);
  EXPECT_EQ(twice.distinct_scores(), 0);
}

TEST(BinaryMetricsTest, BadInputIsRejectedAndNothingAdded) {
  BinaryMetrics metrics;
  EXPECT_THAT(metrics.Add({0.5f, 0.5f}, {1.0f}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "2 probabilities but 1 labels"));
  EXPECT_THAT(metrics.Add({0.5f, 0.5f}, {1.0f, 0.5f}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "labels[1] is 0.5, not 0 or 1"));
  EXPECT_THAT(metrics.Add({0.5f, NAN}, {1.0f, 0.0f}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "probabilities[1] is nan"));
  EXPECT_THAT(metrics.Add({1.5f}, {1.0f}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "not in [0, 1]"));
  EXPECT_EQ(metrics.count(), 0);
}

}  // namespace
}  // namespace strata

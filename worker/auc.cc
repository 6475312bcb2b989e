// Exact streaming AUC and log loss (worker/auc.h).
#include "worker/auc.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace {

uint32_t KeyOf(float score) {
  if (score == 0.0f) score = 0.0f;  // -0.0 ties with 0.0
  uint32_t bits;
  std::memcpy(&bits, &score, sizeof(bits));
  return bits;
}

float ScoreOf(uint32_t key) {
  float score;
  std::memcpy(&score, &key, sizeof(score));
  return score;
}

}  // namespace

absl::Status BinaryMetrics::Add(absl::Span<const float> probabilities,
                                absl::Span<const float> labels) {
  if (probabilities.size() != labels.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("BinaryMetrics::Add: ", probabilities.size(),
                     " probabilities but ", labels.size(), " labels"));
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != 0.0f && labels[i] != 1.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat("BinaryMetrics::Add: labels[", i, "] is ", labels[i],
                       ", not 0 or 1"));
    }
    // Written so that NaN fails too.
    if (!(probabilities[i] >= 0.0f && probabilities[i] <= 1.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("BinaryMetrics::Add: probabilities[", i, "] is ",
                       probabilities[i], ", not in [0, 1]"));
    }
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    const bool positive = labels[i] == 1.0f;
    Counts& counts = counts_[KeyOf(probabilities[i])];
    const double p = std::clamp(static_cast<double>(probabilities[i]),
                                kLogLossEpsilon, 1.0 - kLogLossEpsilon);
    if (positive) {
      ++counts.positives;
      ++positives_;
      log_loss_sum_ -= std::log(p);
    } else {
      ++counts.negatives;
      ++negatives_;
      log_loss_sum_ -= std::log1p(-p);
    }
  }
  return absl::OkStatus();
}

double BinaryMetrics::Auc() const {
  if (positives_ == 0 || negatives_ == 0) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  std::vector<std::pair<float, Counts>> sorted;
  sorted.reserve(counts_.size());
  for (const auto& [key, counts] : counts_) {
    sorted.emplace_back(ScoreOf(key), counts);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // Twice the Mann-Whitney U: each positive counts 2 per negative below it
  // and 1 per negative tied with it. At most 2 * 2^63 * 2^63: 128 bits.
  unsigned __int128 twice_u = 0;
  unsigned __int128 negatives_below = 0;
  for (const auto& [score, counts] : sorted) {
    const auto pos = static_cast<unsigned __int128>(counts.positives);
    const auto neg = static_cast<unsigned __int128>(counts.negatives);
    twice_u += pos * (2 * negatives_below + neg);
    negatives_below += neg;
  }
  const unsigned __int128 pairs =
      static_cast<unsigned __int128>(positives_) *
      static_cast<unsigned __int128>(negatives_);
  // The exact integers' ratio, formed in long double (64-bit mantissa).
  return static_cast<double>(static_cast<long double>(twice_u) /
                             (2.0L * static_cast<long double>(pairs)));
}

double BinaryMetrics::LogLoss() const {
  if (count() == 0) return std::numeric_limits<double>::quiet_NaN();
  return log_loss_sum_ / static_cast<double>(count());
}

void BinaryMetrics::Merge(const BinaryMetrics& other) {
  if (&other == this) {
    const BinaryMetrics copy = other;
    Merge(copy);
    return;
  }
  for (const auto& [key, counts] : other.counts_) {
    Counts& mine = counts_[key];
    mine.positives += counts.positives;
    mine.negatives += counts.negatives;
  }
  positives_ += other.positives_;
  negatives_ += other.negatives_;
  log_loss_sum_ += other.log_loss_sum_;
}

void BinaryMetrics::Clear() {
  counts_.clear();
  positives_ = 0;
  negatives_ = 0;
  log_loss_sum_ = 0;
}

}  // namespace strata

// Exact binary-classification metrics over a stream of predictions: the area
// under the ROC curve (ties counted as 1/2) and the mean log loss.
//
//   BinaryMetrics metrics;
//   STRATA_RETURN_IF_ERROR(metrics.Add(probabilities, labels));  // per batch
//   double auc = metrics.Auc();
//
// Exactness: scores are float32, so the metric keeps, per distinct score
// (its bit pattern), the number of positives and negatives, and sorts the
// distinct scores only when Auc() is called. The pair count (the
// Mann-Whitney U) is summed exactly in 128-bit integers and divided once at
// the end, so the AUC is exact to within long double rounding. Memory is O(distinct scores): at most the number
// of examples added, far fewer for a quantized or saturated model.
#ifndef STRATA_WORKER_AUC_H_
#define STRATA_WORKER_AUC_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace strata {

// Accumulates (probability, label) pairs. Thread-compatible: one thread at
// a time, or external locking; const methods may run concurrently.
class BinaryMetrics {
 public:
  // Log loss clips each probability to [kLogLossEpsilon, 1 - kLogLossEpsilon].
  static constexpr double kLogLossEpsilon = 1e-7;

  BinaryMetrics() = default;
  BinaryMetrics(const BinaryMetrics&) = default;
  BinaryMetrics& operator=(const BinaryMetrics&) = default;
  BinaryMetrics(BinaryMetrics&&) = default;
  BinaryMetrics& operator=(BinaryMetrics&&) = default;

  // Adds probabilities[i] for an example of label labels[i]. Each label must
  // be exactly 0 or 1 and each probability in [0, 1] (-0.0 counts as 0.0).
  // All or nothing: on error nothing is added.
  // Errors: INVALID_ARGUMENT naming the first offending index (sizes that
  // differ, a label not 0 or 1, a probability NaN or outside [0, 1]).
  absl::Status Add(absl::Span<const float> probabilities,
                   absl::Span<const float> labels);

  // The probability that a random positive scores above a random negative,
  // a tie counting 1/2: 1.0 for a perfect ranking, 0.0 for a reversed one.
  // NaN while there are no positives or no negatives. O(d log d) for d
  // distinct scores.
  double Auc() const;

  // The mean of -(y log p + (1 - y) log(1 - p)) with p clipped as above;
  // NaN when count() is 0.
  double LogLoss() const;

  int64_t count() const { return positives_ + negatives_; }
  int64_t positives() const { return positives_; }
  int64_t negatives() const { return negatives_; }
  // The number of distinct scores held (the memory used is proportional).
  int64_t distinct_scores() const {
    return static_cast<int64_t>(counts_.size());
  }

  // Adds everything `other` holds, as if its pairs had been added here
  // (merging a copy of itself doubles every count).
  void Merge(const BinaryMetrics& other);

  // Forgets everything.
  void Clear();

 private:
  struct Counts {
    int64_t positives = 0;
    int64_t negatives = 0;
  };

  // Keyed by the float's bit pattern (with -0.0 folded into 0.0).
  absl::flat_hash_map<uint32_t, Counts> counts_;
  int64_t positives_ = 0;
  int64_t negatives_ = 0;
  double log_loss_sum_ = 0;
};

}  // namespace strata

#endif  // STRATA_WORKER_AUC_H_

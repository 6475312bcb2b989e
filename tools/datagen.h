// Synthetic click data in the Criteo display-ads TSV format
// (worker/criteo_data.h), a pure function of a seed, with a known best
// achievable AUC: for testing and benchmarking sparse (embedding) models at
// any scale without the real logs.
//
// The model behind the data, for each example:
//   * each categorical column c draws a rank r in [1, cardinality_c] from a
//     Zipf distribution (P(r) proportional to r^-zipf_exponent), or is
//     missing with probability missing_rate; the id written is a keyed
//     bijection of (seed, c, r) onto 32 bits, as 8 lowercase hex digits
//     (distinct ranks of a column never share an id);
//   * a multi-hot column (options.multi_hot_columns) draws 1 to max_hot
//     ranks instead of one, written as a comma-separated list;
//   * each (c, r) has a latent vector v(c, r) in R^latent_dim, a hash of
//     (seed, c, r) (no table is kept); the signal is s = w . sum_c v(c, r_c)
//     with w drawn from the seed and scaled so that s has standard deviation
//     signal_std (a multi-hot column adds the mean of its ranks' vectors);
//   * the label is Bernoulli(sigmoid(s + b + noise * N(0, 1))), with the
//     bias b solved (on a calibration sample) for the positive rate
//     positive_rate;
//   * integer columns 1..13 are geometric counts with Criteo-like means; the
//     first four have their mean scaled by exp(0.5 * s / signal_std), so they
//     carry part of the signal; column 2 is negative (-1..-3) 5% of the
//     time, as in the real data; each is missing with probability
//     missing_rate.
// The Bayes score is the noiseless logit s + b (the label's noise is
// independent of the features): bayes_auc is its exact AUC against the drawn
// labels, the best any model can reach on this data.
//
// Randomness is counter-based: example i's draws come from a SplitMix64
// stream keyed by (seed, i) (tools/zipf_sampler.h), so the output depends only on the options and
// is identical across runs, and no memory grows with the cardinalities.
//
// The checked-in sample tests/data/criteo_sample.tsv (and its
// .summary.json) was made, from the repository root, with
//   strata datagen --out tests/data/criteo_sample.tsv --examples 1300 --seed 1
#ifndef STRATA_TOOLS_DATAGEN_H_
#define STRATA_TOOLS_DATAGEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/zipf_sampler.h"

namespace strata {

struct DatagenOptions {
  std::string path;       // the TSV file to write (its parent must exist)
  int64_t examples = 0;   // >= 1
  uint64_t seed = 1;
  // 26 values in [1, 2^32]; empty: DefaultCardinalities() (10^2..10^6).
  std::vector<int64_t> cardinalities;
  double zipf_exponent = 1.05;  // > 0
  int latent_dim = 8;           // 1..1024
  double noise = 0.5;           // >= 0: the label logit's N(0, 1) scale
  bool gzip = false;            // write gzip (zlib's default level)
  double missing_rate = 0.02;   // [0, 1): each integer and id field
  double positive_rate = 0.25;  // (0, 1): the target fraction of 1 labels
  double signal_std = 1.5;      // > 0: the standard deviation of s
  // Categorical columns (0..25, distinct) written as multi-hot fields: each
  // present one holds 1 to max_hot ids (uniform), drawn independently from
  // the column's Zipf distribution and written comma-separated, and adds
  // the mean of their latent vectors to the signal (what a mean bag can
  // learn). Empty: every field one id (and the same output as before).
  std::vector<int> multi_hot_columns;
  int max_hot = 4;  // [1, 1024]
  // When > 0: the first `split` examples are a training set, the rest a
  // test set (as `head`/`tail` of the file split it), and the summary adds
  // the ceilings of a learner that saw only the training set: the test
  // set's Bayes AUC, and the AUC of the oracle that knows the latent value
  // of every id seen at least k times in training (k = 1, 2, 5) and uses
  // the prior mean (0) for the others. [0, examples).
  int64_t split = 0;
  // With split > 0: the test examples (from `split` on) are written here
  // instead of after the training ones in `path` (which then holds the
  // first `split`). The directories of both files are created.
  std::string test_path;
};

struct DatagenSummary {
  int64_t examples = 0;
  int64_t positives = 0;
  double bayes_auc = 0;      // the exact AUC of the noiseless logit
  // The log loss of sigmoid((s + b) / sqrt(1 + pi * noise^2 / 8)), the
  // probit approximation of the true P(label = 1 | features).
  double bayes_logloss = 0;
  double bias = 0;           // the b solved for
  // With DatagenOptions::split: the test set's Bayes AUC, and the seen-ids
  // oracle's for k = 1, 2, 5 (see there); the share of the test set's ids
  // never seen in training.
  double test_bayes_auc = 0;
  double seen_ids_auc[3] = {0, 0, 0};
  double test_ids_unseen = 0;
};

// 26 cardinalities spread geometrically from max^(1/3) to max (for 10^6:
// 100 to 10^6), in a fixed shuffled order. max_cardinality >= 1.
std::vector<int64_t> DefaultCardinalities(int64_t max_cardinality = 1000000);

// Parses "c1,c2,...,c26". Errors: INVALID_ARGUMENT (not 26 values, one that
// is not an integer in [1, 2^32]).
absl::StatusOr<std::vector<int64_t>> ParseCardinalities(
    absl::string_view text);

// Writes options.examples lines to options.path (through a temporary file
// renamed into place) and the summary as JSON to
// options.path + ".summary.json" (DatagenSummaryJson, with the
// cardinalities used). Memory: O(distinct
// Bayes scores) for the exact AUC, at most ~40 bytes per example.
// Errors: INVALID_ARGUMENT (options out of range, naming the field),
// NOT_FOUND / PERMISSION_DENIED / INTERNAL naming the path that cannot be
// written.
absl::StatusOr<DatagenSummary> GenerateCriteoData(
    const DatagenOptions& options);

// The summary and the options that made it, as a JSON object (one line per
// field, sorted keys).
std::string DatagenSummaryJson(const DatagenOptions& options,
                               const DatagenSummary& summary);

}  // namespace strata

#endif  // STRATA_TOOLS_DATAGEN_H_

// The SDK's data: Dataset (examples from files or memory, loaded on first
// use) and the datasets:: constructors (FashionMnist, Idx, Csv, Criteo,
// FromIds, FromArrays). Part of the SDK that sdk/strata.h includes whole.
#ifndef STRATA_SDK_DATA_H_
#define STRATA_SDK_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata {
struct Dataset;  // worker/dataset.h: examples in memory
}  // namespace strata

namespace strata::sdk {

namespace internal {
struct DatasetAccess;
}  // namespace internal

// A dataset as tf.data sees it from Fit: a description of where examples
// come from (files, or arrays in memory), loaded on first use and cached by
// this value and its copies. Copies share the cache; Take() makes a new
// dataset with its own. Thread-safe.
class Dataset {
 public:
  // An empty in-memory dataset.
  Dataset();

  // The first `n` examples (n >= 1). n < 0 keeps them all (as tf.data's
  // take(-1)); Take(0) selects nothing, which Load() reports as
  // INVALID_ARGUMENT. Take(a).Take(b) keeps min(a, b).
  Dataset Take(int64_t n) const;

  // True for FromArrays datasets (a cluster strategy's Fit writes them to
  // IDX files in its run directory).
  bool in_memory() const;
  // E.g. "idx(/path/train-images..., /path/train-labels...), scale 255,
  // take 3000".
  std::string DebugString() const;

  // The examples, loaded once (worker/dataset.h LoadIdx / LoadCsv, limited
  // and scaled). Errors: as those loaders (NOT_FOUND for a missing file,
  // DATA_LOSS for a corrupt one, INVALID_ARGUMENT naming "path:line" for a
  // bad CSV value), and INVALID_ARGUMENT for Take(0) or inconsistent arrays.
  absl::StatusOr<std::shared_ptr<const ::strata::Dataset>> Load() const;

  struct Source;  // internal
  struct Cache;   // internal

 private:
  friend struct internal::DatasetAccess;
  Dataset(std::shared_ptr<const Source> source, int64_t take);

  std::shared_ptr<const Source> source_;
  int64_t take_ = -1;  // -1: all
  std::shared_ptr<Cache> cache_;
};

namespace datasets {

struct TrainTest {
  Dataset train;
  Dataset test;
};

// Fashion-MNIST as the Debian package dataset-fashion-mnist installs it
// (train-*-ubyte.gz and t10k-*-ubyte.gz under `dir`), pixels / 255.
TrainTest FashionMnist(
    const std::string& dir = "/usr/share/datasets/fashion-mnist");

// An IDX pair (gzip or not); features are divided by `scale` (> 0).
Dataset Idx(std::string images, std::string labels, double scale = 1.0);

// A CSV file (gzip or not): column `label_column` is the integer label, the
// others the features (divided by `scale`); `header` skips the first line.
Dataset Csv(std::string path, int64_t label_column = 0, bool header = true,
            double scale = 1.0);

// A Criteo display-ads TSV file (gzip or not: label, 13 integer and 26 hex
// categorical columns; `strata datagen` writes such files), read as a
// stream each epoch by models with embeddings (Sequential(Inputs, ...)).
// `bad_lines`: "stop" (a malformed line fails the Fit naming its line and
// column) or "skip" (skipped and counted). `multi_hot_columns`:
// categorical columns (0..25) whose fields are comma-separated id lists, for
// bag embeddings (Embedding combiner "sum" or "mean") over multi-hot
// features. Such a dataset has no in-memory form: Load() is
// INVALID_ARGUMENT, and Take() is refused by Fit.
Dataset Criteo(std::string path, std::string bad_lines = "stop",
               std::vector<int> multi_hot_columns = {});

// Examples of categorical ids in memory, for a model whose Inputs have no
// dense features (Inputs::dense 0), as Keras's Embedding layer reads them:
// example i's ids are ids[i * columns, (i + 1) * columns), each >= 0, and
// labels[i] is 0 or 1. `bag` false: column c of the model's categorical
// inputs holds id c (columns <= 26; for concat embeddings over columns
// 0..columns-1); `bag` true: categorical column 0 is multi-hot and holds
// all of an example's ids (for a "sum" or "mean" embedding over column 0;
// columns <= 2^20). The examples are written once, as a criteo file in
// `dir` (empty: the system's temporary directory) that every strategy's
// Fit streams (a cluster's workers read it too); the file is removed when
// the last copy of the dataset goes. Errors: INVALID_ARGUMENT naming the
// first bad value (a negative id, a label not 0 or 1, sizes that disagree);
// the file system's error.
absl::StatusOr<Dataset> FromIds(const std::vector<int64_t>& ids,
                                int64_t columns,
                                const std::vector<int32_t>& labels, bool bag,
                                const std::string& dir = "");

// Examples in memory: `x` holds labels.size() rows of `features` values.
// Consistency is checked by Load(). Usable under every strategy (a local
// cluster's Fit writes them as IDX files into its run directory).
Dataset FromArrays(std::vector<float> x, std::vector<int32_t> labels,
                   int64_t features);

}  // namespace datasets

}  // namespace strata::sdk

#endif  // STRATA_SDK_DATA_H_

// In-memory datasets for the worker: IDX (MNIST/Fashion-MNIST, gzip or not)
// and CSV loaders, deterministic epoch shuffling, and batching.
//
// Everything here is a pure function of its arguments (no globals, no
// clocks); loaders only read the files they are given.
#ifndef STRATA_WORKER_DATASET_H_
#define STRATA_WORKER_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "job/job.h"
#include "worker/criteo_data.h"

namespace strata {

// Examples as a dense row-major float matrix plus sparse integer labels.
struct Dataset {
  int64_t size = 0;      // examples
  int64_t features = 0;  // values per example
  std::vector<float> x;  // size * features, row-major, already scaled
  std::vector<int32_t> labels;  // size entries, each >= 0
  int num_classes = 0;          // max(label) + 1 (0 when empty)
};

// Loads an IDX pair: `images_path` holds unsigned bytes with magic
// 0x00000803 (count, rows, cols; big-endian) or float32 with magic
// 0x00000D02 (count, features) or 0x00000D03 (count, rows, cols);
// `labels_path` unsigned bytes with magic 0x00000801 (count) or int32 with
// 0x00000C01. Either file may be gzip-compressed
// (detected by its first bytes, 1f 8b). Pixel values are divided by `scale`
// (> 0). `limit` > 0 keeps only the first `limit` examples (0 = all).
// Errors: NOT_FOUND (a file is missing), INVALID_ARGUMENT (scale or limit
// out of range), DATA_LOSS naming the file (bad magic, truncated header or
// payload, corrupt gzip stream, image and label counts that differ).
absl::StatusOr<Dataset> LoadIdx(const std::string& images_path,
                                const std::string& labels_path, double scale,
                                int64_t limit);

// Writes `data` as an IDX pair LoadIdx reads back bit for bit (scale 1):
// float32 features (0x00000D02) and int32 labels (0x00000C01).
// Errors: INVALID_ARGUMENT for an inconsistent dataset, INTERNAL when a
// file cannot be written.
absl::Status WriteIdx(const Dataset& data, const std::string& images_path,
                      const std::string& labels_path);

// The example count in an IDX file's header (images or labels), reading
// only the header. Errors as LoadIdx.
absl::StatusOr<int64_t> CountIdxExamples(const std::string& images_path);

// Loads a CSV file (gzip or not): one example per line, comma-separated
// numbers; column `label_column` is the (non-negative integer) label, the
// others are the features, divided by `scale`. `header` skips the first
// line. Blank lines are skipped; quoting is not supported. `limit` as
// LoadIdx. Errors: NOT_FOUND, INVALID_ARGUMENT naming "path:line" (a value
// that is not a number, a negative or fractional label, a row whose column
// count differs from the first row's, label_column out of range), or
// DATA_LOSS (unreadable gzip).
absl::StatusOr<Dataset> LoadCsv(const std::string& path, int64_t label_column,
                                bool header, int64_t limit,
                                double scale = 1.0);

// The job's training / test split (data.train / data.test), scaled and
// limited as the job says. Errors as the loaders, each message prefixed by
// the job field naming the file ("job.data.train.images: /d/x.gz: No such
// file or directory"; "job.data.test.path: ..."; a count mismatch by
// "job.data.train: "), plus INVALID_ARGUMENT when the feature count differs
// from the product of model.input_shape, and FAILED_PRECONDITION from
// LoadTest when the job has no data.test.
absl::StatusOr<Dataset> LoadTrain(const JobSpec& job);
absl::StatusOr<Dataset> LoadTest(const JobSpec& job);

// The reader options of a job's criteo data (its bad_lines policy).
CriteoReaderOptions CriteoOptionsFor(const JobSpec& job);

// The number of training examples the job uses (after limit_train), cheaply
// for IDX (header only); CSV and criteo files are read in full. Errors as
// LoadTrain (criteo: CriteoReader's, naming job.data.train.path).
absl::StatusOr<int64_t> CountTrainExamples(const JobSpec& job);

// Checks, without reading them, that every data file the job names (train,
// and test when present) can be opened for reading: for a tool to refuse a
// job at once on the machine that will read them. Errors: NOT_FOUND,
// PERMISSION_DENIED or INTERNAL as opening the file failed, INVALID_ARGUMENT
// for a directory or an unknown format; each names the field and the path
// ("job.data.train.images: /x/y.gz: No such file or directory").
absl::Status CheckDataFiles(const JobSpec& job);

// A permutation of [0, n) for `epoch`: a pure function of (n, shuffle_seed,
// epoch), Fisher-Yates driven by std::mt19937_64 seeded from the seed and the
// epoch, with a platform-independent bounded draw. Empty when n <= 0.
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t shuffle_seed,
                                      int epoch);

// ceil(n / batch): Keras keeps the last partial batch. 0 when n <= 0 or
// batch <= 0.
int64_t StepsPerEpoch(int64_t n, int64_t batch);

// Copies batch `batch_index` (examples perm[batch_index * batch_size, ...),
// the last batch possibly smaller) into *x (rows of data.features) and *y,
// resizing both. A batch past the end yields empty vectors. `perm` holds
// indices into `data` (e.g. from EpochPermutation(data.size, ...)); indices
// out of range are the caller's bug and are skipped.
void GatherBatch(const Dataset& data, const std::vector<int64_t>& perm,
                 int64_t batch_index, int64_t batch_size,
                 std::vector<float>* x, std::vector<int32_t>* y);

}  // namespace strata

#endif  // STRATA_WORKER_DATASET_H_

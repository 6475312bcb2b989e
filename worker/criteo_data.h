// A streaming reader of the Criteo display-advertising TSV format (the
// Kaggle / Terabyte click logs), plain or gzip-compressed.
//
// Each line is 40 tab-separated columns: column 0 the label (0 or 1),
// columns 1..13 integer counts (decimal, possibly negative), columns 14..39
// categorical ids in hexadecimal (8 digits in the real data; 1 to 16 digits,
// either case, are accepted). Any integer or categorical field may be empty
// (missing). Columns are numbered from 0 in error messages, as the label is
// column 0.
//
//   STRATA_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
//                           CriteoReader::Create(path, CriteoReaderOptions()));
//   CriteoBatch batch;
//   while (true) {
//     STRATA_ASSIGN_OR_RETURN(bool more, reader->Next(&batch, 1024));
//     if (!more) break;
//     ...  // batch.size examples
//   }
//
// The file is read in chunks; memory is bounded by the batch, the read
// buffer and the longest accepted line, never the file's size.
#ifndef STRATA_WORKER_CRITEO_DATA_H_
#define STRATA_WORKER_CRITEO_DATA_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

inline constexpr int kCriteoDenseColumns = 13;
inline constexpr int kCriteoCategoricalColumns = 26;
inline constexpr int kCriteoColumns =
    1 + kCriteoDenseColumns + kCriteoCategoricalColumns;  // 40

// The id a missing categorical field reads as by default. A 16-digit id
// ffffffffffffffff reads as the same value (it is reinterpreted as int64);
// ids of the real data have 8 digits and never collide with it.
inline constexpr int64_t kCriteoMissingId = -1;

// A batch's categorical ids as a model reads them: example b's column c
// (0..25) holds ids[offsets[b * 26 + c], offsets[b * 26 + c + 1]) when
// `offsets` is set (multi-hot columns), else exactly ids[b * 26 + c].
struct CategoricalIds {
  const int64_t* ids = nullptr;
  const int64_t* offsets = nullptr;
};

// Examples, row-major: example i's dense values
// are dense[i * 13, i * 13 + 13), its ids categorical[i * 26, i * 26 + 26)
// (or, with multi-hot columns, as categorical_offsets says).
struct CriteoBatch {
  int64_t size = 0;
  std::vector<float> labels;         // size values, each 0 or 1
  // log(1 + max(x, 0)) of each integer x (the usual DLRM transform, which
  // maps the negative values of the real data to 0); a missing field is 0.
  std::vector<float> dense;          // size * kCriteoDenseColumns
  // Each hex id parsed as uint64 and reinterpreted as int64 (so
  // ffffffffffffffff is -1); a missing field is options.missing_id.
  std::vector<int64_t> categorical;  // size * kCriteoCategoricalColumns
  // With multi-hot columns (CriteoReaderOptions::multi_hot_columns) each
  // field holds 0 or more ids: field (i, c)'s are categorical[o[i * 26 + c],
  // o[i * 26 + c + 1]) for o = categorical_offsets (size * 26 + 1 values,
  // from 0). Empty when every field holds exactly one id.
  std::vector<int64_t> categorical_offsets;

  // Examples first, first + 1, ... as a model reads them.
  CategoricalIds Categorical(int64_t first = 0) const;
  void Clear();
};

// What to do with a malformed line.
enum class BadLinePolicy {
  kStop,  // Next fails with INVALID_ARGUMENT naming the line and column
  kSkip,  // the line is skipped and counted (CriteoReader::lines_skipped)
};

struct CriteoReaderOptions {
  BadLinePolicy bad_line_policy = BadLinePolicy::kStop;
  // The id a missing categorical field reads as.
  int64_t missing_id = kCriteoMissingId;
  // Under kSkip, how many skipped lines' error messages are kept for a
  // summary (skipped_errors()); the count goes on past it.
  int max_kept_errors = 5;
  // A line longer than this (without its newline) is malformed; this bounds
  // the memory a file without newlines can make the reader use. >= 1024.
  int64_t max_line_bytes = int64_t{1} << 16;
  // Bytes read from the file (after decompression) at a time. >= 1.
  int64_t read_buffer_bytes = int64_t{1} << 17;
  // Categorical columns (0..25, distinct) whose fields are lists of ids,
  // comma-separated ("a1,b2,c3"; an empty field: no id), for bag
  // embeddings over multi-hot features. The batches then carry
  // categorical_offsets.
  std::vector<int> multi_hot_columns;
  // The most ids one multi-hot field may hold (1 to 2^20); more is a
  // malformed line.
  int64_t max_ids_per_field = 1024;
};

// Reads a Criteo TSV file example by example. Thread-compatible: one thread
// at a time. Owns its open file.
class CriteoReader {
 public:
  // Opens `path`; gzip is detected by the file's first two bytes (1f 8b).
  // Errors: NOT_FOUND (no such file), PERMISSION_DENIED, INVALID_ARGUMENT
  // (a directory; options out of range), INTERNAL (any other open error),
  // each naming the path.
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Create(
      const std::string& path, const CriteoReaderOptions& options);

  ~CriteoReader();
  CriteoReader(const CriteoReader&) = delete;
  CriteoReader& operator=(const CriteoReader&) = delete;

  // Replaces *batch with the next up to `max_examples` (>= 1) examples.
  // Returns true when it holds at least one, false at the end of the data
  // (the batch then empty). Empty lines (and a final "\r" of each line) are
  // ignored.
  // Errors (the batch is then empty):
  //   INVALID_ARGUMENT: max_examples < 1 (nothing read);
  // and these, after which every later call returns the same error until
  // Rewind():
  //   INVALID_ARGUMENT: under kStop, a malformed line, as
  //     "path:line: column N: <what>" (a label not 0 or 1, an integer that
  //     is not decimal or out of int64 range, an id that is not hex or has
  //     more than 16 digits; in a multi-hot field, an empty id in the list
  //     or more than max_ids_per_field ids, naming the id's place) or "path:line: expected 40 tab-separated
  //     columns, got M" or "path:line: longer than max_line_bytes (B)";
  //   DATA_LOSS: a read error, or corrupt or truncated gzip data.
  absl::StatusOr<bool> Next(CriteoBatch* batch, int64_t max_examples);

  // Reopens the file for another pass: the next example is the first, and
  // the counters below and any error are reset. Errors as Create (the file
  // may have gone).
  absl::Status Rewind();

  const std::string& path() const { return path_; }
  // Lines consumed in this pass (including empty and skipped ones): the
  // number of the last line read.
  int64_t lines_read() const { return line_number_; }
  // Examples returned in this pass.
  int64_t examples_read() const { return examples_read_; }
  // Malformed lines skipped in this pass (kSkip).
  int64_t lines_skipped() const { return lines_skipped_; }
  // The first options.max_kept_errors of their messages, in file order,
  // each as kStop would have reported it.
  const std::vector<std::string>& skipped_errors() const {
    return skipped_errors_;
  }

 private:
  class Input;

  CriteoReader(std::string path, const CriteoReaderOptions& options,
               std::unique_ptr<Input> input);

  // The next line into *line (valid until the next call); false at the end.
  // A line over max_line_bytes is returned truncated with *too_long set.
  absl::StatusOr<bool> NextLine(absl::string_view* line, bool* too_long);
  // Parses one line into the end of *batch; on error leaves *batch as it
  // was and returns the message (without the "path:line: " prefix).
  bool ParseLine(absl::string_view line, CriteoBatch* batch,
                 std::string* error) const;

  std::string path_;
  CriteoReaderOptions options_;
  // options_.multi_hot_columns as a mask, and whether any is set.
  std::array<bool, kCriteoCategoricalColumns> multi_hot_{};
  bool any_multi_hot_ = false;
  std::unique_ptr<Input> input_;
  std::string buffer_;    // bytes read but not yet consumed
  size_t buffer_pos_ = 0;
  bool eof_ = false;
  absl::Status error_;    // sticky until Rewind
  int64_t line_number_ = 0;
  int64_t examples_read_ = 0;
  int64_t lines_skipped_ = 0;
  std::vector<std::string> skipped_errors_;
};

// Reads the first `limit` examples of `path` (0: all) into one batch, for
// a worker that serves any batch of an epoch (about 260 bytes an example).
// *skipped (when set) gets the lines skipped under kSkip. Errors: those of
// CriteoReader.
absl::StatusOr<CriteoBatch> LoadCriteo(const std::string& path,
                                       const CriteoReaderOptions& options,
                                       int64_t limit,
                                       int64_t* skipped = nullptr);

// Counts the examples of `path` (at most `limit`, 0: all) by reading it
// through. Errors: those of CriteoReader.
absl::StatusOr<int64_t> CountCriteoExamples(const std::string& path,
                                            const CriteoReaderOptions& options,
                                            int64_t limit);

}  // namespace strata

#endif  // STRATA_WORKER_CRITEO_DATA_H_

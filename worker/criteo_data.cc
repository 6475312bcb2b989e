// The streaming Criteo TSV reader (worker/criteo_data.h).
#include "worker/criteo_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace strata {
namespace {

absl::Status OpenError(const std::string& path, int err) {
  const std::string what = absl::StrCat(path, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(what);
  if (err == EACCES) return absl::PermissionDeniedError(what);
  if (err == EISDIR) return absl::InvalidArgumentError(what);
  return absl::InternalError(what);
}

// A field as quoted in an error message: C-escaped, at most 40 bytes shown.
std::string Quoted(absl::string_view field) {
  constexpr size_t kShown = 40;
  if (field.size() <= kShown) {
    return absl::StrCat("'", absl::CHexEscape(field), "'");
  }
  return absl::StrCat("'", absl::CHexEscape(field.substr(0, kShown)),
                      "...' (", field.size(), " bytes)");
}

// Parses a decimal int64 with an optional leading '-'. On failure *error
// says why.
bool ParseInteger(absl::string_view field, int64_t* value,
                  std::string* error) {
  absl::string_view digits = field;
  const bool negative = !digits.empty() && digits.front() == '-';
  if (negative) digits.remove_prefix(1);
  if (digits.empty()) {
    *error = absl::StrCat("integer ", Quoted(field), " is not a decimal integer");
    return false;
  }
  // The magnitude, up to 2^63 for a negative value, 2^63 - 1 otherwise.
  const uint64_t limit =
      uint64_t{std::numeric_limits<int64_t>::max()} + (negative ? 1 : 0);
  uint64_t magnitude = 0;
  bool overflow = false;
  for (char c : digits) {
    if (c < '0' || c > '9') {
      *error =
          absl::StrCat("integer ", Quoted(field), " is not a decimal integer");
      return false;
    }
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (magnitude > (limit - digit) / 10) overflow = true;
    if (!overflow) magnitude = magnitude * 10 + digit;
  }
  if (overflow) {
    *error = absl::StrCat("integer ", Quoted(field),
                          " is out of int64 range");
    return false;
  }
  *value = negative ? static_cast<int64_t>(0 - magnitude)
                    : static_cast<int64_t>(magnitude);
  return true;
}

// Parses 1 to 16 hex digits (either case) as uint64 reinterpreted as int64.
bool ParseHexId(absl::string_view field, int64_t* value, std::string* error) {
  uint64_t id = 0;
  for (char c : field) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      *error = absl::StrCat("categorical id ", Quoted(field),
                            " is not hexadecimal");
      return false;
    }
    id = (id << 4) | static_cast<uint64_t>(digit);
  }
  if (field.size() > 16) {
    *error = absl::StrCat("categorical id ", Quoted(field), " has ",
                          field.size(), " hex digits, more than 16");
    return false;
  }
  *value = static_cast<int64_t>(id);
  return true;
}

}  // namespace

void CriteoBatch::Clear() {
  size = 0;
  labels.clear();
  dense.clear();
  categorical.clear();
  categorical_offsets.clear();
}

CategoricalIds CriteoBatch::Categorical(int64_t first) const {
  CategoricalIds view;
  if (categorical_offsets.empty()) {
    view.ids = categorical.data() + first * kCriteoCategoricalColumns;
  } else {
    view.ids = categorical.data();
    view.offsets =
        categorical_offsets.data() + first * kCriteoCategoricalColumns;
  }
  return view;
}

// A file read sequentially, gunzipped when it starts with 1f 8b.
class CriteoReader::Input {
 public:
  static absl::StatusOr<std::unique_ptr<Input>> Open(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return OpenError(path, errno);
    struct stat st;
    if (::fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
      std::fclose(f);
      return OpenError(path, EISDIR);
    }
    unsigned char magic[2] = {0, 0};
    const size_t got = std::fread(magic, 1, 2, f);
    const bool gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (!gzip) {
      std::rewind(f);
      return std::unique_ptr<Input>(new Input(path, f, nullptr));
    }
    std::fclose(f);
    gzFile gz = gzopen(path.c_str(), "rb");
    if (gz == nullptr) return OpenError(path, errno == 0 ? EIO : errno);
    gzbuffer(gz, 1 << 17);
    return std::unique_ptr<Input>(new Input(path, nullptr, gz));
  }

  ~Input() {
    if (file_ != nullptr) std::fclose(file_);
    if (gz_ != nullptr) gzclose(gz_);
  }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  // Reads up to `n` (< 2^30) bytes; 0 only at the end of the data.
  // DATA_LOSS on a read error or corrupt or truncated gzip data.
  absl::StatusOr<size_t> Read(char* out, size_t n) {
    if (file_ != nullptr) {
      const size_t got = std::fread(out, 1, n, file_);
      if (got == 0 && std::ferror(file_)) {
        return absl::DataLossError(
            absl::StrCat(path_, ": read error: ", std::strerror(errno)));
      }
      return got;
    }
    const int got = gzread(gz_, out, static_cast<unsigned>(n));
    int errnum = Z_OK;
    const char* msg = gzerror(gz_, &errnum);
    if (got < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
      return absl::DataLossError(
          absl::StrCat(path_, ": corrupt or truncated gzip data: ",
                       msg == nullptr ? "unknown error" : msg));
    }
    return static_cast<size_t>(got);
  }

 private:
  Input(std::string path, FILE* file, gzFile gz)
      : path_(std::move(path)), file_(file), gz_(gz) {}

  std::string path_;
  FILE* file_;
  gzFile gz_;
};

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Create(
    const std::string& path, const CriteoReaderOptions& options) {
  std::array<bool, kCriteoCategoricalColumns> seen{};
  for (int c : options.multi_hot_columns) {
    if (c < 0 || c >= kCriteoCategoricalColumns || seen[c]) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": multi_hot_columns: ", c,
          c < 0 || c >= kCriteoCategoricalColumns
              ? " is not a categorical column (0 to 25)"
              : " is listed twice"));
    }
    seen[c] = true;
  }
  if (options.max_ids_per_field < 1 ||
      options.max_ids_per_field > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": max_ids_per_field must be 1 to 2^20, got ",
                     options.max_ids_per_field));
  }
  if (options.max_line_bytes < 1024 || options.read_buffer_bytes < 1 ||
      options.read_buffer_bytes > (int64_t{1} << 30) ||
      options.max_kept_errors < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": CriteoReaderOptions out of range: max_line_bytes ",
        options.max_line_bytes, " (>= 1024), read_buffer_bytes ",
        options.read_buffer_bytes, " (1 to 2^30), max_kept_errors ",
        options.max_kept_errors, " (>= 0)"));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Input> input, Input::Open(path));
  return std::unique_ptr<CriteoReader>(
      new CriteoReader(path, options, std::move(input)));
}

CriteoReader::CriteoReader(std::string path,
                           const CriteoReaderOptions& options,
                           std::unique_ptr<Input> input)
    : path_(std::move(path)), options_(options), input_(std::move(input)) {
  for (int c : options_.multi_hot_columns) {
    multi_hot_[static_cast<size_t>(c)] = true;
    any_multi_hot_ = true;
  }
}

CriteoReader::~CriteoReader() = default;

absl::Status CriteoReader::Rewind() {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Input> input, Input::Open(path_));
  input_ = std::move(input);
  buffer_.clear();
  buffer_pos_ = 0;
  eof_ = false;
  error_ = absl::OkStatus();
  line_number_ = 0;
  examples_read_ = 0;
  lines_skipped_ = 0;
  skipped_errors_.clear();
  return absl::OkStatus();
}

absl::StatusOr<bool> CriteoReader::NextLine(absl::string_view* line,
                                            bool* too_long) {
  *too_long = false;
  const size_t max_line = static_cast<size_t>(options_.max_line_bytes);
  size_t scan_from = buffer_pos_;
  while (true) {
    const size_t newline = buffer_.find('\n', scan_from);
    if (newline != std::string::npos) {
      ++line_number_;
      if (*too_long) {
        *line = absl::string_view();
      } else {
        *line = absl::string_view(buffer_).substr(buffer_pos_,
                                                  newline - buffer_pos_);
        *too_long = line->size() > max_line;
      }
      buffer_pos_ = newline + 1;
      return true;
    }
    if (!*too_long && buffer_.size() - buffer_pos_ > max_line) {
      // Drop what we have of this line and look for its end.
      *too_long = true;
    }
    if (*too_long) {
      buffer_.clear();
      buffer_pos_ = 0;
    }
    if (eof_) {
      if (buffer_pos_ == buffer_.size() && !*too_long) return false;
      ++line_number_;
      *line = *too_long ? absl::string_view()
                        : absl::string_view(buffer_).substr(buffer_pos_);
      buffer_pos_ = buffer_.size();
      return true;
    }
    // Keep the unconsumed tail, then append a chunk.
    buffer_.erase(0, buffer_pos_);
    buffer_pos_ = 0;
    scan_from = buffer_.size();
    const size_t want = static_cast<size_t>(options_.read_buffer_bytes);
    buffer_.resize(scan_from + want);
    absl::StatusOr<size_t> got = input_->Read(&buffer_[scan_from], want);
    if (!got.ok()) {
      buffer_.resize(scan_from);
      return got.status();
    }
    buffer_.resize(scan_from + *got);
    if (*got == 0) eof_ = true;
  }
}

bool CriteoReader::ParseLine(absl::string_view line, CriteoBatch* batch,
                             std::string* error) const {
  std::array<absl::string_view, kCriteoColumns> fields;
  size_t count = 0;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    const size_t end = tab == absl::string_view::npos ? line.size() : tab;
    if (count < fields.size()) fields[count] = line.substr(start, end - start);
    ++count;
    if (tab == absl::string_view::npos) break;
    start = tab + 1;
  }
  if (count != fields.size()) {
    *error = absl::StrCat("expected ", kCriteoColumns,
                          " tab-separated columns, got ", count);
    return false;
  }
  float label;
  if (fields[0] == "0") {
    label = 0.0f;
  } else if (fields[0] == "1") {
    label = 1.0f;
  } else {
    *error = absl::StrCat("column 0: label ", Quoted(fields[0]),
                          " is not 0 or 1");
    return false;
  }
  std::array<float, kCriteoDenseColumns> dense;
  for (int i = 0; i < kCriteoDenseColumns; ++i) {
    const int column = 1 + i;
    dense[i] = 0.0f;
    if (fields[column].empty()) continue;
    int64_t x;
    std::string why;
    if (!ParseInteger(fields[column], &x, &why)) {
      *error = absl::StrCat("column ", column, ": ", why);
      return false;
    }
    if (x > 0) dense[i] = static_cast<float>(std::log1p(static_cast<double>(x)));
  }
  if (any_multi_hot_) {
    // Every field's ids one after another, then the offsets.
    std::vector<int64_t> values;
    std::array<int64_t, kCriteoCategoricalColumns> counts;
    for (int i = 0; i < kCriteoCategoricalColumns; ++i) {
      const int column = 1 + kCriteoDenseColumns + i;
      const absl::string_view field = fields[column];
      if (!multi_hot_[i]) {
        int64_t id = options_.missing_id;
        std::string why;
        if (!field.empty() && !ParseHexId(field, &id, &why)) {
          *error = absl::StrCat("column ", column, ": ", why);
          return false;
        }
        values.push_back(id);
        counts[i] = 1;
        continue;
      }
      counts[i] = 0;
      if (field.empty()) continue;  // no id
      size_t from = 0;
      while (true) {
        const size_t comma = field.find(',', from);
        const absl::string_view token = field.substr(
            from, comma == absl::string_view::npos ? absl::string_view::npos
                                                   : comma - from);
        ++counts[i];
        if (counts[i] > options_.max_ids_per_field) {
          *error = absl::StrCat("column ", column, ": more than ",
                                options_.max_ids_per_field,
                                " ids (max_ids_per_field)");
          return false;
        }
        int64_t id = 0;
        std::string why;
        if (token.empty()) {
          *error = absl::StrCat("column ", column, ": id ", counts[i],
                                " of the list is empty");
          return false;
        }
        if (!ParseHexId(token, &id, &why)) {
          *error = absl::StrCat("column ", column, ": id ", counts[i],
                                " of the list: ", why);
          return false;
        }
        values.push_back(id);
        if (comma == absl::string_view::npos) break;
        from = comma + 1;
      }
    }
    batch->labels.push_back(label);
    batch->dense.insert(batch->dense.end(), dense.begin(), dense.end());
    if (batch->categorical_offsets.empty()) {
      batch->categorical_offsets.push_back(0);
    }
    for (int i = 0; i < kCriteoCategoricalColumns; ++i) {
      batch->categorical_offsets.push_back(batch->categorical_offsets.back() +
                                           counts[i]);
    }
    batch->categorical.insert(batch->categorical.end(), values.begin(),
                              values.end());
    ++batch->size;
    return true;
  }
  std::array<int64_t, kCriteoCategoricalColumns> ids;
  for (int i = 0; i < kCriteoCategoricalColumns; ++i) {
    const int column = 1 + kCriteoDenseColumns + i;
    ids[i] = options_.missing_id;
    if (fields[column].empty()) continue;
    std::string why;
    if (!ParseHexId(fields[column], &ids[i], &why)) {
      *error = absl::StrCat("column ", column, ": ", why);
      return false;
    }
  }
  batch->labels.push_back(label);
  batch->dense.insert(batch->dense.end(), dense.begin(), dense.end());
  batch->categorical.insert(batch->categorical.end(), ids.begin(), ids.end());
  ++batch->size;
  return true;
}

absl::StatusOr<bool> CriteoReader::Next(CriteoBatch* batch,
                                        int64_t max_examples) {
  batch->Clear();
  if (max_examples < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": max_examples must be >= 1, got ", max_examples));
  }
  if (!error_.ok()) return error_;
  const size_t reserve =
      static_cast<size_t>(std::min<int64_t>(max_examples, 1 << 16));
  batch->labels.reserve(reserve);
  batch->dense.reserve(reserve * kCriteoDenseColumns);
  batch->categorical.reserve(reserve * kCriteoCategoricalColumns);
  while (batch->size < max_examples) {
    absl::string_view line;
    bool too_long = false;
    absl::StatusOr<bool> more = NextLine(&line, &too_long);
    if (!more.ok()) {
      error_ = more.status();
      batch->Clear();
      return error_;
    }
    if (!*more) break;
    std::string error;
    if (too_long) {
      error = absl::StrCat("longer than max_line_bytes (",
                           options_.max_line_bytes, ")");
    } else {
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      if (ParseLine(line, batch, &error)) continue;
    }
    const std::string message =
        absl::StrCat(path_, ":", line_number_, ": ", error);
    if (options_.bad_line_policy == BadLinePolicy::kStop) {
      error_ = absl::InvalidArgumentError(message);
      batch->Clear();
      return error_;
    }
    ++lines_skipped_;
    if (static_cast<int64_t>(skipped_errors_.size()) <
        options_.max_kept_errors) {
      skipped_errors_.push_back(message);
    }
  }
  examples_read_ += batch->size;
  return batch->size > 0;
}

absl::StatusOr<CriteoBatch> LoadCriteo(const std::string& path,
                                       const CriteoReaderOptions& options,
                                       int64_t limit, int64_t* skipped) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
                          CriteoReader::Create(path, options));
  CriteoBatch all;
  CriteoBatch part;
  constexpr int64_t kChunk = 65536;
  while (limit <= 0 || all.size < limit) {
    const int64_t want = limit > 0 ? std::min(kChunk, limit - all.size) : kChunk;
    STRATA_ASSIGN_OR_RETURN(bool more, reader->Next(&part, want));
    if (!more) break;
    all.labels.insert(all.labels.end(), part.labels.begin(), part.labels.end());
    all.dense.insert(all.dense.end(), part.dense.begin(), part.dense.end());
    if (!part.categorical_offsets.empty()) {
      // Offsets continue from the ids already held.
      if (all.categorical_offsets.empty()) all.categorical_offsets.push_back(0);
      const int64_t base = static_cast<int64_t>(all.categorical.size());
      for (size_t i = 1; i < part.categorical_offsets.size(); ++i) {
        all.categorical_offsets.push_back(base + part.categorical_offsets[i]);
      }
    }
    all.categorical.insert(all.categorical.end(), part.categorical.begin(),
                           part.categorical.end());
    all.size += part.size;
  }
  if (skipped != nullptr) *skipped = reader->lines_skipped();
  return all;
}

absl::StatusOr<int64_t> CountCriteoExamples(const std::string& path,
                                            const CriteoReaderOptions& options,
                                            int64_t limit) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
                          CriteoReader::Create(path, options));
  CriteoBatch part;
  int64_t n = 0;
  while (limit <= 0 || n < limit) {
    STRATA_ASSIGN_OR_RETURN(bool more, reader->Next(&part, 65536));
    if (!more) break;
    n += part.size;
  }
  return limit > 0 ? std::min(n, limit) : n;
}

}  // namespace strata

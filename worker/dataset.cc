#include "worker/dataset.h"

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
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "worker/criteo_data.h"

namespace strata {
namespace {

// IDX magics: 0, 0, the element type (0x08 unsigned byte, 0x0C int32, 0x0D
// float32), the number of dimensions.
constexpr uint32_t kIdxImagesMagic = 0x00000803;        // u8, n x rows x cols
constexpr uint32_t kIdxFloatMatrixMagic = 0x00000D02;   // f32, n x features
constexpr uint32_t kIdxFloatImagesMagic = 0x00000D03;   // f32, n x rows x cols
constexpr uint32_t kIdxLabelsMagic = 0x00000801;        // u8, n
constexpr uint32_t kIdxIntLabelsMagic = 0x00000C01;     // int32, n
// Payloads are read in chunks of this size so that a corrupt header cannot
// make us allocate more than the file really holds.
constexpr size_t kReadChunk = size_t{4} << 20;

absl::Status OpenError(const std::string& path, int err) {
  const std::string what = absl::StrCat(path, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(what);
  if (err == EACCES) return absl::PermissionDeniedError(what);
  return absl::InternalError(what);
}

// `status` with its message prefixed by the job field it concerns
// ("job.data.train.images: ..."); as is when OK or `field` is empty.
absl::Status InField(const absl::Status& status, absl::string_view field) {
  if (status.ok() || field.empty()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(field, ": ", status.message()));
}

// The job fields that name one split's files, for error messages; all
// empty for a loader called with bare paths.
struct SplitFields {
  std::string split;   // "job.data.train"
  std::string images;  // "job.data.train.images"
  std::string labels;
  std::string path;
};

SplitFields FieldsOf(absl::string_view split) {
  const std::string base = absl::StrCat("job.data.", split);
  return {base, base + ".images", base + ".labels", base + ".path"};
}

// A file read sequentially, transparently gunzipped when it starts with the
// gzip magic (1f 8b). Thread-compatible.
class InputFile {
 public:
  static absl::StatusOr<std::unique_ptr<InputFile>> Open(
      const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return OpenError(path, errno);
    unsigned char magic[2] = {0, 0};
    const size_t got = std::fread(magic, 1, 2, f);
    const bool gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (!gzip) {
      std::rewind(f);
      return std::unique_ptr<InputFile>(new InputFile(path, f, nullptr));
    }
    std::fclose(f);
    gzFile gz = gzopen(path.c_str(), "rb");
    if (gz == nullptr) return OpenError(path, errno == 0 ? EIO : errno);
    gzbuffer(gz, 1 << 17);
    return std::unique_ptr<InputFile>(new InputFile(path, nullptr, gz));
  }

  ~InputFile() {
    if (file_ != nullptr) std::fclose(file_);
    if (gz_ != nullptr) gzclose(gz_);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  bool gzip() const { return gz_ != nullptr; }

  // Reads up to `n` bytes; fewer only at the end of the data. DATA_LOSS on a
  // read error or a corrupt or truncated gzip stream.
  absl::StatusOr<size_t> Read(void* buf, size_t n) {
    char* out = static_cast<char*>(buf);
    size_t total = 0;
    while (total < n) {
      if (file_ != nullptr) {
        const size_t got = std::fread(out + total, 1, n - total, file_);
        total += got;
        if (got == 0) {
          if (std::ferror(file_)) {
            return absl::DataLossError(
                absl::StrCat(path_, ": read error: ", std::strerror(errno)));
          }
          break;
        }
      } else {
        const unsigned want = static_cast<unsigned>(
            std::min<size_t>(n - total, size_t{1} << 30));
        const int got = gzread(gz_, out + total, want);
        if (got > 0) total += static_cast<size_t>(got);
        if (got < static_cast<int>(want)) {
          int errnum = Z_OK;
          const char* msg = gzerror(gz_, &errnum);
          if (got < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
            return absl::DataLossError(absl::StrCat(
                path_, ": corrupt or truncated gzip data: ",
                msg == nullptr ? "unknown error" : msg));
          }
          break;
        }
      }
    }
    return total;
  }

  // Reads everything that is left.
  absl::StatusOr<std::string> ReadAll() {
    std::string data;
    size_t used = 0;
    while (true) {
      data.resize(used + kReadChunk);
      STRATA_ASSIGN_OR_RETURN(size_t got, Read(&data[used], kReadChunk));
      used += got;
      if (got < kReadChunk) break;
    }
    data.resize(used);
    return data;
  }

 private:
  InputFile(std::string path, FILE* file, gzFile gz)
      : path_(std::move(path)), file_(file), gz_(gz) {}

  std::string path_;
  FILE* file_;
  gzFile gz_;
};

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// An opened IDX file positioned after its header.
struct IdxFile {
  std::unique_ptr<InputFile> file;
  uint32_t magic = 0;
  std::vector<int64_t> dims;
};

enum class IdxKind { kImages, kLabels, kAny };

bool IsImages(uint32_t magic) {
  return magic == kIdxImagesMagic || magic == kIdxFloatMatrixMagic ||
         magic == kIdxFloatImagesMagic;
}
bool IsLabels(uint32_t magic) {
  return magic == kIdxLabelsMagic || magic == kIdxIntLabelsMagic;
}

std::string Expected(IdxKind kind) {
  switch (kind) {
    case IdxKind::kImages:
      return "IDX images: 0x00000803 (unsigned bytes), 0x00000D02 or "
             "0x00000D03 (float32)";
    case IdxKind::kLabels:
      return "IDX labels: 0x00000801 (unsigned bytes) or 0x00000C01 (int32)";
    case IdxKind::kAny:
      break;
  }
  return "IDX images (0x00000803, 0x00000D02, 0x00000D03) or labels "
         "(0x00000801, 0x00000C01)";
}

// Opens `path` and reads its header, which must be of `kind`.
absl::StatusOr<IdxFile> OpenIdx(const std::string& path, IdxKind kind) {
  IdxFile idx;
  STRATA_ASSIGN_OR_RETURN(idx.file, InputFile::Open(path));
  unsigned char header[16];
  STRATA_ASSIGN_OR_RETURN(size_t got, idx.file->Read(header, 4));
  if (got < 4) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated IDX header: ", got, " of 4 magic bytes"));
  }
  idx.magic = BigEndian32(header);
  const bool accepted = kind == IdxKind::kImages   ? IsImages(idx.magic)
                        : kind == IdxKind::kLabels ? IsLabels(idx.magic)
                                                   : IsImages(idx.magic) ||
                                                         IsLabels(idx.magic);
  if (!accepted) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad magic 0x%08x; expected %s", path, idx.magic,
        Expected(kind)));
  }
  const size_t ndims = idx.magic & 0xff;
  STRATA_ASSIGN_OR_RETURN(got, idx.file->Read(header + 4, 4 * ndims));
  if (got < 4 * ndims) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated IDX header: ", 4 + got, " of ",
                     4 + 4 * ndims, " bytes"));
  }
  for (size_t i = 0; i < ndims; ++i) {
    idx.dims.push_back(BigEndian32(header + 4 + 4 * i));
  }
  return idx;
}

// Reads exactly `n` bytes of payload into *out (grown chunk by chunk).
absl::Status ReadPayload(InputFile* file, const std::string& path, size_t n,
                         absl::string_view what, std::vector<uint8_t>* out) {
  out->clear();
  size_t used = 0;
  while (used < n) {
    const size_t want = std::min(kReadChunk, n - used);
    out->resize(used + want);
    STRATA_ASSIGN_OR_RETURN(size_t got, file->Read(out->data() + used, want));
    used += got;
    if (got < want) {
      return absl::DataLossError(
          absl::StrCat(path, ": truncated: the header promises ", n,
                       " bytes of ", what, " but only ", used, " follow"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNoTrailingData(InputFile* file, const std::string& path,
                                 int64_t examples) {
  char probe;
  STRATA_ASSIGN_OR_RETURN(size_t got, file->Read(&probe, 1));
  if (got != 0) {
    return absl::DataLossError(absl::StrCat(
        path, ": unexpected data after the ", examples,
        " examples the header announces"));
  }
  return absl::OkStatus();
}

absl::Status CheckScaleAndLimit(double scale, int64_t limit) {
  if (!(scale > 0) || !std::isfinite(scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale must be finite and > 0, got ", scale));
  }
  if (limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit must be >= 0 (0 = all), got ", limit));
  }
  return absl::OkStatus();
}

int NumClasses(const std::vector<int32_t>& labels) {
  int32_t max = -1;
  for (int32_t l : labels) max = std::max(max, l);
  return static_cast<int>(max) + 1;
}

// SplitMix64's finalizer.
absl::Status CheckFeatures(const JobSpec& job, const Dataset& data,
                           absl::string_view split) {
  const int64_t expected = NumElements(job.model.input_shape);
  if (data.features != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job.data.", split, ": examples have ", data.features,
        " features but job.model.input_shape ",
        ShapeString(job.model.input_shape), " needs ", expected));
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> LoadIdxFiles(const std::string& images_path,
                                     const std::string& labels_path,
                                     double scale, int64_t limit,
                                     const SplitFields& fields);

absl::StatusOr<Dataset> LoadSplit(const JobSpec& job,
                                  const DataSplitSpec& split, int64_t limit,
                                  absl::string_view name) {
  STRATA_RETURN_IF_ERROR(CheckScaleAndLimit(job.data.scale, limit));
  const SplitFields fields = FieldsOf(name);
  absl::StatusOr<Dataset> data;
  if (job.data.format == "csv") {
    data = LoadCsv(split.path, split.label_column, split.header, limit,
                   job.data.scale);
    if (!data.ok()) return InField(data.status(), fields.path);
  } else if (job.data.format == "idx") {
    data = LoadIdxFiles(split.images, split.labels, job.data.scale, limit,
                        fields);
  } else if (job.data.format == "criteo") {
    return absl::InvalidArgumentError(absl::StrCat(
        "job.data.format: criteo data is streamed from its file "
        "(worker/criteo_data.h), not loaded into a Dataset"));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("job.data.format: '", job.data.format,
                     "' is not one of idx, csv, criteo"));
  }
  if (!data.ok()) return data.status();
  STRATA_RETURN_IF_ERROR(CheckFeatures(job, *data, name));
  return data;
}

// LoadIdx with the errors of each file prefixed by its field in `fields`.
absl::StatusOr<Dataset> LoadIdxFiles(const std::string& images_path,
                                     const std::string& labels_path,
                                     double scale, int64_t limit,
                                     const SplitFields& fields) {
  STRATA_RETURN_IF_ERROR(CheckScaleAndLimit(scale, limit));
  absl::StatusOr<IdxFile> opened = OpenIdx(images_path, IdxKind::kImages);
  if (!opened.ok()) return InField(opened.status(), fields.images);
  IdxFile images = std::move(*opened);
  opened = OpenIdx(labels_path, IdxKind::kLabels);
  if (!opened.ok()) return InField(opened.status(), fields.labels);
  IdxFile labels = std::move(*opened);
  const int64_t n = images.dims[0];
  const int64_t rows = images.dims[1];
  const int64_t cols = images.dims.size() > 2 ? images.dims[2] : 1;
  if (rows == 0 || cols == 0) {
    return InField(absl::InvalidArgumentError(absl::StrCat(
                       images_path, ": images of ", rows, "x", cols,
                       " hold no pixels")),
                   fields.images);
  }
  const bool float_images = images.magic != kIdxImagesMagic;
  const bool int_labels = labels.magic == kIdxIntLabelsMagic;
  if (labels.dims[0] != n) {
    return InField(absl::InvalidArgumentError(absl::StrCat(
                       "IDX count mismatch: ", images_path, " holds ", n,
                       " images but ", labels_path, " holds ",
                       labels.dims[0], " labels")),
                   fields.split);
  }
  const int64_t take = limit > 0 ? std::min(limit, n) : n;
  const int64_t features = rows * cols;  // < 2^64: both < 2^32

  Dataset data;
  data.size = take;
  data.features = features;
  std::vector<uint8_t> bytes;
  const size_t pixel_bytes = float_images ? 4 : 1;
  STRATA_RETURN_IF_ERROR(
      InField(ReadPayload(images.file.get(), images_path,
                          static_cast<size_t>(take * features) * pixel_bytes,
                          "pixels", &bytes),
              fields.images));
  if (take == n) {
    STRATA_RETURN_IF_ERROR(InField(
        CheckNoTrailingData(images.file.get(), images_path, n),
        fields.images));
  }
  if (float_images) {
    const float inv_scale = static_cast<float>(1.0 / scale);
    data.x.resize(bytes.size() / 4);
    for (size_t i = 0; i < data.x.size(); ++i) {
      const uint32_t bits = BigEndian32(bytes.data() + 4 * i);
      float v;
      std::memcpy(&v, &bits, sizeof(v));
      if (!std::isfinite(v)) {
        return InField(
            absl::InvalidArgumentError(absl::StrCat(
                images_path, ": example ", i / static_cast<size_t>(features),
                " holds a non-finite value (", v, ")")),
            fields.images);
      }
      data.x[i] = scale == 1.0 ? v : v * inv_scale;
    }
  } else {
    std::array<float, 256> lut;
    for (int v = 0; v < 256; ++v) lut[v] = static_cast<float>(v / scale);
    data.x.resize(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) data.x[i] = lut[bytes[i]];
  }

  const size_t label_bytes = int_labels ? 4 : 1;
  STRATA_RETURN_IF_ERROR(InField(
      ReadPayload(labels.file.get(), labels_path,
                  static_cast<size_t>(take) * label_bytes, "labels", &bytes),
      fields.labels));
  if (take == n) {
    STRATA_RETURN_IF_ERROR(InField(
        CheckNoTrailingData(labels.file.get(), labels_path, n),
        fields.labels));
  }
  if (int_labels) {
    data.labels.resize(static_cast<size_t>(take));
    for (size_t i = 0; i < data.labels.size(); ++i) {
      data.labels[i] = static_cast<int32_t>(BigEndian32(bytes.data() + 4 * i));
      if (data.labels[i] < 0) {
        return InField(absl::InvalidArgumentError(absl::StrCat(
                           labels_path, ": label ", i, " is negative (",
                           data.labels[i], ")")),
                       fields.labels);
      }
    }
  } else {
    data.labels.assign(bytes.begin(), bytes.end());
  }
  data.num_classes = NumClasses(data.labels);
  return data;
}

// OK when `path` can be opened for reading and is not a directory; else
// the error of opening it, prefixed by `field`.
absl::Status CheckDataFile(const std::string& path, const std::string& field) {
  // Non-blocking: a FIFO without a writer must not hang the check.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return InField(OpenError(path, errno), field);
  struct stat st;
  const bool directory = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  ::close(fd);
  if (directory) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", path, ": ", std::strerror(EISDIR)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Dataset> LoadIdx(const std::string& images_path,
                                const std::string& labels_path, double scale,
                                int64_t limit) {
  return LoadIdxFiles(images_path, labels_path, scale, limit, SplitFields());
}

absl::Status WriteIdx(const Dataset& data, const std::string& images_path,
                      const std::string& labels_path) {
  if (data.features < 1 ||
      static_cast<int64_t>(data.x.size()) != data.size * data.features ||
      static_cast<int64_t>(data.labels.size()) != data.size ||
      data.size > int64_t{0xffffffff} || data.features > int64_t{0xffffffff}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteIdx: inconsistent dataset (", data.size, " examples of ",
        data.features, " features, ", data.x.size(), " values, ",
        data.labels.size(), " labels)"));
  }
  auto put32 = [](std::string* out, uint32_t v) {
    const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
    out->append(b, 4);
  };
  auto write = [](const std::string& path,
                  const std::string& bytes) -> absl::Status {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
    return absl::OkStatus();
  };
  std::string images;
  images.reserve(12 + data.x.size() * 4);
  put32(&images, kIdxFloatMatrixMagic);
  put32(&images, static_cast<uint32_t>(data.size));
  put32(&images, static_cast<uint32_t>(data.features));
  for (float v : data.x) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    put32(&images, bits);
  }
  STRATA_RETURN_IF_ERROR(write(images_path, images));
  std::string labels;
  labels.reserve(8 + data.labels.size() * 4);
  put32(&labels, kIdxIntLabelsMagic);
  put32(&labels, static_cast<uint32_t>(data.size));
  for (int32_t l : data.labels) put32(&labels, static_cast<uint32_t>(l));
  return write(labels_path, labels);
}

absl::StatusOr<int64_t> CountIdxExamples(const std::string& images_path) {
  STRATA_ASSIGN_OR_RETURN(IdxFile idx, OpenIdx(images_path, IdxKind::kAny));
  return idx.dims[0];
}

absl::StatusOr<Dataset> LoadCsv(const std::string& path, int64_t label_column,
                                bool header, int64_t limit, double scale) {
  STRATA_RETURN_IF_ERROR(CheckScaleAndLimit(scale, limit));
  if (label_column < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": label_column must be >= 0, got ", label_column));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> file,
                          InputFile::Open(path));
  STRATA_ASSIGN_OR_RETURN(std::string text, file->ReadAll());

  Dataset data;
  int64_t columns = -1;
  int64_t line_number = 0;
  size_t pos = 0;
  const float inv_scale = static_cast<float>(1.0 / scale);
  while (pos < text.size() && (limit == 0 || data.size < limit)) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    absl::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (header && line_number == 1) continue;
    if (absl::StripAsciiWhitespace(line).empty()) continue;

    const std::string where = absl::StrCat(path, ":", line_number);
    int64_t column = 0;
    size_t start = 0;
    while (true) {
      size_t comma = line.find(',', start);
      const bool last = comma == absl::string_view::npos;
      if (last) comma = line.size();
      absl::string_view field =
          absl::StripAsciiWhitespace(line.substr(start, comma - start));
      if (column == label_column) {
        double label = 0;
        if (!absl::SimpleAtod(field, &label) || label < 0 ||
            label != std::trunc(label) ||
            label > std::numeric_limits<int32_t>::max()) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": column ", column, ": label '", field,
              "' is not a non-negative integer"));
        }
        data.labels.push_back(static_cast<int32_t>(label));
      } else {
        float value = 0;
        if (!absl::SimpleAtof(field, &value) || !std::isfinite(value)) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": column ", column, ": '", field,
                           "' is not a finite number"));
        }
        data.x.push_back(value * inv_scale);
      }
      ++column;
      if (last) break;
      start = comma + 1;
    }
    if (columns < 0) {
      columns = column;
      if (label_column >= columns) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": label_column ", label_column,
                         " is out of range: the row has ", columns,
                         " columns"));
      }
    } else if (column != columns) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", column, " columns, but the first row has ",
                       columns));
    }
    ++data.size;
  }
  data.features = columns < 0 ? 0 : columns - 1;
  data.num_classes = NumClasses(data.labels);
  return data;
}

absl::StatusOr<Dataset> LoadTrain(const JobSpec& job) {
  return LoadSplit(job, job.data.train, job.data.limit_train, "train");
}

absl::StatusOr<Dataset> LoadTest(const JobSpec& job) {
  if (!job.data.has_test) {
    return absl::FailedPreconditionError("the job has no data.test");
  }
  return LoadSplit(job, job.data.test, job.data.limit_test, "test");
}

CriteoReaderOptions CriteoOptionsFor(const JobSpec& job) {
  CriteoReaderOptions options;
  options.bad_line_policy = job.data.bad_lines == "skip"
                                ? BadLinePolicy::kSkip
                                : BadLinePolicy::kStop;
  options.multi_hot_columns.assign(job.data.multi_hot_columns.begin(),
                                   job.data.multi_hot_columns.end());
  options.max_ids_per_field = job.data.max_ids_per_field;
  return options;
}

absl::StatusOr<int64_t> CountTrainExamples(const JobSpec& job) {
  if (job.data.format == "criteo") {
    absl::StatusOr<int64_t> n = CountCriteoExamples(
        job.data.train.path, CriteoOptionsFor(job), job.data.limit_train);
    if (!n.ok()) return InField(n.status(), FieldsOf("train").path);
    return *n;
  }
  if (job.data.format == "idx") {
    absl::StatusOr<int64_t> n = CountIdxExamples(job.data.train.images);
    if (!n.ok()) return InField(n.status(), FieldsOf("train").images);
    return job.data.limit_train > 0 ? std::min(*n, job.data.limit_train) : *n;
  }
  STRATA_ASSIGN_OR_RETURN(Dataset data, LoadTrain(job));
  return data.size;
}

absl::Status CheckDataFiles(const JobSpec& job) {
  std::vector<std::pair<const DataSplitSpec*, SplitFields>> splits = {
      {&job.data.train, FieldsOf("train")}};
  if (job.data.has_test) splits.push_back({&job.data.test, FieldsOf("test")});
  for (const auto& [split, fields] : splits) {
    if (job.data.format == "idx") {
      STRATA_RETURN_IF_ERROR(CheckDataFile(split->images, fields.images));
      STRATA_RETURN_IF_ERROR(CheckDataFile(split->labels, fields.labels));
    } else if (job.data.format == "csv" || job.data.format == "criteo") {
      STRATA_RETURN_IF_ERROR(CheckDataFile(split->path, fields.path));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("job.data.format: '", job.data.format,
                       "' is not one of idx, csv, criteo"));
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t shuffle_seed,
                                      int epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  std::mt19937_64 rng(
      Mix64(shuffle_seed ^ Mix64(static_cast<uint64_t>(epoch) + 1)));
  for (int64_t i = n - 1; i > 0; --i) {
    // Multiply-shift maps 64 random bits onto [0, i]; the engine's output
    // sequence is fixed by the standard, so this is platform independent.
    const uint64_t j = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(rng()) * static_cast<uint64_t>(i + 1))
        >> 64);
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

int64_t StepsPerEpoch(int64_t n, int64_t batch) {
  if (n <= 0 || batch <= 0) return 0;
  return (n + batch - 1) / batch;
}

void GatherBatch(const Dataset& data, const std::vector<int64_t>& perm,
                 int64_t batch_index, int64_t batch_size,
                 std::vector<float>* x, std::vector<int32_t>* y) {
  const int64_t n = static_cast<int64_t>(perm.size());
  if (batch_index < 0 || batch_size <= 0 || batch_index * batch_size >= n) {
    x->clear();
    y->clear();
    return;
  }
  const int64_t begin = batch_index * batch_size;
  const int64_t end = std::min(n, begin + batch_size);
  const int64_t f = data.features;
  x->resize(static_cast<size_t>((end - begin) * f));
  y->resize(static_cast<size_t>(end - begin));
  int64_t row = 0;
  for (int64_t k = begin; k < end; ++k) {
    const int64_t i = perm[k];
    if (i < 0 || i >= data.size) continue;
    std::memcpy(x->data() + row * f, data.x.data() + i * f,
                static_cast<size_t>(f) * sizeof(float));
    (*y)[row] = data.labels[i];
    ++row;
  }
  x->resize(static_cast<size_t>(row * f));
  y->resize(static_cast<size_t>(row));
}

}  // namespace strata

// Datasets: sources, loading and caching, and the job's "data" object.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "sdk/internal.h"
#include "sdk/strata.h"
#include "worker/dataset.h"

namespace strata::sdk {
namespace {

using Kind = Dataset::Source::Kind;

// Checks and limits in-memory arrays.
absl::StatusOr<::strata::Dataset> LoadArrays(const ::strata::Dataset& arrays,
                                             int64_t limit) {
  if (arrays.features < 0 || (arrays.features == 0 && arrays.size > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FromArrays: features must be >= 1, got ", arrays.features));
  }
  if (static_cast<int64_t>(arrays.x.size()) != arrays.size * arrays.features) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FromArrays: ", arrays.size, " labels of ", arrays.features,
        " features need ", arrays.size * arrays.features, " values, got ",
        arrays.x.size()));
  }
  for (int64_t i = 0; i < arrays.size; ++i) {
    if (arrays.labels[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FromArrays: label ", i, " is negative (", arrays.labels[i], ")"));
    }
  }
  ::strata::Dataset out;
  out.size = limit > 0 ? std::min(limit, arrays.size) : arrays.size;
  out.features = arrays.features;
  out.x.assign(arrays.x.begin(), arrays.x.begin() + out.size * out.features);
  out.labels.assign(arrays.labels.begin(), arrays.labels.begin() + out.size);
  for (int32_t label : out.labels) {
    out.num_classes = std::max(out.num_classes, label + 1);
  }
  return out;
}

nlohmann::json SplitJson(const Dataset::Source& s) {
  if (s.kind == Kind::kIdx) {
    return {{"images", s.images}, {"labels", s.labels}};
  }
  if (s.kind == Kind::kCriteo) return {{"path", s.path}};
  return {{"path", s.path}, {"label_column", s.label_column},
          {"header", s.header}};
}

absl::Status CheckForJob(const Dataset& d, absl::string_view what) {
  const Dataset::Source& s = internal::DatasetAccess::source(d);
  if (s.kind == Kind::kArrays) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": in-memory datasets (datasets::FromArrays) cannot be sent to "
              "a cluster; use datasets::Idx or datasets::Csv files"));
  }
  if (internal::DatasetAccess::take(d) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": Take(0) selects no examples"));
  }
  if (s.kind == Kind::kCriteo && internal::DatasetAccess::take(d) > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": Take() applies to datasets loaded whole; a criteo file is "
              "streamed as it is (write a shorter one, e.g. strata datagen "
              "--rows N)"));
  }
  return absl::OkStatus();
}

std::shared_ptr<const Dataset::Source> EmptySource() {
  auto source = std::make_shared<Dataset::Source>();
  source->kind = Kind::kArrays;
  source->arrays = std::make_shared<const ::strata::Dataset>();
  return source;
}

const char* FormatName(Kind kind) {
  switch (kind) {
    case Kind::kIdx:
      return "idx";
    case Kind::kCsv:
      return "csv";
    case Kind::kArrays:
      return "in-memory";
    case Kind::kCriteo:
      return "criteo";
  }
  return "unknown";
}

}  // namespace

Dataset::Dataset() : Dataset(EmptySource(), -1) {}

Dataset::Dataset(std::shared_ptr<const Source> source, int64_t take)
    : source_(std::move(source)),
      take_(take),
      cache_(std::make_shared<Cache>()) {}

Dataset Dataset::Take(int64_t n) const {
  if (n < 0) return *this;
  return Dataset(source_, take_ < 0 ? n : std::min(take_, n));
}

bool Dataset::in_memory() const { return source_->kind == Kind::kArrays; }

std::string Dataset::DebugString() const {
  const Source& s = *source_;
  std::string out;
  switch (s.kind) {
    case Kind::kIdx:
      out = absl::StrCat("idx(", s.images, ", ", s.labels, ")");
      break;
    case Kind::kCsv:
      out = absl::StrCat("csv(", s.path, ", label column ", s.label_column,
                         s.header ? ", header" : "", ")");
      break;
    case Kind::kArrays:
      out = absl::StrCat("arrays(", s.arrays->size, " examples of ",
                         s.arrays->features, " features)");
      break;
    case Kind::kCriteo:
      out = absl::StrCat("criteo(", s.path, ", bad lines: ", s.bad_lines, ")");
      break;
  }
  if (s.scale != 1.0) absl::StrAppend(&out, ", scale ", s.scale);
  if (take_ >= 0) absl::StrAppend(&out, ", take ", take_);
  return out;
}

absl::StatusOr<std::shared_ptr<const ::strata::Dataset>> Dataset::Load()
    const {
  if (take_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(DebugString(), ": Take(0) selects no examples"));
  }
  absl::MutexLock lock(&cache_->mu);
  if (cache_->data != nullptr) return cache_->data;
  const int64_t limit = take_ < 0 ? 0 : take_;
  const Source& s = *source_;
  ::strata::Dataset loaded;
  switch (s.kind) {
    case Kind::kIdx: {
      STRATA_ASSIGN_OR_RETURN(loaded,
                              LoadIdx(s.images, s.labels, s.scale, limit));
      break;
    }
    case Kind::kCsv: {
      STRATA_ASSIGN_OR_RETURN(
          loaded, LoadCsv(s.path, s.label_column, s.header, limit, s.scale));
      break;
    }
    case Kind::kArrays: {
      STRATA_ASSIGN_OR_RETURN(loaded, LoadArrays(*s.arrays, limit));
      break;
    }
    case Kind::kCriteo:
      return absl::InvalidArgumentError(absl::StrCat(
          DebugString(),
          ": criteo files are streamed by models with embeddings "
          "(Sequential(Inputs, layers)); they have no dense in-memory form"));
  }
  cache_->data = std::make_shared<const ::strata::Dataset>(std::move(loaded));
  return cache_->data;
}

namespace datasets {

TrainTest FashionMnist(const std::string& dir) {
  return {Idx(dir + "/train-images-idx3-ubyte.gz",
              dir + "/train-labels-idx1-ubyte.gz", 255.0),
          Idx(dir + "/t10k-images-idx3-ubyte.gz",
              dir + "/t10k-labels-idx1-ubyte.gz", 255.0)};
}

Dataset Idx(std::string images, std::string labels, double scale) {
  auto source = std::make_shared<Dataset::Source>();
  source->kind = Kind::kIdx;
  source->images = std::move(images);
  source->labels = std::move(labels);
  source->scale = scale;
  return internal::DatasetAccess::Make(std::move(source));
}

Dataset Csv(std::string path, int64_t label_column, bool header,
            double scale) {
  auto source = std::make_shared<Dataset::Source>();
  source->kind = Kind::kCsv;
  source->path = std::move(path);
  source->label_column = label_column;
  source->header = header;
  source->scale = scale;
  return internal::DatasetAccess::Make(std::move(source));
}

Dataset Criteo(std::string path, std::string bad_lines,
               std::vector<int> multi_hot_columns) {
  auto source = std::make_shared<Dataset::Source>();
  source->kind = Kind::kCriteo;
  source->path = std::move(path);
  source->bad_lines = std::move(bad_lines);
  source->multi_hot_columns = std::move(multi_hot_columns);
  return internal::DatasetAccess::Make(std::move(source));
}

absl::StatusOr<Dataset> FromIds(const std::vector<int64_t>& ids,
                                int64_t columns,
                                const std::vector<int32_t>& labels, bool bag,
                                const std::string& dir) {
  const int64_t max_columns =
      bag ? int64_t{1} << 20 : int64_t{kCriteoCategoricalColumns};
  if (columns < 1 || columns > max_columns) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FromIds: columns must be in [1, ", max_columns, "] ",
        bag ? "(the ids of one multi-hot field)"
            : "(one criteo categorical column each)",
        ", got ", columns));
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  if (static_cast<int64_t>(ids.size()) != n * columns) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FromIds: ", n, " labels of ", columns, " ids need ", n * columns,
        " ids, got ", ids.size()));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] != 0 && labels[i] != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FromIds: label ", i, " is ", labels[i], "; labels must be 0 or 1"));
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FromIds: id [", i / columns, ", ", i % columns, "] is negative (",
          ids[i], ")"));
    }
  }
  std::error_code ec;
  const std::filesystem::path base =
      dir.empty() ? std::filesystem::temp_directory_path(ec)
                  : std::filesystem::path(dir);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("FromIds: no temporary directory: ", ec.message()));
  }
  std::string path = (base / "strata-ids-XXXXXX.tsv").string();
  const int fd = mkstemps(path.data(), 4);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "FromIds: cannot create a file in ", base.string(), ": ",
        std::strerror(errno)));
  }
  // Removed with the last copy of the dataset (and now, on failure).
  auto owned = std::shared_ptr<const std::string>(
      new std::string(path), [](const std::string* p) {
        std::remove(p->c_str());
        delete p;
      });
  FILE* f = fdopen(fd, "w");
  if (f == nullptr) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("FromIds: ", path, ": ", std::strerror(errno)));
  }
  // label, 13 empty integer fields, then the 26 categorical fields, each
  // line within the reader's default bound.
  const int64_t kMaxLineBytes = CriteoReaderOptions().max_line_bytes;
  std::string line;
  char hex[17];
  bool ok = true;
  for (int64_t i = 0; i < n && ok; ++i) {
    line.assign(1, labels[i] == 1 ? '1' : '0');
    line.append(kCriteoDenseColumns, '\t');
    const int64_t* row = ids.data() + i * columns;
    for (int64_t c = 0; c < columns; ++c) {
      line.push_back(bag && c > 0 ? ',' : '\t');
      const int len = std::snprintf(hex, sizeof(hex), "%llx",
                                    static_cast<unsigned long long>(row[c]));
      line.append(hex, static_cast<size_t>(len));
    }
    const int64_t used = bag ? 1 : columns;
    line.append(static_cast<size_t>(kCriteoCategoricalColumns - used), '\t');
    if (static_cast<int64_t>(line.size()) > kMaxLineBytes) {
      std::fclose(f);
      return absl::InvalidArgumentError(absl::StrCat(
          "FromIds: example ", i, "'s ids take ", line.size(),
          " bytes as a criteo line, more than ", kMaxLineBytes,
          "; use fewer columns"));
    }
    line.push_back('\n');
    ok = std::fwrite(line.data(), 1, line.size(), f) == line.size();
  }
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !ok) {
    return absl::UnavailableError(absl::StrCat(
        "FromIds: writing ", path, ": ",
        std::strerror(ok ? errno : write_errno)));
  }
  auto source = std::make_shared<Dataset::Source>();
  source->kind = Kind::kCriteo;
  source->path = path;
  if (bag) {
    source->multi_hot_columns = {0};
    if (columns > 1024) source->max_ids_per_field = columns;
  }
  source->owned_file = std::move(owned);
  return internal::DatasetAccess::Make(std::move(source));
}

Dataset FromArrays(std::vector<float> x, std::vector<int32_t> labels,
                   int64_t features) {
  auto arrays = std::make_shared<::strata::Dataset>();
  arrays->size = static_cast<int64_t>(labels.size());
  arrays->features = features;
  arrays->x = std::move(x);
  arrays->labels = std::move(labels);
  auto source = std::make_shared<Dataset::Source>();
  source->kind = Kind::kArrays;
  source->arrays = std::move(arrays);
  return internal::DatasetAccess::Make(std::move(source));
}

}  // namespace datasets

namespace internal {

absl::StatusOr<nlohmann::json> DataJson(const Dataset& train,
                                        const std::optional<Dataset>& test) {
  STRATA_RETURN_IF_ERROR(CheckForJob(train, "training data"));
  const Dataset::Source& tr = DatasetAccess::source(train);
  nlohmann::json data = {{"format", FormatName(tr.kind)},
                         {"train", SplitJson(tr)},
                         {"scale", tr.scale}};
  if (tr.kind == Kind::kCriteo) {
    data["bad_lines"] = tr.bad_lines;
    if (!tr.multi_hot_columns.empty()) {
      data["multi_hot_columns"] = tr.multi_hot_columns;
    }
    if (tr.max_ids_per_field > 0) {
      data["max_ids_per_field"] = tr.max_ids_per_field;
    }
  }
  if (DatasetAccess::take(train) > 0) {
    data["limit_train"] = DatasetAccess::take(train);
  }
  if (test.has_value()) {
    STRATA_RETURN_IF_ERROR(CheckForJob(*test, "validation data"));
    const Dataset::Source& te = DatasetAccess::source(*test);
    if (te.kind != tr.kind) {
      return absl::InvalidArgumentError(absl::StrCat(
          "validation data: a job holds one format for both splits; the "
          "training data is ",
          FormatName(tr.kind), ", the validation data ", FormatName(te.kind)));
    }
    if (te.scale != tr.scale) {
      return absl::InvalidArgumentError(absl::StrCat(
          "validation data: a job holds one scale for both splits; the "
          "training data has ",
          tr.scale, ", the validation data ", te.scale));
    }
    if (te.kind == Kind::kCriteo && te.bad_lines != tr.bad_lines) {
      return absl::InvalidArgumentError(absl::StrCat(
          "validation data: a job holds one bad-lines policy for both "
          "splits; the training data has ",
          tr.bad_lines, ", the validation data ", te.bad_lines));
    }
    if (te.kind == Kind::kCriteo &&
        te.multi_hot_columns != tr.multi_hot_columns) {
      return absl::InvalidArgumentError(
          "validation data: a job holds one set of multi-hot columns for "
          "both splits; the training and validation data differ");
    }
    if (te.max_ids_per_field > tr.max_ids_per_field) {
      data["max_ids_per_field"] = te.max_ids_per_field;
    }
    data["test"] = SplitJson(te);
    if (DatasetAccess::take(*test) > 0) {
      data["limit_test"] = DatasetAccess::take(*test);
    }
  }
  return data;
}

absl::StatusOr<Dataset> WriteAsIdx(const Dataset& data,
                                   const std::string& prefix) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const ::strata::Dataset> examples,
                          data.Load());
  const std::string images = prefix + "-images.idx";
  const std::string labels = prefix + "-labels.idx";
  STRATA_RETURN_IF_ERROR(::strata::WriteIdx(*examples, images, labels));
  return datasets::Idx(images, labels);
}

absl::StatusOr<std::unique_ptr<CriteoReader>> OpenCriteo(
    const Dataset& data, absl::string_view what) {
  const Dataset::Source& s = DatasetAccess::source(data);
  if (s.kind != Kind::kCriteo) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": a model with embeddings reads criteo files "
              "(datasets::Criteo), not ",
        data.DebugString()));
  }
  STRATA_RETURN_IF_ERROR(CheckForJob(data, what));
  if (s.bad_lines != "stop" && s.bad_lines != "skip") {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": bad_lines must be \"stop\" or \"skip\", got \"",
        s.bad_lines, "\""));
  }
  CriteoReaderOptions options;
  options.bad_line_policy =
      s.bad_lines == "skip" ? BadLinePolicy::kSkip : BadLinePolicy::kStop;
  options.multi_hot_columns = s.multi_hot_columns;
  if (s.max_ids_per_field > 0) options.max_ids_per_field = s.max_ids_per_field;
  return CriteoReader::Create(s.path, options);
}

absl::Status CheckFeatures(const ::strata::Dataset& data, const Model& model,
                           absl::string_view what) {
  if (data.features != model.num_features()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": examples have ", data.features, " features; the model takes ",
        model.num_features()));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace strata::sdk

#include "job/job.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "job/job_internal.h"

namespace strata {
namespace {

using nlohmann::json;
using job_internal::FootprintError;
using job_internal::FormatBytes;
using job_internal::Join;
using job_internal::Object;
using job_internal::ValidLayerName;
using job_internal::ParseModel;
using job_internal::ParseStrategy;
using job_internal::PathError;
using job_internal::Quote;
using job_internal::Show;
using job_internal::Shorten;

// Every loss name a job takes (Keras's names and aliases), and the one the
// runtime knows each by (CanonicalLoss).
constexpr std::initializer_list<const char*> kLossNames = {
    "sparse_categorical_crossentropy", "categorical_crossentropy",
    "binary_crossentropy", "mse", "mean_squared_error", "mae",
    "mean_absolute_error", "huber", "huber_loss"};

absl::Status ParseOptimizer(const json& value, OptimizerConfig* config) {
  const std::initializer_list<const char*> kTypes = {"sgd", "adam",
                                                         "adagrad", "rmsprop"};
  const std::string path = "job.optimizer";
  json object = value;
  if (value.is_string()) object = json{{"type", value}};
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(object, path));
  std::string type;
  STRATA_RETURN_IF_ERROR(o.Enum("type", true, kTypes, &type));
  STRATA_ASSIGN_OR_RETURN(config->type, ParseOptimizerType(type));
  // The fields each optimizer uses; any other is an error.
  switch (config->type) {
    case OptimizerType::kSgd:
      STRATA_RETURN_IF_ERROR(o.CheckKeys(
          {"type", "learning_rate", "momentum", "nesterov"}, " for sgd"));
      break;
    case OptimizerType::kAdam:
      STRATA_RETURN_IF_ERROR(
          o.CheckKeys({"type", "learning_rate", "beta_1", "beta_2", "epsilon",
                       "amsgrad"},
                      " for adam"));
      break;
    case OptimizerType::kAdagrad:
      STRATA_RETURN_IF_ERROR(
          o.CheckKeys({"type", "learning_rate", "initial_accumulator_value",
                       "epsilon"},
                      " for adagrad"));
      break;
    case OptimizerType::kRmsprop:
      STRATA_RETURN_IF_ERROR(
          o.CheckKeys({"type", "learning_rate", "rho", "momentum", "epsilon",
                       "centered"},
                      " for rmsprop"));
      break;
    case OptimizerType::kAssignAdd:
    case OptimizerType::kAssign:
      return PathError(o.Path("type"),
                       absl::StrCat(Quote(type), " is not one of ",
                                    Join(kTypes)));
  }
  const double inf = std::numeric_limits<double>::infinity();
  STRATA_RETURN_IF_ERROR(o.Number("learning_rate", false, 0, inf, false,
                                  &config->learning_rate));
  STRATA_RETURN_IF_ERROR(
      o.Number("momentum", false, 0, 1, false, &config->momentum));
  STRATA_RETURN_IF_ERROR(o.Bool("nesterov", &config->nesterov));
  STRATA_RETURN_IF_ERROR(o.Number("beta_1", false, 0, 1, true,
                                  &config->beta_1));
  STRATA_RETURN_IF_ERROR(o.Number("beta_2", false, 0, 1, true,
                                  &config->beta_2));
  STRATA_RETURN_IF_ERROR(
      o.Number("epsilon", false, 0, inf, false, &config->epsilon));
  STRATA_RETURN_IF_ERROR(o.Bool("amsgrad", &config->amsgrad));
  STRATA_RETURN_IF_ERROR(o.Number("initial_accumulator_value", false, 0, inf,
                                  false, &config->initial_accumulator_value));
  STRATA_RETURN_IF_ERROR(o.Number("rho", false, 0, 1, true, &config->rho));
  STRATA_RETURN_IF_ERROR(o.Bool("centered", &config->centered));
  // Belt and braces: the optimizer's own validation.
  absl::StatusOr<std::unique_ptr<Optimizer>> created =
      Optimizer::Create(*config);
  if (!created.ok()) return PathError(path, created.status().message());
  return absl::OkStatus();
}

absl::Status ParseSplit(const json& value, const std::string& path,
                        const std::string& format, DataSplitSpec* split) {
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(value, path));
  if (format == "idx") {
    STRATA_RETURN_IF_ERROR(
        o.CheckKeys({"images", "labels"}, " for format idx"));
    STRATA_RETURN_IF_ERROR(o.String("images", true, &split->images));
    STRATA_RETURN_IF_ERROR(o.String("labels", true, &split->labels));
  } else if (format == "criteo") {
    STRATA_RETURN_IF_ERROR(o.CheckKeys({"path"}, " for format criteo"));
    STRATA_RETURN_IF_ERROR(o.String("path", true, &split->path));
  } else {
    STRATA_RETURN_IF_ERROR(
        o.CheckKeys({"path", "label_column", "header"}, " for format csv"));
    STRATA_RETURN_IF_ERROR(o.String("path", true, &split->path));
    STRATA_RETURN_IF_ERROR(o.Int("label_column", false, 0, int64_t{1} << 31,
                                 &split->label_column));
    STRATA_RETURN_IF_ERROR(o.Bool("header", &split->header));
  }
  return absl::OkStatus();
}

absl::Status ParseData(const json& value, DataSpec* data) {
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(value, "job.data"));
  STRATA_RETURN_IF_ERROR(o.CheckKeys({"format", "train", "test", "scale",
                                      "limit_train", "limit_test", "bad_lines",
                                      "multi_hot_columns",
                                      "max_ids_per_field"}));
  STRATA_RETURN_IF_ERROR(
      o.Enum("format", true, {"idx", "csv", "criteo"}, &data->format));
  STRATA_RETURN_IF_ERROR(
      o.Enum("bad_lines", false, {"stop", "skip"}, &data->bad_lines));
  if (o.Has("bad_lines") && data->format != "criteo") {
    return PathError(o.Path("bad_lines"), "applies to format criteo only");
  }
  for (const char* key : {"multi_hot_columns", "max_ids_per_field"}) {
    if (o.Has(key) && data->format != "criteo") {
      return PathError(o.Path(key), "applies to format criteo only");
    }
  }
  if (o.Has("multi_hot_columns")) {
    const json& columns = o.At("multi_hot_columns");
    if (!columns.is_array()) {
      return PathError(o.Path("multi_hot_columns"),
                       absl::StrCat("expected an array of categorical column "
                                    "indices, got ",
                                    Show(columns)));
    }
    for (size_t i = 0; i < columns.size(); ++i) {
      const json& c = columns[i];
      const std::string path =
          absl::StrCat(o.Path("multi_hot_columns"), "[", i, "]");
      if (!c.is_number_integer() || c.get<int64_t>() < 0 ||
          c.get<int64_t>() >= 26) {
        return PathError(path, absl::StrCat("expected a categorical column "
                                            "in [0, 26), got ",
                                            Show(c)));
      }
      if (std::find(data->multi_hot_columns.begin(),
                    data->multi_hot_columns.end(),
                    c.get<int64_t>()) != data->multi_hot_columns.end()) {
        return PathError(path, absl::StrCat("column ", c.get<int64_t>(),
                                            " is listed twice"));
      }
      data->multi_hot_columns.push_back(c.get<int64_t>());
    }
  }
  STRATA_RETURN_IF_ERROR(o.Int("max_ids_per_field", false, 1, int64_t{1} << 20,
                               &data->max_ids_per_field));
  STRATA_RETURN_IF_ERROR(o.Required("train"));
  STRATA_RETURN_IF_ERROR(
      ParseSplit(o.At("train"), o.Path("train"), data->format, &data->train));
  data->has_test = o.Has("test");
  if (data->has_test) {
    STRATA_RETURN_IF_ERROR(
        ParseSplit(o.At("test"), o.Path("test"), data->format, &data->test));
  }
  STRATA_RETURN_IF_ERROR(o.Number("scale", false, 0, 1e300, false,
                                  &data->scale));
  if (!(data->scale > 0)) {
    return PathError(o.Path("scale"), "must be > 0");
  }
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  STRATA_RETURN_IF_ERROR(
      o.Int("limit_train", false, 0, kMax, &data->limit_train));
  STRATA_RETURN_IF_ERROR(o.Int("limit_test", false, 0, kMax, &data->limit_test));
  return absl::OkStatus();
}

}  // namespace

std::string CanonicalLoss(const std::string& name) {
  if (name == "mean_squared_error") return "mse";
  if (name == "mean_absolute_error") return "mae";
  if (name == "huber_loss") return "huber";
  return name;
}

absl::StatusOr<int> ParseDeviceName(absl::string_view name,
                                    absl::string_view path) {
  if (name == "cpu") return -1;
  if (name == "cuda") return 0;
  if (absl::StartsWith(name, "cuda:")) {
    const absl::string_view index = name.substr(5);
    int n = 0;
    const bool digits =
        !index.empty() && index.size() <= 4 &&
        std::all_of(index.begin(), index.end(),
                    [](char c) { return c >= '0' && c <= '9'; });
    if (digits && absl::SimpleAtoi(index, &n)) return n;
  }
  return PathError(path,
                   absl::StrCat(Quote(name),
                                " is not one of cpu, cuda, cuda:N (N a GPU "
                                "index, 0 to 9999)"));
}

namespace {

// ParseJob and ParseJobControl: every field present is parsed and
// validated; `full` requires the fields a worker needs to train.
absl::StatusOr<JobSpec> ParseJobFields(const json& job, bool full) {
  STRATA_RETURN_IF_ERROR(CheckJobValueLimits(job));
  JobSpec spec;
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(job, "job"));
  STRATA_RETURN_IF_ERROR(o.CheckKeys(
      {"name", "model", "loss", "metrics", "optimizer", "data", "strategy",
       "epochs", "batch_size", "shuffle_seed", "seed", "checkpoint",
       "evaluation", "device"}));
  STRATA_RETURN_IF_ERROR(o.String("name", false, &spec.name));
  if (!ValidLayerName(spec.name)) {
    return PathError(o.Path("name"),
                     absl::StrCat(Quote(spec.name),
                                  " may only hold letters, digits, '_', '-' "
                                  "and '.'"));
  }

  if (full) STRATA_RETURN_IF_ERROR(o.Required("model"));
  if (o.Has("model")) {
    STRATA_RETURN_IF_ERROR(ParseModel(o.At("model"), &spec.model));
  }

  if (o.Has("loss") && o.At("loss").is_object()) {
    // {"name": "sparse_categorical_crossentropy", "from_logits": true}, as
    // Keras's loss objects take it.
    STRATA_ASSIGN_OR_RETURN(Object l, Object::Make(o.At("loss"), "job.loss"));
    STRATA_RETURN_IF_ERROR(l.CheckKeys({"name", "from_logits", "delta"}));
    STRATA_RETURN_IF_ERROR(l.Enum("name", true, kLossNames, &spec.loss));
    spec.loss = CanonicalLoss(spec.loss);
    STRATA_RETURN_IF_ERROR(l.Bool("from_logits", &spec.model.from_logits));
    if (spec.model.from_logits && IsRegressionLoss(spec.loss)) {
      return PathError("job.loss.from_logits",
                       "applies to the cross-entropies only");
    }
    if (l.Has("delta") && spec.loss != "huber") {
      return PathError("job.loss.delta", "applies to the huber loss only");
    }
    STRATA_RETURN_IF_ERROR(l.Number("delta", false, 0,
                                    std::numeric_limits<double>::infinity(),
                                    false, &spec.model.huber_delta));
    if (spec.model.huber_delta <= 0) {
      return PathError("job.loss.delta",
                       absl::StrCat("must be > 0, got ",
                                    spec.model.huber_delta));
    }
  } else {
    STRATA_RETURN_IF_ERROR(o.Enum("loss", full, kLossNames, &spec.loss));
  }
  spec.loss = CanonicalLoss(spec.loss);

  if (o.Has("metrics")) {
    const json& metrics = o.At("metrics");
    if (!metrics.is_array()) {
      return PathError(o.Path("metrics"),
                       absl::StrCat("expected an array, got ", Show(metrics)));
    }
    for (size_t i = 0; i < metrics.size(); ++i) {
      const json& m = metrics[i];
      if (!m.is_string() || (m.get<std::string>() != "accuracy" &&
                             m.get<std::string>() != "auc")) {
        return PathError(absl::StrCat(o.Path("metrics"), "[", i, "]"),
                         absl::StrCat(Show(m), " is not one of accuracy, auc"));
      }
      const std::string name = m.get<std::string>();
      if (name == "auc" && o.Has("loss") &&
          spec.loss != "binary_crossentropy") {
        return PathError(absl::StrCat(o.Path("metrics"), "[", i, "]"),
                         "auc needs loss binary_crossentropy (a binary "
                         "model)");
      }
      if (std::find(spec.metrics.begin(), spec.metrics.end(), name) ==
          spec.metrics.end()) {
        spec.metrics.push_back(name);
      }
    }
  }

  if (full) STRATA_RETURN_IF_ERROR(o.Required("optimizer"));
  if (o.Has("optimizer")) {
    STRATA_RETURN_IF_ERROR(
        ParseOptimizer(o.At("optimizer"), &spec.optimizer));
  }

  if (full) STRATA_RETURN_IF_ERROR(o.Required("data"));
  if (o.Has("data")) {
    STRATA_RETURN_IF_ERROR(ParseData(o.At("data"), &spec.data));
  }

  if (o.Has("strategy")) {
    STRATA_RETURN_IF_ERROR(ParseStrategy(o.At("strategy"), &spec.strategy));
  }

  STRATA_RETURN_IF_ERROR(o.Int32("epochs", false, 1, &spec.epochs));
  STRATA_RETURN_IF_ERROR(o.Int("batch_size", false, 1, int64_t{1} << 31,
                               &spec.batch_size));
  STRATA_RETURN_IF_ERROR(o.Uint64("shuffle_seed", &spec.shuffle_seed));
  STRATA_RETURN_IF_ERROR(o.Uint64("seed", &spec.seed));

  if (o.Has("checkpoint")) {
    STRATA_ASSIGN_OR_RETURN(
        Object c, Object::Make(o.At("checkpoint"), o.Path("checkpoint")));
    STRATA_RETURN_IF_ERROR(c.CheckKeys(
        {"every_steps", "every_seconds", "keep", "max_failures"}));
    STRATA_RETURN_IF_ERROR(c.Int("every_steps", false, 0,
                                 std::numeric_limits<int64_t>::max(),
                                 &spec.checkpoint.every_steps));
    STRATA_RETURN_IF_ERROR(
        c.Number("every_seconds", false, 0,
                 std::numeric_limits<double>::infinity(), false,
                 &spec.checkpoint.every_seconds));
    STRATA_RETURN_IF_ERROR(
        c.Int32("keep", false, 1, &spec.checkpoint.keep));
    STRATA_RETURN_IF_ERROR(
        c.Int32("max_failures", false, 0, &spec.checkpoint.max_failures));
  }
  if (o.Has("evaluation")) {
    STRATA_ASSIGN_OR_RETURN(
        Object e, Object::Make(o.At("evaluation"), o.Path("evaluation")));
    STRATA_RETURN_IF_ERROR(e.CheckKeys({"every_epochs"}));
    STRATA_RETURN_IF_ERROR(
        e.Int32("every_epochs", false, 0, &spec.evaluation.every_epochs));
  }

  if (o.Has("device")) {
    std::string device;
    STRATA_RETURN_IF_ERROR(o.String("device", true, &device));
    STRATA_ASSIGN_OR_RETURN(spec.cuda_device,
                            ParseDeviceName(device, o.Path("device")));
    spec.device = spec.cuda_device < 0
                      ? "cpu"
                      : absl::StrCat("cuda:", spec.cuda_device);
  }

  // The strategy as a whole, as the policy registry sees it.
  {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> policy,
                            PolicyFor(spec));
    // A field the strategy cannot honour is refused, never dropped.
    const char* asked = spec.checkpoint.every_steps > 0 ? "every_steps"
                        : spec.checkpoint.every_seconds > 0 ? "every_seconds"
                                                            : nullptr;
    if (asked != nullptr && !policy->supports_checkpoints()) {
      return PathError(
          absl::StrCat("job.checkpoint.", asked),
          absl::StrCat("strategy ", spec.strategy.type,
                       " takes no coordinated checkpoints (they save the "
                       "parameter servers of parameter_server and "
                       "central_storage); remove it or set 0"));
    }
  }
  if (!spec.model.embeddings.empty() &&
      spec.strategy.type != "parameter_server" &&
      spec.strategy.type != "one_device") {
    return PathError("job.model.embeddings",
                     absl::StrCat("strategy ", spec.strategy.type,
                                  " does not train embedding tables yet "
                                  "(parameter_server and one_device do)"));
  }
  if (!spec.model.embeddings.empty() && spec.strategy.ps_replication > 1) {
    return PathError("job.strategy.ps_replication",
                     "embedding tables are not replicated yet; use 1 with "
                     "model.embeddings");
  }

  if (o.Has("model") && o.Has("data")) {
    const bool criteo = spec.data.format == "criteo";
    int64_t features = 1;
    for (int64_t d : spec.model.input_shape) features *= d;
    // A model may leave the 13 integer columns out (input_shape [0]).
    if (criteo && ((features != 13 && features != 0) ||
                   spec.model.categorical_columns != 26)) {
      return PathError("job.model",
                       absl::StrCat("criteo data has 13 integer and 26 "
                                    "categorical columns; the model takes ",
                                    features, " and ",
                                    spec.model.categorical_columns,
                                    " (set input_shape [13] or [0] and "
                                    "categorical_columns 26)"));
    }
    if (!criteo && spec.model.categorical_columns > 0) {
      return PathError("job.model.categorical_columns",
                       absl::StrCat("format ", spec.data.format,
                                    " has no categorical columns"));
    }
    // A concat embedding reads one id per column: not a multi-hot one.
    for (size_t i = 0; i < spec.model.embeddings.size(); ++i) {
      const EmbeddingSpec& e = spec.model.embeddings[i];
      if (e.combiner != "concat") continue;
      for (size_t j = 0; j < e.columns.size(); ++j) {
        const auto& multi = spec.data.multi_hot_columns;
        if (std::find(multi.begin(), multi.end(), e.columns[j]) !=
            multi.end()) {
          return PathError(
              absl::StrCat("job.model.embeddings[", i, "].columns[", j, "]"),
              absl::StrCat("column ", e.columns[j],
                           " is multi-hot (job.data.multi_hot_columns): a "
                           "concat embedding reads exactly one id per "
                           "column; combine it with \"sum\" or \"mean\""));
        }
      }
    }
  }
  if (o.Has("model") && o.Has("loss")) {
    STRATA_RETURN_IF_ERROR(ValidateModelAndLoss(spec.model, spec.loss));
    STRATA_ASSIGN_OR_RETURN(
        ModelFootprint footprint,
        ComputeModelFootprint(spec.model, spec.optimizer, spec.batch_size));
    if (footprint.saturated || footprint.bytes > kMaxJobModelBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          FootprintError(spec, footprint), "; a job may need at most ",
          FormatBytes(kMaxJobModelBytes), " per worker"));
    }
  }
  spec.json = job.dump();
  return spec;
}

// Text to JSON after CheckJobTextLimits; malformed JSON is
// INVALID_ARGUMENT with the parser's position (its message shortened).
absl::StatusOr<json> ParseJobText(absl::string_view text) {
  STRATA_RETURN_IF_ERROR(CheckJobTextLimits(text));
  json parsed = json::parse(text.begin(), text.end(), nullptr,
                            /*allow_exceptions=*/false,
                            /*ignore_comments=*/false);
  if (parsed.is_discarded()) {
    // Re-parse with exceptions to get the position of the error.
    std::string detail = "malformed JSON";
    try {
      json reparsed = json::parse(text.begin(), text.end());
      (void)reparsed;
    } catch (const json::exception& e) {
      // parse_error, or out_of_range for a number that overflows. The
      // message quotes the token last read, which may be long.
      detail = Shorten(e.what(), 256);
    }
    return absl::InvalidArgumentError(absl::StrCat("job: ", detail));
  }
  return parsed;
}

}  // namespace

absl::StatusOr<JobSpec> ParseJob(const json& job) {
  return ParseJobFields(job, /*full=*/true);
}

absl::StatusOr<JobSpec> ParseJobControl(absl::string_view text) {
  STRATA_ASSIGN_OR_RETURN(json parsed, ParseJobText(text));
  STRATA_ASSIGN_OR_RETURN(JobSpec spec, ParseJobFields(parsed, /*full=*/false));
  spec.json = std::string(text);
  return spec;
}

absl::StatusOr<JobSpec> ParseJobString(absl::string_view text) {
  STRATA_ASSIGN_OR_RETURN(json parsed, ParseJobText(text));
  STRATA_ASSIGN_OR_RETURN(JobSpec spec, ParseJob(parsed));
  spec.json = std::string(text);
  return spec;
}

absl::StatusOr<JobSpec> LoadJobFile(const std::string& path) {
  const std::string limit =
      absl::StrCat("at most ", kMaxJobBytes, " (", FormatBytes(kMaxJobBytes),
                   ")");
  // Refuse a large file by its size, before opening it.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("job file ", path, ": is a directory"));
    }
    if (S_ISREG(st.st_mode) &&
        static_cast<uint64_t>(st.st_size) > kMaxJobBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job file ", path, ": ", st.st_size, " bytes, ", limit));
    }
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string what =
        absl::StrCat("job file ", path, ": ", std::strerror(err));
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(what);
    if (err == EACCES) return absl::PermissionDeniedError(what);
    return absl::InternalError(what);
  }
  // A file without a size (a pipe, a device) or one that grew: read one
  // byte past the limit, no more.
  std::string text(kMaxJobBytes + 1, '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    return absl::InternalError(
        absl::StrCat("job file ", path, ": read failed"));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxJobBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job file ", path, ": more than ", kMaxJobBytes, " bytes, ", limit));
  }
  absl::StatusOr<JobSpec> spec = ParseJobString(text);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(),
                        absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

PolicyConfig PolicyConfigFor(const JobSpec& job) {
  PolicyConfig c;
  const StrategySpec& s = job.strategy;
  c.type = s.type;
  c.update = s.update;
  c.sync_replicas = s.sync_replicas;
  c.partitioner = s.partitioner.type;
  c.num_shards = s.partitioner.num_shards;
  c.min_shard_bytes = s.partitioner.min_shard_bytes;
  c.max_shard_bytes = s.partitioner.max_shard_bytes;
  c.max_shards = s.partitioner.max_shards;
  c.collective = s.collective;
  c.replicas = s.replicas;
  c.pack_bytes = s.pack_bytes;
  c.collective_timeout = absl::Seconds(s.timeout_seconds);
  return c;
}

absl::StatusOr<std::unique_ptr<PlacementPolicy>> PolicyFor(const JobSpec& job) {
  return MakePlacementPolicy(PolicyConfigFor(job));
}

}  // namespace strata

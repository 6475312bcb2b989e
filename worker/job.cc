#include "worker/job.h"

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

namespace strata {
namespace {

using nlohmann::json;

// `s` cut to at most `max` bytes (at a character boundary, "..." marking
// the cut), for error messages.
std::string Shorten(absl::string_view s, size_t max = 64) {
  if (s.size() <= max) return std::string(s);
  size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) {
    --cut;
  }
  return absl::StrCat(s.substr(0, cut), "...");
}

// A JSON value as it appeared, shortened for error messages.
std::string Show(const json& value) {
  return Shorten(value.dump(-1, ' ', false, json::error_handler_t::replace));
}

// A string in quotes, shortened for error messages: 'relu'.
std::string Quote(absl::string_view s) {
  return absl::StrCat("'", Shorten(s), "'");
}

absl::Status PathError(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

std::string Join(std::initializer_list<const char*> names) {
  return absl::StrJoin(names, ", ");
}

// Typed access to the members of one JSON object, with errors naming the
// path. Keys are checked against an allowed list before any member is read.
class Object {
 public:
  Object(const json& value, std::string path)
      : value_(value), path_(std::move(path)) {}

  static absl::StatusOr<Object> Make(const json& value, std::string path) {
    if (!value.is_object()) {
      return PathError(path,
                       absl::StrCat("expected an object, got ", Show(value)));
    }
    return Object(value, std::move(path));
  }

  const std::string& path() const { return path_; }
  std::string Path(absl::string_view key) const {
    return absl::StrCat(path_, ".", key);
  }
  bool Has(const char* key) const { return value_.contains(key); }
  const json& At(const char* key) const { return value_.at(key); }

  absl::Status CheckKeys(std::initializer_list<const char*> allowed,
                         absl::string_view context = "") const {
    for (const auto& item : value_.items()) {
      bool known = false;
      for (const char* a : allowed) known = known || item.key() == a;
      if (!known) {
        return PathError(
            path_, absl::StrCat("unknown key ", Quote(item.key()), context,
                                "; allowed keys: ", Join(allowed)));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Required(const char* key) const {
    if (Has(key)) return absl::OkStatus();
    return PathError(Path(key), "required but missing");
  }

  // Each getter leaves *out unchanged when the key is absent and not
  // required.
  absl::Status String(const char* key, bool required, std::string* out,
                      bool allow_empty = false) const {
    if (!Has(key)) return required ? Required(key) : absl::OkStatus();
    const json& v = At(key);
    if (!v.is_string()) {
      return PathError(Path(key),
                       absl::StrCat("expected a string, got ", Show(v)));
    }
    std::string s = v.get<std::string>();
    if (s.empty() && !allow_empty) {
      return PathError(Path(key), "must not be empty");
    }
    *out = std::move(s);
    return absl::OkStatus();
  }

  absl::Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return absl::OkStatus();
    const json& v = At(key);
    if (!v.is_boolean()) {
      return PathError(Path(key),
                       absl::StrCat("expected true or false, got ", Show(v)));
    }
    *out = v.get<bool>();
    return absl::OkStatus();
  }

  // A finite number in [min, max] (or [min, max) when max_open).
  absl::Status Number(const char* key, bool required, double min, double max,
                      bool max_open, double* out) const {
    if (!Has(key)) return required ? Required(key) : absl::OkStatus();
    const json& v = At(key);
    if (!v.is_number()) {
      return PathError(Path(key),
                       absl::StrCat("expected a number, got ", Show(v)));
    }
    const double d = v.get<double>();
    const bool above = max_open ? !(d < max) : !(d <= max);
    if (!std::isfinite(d) || d < min || above) {
      std::string range;
      if (max == std::numeric_limits<double>::infinity()) {
        range = absl::StrCat(">= ", min);
      } else {
        range = absl::StrCat("in [", min, ", ", max, max_open ? ")" : "]");
      }
      return PathError(Path(key),
                       absl::StrCat("must be ", range, ", got ", Show(v)));
    }
    *out = d;
    return absl::OkStatus();
  }

  // An integer in [min, max]. Integral floats (10.0) are accepted.
  absl::Status Int(const char* key, bool required, int64_t min, int64_t max,
                   int64_t* out) const {
    if (!Has(key)) return required ? Required(key) : absl::OkStatus();
    const json& v = At(key);
    int64_t i = 0;
    bool ok = false;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      ok = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      i = static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      i = v.get<int64_t>();
      ok = true;
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      ok = std::isfinite(d) && std::trunc(d) == d && std::fabs(d) < 9.0e18;
      if (ok) i = static_cast<int64_t>(d);
    }
    if (!ok) {
      return PathError(Path(key),
                       absl::StrCat("expected an integer, got ", Show(v)));
    }
    if (i < min) {
      return PathError(Path(key),
                       absl::StrCat("must be >= ", min, ", got ", i));
    }
    if (i > max) {
      return PathError(Path(key),
                       absl::StrCat("must be <= ", max, ", got ", i));
    }
    *out = i;
    return absl::OkStatus();
  }

  absl::Status Int32(const char* key, bool required, int64_t min, int* out)
      const {
    int64_t v = *out;
    STRATA_RETURN_IF_ERROR(
        Int(key, required, min, std::numeric_limits<int>::max(), &v));
    *out = static_cast<int>(v);
    return absl::OkStatus();
  }

  absl::Status Uint64(const char* key, uint64_t* out) const {
    if (!Has(key)) return absl::OkStatus();
    const json& v = At(key);
    if (v.is_number_unsigned()) {
      *out = v.get<uint64_t>();
      return absl::OkStatus();
    }
    if (v.is_number_integer() && v.get<int64_t>() >= 0) {
      *out = static_cast<uint64_t>(v.get<int64_t>());
      return absl::OkStatus();
    }
    return PathError(Path(key), absl::StrCat("expected an integer in [0, "
                                             "2^64), got ",
                                             Show(v)));
  }

  // A string that must be one of `allowed`.
  absl::Status Enum(const char* key, bool required,
                    std::initializer_list<const char*> allowed,
                    std::string* out) const {
    if (!Has(key)) return required ? Required(key) : absl::OkStatus();
    std::string s;
    STRATA_RETURN_IF_ERROR(String(key, true, &s, /*allow_empty=*/true));
    for (const char* a : allowed) {
      if (s == a) {
        *out = s;
        return absl::OkStatus();
      }
    }
    return PathError(Path(key), absl::StrCat(Quote(s), " is not one of ",
                                             Join(allowed)));
  }

 private:
  const json& value_;
  std::string path_;
};

constexpr const char* kActivationNames = "relu, sigmoid, tanh, softmax, linear";

bool ValidLayerName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                    c == '.';
    if (!ok) return false;
  }
  return true;
}

// An initializer: a name, or {"type", "seed", "value", "minval", "maxval",
// "mean", "stddev"}.
absl::Status ParseInitializer(const json& value, const std::string& path,
                              InitializerSpec* spec, bool* seed_set) {
  const std::initializer_list<const char*> kNames = {
      "zeros",           "ones",           "constant",
      "random_uniform",  "random_normal",  "truncated_normal",
      "glorot_uniform",  "glorot_normal",  "he_normal",
      "he_uniform"};
  std::string type_name;
  if (value.is_string()) {
    type_name = value.get<std::string>();
  } else if (value.is_object()) {
    Object o(value, path);
    STRATA_RETURN_IF_ERROR(o.CheckKeys({"type", "seed", "value", "minval",
                                        "maxval", "mean", "stddev"}));
    STRATA_RETURN_IF_ERROR(o.Enum("type", true, kNames, &type_name));
    if (o.Has("seed")) {
      STRATA_RETURN_IF_ERROR(o.Uint64("seed", &spec->seed));
      *seed_set = true;
    }
    const double inf = std::numeric_limits<double>::infinity();
    STRATA_RETURN_IF_ERROR(
        o.Number("value", false, -inf, inf, false, &spec->value));
    STRATA_RETURN_IF_ERROR(
        o.Number("minval", false, -inf, inf, false, &spec->minval));
    STRATA_RETURN_IF_ERROR(
        o.Number("maxval", false, -inf, inf, false, &spec->maxval));
    STRATA_RETURN_IF_ERROR(
        o.Number("mean", false, -inf, inf, false, &spec->mean));
    STRATA_RETURN_IF_ERROR(
        o.Number("stddev", false, 0, inf, false, &spec->stddev));
    if (!(spec->minval < spec->maxval)) {
      return PathError(path, absl::StrCat("minval (", spec->minval,
                                          ") must be < maxval (", spec->maxval,
                                          ")"));
    }
  } else {
    return PathError(path, absl::StrCat("expected an initializer name or "
                                        "object, got ",
                                        Show(value)));
  }
  absl::StatusOr<InitializerType> type = ParseInitializerType(type_name);
  if (!type.ok()) {
    return PathError(path, absl::StrCat(Quote(type_name), " is not one of ",
                                        Join(kNames)));
  }
  spec->type = *type;
  return absl::OkStatus();
}

absl::Status ParseLayer(const json& value, const std::string& path,
                        LayerSpec* layer) {
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(value, path));
  std::string type;
  STRATA_RETURN_IF_ERROR(
      o.Enum("type", true, {"dense", "dropout", "flatten"}, &type));
  if (type == "dense") {
    layer->type = LayerType::kDense;
    STRATA_RETURN_IF_ERROR(o.CheckKeys(
        {"type", "name", "units", "activation", "use_bias",
         "kernel_initializer", "bias_initializer"},
        " for a dense layer"));
    // Any size here: ParseJob refuses a model that does not fit with the
    // bytes it would need (ComputeModelFootprint).
    STRATA_RETURN_IF_ERROR(o.Int("units", true, 1,
                                 std::numeric_limits<int64_t>::max(),
                                 &layer->units));
    std::string activation = "linear";
    STRATA_RETURN_IF_ERROR(o.Enum(
        "activation", false, {"relu", "sigmoid", "tanh", "softmax", "linear"},
        &activation));
    STRATA_ASSIGN_OR_RETURN(layer->activation, ParseActivation(activation));
    STRATA_RETURN_IF_ERROR(o.Bool("use_bias", &layer->use_bias));
    if (o.Has("kernel_initializer")) {
      STRATA_RETURN_IF_ERROR(ParseInitializer(
          o.At("kernel_initializer"), o.Path("kernel_initializer"),
          &layer->kernel_initializer, &layer->kernel_seed_set));
    }
    if (o.Has("bias_initializer")) {
      STRATA_RETURN_IF_ERROR(ParseInitializer(
          o.At("bias_initializer"), o.Path("bias_initializer"),
          &layer->bias_initializer, &layer->bias_seed_set));
    }
  } else if (type == "dropout") {
    layer->type = LayerType::kDropout;
    STRATA_RETURN_IF_ERROR(
        o.CheckKeys({"type", "name", "rate"}, " for a dropout layer"));
    STRATA_RETURN_IF_ERROR(o.Number("rate", true, 0, 1, true, &layer->rate));
  } else {
    layer->type = LayerType::kFlatten;
    STRATA_RETURN_IF_ERROR(
        o.CheckKeys({"type", "name"}, " for a flatten layer"));
  }
  STRATA_RETURN_IF_ERROR(o.String("name", false, &layer->name));
  if (o.Has("name") && !ValidLayerName(layer->name)) {
    return PathError(o.Path("name"),
                     absl::StrCat(Quote(layer->name),
                                  " may only hold letters, digits, '_', '-' "
                                  "and '.'"));
  }
  return absl::OkStatus();
}

absl::Status ParseModel(const json& value, ModelSpec* model) {
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(value, "job.model"));
  STRATA_RETURN_IF_ERROR(o.CheckKeys({"input_shape", "layers"}));
  STRATA_RETURN_IF_ERROR(o.Required("input_shape"));
  const json& shape = o.At("input_shape");
  if (!shape.is_array() || shape.empty()) {
    return PathError(o.Path("input_shape"),
                     absl::StrCat("expected a non-empty array of positive "
                                  "integers, got ",
                                  Show(shape)));
  }
  model->input_shape.clear();
  int64_t features = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const json& d = shape[i];
    const std::string path = absl::StrCat(o.Path("input_shape"), "[", i, "]");
    if (!d.is_number_integer() || d.get<int64_t>() < 1 ||
        d.get<int64_t>() > (int64_t{1} << 31)) {
      return PathError(path, absl::StrCat("expected a positive integer, got ",
                                          Show(d)));
    }
    features *= d.get<int64_t>();
    if (features > (int64_t{1} << 31)) {
      return PathError(o.Path("input_shape"),
                       absl::StrCat("more than 2^31 features per example"));
    }
    model->input_shape.push_back(d.get<int64_t>());
  }
  STRATA_RETURN_IF_ERROR(o.Required("layers"));
  const json& layers = o.At("layers");
  if (!layers.is_array() || layers.empty()) {
    return PathError(o.Path("layers"),
                     absl::StrCat("expected a non-empty array of layers, got ",
                                  Show(layers)));
  }
  model->layers.clear();
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerSpec layer;
    STRATA_RETURN_IF_ERROR(
        ParseLayer(layers[i], absl::StrCat(o.Path("layers"), "[", i, "]"),
                   &layer));
    model->layers.push_back(std::move(layer));
  }
  return absl::OkStatus();
}

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
  STRATA_RETURN_IF_ERROR(o.CheckKeys(
      {"format", "train", "test", "scale", "limit_train", "limit_test"}));
  STRATA_RETURN_IF_ERROR(o.Enum("format", true, {"idx", "csv"}, &data->format));
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

absl::Status ParsePartitioner(const json& value, const std::string& path,
                              PartitionerSpec* p) {
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(value, path));
  STRATA_RETURN_IF_ERROR(o.CheckKeys({"type", "num_shards", "min_shard_bytes",
                                      "max_shard_bytes", "max_shards"}));
  STRATA_RETURN_IF_ERROR(
      o.Enum("type", true, {"fixed", "min_size", "max_size"}, &p->type));
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  if (p->type == "fixed") {
    STRATA_RETURN_IF_ERROR(o.CheckKeys({"type", "num_shards"},
                                       " for a fixed partitioner"));
    STRATA_RETURN_IF_ERROR(o.Int32("num_shards", false, 1, &p->num_shards));
  } else if (p->type == "min_size") {
    STRATA_RETURN_IF_ERROR(o.CheckKeys(
        {"type", "min_shard_bytes", "max_shards"}, " for a min_size "
                                                   "partitioner"));
    p->max_shards = 1;
    STRATA_RETURN_IF_ERROR(
        o.Int("min_shard_bytes", false, 1, kMax, &p->min_shard_bytes));
    STRATA_RETURN_IF_ERROR(o.Int32("max_shards", false, 1, &p->max_shards));
  } else {
    STRATA_RETURN_IF_ERROR(o.CheckKeys(
        {"type", "max_shard_bytes", "max_shards"}, " for a max_size "
                                                   "partitioner"));
    p->max_shards = 0;
    STRATA_RETURN_IF_ERROR(
        o.Int("max_shard_bytes", true, 1, kMax, &p->max_shard_bytes));
    STRATA_RETURN_IF_ERROR(o.Int32("max_shards", false, 0, &p->max_shards));
  }
  return absl::OkStatus();
}

absl::Status ParseStrategy(const json& value, StrategySpec* s) {
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(value, "job.strategy"));
  STRATA_RETURN_IF_ERROR(
      o.CheckKeys({"type", "update", "partitioner", "sync_replicas",
                   "collective", "replicas", "pack_bytes", "timeout_seconds"}));
  STRATA_RETURN_IF_ERROR(o.Enum("type", true,
                                {"parameter_server", "central_storage",
                                 "multi_worker_mirrored", "mirrored",
                                 "one_device"},
                                &s->type));
  s->update = s->type == "parameter_server" ? "async" : "sync";
  STRATA_RETURN_IF_ERROR(o.Enum("update", false, {"async", "sync"},
                                &s->update));
  if (s->update == "async" && s->type != "parameter_server" &&
      s->type != "one_device") {
    return PathError(o.Path("update"),
                     absl::StrCat("'async' is not supported by ", s->type,
                                  " (it is synchronous); use 'sync'"));
  }
  STRATA_RETURN_IF_ERROR(
      o.Int32("sync_replicas", false, 1, &s->sync_replicas));
  STRATA_RETURN_IF_ERROR(
      o.Enum("collective", false, {"ring", "ps"}, &s->collective));
  STRATA_RETURN_IF_ERROR(o.Int32("replicas", false, 1, &s->replicas));
  STRATA_RETURN_IF_ERROR(
      o.Int("pack_bytes", false, 1, int64_t{1} << 40, &s->pack_bytes));
  STRATA_RETURN_IF_ERROR(
      o.Number("timeout_seconds", false, 1e-3, 86400, false,
               &s->timeout_seconds));
  if (o.Has("partitioner")) {
    STRATA_RETURN_IF_ERROR(ParsePartitioner(
        o.At("partitioner"), o.Path("partitioner"), &s->partitioner));
  }
  s->options = value;
  return absl::OkStatus();
}

// Arithmetic on non-negative counts that sticks at INT64_MAX instead of
// overflowing, and remembers that it did.
class Saturating {
 public:
  int64_t Add(int64_t a, int64_t b) {
    int64_t r = 0;
    return __builtin_add_overflow(a, b, &r) ? Saturate() : r;
  }
  int64_t Mul(int64_t a, int64_t b) {
    int64_t r = 0;
    return __builtin_mul_overflow(a, b, &r) ? Saturate() : r;
  }
  bool saturated() const { return saturated_; }

 private:
  int64_t Saturate() {
    saturated_ = true;
    return std::numeric_limits<int64_t>::max();
  }
  bool saturated_ = false;
};

// "101770" or, from a million on, "3.2e9", "8.0e14".
std::string FormatCount(int64_t n) {
  if (n < 1000000) return absl::StrCat(n);
  const std::string s = absl::StrFormat("%.1e", static_cast<double>(n));
  const size_t e = s.find('e');
  int exponent = 0;
  if (e == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(s).substr(e + 1), &exponent)) {
    return s;
  }
  return absl::StrCat(s.substr(0, e), "e", exponent);
}

// "512 B", "23.4 GiB", "256 GiB", "12.2 PiB".
std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B",   "KiB", "MiB", "GiB",
                                           "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 6) {
    v /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  if (std::floor(v) == v) return absl::StrFormat("%.0f %s", v, kUnits[unit]);
  return absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

// "job.model.layers[0].units: 1000000000000 units make the model 8.0e14
// parameters, needing 12.2 PiB (values, gradients, 2 adam slots,
// activations for batch 128)".
std::string FootprintError(const JobSpec& job, const ModelFootprint& f) {
  const char* at_least = f.saturated ? "at least " : "";
  std::string cause = "job.model: the layers make";
  if (f.largest_layer >= 0) {
    cause = absl::StrCat("job.model.layers[", f.largest_layer, "].units: ",
                         job.model.layers[f.largest_layer].units,
                         " units make");
  }
  std::string state = "values, gradients";
  if (f.slots > 0) {
    absl::StrAppend(&state, ", ", f.slots, " ",
                    OptimizerTypeName(job.optimizer.type),
                    f.slots == 1 ? " slot" : " slots");
  }
  return absl::StrCat(cause, " the model ", at_least,
                      FormatCount(f.parameters), " parameters, needing ",
                      at_least, FormatBytes(f.bytes), " (", state,
                      ", activations for batch ", job.batch_size, ")");
}

}  // namespace

absl::StatusOr<Activation> ParseActivation(absl::string_view name) {
  for (Activation a : {Activation::kLinear, Activation::kRelu,
                       Activation::kSigmoid, Activation::kTanh,
                       Activation::kSoftmax}) {
    if (name == ActivationName(a)) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      Quote(name), " is not one of ", kActivationNames));
}

std::string ActivationName(Activation activation) {
  switch (activation) {
    case Activation::kLinear:
      return "linear";
    case Activation::kRelu:
      return "relu";
    case Activation::kSigmoid:
      return "sigmoid";
    case Activation::kTanh:
      return "tanh";
    case Activation::kSoftmax:
      return "softmax";
  }
  return absl::StrCat("unknown(", static_cast<int>(activation), ")");
}

std::string LayerTypeName(LayerType type) {
  switch (type) {
    case LayerType::kDense:
      return "dense";
    case LayerType::kDropout:
      return "dropout";
    case LayerType::kFlatten:
      return "flatten";
  }
  return absl::StrCat("unknown(", static_cast<int>(type), ")");
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

absl::StatusOr<JobSpec> ParseJob(const json& job) {
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

  STRATA_RETURN_IF_ERROR(o.Required("model"));
  STRATA_RETURN_IF_ERROR(ParseModel(o.At("model"), &spec.model));

  STRATA_RETURN_IF_ERROR(o.Enum(
      "loss", true,
      {"sparse_categorical_crossentropy", "categorical_crossentropy",
       "binary_crossentropy", "mse", "mean_squared_error"},
      &spec.loss));
  if (spec.loss == "mean_squared_error") spec.loss = "mse";

  if (o.Has("metrics")) {
    const json& metrics = o.At("metrics");
    if (!metrics.is_array()) {
      return PathError(o.Path("metrics"),
                       absl::StrCat("expected an array, got ", Show(metrics)));
    }
    for (size_t i = 0; i < metrics.size(); ++i) {
      const json& m = metrics[i];
      if (!m.is_string() || m.get<std::string>() != "accuracy") {
        return PathError(absl::StrCat(o.Path("metrics"), "[", i, "]"),
                         absl::StrCat(Show(m), " is not one of accuracy"));
      }
      if (spec.metrics.empty()) spec.metrics.push_back("accuracy");
    }
  }

  STRATA_RETURN_IF_ERROR(o.Required("optimizer"));
  STRATA_RETURN_IF_ERROR(ParseOptimizer(o.At("optimizer"), &spec.optimizer));

  STRATA_RETURN_IF_ERROR(o.Required("data"));
  STRATA_RETURN_IF_ERROR(ParseData(o.At("data"), &spec.data));

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
    STRATA_RETURN_IF_ERROR(c.CheckKeys({"every_steps", "every_seconds"}));
    STRATA_RETURN_IF_ERROR(c.Int("every_steps", false, 0,
                                 std::numeric_limits<int64_t>::max(),
                                 &spec.checkpoint.every_steps));
    STRATA_RETURN_IF_ERROR(
        c.Number("every_seconds", false, 0,
                 std::numeric_limits<double>::infinity(), false,
                 &spec.checkpoint.every_seconds));
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

  STRATA_RETURN_IF_ERROR(ValidateModelAndLoss(spec.model, spec.loss));
  STRATA_ASSIGN_OR_RETURN(
      ModelFootprint footprint,
      ComputeModelFootprint(spec.model, spec.optimizer, spec.batch_size));
  if (footprint.saturated || footprint.bytes > kMaxJobModelBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        FootprintError(spec, footprint), "; a job may need at most ",
        FormatBytes(kMaxJobModelBytes), " per worker"));
  }
  spec.json = job.dump();
  return spec;
}

absl::Status ValidateModelAndLoss(const ModelSpec& model,
                                  absl::string_view loss) {
  if (model.input_shape.empty()) {
    return PathError("job.model.input_shape", "must not be empty");
  }
  for (size_t i = 0; i < model.input_shape.size(); ++i) {
    if (model.input_shape[i] < 1) {
      return PathError(absl::StrCat("job.model.input_shape[", i, "]"),
                       absl::StrCat("must be >= 1, got ",
                                    model.input_shape[i]));
    }
  }
  if (model.layers.empty()) {
    return PathError("job.model.layers", "must hold at least one layer");
  }
  // Layer names: explicit ones kept, the others Keras's automatic names.
  std::vector<std::string> names = ResolveLayerNames(model);
  std::set<std::string> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string path = absl::StrCat("job.model.layers[", i, "]");
    const LayerSpec& layer = model.layers[i];
    if (!seen.insert(names[i]).second) {
      return PathError(path,
                       absl::StrCat("duplicate layer name ", Quote(names[i])));
    }
    if (!ValidLayerName(names[i])) {
      return PathError(path + ".name",
                       absl::StrCat(Quote(names[i]),
                                    " may only hold letters, digits, '_', "
                                    "'-' and '.'"));
    }
    if (layer.type == LayerType::kDense && layer.units < 1) {
      return PathError(path + ".units",
                       absl::StrCat("must be >= 1, got ", layer.units));
    }
    if (layer.type == LayerType::kDropout &&
        !(layer.rate >= 0 && layer.rate < 1)) {
      return PathError(path + ".rate",
                       absl::StrCat("must be in [0, 1), got ", layer.rate));
    }
  }
  // The output layer: the last layer other than flatten must be dense.
  int last = static_cast<int>(model.layers.size()) - 1;
  while (last >= 0 && model.layers[last].type == LayerType::kFlatten) --last;
  if (last < 0 || model.layers[last].type != LayerType::kDense) {
    const int at = last < 0 ? 0 : last;
    return PathError(
        absl::StrCat("job.model.layers[", at, "]"),
        absl::StrCat("the output layer must be dense, got ",
                     LayerTypeName(model.layers[at].type)));
  }
  const LayerSpec& out = model.layers[last];
  const std::string out_path = absl::StrCat("job.model.layers[", last, "]");
  if (loss == "sparse_categorical_crossentropy" ||
      loss == "categorical_crossentropy") {
    if (out.activation != Activation::kSoftmax) {
      return PathError(out_path + ".activation",
                       absl::StrCat("job.loss ", loss,
                                    " needs a softmax output layer, got ",
                                    ActivationName(out.activation)));
    }
    if (out.units < 2) {
      return PathError(out_path + ".units",
                       absl::StrCat("job.loss ", loss,
                                    " needs an output layer of >= 2 units "
                                    "(one per class), got ",
                                    out.units));
    }
  } else if (loss == "binary_crossentropy") {
    if (out.activation != Activation::kSigmoid) {
      return PathError(out_path + ".activation",
                       absl::StrCat("job.loss ", loss,
                                    " needs a sigmoid output layer, got ",
                                    ActivationName(out.activation)));
    }
    if (out.units != 1) {
      return PathError(out_path + ".units",
                       absl::StrCat("job.loss ", loss,
                                    " needs an output layer of 1 unit "
                                    "(labels 0/1), got ",
                                    out.units));
    }
  } else if (loss != "mse" && loss != "mean_squared_error") {
    return PathError("job.loss",
                     absl::StrCat(Quote(loss), " is not one of "
                                  "sparse_categorical_crossentropy, "
                                  "categorical_crossentropy, "
                                  "binary_crossentropy, mse"));
  }
  return absl::OkStatus();
}

std::vector<std::string> ResolveLayerNames(const ModelSpec& model) {
  std::vector<std::string> names;
  int counts[3] = {0, 0, 0};
  for (const LayerSpec& layer : model.layers) {
    if (!layer.name.empty()) {
      names.push_back(layer.name);
      continue;
    }
    int& n = counts[static_cast<int>(layer.type)];
    const std::string base = LayerTypeName(layer.type);
    names.push_back(n == 0 ? base : absl::StrCat(base, "_", n));
    ++n;
  }
  return names;
}

absl::StatusOr<JobSpec> ParseJobString(absl::string_view text) {
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

absl::StatusOr<ModelFootprint> ComputeModelFootprint(
    const ModelSpec& model, const OptimizerConfig& optimizer,
    int64_t batch_size) {
  absl::StatusOr<std::unique_ptr<Optimizer>> created =
      Optimizer::Create(optimizer);
  if (!created.ok()) {
    return PathError("job.optimizer", created.status().message());
  }
  ModelFootprint f;
  f.slots = static_cast<int>((*created)->SlotNames().size());
  Saturating sat;
  const int64_t batch = std::max<int64_t>(batch_size, 1);
  // Bytes per parameter: its value, gradient and slots, float32 each.
  const int64_t state_bytes = int64_t{4} * (2 + f.slots);
  int64_t width = 1;
  for (int64_t d : model.input_shape) {
    width = sat.Mul(width, std::max<int64_t>(d, 0));
  }
  // Activation floats no dense layer owns yet: the input batch, and the
  // dropouts before the first dense layer.
  int64_t pending = sat.Mul(batch, width);
  f.activations = pending;
  std::vector<int64_t> layer_bytes(model.layers.size(), 0);
  int owner = -1;  // the last dense layer
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const LayerSpec& layer = model.layers[i];
    if (layer.type == LayerType::kDropout) {
      // Its mask, outputs and their gradients.
      const int64_t floats = sat.Mul(3, sat.Mul(batch, width));
      f.activations = sat.Add(f.activations, floats);
      if (owner >= 0) {
        layer_bytes[owner] = sat.Add(layer_bytes[owner], sat.Mul(4, floats));
      } else {
        pending = sat.Add(pending, floats);
      }
    } else if (layer.type == LayerType::kDense) {
      const int64_t units = std::max<int64_t>(layer.units, 0);
      const int64_t params =
          sat.Add(sat.Mul(width, units), layer.use_bias ? units : 0);
      // Its outputs and their gradients.
      const int64_t floats = sat.Mul(2, sat.Mul(batch, units));
      f.parameters = sat.Add(f.parameters, params);
      f.activations = sat.Add(f.activations, floats);
      layer_bytes[i] = sat.Add(sat.Mul(state_bytes, params),
                               sat.Mul(4, sat.Add(floats, pending)));
      pending = 0;
      owner = static_cast<int>(i);
      width = units;
    }  // flatten: examples are already flat
  }
  f.bytes = sat.Add(sat.Mul(state_bytes, f.parameters),
                    sat.Mul(4, f.activations));
  for (size_t i = 0; i < model.layers.size(); ++i) {
    if (model.layers[i].type != LayerType::kDense) continue;
    if (f.largest_layer < 0 || layer_bytes[i] > f.largest_layer_bytes) {
      f.largest_layer = static_cast<int>(i);
      f.largest_layer_bytes = layer_bytes[i];
    }
  }
  f.saturated = sat.saturated();
  return f;
}

absl::Status CheckJobFitsMemory(const JobSpec& job, int64_t memory_bytes) {
  if (memory_bytes <= 0) return absl::OkStatus();
  STRATA_ASSIGN_OR_RETURN(
      ModelFootprint f,
      ComputeModelFootprint(job.model, job.optimizer, job.batch_size));
  if (!f.saturated && f.bytes <= memory_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(FootprintError(job, f), "; this machine has ",
                   FormatBytes(memory_bytes)));
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

// Internals of the job parser shared by its source files: error helpers
// and typed access to JSON objects with errors naming the path. Not for use
// outside job/.
#ifndef STRATA_JOB_JOB_INTERNAL_H_
#define STRATA_JOB_JOB_INTERNAL_H_

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "job/job.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace job_internal {

using nlohmann::json;

// `s` cut to at most `max` bytes (at a character boundary, "..." marking
// the cut), for error messages.
std::string Shorten(absl::string_view s, size_t max = 64);
// A JSON value as it appeared, shortened for error messages.
std::string Show(const json& value);
// A string in quotes, shortened for error messages: 'relu'.
std::string Quote(absl::string_view s);
// INVALID_ARGUMENT "PATH: WHAT".
absl::Status PathError(absl::string_view path, absl::string_view what);
std::string Join(std::initializer_list<const char*> names);
// OK for a loss CanonicalLoss knows (a cross-entropy or a regression loss);
// else INVALID_ARGUMENT at job.loss listing them.
absl::Status CheckKnownLoss(absl::string_view loss);

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

// Layer and job names: letters, digits, '_', '-' and '.', not empty.
bool ValidLayerName(absl::string_view name);
// job.model into *model (job/model_spec.cc).
absl::Status ParseModel(const json& value, ModelSpec* model);
// job.strategy into *s (job/strategy_spec.cc). Errors: INVALID_ARGUMENT
// naming the JSON path.
absl::Status ParseStrategy(const json& value, StrategySpec* s);

// Keras's automatic layer name base: the class in snake_case ("Conv2D" ->
// "conv2d", "BatchNormalization" -> "batch_normalization").
std::string KerasAutoName(const std::string& cls);
// Binds the inputs of a Keras model with embeddings to "dense" and table
// names (job.model.inputs of `o`, else by the inputs' names, else in
// order), reordering graph->inputs and model->embeddings to the row layout
// (model_graph.cc). Errors: INVALID_ARGUMENT naming the input.
absl::Status BindInputs(const Object& o, ModelSpec* model,
                        model::GraphSpec* graph);
// ValidateModelAndLoss for a model that is not a dense chain: the graph
// builds, its one output is [units] and fits the loss (model_graph.cc).
absl::Status ValidateGraphAndLoss(const ModelSpec& model,
                                  absl::string_view loss);

// "512 B", "23.4 GiB", "256 GiB", "12.2 PiB".
std::string FormatBytes(int64_t bytes);
// "job.model.layers[0].units: 1000000000000 units make the model 8.0e14
// parameters, needing 12.2 PiB (values, gradients, 2 adam slots,
// activations for batch 128)".
std::string FootprintError(const JobSpec& job, const ModelFootprint& f);

}  // namespace job_internal
}  // namespace strata

#endif  // STRATA_JOB_JOB_INTERNAL_H_

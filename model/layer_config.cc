#include "model/layer_config.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/layer.h"

namespace strata {
namespace model {
namespace {

using json = nlohmann::json;

// Keys every Keras layer config may carry, honoured when their values are
// the ones checked in Finish().
const std::set<std::string>& CommonKeys() {
  static const std::set<std::string> keys = {
      "name", "trainable", "dtype", "batch_input_shape", "input_shape",
      "batch_shape", "batch_size", "activity_regularizer",
      "kernel_constraint", "bias_constraint", "embeddings_constraint",
      "beta_constraint", "gamma_constraint", "data_format",
      "input_dim_unused", "autocast", "input_length", "seed"};
  return keys;
}

bool IsFloat32Dtype(const json& d) {
  if (d.is_null()) return true;
  if (d.is_string()) {
    const std::string s = d.get<std::string>();
    return s == "float32" || s == "mixed_float32";
  }
  // Keras 3: {"module": "keras", "class_name": "DTypePolicy", "config":
  // {"name": "float32"}}.
  if (d.is_object() && d.contains("config") && d["config"].is_object() &&
      d["config"].contains("name")) {
    return IsFloat32Dtype(d["config"]["name"]);
  }
  return false;
}

std::string CamelToSnake(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c >= 'A' && c <= 'Z') {
      if (i > 0) out.push_back('_');
      out.push_back(static_cast<char>(c - 'A' + 'a'));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::string ShowJson(const json& value) {
  std::string s = value.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

ConfigReader::ConfigReader(const LayerConfig& layer, std::string path)
    : layer_(layer), path_(std::move(path)) {}

bool ConfigReader::Has(const std::string& key) const {
  return layer_.config.is_object() && layer_.config.contains(key) &&
         !layer_.config.at(key).is_null();
}

const json& ConfigReader::At(const std::string& key) const {
  return layer_.config.at(key);
}

absl::Status ConfigReader::LayerError(const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(
      path_, path_.empty() ? "" : ": ", "layer '", layer_.name, "' (",
      layer_.class_name, "): ", what));
}

absl::Status ConfigReader::ArgError(const std::string& key,
                                    const std::string& what) const {
  return LayerError(absl::StrCat("argument '", key, "': ", what));
}

absl::Status ConfigReader::Int(const std::string& key, bool required,
                               int64_t def, int64_t min, int64_t max,
                               int64_t* out) {
  read_.insert(key);
  if (!Has(key)) {
    if (required) return ArgError(key, "is required");
    *out = def;
    return absl::OkStatus();
  }
  const json& v = At(key);
  // Keras writes some ints as floats (2.0); accept integral values.
  if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
    const double d = v.get<double>();
    if (d < static_cast<double>(min) || d > static_cast<double>(max)) {
      return ArgError(key, absl::StrCat("must be in [", min, ", ", max,
                                        "], got ", ShowJson(v)));
    }
    *out = static_cast<int64_t>(d);
    return absl::OkStatus();
  }
  if (!v.is_number_integer()) {
    return ArgError(key, absl::StrCat("expected an integer, got ",
                                      ShowJson(v)));
  }
  const int64_t x = v.get<int64_t>();
  if (x < min || x > max) {
    return ArgError(key, absl::StrCat("must be in [", min, ", ", max,
                                      "], got ", x));
  }
  *out = x;
  return absl::OkStatus();
}

absl::Status ConfigReader::IntTuple(const std::string& key, size_t n,
                                    std::vector<int64_t> def, int64_t min,
                                    std::vector<int64_t>* out) {
  read_.insert(key);
  if (!Has(key)) {
    if (def.empty()) return ArgError(key, "is required");
    *out = std::move(def);
    return absl::OkStatus();
  }
  const json& v = At(key);
  out->clear();
  if (v.is_number_integer()) {
    out->assign(n, v.get<int64_t>());
  } else if (v.is_array() && v.size() == n) {
    for (const json& e : v) {
      if (!e.is_number_integer()) {
        return ArgError(key, absl::StrCat("expected an integer or a list of ",
                                          n, " integers, got ", ShowJson(v)));
      }
      out->push_back(e.get<int64_t>());
    }
  } else {
    return ArgError(key, absl::StrCat("expected an integer or a list of ", n,
                                      " integers, got ", ShowJson(v)));
  }
  for (int64_t x : *out) {
    if (x < min) {
      return ArgError(key, absl::StrCat("every value must be >= ", min,
                                        ", got ", ShowJson(v)));
    }
  }
  return absl::OkStatus();
}

absl::Status ConfigReader::IntList(const std::string& key, bool required,
                                   bool allow_minus_one,
                                   std::vector<int64_t>* out) {
  read_.insert(key);
  if (!Has(key)) {
    if (required) return ArgError(key, "is required");
    return absl::OkStatus();
  }
  const json& v = At(key);
  if (!v.is_array()) {
    return ArgError(key, absl::StrCat("expected a list of integers, got ",
                                      ShowJson(v)));
  }
  out->clear();
  for (const json& e : v) {
    if (!e.is_number_integer() ||
        (e.get<int64_t>() < 1 && !(allow_minus_one && e.get<int64_t>() == -1))) {
      return ArgError(key, absl::StrCat("expected positive integers",
                                        allow_minus_one ? " (or one -1)" : "",
                                        ", got ", ShowJson(v)));
    }
    out->push_back(e.get<int64_t>());
  }
  return absl::OkStatus();
}

absl::Status ConfigReader::Number(const std::string& key, double def,
                                  double min, double max, bool max_inclusive,
                                  double* out) {
  read_.insert(key);
  if (!Has(key)) {
    *out = def;
    return absl::OkStatus();
  }
  const json& v = At(key);
  if (!v.is_number()) {
    return ArgError(key, absl::StrCat("expected a number, got ", ShowJson(v)));
  }
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < min || x > max || (!max_inclusive && x == max)) {
    return ArgError(key, absl::StrCat("must be in [", min, ", ", max,
                                      max_inclusive ? "]" : ")", ", got ",
                                      ShowJson(v)));
  }
  *out = x;
  return absl::OkStatus();
}

absl::Status ConfigReader::Bool(const std::string& key, bool def, bool* out) {
  read_.insert(key);
  if (!Has(key)) {
    *out = def;
    return absl::OkStatus();
  }
  const json& v = At(key);
  if (!v.is_boolean()) {
    return ArgError(key, absl::StrCat("expected true or false, got ",
                                      ShowJson(v)));
  }
  *out = v.get<bool>();
  return absl::OkStatus();
}

absl::Status ConfigReader::Enum(const std::string& key, const std::string& def,
                                std::initializer_list<const char*> allowed,
                                std::string* out) {
  read_.insert(key);
  if (!Has(key)) {
    *out = def;
    return absl::OkStatus();
  }
  const json& v = At(key);
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    // Keras accepts "VALID"/"SAME" too.
    std::string lower;
    for (char c : s) lower.push_back(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    for (const char* a : allowed) {
      if (lower == a) {
        *out = lower;
        return absl::OkStatus();
      }
    }
  }
  return ArgError(key, absl::StrCat(ShowJson(v), " is not one of ",
                                    absl::StrJoin(allowed, ", ")));
}

absl::Status ConfigReader::ActivationArg(const std::string& key,
                                         const std::string& def,
                                         Activation* out) {
  read_.insert(key);
  std::string name = def;
  double alpha = -1;
  if (Has(key)) {
    const json& v = At(key);
    if (v.is_string()) {
      name = v.get<std::string>();
    } else if (v.is_object() && v.contains("class_name") &&
               v["class_name"].is_string()) {
      // Keras 3 may serialize a function as {"module": "keras.activations",
      // "class_name": "function", "config": "relu"}; a layer object as
      // {"class_name": "LeakyReLU", "config": {...}}.
      const std::string cls = v["class_name"].get<std::string>();
      if (cls == "function" && v.contains("config") &&
          v["config"].is_string()) {
        name = v["config"].get<std::string>();
      } else {
        name = CamelToSnake(cls);
        if (name == "leaky_re_l_u" || name == "leaky_relu") name = "leaky_relu";
        if (name == "re_l_u") name = "relu";
        if (name == "e_l_u") name = "elu";
        if (v.contains("config") && v["config"].is_object()) {
          const json& c = v["config"];
          for (const char* k : {"negative_slope", "alpha"}) {
            if (c.contains(k) && c[k].is_number()) alpha = c[k].get<double>();
          }
        }
      }
    } else {
      return ArgError(key, absl::StrCat("expected an activation name, got ",
                                        ShowJson(v)));
    }
  }
  absl::StatusOr<Activation> a = ParseActivationName(name);
  if (!a.ok()) return ArgError(key, std::string(a.status().message()));
  if (alpha >= 0) a->alpha = alpha;
  *out = *a;
  return absl::OkStatus();
}

absl::Status ConfigReader::Initializer(const std::string& key,
                                       InitializerType def,
                                       InitializerSpec* out, bool* seed_set) {
  read_.insert(key);
  *out = InitializerSpec{def};
  *seed_set = false;
  if (!Has(key)) return absl::OkStatus();
  const json& v = At(key);
  std::string type;
  const json* params = nullptr;
  if (v.is_string()) {
    type = v.get<std::string>();
  } else if (v.is_object() && v.contains("class_name") &&
             v["class_name"].is_string()) {
    type = CamelToSnake(v["class_name"].get<std::string>());
    if (v.contains("config") && v["config"].is_object()) params = &v["config"];
  } else if (v.is_object() && v.contains("type") && v["type"].is_string()) {
    type = v["type"].get<std::string>();
    params = &v;
  } else {
    return ArgError(key, absl::StrCat("expected an initializer, got ",
                                      ShowJson(v)));
  }
  if (type.find('_') == std::string::npos && !type.empty() &&
      type[0] >= 'A' && type[0] <= 'Z') {
    type = CamelToSnake(type);
  }
  // Keras's short aliases.
  if (type == "uniform") type = "random_uniform";
  if (type == "normal") type = "random_normal";
  absl::StatusOr<InitializerType> t = ParseInitializerType(type);
  if (!t.ok()) {
    return ArgError(key, absl::StrCat(
        "initializer ", ShowJson(v), " is not one of zeros, ones, constant, "
        "random_uniform, random_normal, truncated_normal, glorot_uniform, "
        "glorot_normal, he_normal, he_uniform"));
  }
  out->type = *t;
  if (params != nullptr) {
    for (auto it = params->begin(); it != params->end(); ++it) {
      const std::string& k = it.key();
      const json& p = it.value();
      if (k == "type") continue;
      if (k == "seed") {
        if (p.is_null()) continue;
        if (!p.is_number_integer() || p.get<int64_t>() < 0) {
          return ArgError(key, absl::StrCat("seed must be a non-negative "
                                            "integer, got ", ShowJson(p)));
        }
        out->seed = p.get<uint64_t>();
        *seed_set = true;
        continue;
      }
      double* field = k == "value"    ? &out->value
                      : k == "minval" ? &out->minval
                      : k == "maxval" ? &out->maxval
                      : k == "mean"   ? &out->mean
                      : k == "stddev" ? &out->stddev
                                      : nullptr;
      if (field == nullptr) {
        return ArgError(key, absl::StrCat("initializer parameter '", k,
                                          "' is not supported"));
      }
      if (!p.is_number()) {
        return ArgError(key, absl::StrCat(k, " must be a number, got ",
                                          ShowJson(p)));
      }
      *field = p.get<double>();
    }
    if (!(out->minval < out->maxval)) {
      return ArgError(key, "minval must be < maxval");
    }
  }
  return absl::OkStatus();
}

absl::Status ConfigReader::KernelAndBias(InitializerType kernel_default,
                                         WeightDef* kernel, WeightDef* bias) {
  STRATA_RETURN_IF_ERROR(Initializer("kernel_initializer", kernel_default,
                                     &kernel->init, &kernel->seed_set));
  STRATA_RETURN_IF_ERROR(Initializer("bias_initializer", InitializerType::kZeros,
                                     &bias->init, &bias->seed_set));
  STRATA_RETURN_IF_ERROR(
      Regularizer("kernel_regularizer", &kernel->l1, &kernel->l2));
  return Regularizer("bias_regularizer", &bias->l1, &bias->l2);
}

absl::Status ConfigReader::Regularizer(const std::string& key, double* l1,
                                       double* l2) {
  read_.insert(key);
  *l1 = 0;
  *l2 = 0;
  if (!Has(key)) return absl::OkStatus();
  const json& v = At(key);
  std::string type;
  if (v.is_string()) {
    type = v.get<std::string>();
    // Keras's defaults for the string forms: 0.01.
    if (type == "l1") *l1 = 0.01;
    else if (type == "l2") *l2 = 0.01;
    else if (type == "l1_l2") { *l1 = 0.01; *l2 = 0.01; }
    else return ArgError(key, absl::StrCat(ShowJson(v),
                                           " is not one of l1, l2, l1_l2"));
    return absl::OkStatus();
  }
  if (!v.is_object() || !v.contains("class_name") ||
      !v["class_name"].is_string()) {
    return ArgError(key, absl::StrCat("expected a regularizer, got ",
                                      ShowJson(v)));
  }
  type = v["class_name"].get<std::string>();
  const json cfg = v.contains("config") && v["config"].is_object()
                       ? v["config"]
                       : json::object();
  auto read = [&](const char* k, double* out) -> absl::Status {
    if (!cfg.contains(k)) return absl::OkStatus();
    if (!cfg[k].is_number() || cfg[k].get<double>() < 0) {
      return ArgError(key, absl::StrCat(k, " must be a number >= 0, got ",
                                        ShowJson(cfg[k])));
    }
    *out = cfg[k].get<double>();
    return absl::OkStatus();
  };
  if (type == "L1" || type == "l1") {
    *l1 = 0.01;
    absl::Status s = read("l1", l1);
    if (!s.ok()) return s;
  } else if (type == "L2" || type == "l2") {
    *l2 = 0.01;
    absl::Status s = read("l2", l2);
    if (!s.ok()) return s;
  } else if (type == "L1L2" || type == "l1_l2") {
    absl::Status s = read("l1", l1);
    if (!s.ok()) return s;
    s = read("l2", l2);
    if (!s.ok()) return s;
  } else {
    return ArgError(key, absl::StrCat("regularizer ", ShowJson(v),
                                      " is not one of L1, L2, L1L2"));
  }
  return absl::OkStatus();
}

absl::Status ConfigReader::Unsupported(const std::string& key,
                                       const json& def) {
  read_.insert(key);
  if (!layer_.config.is_object() || !layer_.config.contains(key)) {
    return absl::OkStatus();
  }
  const json& v = layer_.config.at(key);
  if (v == def || (v.is_null() && def.is_null())) return absl::OkStatus();
  // A one-element list equal to a scalar default (dilation [1] vs 1).
  if (v.is_array() && !def.is_array()) {
    bool all = !v.empty();
    for (const json& e : v) all = all && e == def;
    if (all) return absl::OkStatus();
  }
  return ArgError(key, absl::StrCat(ShowJson(v), " is not supported (only ",
                                    ShowJson(def), ")"));
}

absl::Status ConfigReader::Finish() {
  if (!layer_.config.is_object()) {
    return LayerError(absl::StrCat("config must be an object, got ",
                                   ShowJson(layer_.config)));
  }
  for (auto it = layer_.config.begin(); it != layer_.config.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (read_.count(k) > 0) continue;
    if (CommonKeys().count(k) == 0) {
      return ArgError(k, "is not supported by this layer here");
    }
    if (k == "trainable" && !(v.is_boolean() && v.get<bool>())) {
      return ArgError(k, "frozen layers (trainable false) are not supported");
    }
    if (k == "dtype" && !IsFloat32Dtype(v)) {
      return ArgError(k, absl::StrCat(ShowJson(v),
                                      " is not supported (only float32)"));
    }
    if (k == "data_format" && !v.is_null() &&
        !(v.is_string() && v.get<std::string>() == "channels_last")) {
      return ArgError(k, absl::StrCat(ShowJson(v), " is not supported (only "
                                      "channels_last)"));
    }
    if ((k == "activity_regularizer" || absl::string_view(k).size() > 11) &&
        k.find("constraint") != std::string::npos && !v.is_null()) {
      return ArgError(k, absl::StrCat(ShowJson(v),
                                      " is not supported (only null)"));
    }
    if (k == "activity_regularizer" && !v.is_null()) {
      return ArgError(k, absl::StrCat(ShowJson(v),
                                      " is not supported (only null)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace model
}  // namespace strata

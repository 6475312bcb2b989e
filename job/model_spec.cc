// The model part of a job: layers, activations, initializers, and the
// model's validation against its loss.
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "job/job.h"
#include "job/job_internal.h"
#include "model/keras_format.h"

namespace strata {
namespace {

using json = nlohmann::json;

constexpr const char* kActivationNames = "relu, sigmoid, tanh, softmax, linear";

}  // namespace

namespace job_internal {

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
  STRATA_RETURN_IF_ERROR(o.String("type", true, &type));
  const std::string other_class =
      type == "dense" || type == "dropout" || type == "flatten"
          ? std::string()
          : model::ClassOfShortType(type);
  if (type != "dense" && type != "dropout" && type != "flatten" &&
      other_class.empty()) {
    return PathError(o.Path("type"),
                     absl::StrCat(Quote(type), " is not one of ",
                                  model::ShortTypeNames()));
  }
  if (!other_class.empty()) {
    layer->type = LayerType::kOther;
    layer->class_name = other_class;
    layer->config = value;
    layer->config.erase("type");
    layer->config.erase("name");
  } else if (type == "dense") {
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
  if (layer->type == LayerType::kOther && o.Has("name") &&
      !o.At("name").is_string()) {
    return PathError(o.Path("name"), "expected a string");
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

// One embedding (see EmbeddingSpec), its columns checked against
// `categorical_columns`.
absl::Status ParseEmbedding(const json& value, const std::string& path,
                            int64_t categorical_columns, EmbeddingSpec* e) {
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(value, path));
  STRATA_RETURN_IF_ERROR(o.CheckKeys(
      {"table", "columns", "output_dim", "combiner", "initializer",
       "init_scale", "min_count", "max_rows", "eviction", "ttl_steps",
       "optimizer"}));
  STRATA_RETURN_IF_ERROR(o.String("table", true, &e->table));
  if (!ValidLayerName(e->table)) {
    return PathError(o.Path("table"),
                     absl::StrCat(Quote(e->table),
                                  " may only hold letters, digits, '_', '-' "
                                  "and '.'"));
  }
  STRATA_RETURN_IF_ERROR(o.Required("columns"));
  const json& columns = o.At("columns");
  if (!columns.is_array() || columns.empty()) {
    return PathError(o.Path("columns"),
                     absl::StrCat("expected a non-empty array of column "
                                  "indices, got ",
                                  Show(columns)));
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    const json& c = columns[i];
    if (!c.is_number_integer() || c.get<int64_t>() < 0 ||
        c.get<int64_t>() >= categorical_columns) {
      return PathError(absl::StrCat(o.Path("columns"), "[", i, "]"),
                       absl::StrCat("expected a categorical column in [0, ",
                                    categorical_columns, "), got ", Show(c)));
    }
    e->columns.push_back(c.get<int64_t>());
  }
  STRATA_RETURN_IF_ERROR(o.Int("output_dim", true, 1, 4096, &e->output_dim));
  STRATA_RETURN_IF_ERROR(
      o.Enum("combiner", false, {"concat", "sum", "mean"}, &e->combiner));
  STRATA_RETURN_IF_ERROR(o.Enum("initializer", false,
                                {"random_uniform", "zeros"}, &e->initializer));
  STRATA_RETURN_IF_ERROR(
      o.Number("init_scale", false, 0, 1e6, true, &e->init_scale));
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  STRATA_RETURN_IF_ERROR(o.Int("min_count", false, 1, kMax, &e->min_count));
  STRATA_RETURN_IF_ERROR(o.Int("max_rows", false, 0, kMax, &e->max_rows));
  STRATA_RETURN_IF_ERROR(
      o.Enum("eviction", false, {"lru", "lfu"}, &e->eviction));
  STRATA_RETURN_IF_ERROR(o.Int("ttl_steps", false, 0, kMax, &e->ttl_steps));
  if (o.Has("optimizer")) {
    const json& opt = o.At("optimizer");
    const std::string opath = o.Path("optimizer");
    std::string type;
    RowOptimizerConfig& c = e->optimizer;
    if (opt.is_string()) {
      type = opt.get<std::string>();
    } else {
      STRATA_ASSIGN_OR_RETURN(Object p, Object::Make(opt, opath));
      STRATA_RETURN_IF_ERROR(p.CheckKeys(
          {"type", "learning_rate", "epsilon", "initial_accumulator_value",
           "beta_1", "beta_2", "learning_rate_power",
           "l1_regularization_strength", "l2_regularization_strength"}));
      STRATA_RETURN_IF_ERROR(p.String("type", true, &type));
      const double inf = std::numeric_limits<double>::infinity();
      STRATA_RETURN_IF_ERROR(p.Number("learning_rate", false, 0, inf, true,
                                      &c.learning_rate));
      STRATA_RETURN_IF_ERROR(
          p.Number("epsilon", false, 0, inf, true, &c.epsilon));
      STRATA_RETURN_IF_ERROR(p.Number("initial_accumulator_value", false, 0,
                                      inf, true, &c.initial_accumulator_value));
      STRATA_RETURN_IF_ERROR(p.Number("beta_1", false, 0, 1, true, &c.beta_1));
      STRATA_RETURN_IF_ERROR(p.Number("beta_2", false, 0, 1, true, &c.beta_2));
      STRATA_RETURN_IF_ERROR(p.Number("learning_rate_power", false, -inf, 0,
                                      false, &c.learning_rate_power));
      STRATA_RETURN_IF_ERROR(p.Number("l1_regularization_strength", false, 0,
                                      inf, true,
                                      &c.l1_regularization_strength));
      STRATA_RETURN_IF_ERROR(p.Number("l2_regularization_strength", false, 0,
                                      inf, true,
                                      &c.l2_regularization_strength));
    }
    absl::StatusOr<RowOptimizerType> parsed = ParseRowOptimizerType(type);
    if (!parsed.ok()) {
      return PathError(opath, absl::StrCat(Quote(type), " is not one of sgd, "
                                           "adagrad, lazy_adam, ftrl"));
    }
    c.type = *parsed;
    absl::StatusOr<std::unique_ptr<RowOptimizer>> created =
        RowOptimizer::Create(c);
    if (!created.ok()) return PathError(opath, created.status().message());
  }
  return absl::OkStatus();
}

// Embeddings naming one table agree on its width and options.
absl::Status CheckSharedTables(const std::vector<EmbeddingSpec>& embeddings) {
  for (size_t i = 0; i < embeddings.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const EmbeddingSpec& a = embeddings[j];
      const EmbeddingSpec& b = embeddings[i];
      if (a.table != b.table) continue;
      if (a.output_dim != b.output_dim || a.initializer != b.initializer ||
          a.init_scale != b.init_scale || a.min_count != b.min_count ||
          a.max_rows != b.max_rows || a.eviction != b.eviction ||
          a.ttl_steps != b.ttl_steps ||
          a.optimizer.type != b.optimizer.type ||
          a.optimizer.learning_rate != b.optimizer.learning_rate) {
        return PathError(
            absl::StrCat("job.model.embeddings[", i, "]"),
            absl::StrCat("shares table ", Quote(b.table),
                         " with embeddings[", j,
                         "] but not its output_dim and table options"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParseEmbeddings(Object& o, ModelSpec* model) {
  STRATA_RETURN_IF_ERROR(o.Int("categorical_columns", false, 0, 1 << 16,
                               &model->categorical_columns));
  if (o.Has("embeddings")) {
    const json& embeddings = o.At("embeddings");
    if (!embeddings.is_array()) {
      return PathError(o.Path("embeddings"),
                       absl::StrCat("expected an array, got ",
                                    Show(embeddings)));
    }
    if (!embeddings.empty() && model->categorical_columns < 1) {
      return PathError(o.Path("categorical_columns"),
                       "must be >= 1 for a model with embeddings");
    }
    for (size_t i = 0; i < embeddings.size(); ++i) {
      EmbeddingSpec e;
      STRATA_RETURN_IF_ERROR(ParseEmbedding(
          embeddings[i], absl::StrCat(o.Path("embeddings"), "[", i, "]"),
          model->categorical_columns, &e));
      model->embeddings.push_back(std::move(e));
    }
    STRATA_RETURN_IF_ERROR(CheckSharedTables(model->embeddings));
  }
  return absl::OkStatus();
}

absl::Status ParseModel(const json& value, ModelSpec* model) {
  model->keras.reset();
  if (model::IsKerasModelJson(value)) {
    model->embeddings.clear();
    model->categorical_columns = 0;
    model->layers.clear();
    STRATA_ASSIGN_OR_RETURN(model::GraphSpec graph,
                            model::ParseKerasModel(value, "job.model"));
    if (graph.inputs.size() == 1) {
      model->input_shape = graph.inputs[0].shape;
    } else {
      int64_t features = 0;
      for (const model::InputSpec& in : graph.inputs) {
        features += NumElements(in.shape);
      }
      model->input_shape = {features};
    }
    model->keras = std::move(graph);
    return absl::OkStatus();
  }
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(value, "job.model"));
  if (o.Has("keras")) {
    STRATA_RETURN_IF_ERROR(
        o.CheckKeys({"keras", "categorical_columns", "embeddings", "inputs"}));
    model->embeddings.clear();
    STRATA_RETURN_IF_ERROR(ParseEmbeddings(o, model));
    model->layers.clear();
    STRATA_ASSIGN_OR_RETURN(
        model::GraphSpec graph,
        model::ParseKerasModel(o.At("keras"), "job.model.keras"));
    if (o.Has("inputs") && model->embeddings.empty()) {
      return PathError(o.Path("inputs"),
                       "binds inputs to embedding tables; the model has no "
                       "embeddings (a model of dense columns only reads its "
                       "inputs in order)");
    }
    if (!model->embeddings.empty()) {
      STRATA_RETURN_IF_ERROR(BindInputs(o, model, &graph));
    }
    int64_t features = 0;
    for (const model::InputSpec& in : graph.inputs) {
      features += NumElements(in.shape);
    }
    const int64_t width = EmbeddingWidth(*model);
    if (features < width) {
      return PathError(o.Path("keras"),
                       absl::StrCat("the model's inputs take ", features,
                                    " floats per example, fewer than the "
                                    "embeddings' ", width));
    }
    model->input_shape = {features - width};
    if (model->embeddings.empty() && graph.inputs.size() == 1) {
      model->input_shape = graph.inputs[0].shape;
    }
    model->keras = std::move(graph);
    return absl::OkStatus();
  }
  STRATA_RETURN_IF_ERROR(o.CheckKeys(
      {"input_shape", "layers", "categorical_columns", "embeddings"}));
  model->embeddings.clear();
  STRATA_RETURN_IF_ERROR(ParseEmbeddings(o, model));
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
    // A model with embeddings may take no dense features: input_shape [0].
    const bool no_dense = !model->embeddings.empty() && shape.size() == 1 &&
                          d.is_number_integer() && d.get<int64_t>() == 0;
    if (!no_dense && (!d.is_number_integer() || d.get<int64_t>() < 1 ||
                      d.get<int64_t>() > (int64_t{1} << 31))) {
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


}  // namespace job_internal

using job_internal::Object;
using job_internal::PathError;
using job_internal::Quote;
using job_internal::Show;
using job_internal::ValidLayerName;

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
    case LayerType::kOther:
      return "other";
  }
  return absl::StrCat("unknown(", static_cast<int>(type), ")");
}

int64_t EmbeddingWidth(const ModelSpec& model) {
  int64_t width = 0;
  for (const EmbeddingSpec& e : model.embeddings) {
    width += e.combiner == "concat"
                 ? static_cast<int64_t>(e.columns.size()) * e.output_dim
                 : e.output_dim;
  }
  return width;
}

ModelSpec DenseModelSpec(const ModelSpec& model) {
  if (model.embeddings.empty()) return model;
  ModelSpec dense;
  int64_t features = 1;
  for (int64_t d : model.input_shape) features *= d;
  dense.input_shape = {features + EmbeddingWidth(model)};
  dense.layers = model.layers;
  dense.keras = model.keras;
  dense.from_logits = model.from_logits;
  return dense;
}

absl::Status ValidateModelAndLoss(const ModelSpec& model,
                                  absl::string_view loss) {
  if (!model.embeddings.empty()) {
    if (model.input_shape.empty()) {
      return PathError("job.model.input_shape", "must not be empty");
    }
    return ValidateModelAndLoss(DenseModelSpec(model), loss);
  }
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
  if (!IsDenseChain(model)) return job_internal::ValidateGraphAndLoss(model, loss);
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
    if (out.activation != Activation::kSoftmax && !model.from_logits) {
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
    if (out.activation != Activation::kSigmoid && !model.from_logits) {
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
  }
  return job_internal::CheckKnownLoss(loss);
}

std::vector<std::string> ResolveLayerNames(const ModelSpec& model) {
  std::vector<std::string> names;
  std::map<std::string, int> counts;
  for (const LayerSpec& layer : model.layers) {
    if (!layer.name.empty()) {
      names.push_back(layer.name);
      continue;
    }
    const std::string base = layer.type == LayerType::kOther
                                 ? job_internal::KerasAutoName(layer.class_name)
                                 : LayerTypeName(layer.type);
    int& n = counts[base];
    names.push_back(n == 0 ? base : absl::StrCat(base, "_", n));
    ++n;
  }
  return names;
}

}  // namespace strata

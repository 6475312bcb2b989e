// Layers, optimizers and Sequential: the model side of the SDK.
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "sdk/internal.h"
#include "sdk/strata.h"
#include "job/job.h"
#include "model/keras_format.h"
#include "worker/model.h"

namespace strata::sdk {
namespace {

using nlohmann::json;

// Validation of a compiled model needs a data section; Fit supplies the
// real one (criteo files for a model with embeddings).
json PlaceholderData(bool embeddings) {
  return json{{"format", embeddings ? "criteo" : "csv"},
              {"train", {{"path", "(supplied by Fit)"}}}};
}

json TableOptimizerJson(const TableOptimizer& o) {
  json j = {{"type", o.type}};
  const auto put = [&j](const char* key, const std::optional<double>& v) {
    if (v.has_value()) j[key] = *v;
  };
  put("learning_rate", o.learning_rate);
  put("epsilon", o.epsilon);
  put("initial_accumulator_value", o.initial_accumulator_value);
  put("beta_1", o.beta_1);
  put("beta_2", o.beta_2);
  put("learning_rate_power", o.learning_rate_power);
  put("l1_regularization_strength", o.l1_regularization_strength);
  put("l2_regularization_strength", o.l2_regularization_strength);
  return j;
}

json EmbeddingJson(const Embedding& e) {
  return json{{"table", e.table},
              {"columns", e.columns},
              {"output_dim", e.output_dim},
              {"combiner", e.combiner},
              {"initializer", e.initializer},
              {"init_scale", e.init_scale},
              {"min_count", e.min_count},
              {"max_rows", e.max_rows},
              {"eviction", e.eviction},
              {"ttl_steps", e.ttl_steps},
              {"optimizer", TableOptimizerJson(e.optimizer)}};
}

std::string KerasTypeName(absl::string_view type) {
  if (type == "dense") return "Dense";
  if (type == "dropout") return "Dropout";
  if (type == "flatten") return "Flatten";
  return std::string(type);
}

std::string ShapeString(int64_t width) {
  return absl::StrCat("(None, ", width, ")");
}

// Keras's summary form of a per-example shape: "(None, 26, 26, 32)".
std::string KerasShape(const Shape& shape) {
  return absl::StrCat("(None, ", absl::StrJoin(shape, ", "), ")");
}

}  // namespace

// Layers ---------------------------------------------------------------------

Layer Layer::Named(std::string layer_name) const {
  Layer copy = *this;
  copy.name = std::move(layer_name);
  return copy;
}

Layer Dense(int64_t units, std::string activation, int64_t input_dim) {
  Layer layer;
  layer.type = "dense";
  layer.units = units;
  layer.activation = std::move(activation);
  if (input_dim != 0) layer.input_shape = {input_dim};
  return layer;
}

Layer Dropout(double rate) {
  Layer layer;
  layer.type = "dropout";
  layer.rate = rate;
  return layer;
}

Layer Flatten(std::vector<int64_t> input_shape) {
  Layer layer;
  layer.type = "flatten";
  layer.input_shape = std::move(input_shape);
  return layer;
}

Layer KerasLayer(std::string type, std::string args_json,
                 std::vector<int64_t> input_shape) {
  Layer layer;
  layer.type = std::move(type);
  layer.args_json = std::move(args_json);
  layer.input_shape = std::move(input_shape);
  return layer;
}

Layer Conv2D(int64_t filters, int64_t kernel_size, std::string activation,
             std::vector<int64_t> input_shape) {
  return KerasLayer("conv2d",
                    json{{"filters", filters},
                         {"kernel_size", kernel_size},
                         {"activation", activation}}
                        .dump(),
                    std::move(input_shape));
}

Layer MaxPooling2D(int64_t pool_size) {
  return KerasLayer("max_pooling2d", json{{"pool_size", pool_size}}.dump());
}

Layer BatchNormalization() { return KerasLayer("batch_normalization"); }

Layer Reshape(std::vector<int64_t> target_shape,
              std::vector<int64_t> input_shape) {
  return KerasLayer("reshape", json{{"target_shape", target_shape}}.dump(),
                    std::move(input_shape));
}

std::vector<Embedding> EmbeddingPerColumn(int64_t categorical,
                                          int64_t output_dim,
                                          TableOptimizer optimizer,
                                          const std::string& table_prefix) {
  std::vector<Embedding> out;
  for (int64_t c = 0; c < categorical; ++c) {
    Embedding e(absl::StrCat(table_prefix, c + 1), {c}, output_dim);
    e.optimizer = optimizer;
    out.push_back(std::move(e));
  }
  return out;
}

// Optimizers -----------------------------------------------------------------

Optimizer SGD(double learning_rate, double momentum, bool nesterov) {
  Optimizer o("sgd");
  o.learning_rate = learning_rate;
  o.momentum = momentum;
  o.nesterov = nesterov;
  return o;
}

Optimizer Adam(double learning_rate, double beta_1, double beta_2,
               double epsilon, bool amsgrad) {
  Optimizer o("adam");
  o.learning_rate = learning_rate;
  o.beta_1 = beta_1;
  o.beta_2 = beta_2;
  o.epsilon = epsilon;
  o.amsgrad = amsgrad;
  return o;
}

Optimizer Adagrad(double learning_rate, double initial_accumulator_value,
                  double epsilon) {
  Optimizer o("adagrad");
  o.learning_rate = learning_rate;
  o.initial_accumulator_value = initial_accumulator_value;
  o.epsilon = epsilon;
  return o;
}

Optimizer RMSprop(double learning_rate, double rho, double momentum,
                  double epsilon, bool centered) {
  Optimizer o("rmsprop");
  o.learning_rate = learning_rate;
  o.rho = rho;
  o.momentum = momentum;
  o.epsilon = epsilon;
  o.centered = centered;
  return o;
}

// Job JSON -------------------------------------------------------------------

namespace internal {

absl::Status RequireCompiled(const ModelState& state,
                             absl::string_view method) {
  if (!state.compiled) {
    return absl::FailedPreconditionError(absl::StrCat(
        method, ": the model is not compiled; call Compile(optimizer, loss, "
                "metrics) first"));
  }
  return absl::OkStatus();
}

absl::StatusOr<json> ModelJson(const std::vector<Layer>& layers,
                               const std::optional<Inputs>& inputs) {
  if (layers.empty()) {
    return absl::InvalidArgumentError(
        "job.model.layers: a Sequential model needs at least one layer");
  }
  if (inputs.has_value() && !layers[0].input_shape.empty()) {
    return absl::InvalidArgumentError(
        "job.model.layers[0]: a model with Inputs takes its input shape from "
        "them (Inputs.dense and the embeddings), not from the first layer");
  }
  if (!inputs.has_value() && layers[0].input_shape.empty()) {
    return absl::InvalidArgumentError(
        "job.model.input_shape: the first layer needs an input shape, e.g. "
        "Dense(units, activation, input_dim) or Flatten({28, 28})");
  }
  json out_layers = json::array();
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    if (i > 0 && !l.input_shape.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job.model.layers[", i,
          "]: only the first layer takes an input shape (input_dim / "
          "input_shape)"));
    }
    json j = {{"type", l.type}};
    if (l.type != "dense" && l.type != "dropout" && l.type != "flatten") {
      json args = json::object();
      if (!l.args_json.empty()) {
        args = json::parse(l.args_json, nullptr, /*allow_exceptions=*/false);
        if (!args.is_object()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "job.model.layers[", i, "]: the arguments of layer type '",
              l.type, "' must be a JSON object, got: ", l.args_json));
        }
      }
      for (auto it = args.begin(); it != args.end(); ++it) {
        if (it.key() == "type") continue;
        j[it.key()] = it.value();
      }
    } else if (l.type == "dense") {
      j["units"] = l.units;
      j["activation"] = l.activation;
      if (!l.use_bias) j["use_bias"] = false;
    } else if (l.type == "dropout") {
      j["rate"] = l.rate;
    }
    if (!l.name.empty()) j["name"] = l.name;
    out_layers.push_back(std::move(j));
  }
  if (!inputs.has_value()) {
    return json{{"input_shape", layers[0].input_shape},
                {"layers", std::move(out_layers)}};
  }
  json embeddings = json::array();
  for (const Embedding& e : inputs->embeddings) {
    embeddings.push_back(EmbeddingJson(e));
  }
  return json{{"input_shape", json::array({inputs->dense})},
              {"categorical_columns", inputs->categorical},
              {"embeddings", std::move(embeddings)},
              {"layers", std::move(out_layers)}};
}

json OptimizerJson(const Optimizer& o) {
  json j = {{"type", o.type}};
  if (o.learning_rate != 0) j["learning_rate"] = o.learning_rate;
  if (o.type == "sgd") {
    j["momentum"] = o.momentum;
    j["nesterov"] = o.nesterov;
  } else if (o.type == "adam") {
    j["beta_1"] = o.beta_1;
    j["beta_2"] = o.beta_2;
    j["epsilon"] = o.epsilon;
    j["amsgrad"] = o.amsgrad;
  } else if (o.type == "adagrad") {
    j["initial_accumulator_value"] = o.initial_accumulator_value;
    j["epsilon"] = o.epsilon;
  } else if (o.type == "rmsprop") {
    j["rho"] = o.rho;
    j["momentum"] = o.momentum;
    j["epsilon"] = o.epsilon;
    j["centered"] = o.centered;
  }
  return j;
}

json ModelState::JobJson(const FitOptions& fit, json data,
                         json strategy) const {
  return json{{"name", options.name},
              {"model", model_json},
              {"loss", loss},
              {"metrics", metrics},
              {"optimizer", optimizer_json},
              {"data", std::move(data)},
              {"strategy", std::move(strategy)},
              {"epochs", fit.epochs},
              {"batch_size", fit.batch_size},
              {"shuffle_seed", fit.shuffle_seed},
              {"seed", options.seed},
              {"evaluation",
               {{"every_epochs",
                 fit.validation.has_value() ? fit.validation_freq : 0}}}};
}

}  // namespace internal

// Sequential -----------------------------------------------------------------

Sequential::Sequential(std::vector<Layer> layers, ModelOptions options)
    : state_(std::make_unique<internal::ModelState>()) {
  state_->layers = std::move(layers);
  state_->options = std::move(options);
  state_->strategy = GetStrategy();
}

Sequential::Sequential(Inputs inputs, std::vector<Layer> layers,
                       ModelOptions options)
    : Sequential(std::move(layers), std::move(options)) {
  state_->inputs = std::move(inputs);
}

Sequential::Sequential(KerasModel keras, ModelOptions options)
    : Sequential(std::vector<Layer>{}, std::move(options)) {
  state_->keras = std::move(keras.config_json);
}

Sequential::~Sequential() = default;
Sequential::Sequential(Sequential&&) noexcept = default;
Sequential& Sequential::operator=(Sequential&&) noexcept = default;

absl::Status Sequential::Compile(Optimizer optimizer, Loss loss,
                                 std::vector<std::string> metrics) {
  internal::ModelState& s = *state_;
  s.compiled = false;
  s.trainer.reset();
  s.embedding.reset();
  s.cluster_tables.reset();
  s.cluster_table_rows.clear();
  s.cluster_params.reset();
  s.mirrored.reset();
  s.weights_set = false;
  s.epochs_trained = 0;
  json model_json;
  if (s.keras.has_value()) {
    model_json = json::parse(*s.keras, nullptr, /*allow_exceptions=*/false);
    if (model_json.is_discarded() || !model::IsKerasModelJson(model_json)) {
      return absl::InvalidArgumentError(
          "job.model: a KerasModel must hold a Keras model config, the JSON "
          "of model.to_json() ({\"class_name\": \"Sequential\" or "
          "\"Functional\", \"config\": {...}})");
    }
  } else {
    STRATA_ASSIGN_OR_RETURN(model_json,
                            internal::ModelJson(s.layers, s.inputs));
  }
  json optimizer_json = internal::OptimizerJson(optimizer);
  json loss_json = loss.name;
  if (loss.from_logits || loss.delta != 1.0) {
    loss_json = {{"name", loss.name}};
    if (loss.from_logits) loss_json["from_logits"] = true;
    if (loss.delta != 1.0) loss_json["delta"] = loss.delta;
  }
  const json job = {{"name", s.options.name},
                    {"model", model_json},
                    {"loss", loss_json},
                    {"metrics", metrics},
                    {"optimizer", optimizer_json},
                    {"data", PlaceholderData(s.inputs.has_value())},
                    {"seed", s.options.seed}};
  STRATA_ASSIGN_OR_RETURN(JobSpec spec, ParseJob(job));
  if (s.inputs.has_value()) {
    STRATA_ASSIGN_OR_RETURN(s.embedding, EmbeddingTrainer::Create(spec));
  } else {
    STRATA_ASSIGN_OR_RETURN(s.trainer, LocalTrainer::Create(spec));
  }
  s.model_json = std::move(model_json);
  s.optimizer_json = std::move(optimizer_json);
  s.loss = std::move(loss_json);
  s.metrics = std::move(metrics);
  s.compiled = true;
  return absl::OkStatus();
}

absl::StatusOr<History> Sequential::Fit(const Dataset& train,
                                        const FitOptions& options) {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "Fit"));
  return state_->strategy->Fit(*state_, train, options);
}

absl::StatusOr<EvalResult> Sequential::Evaluate(const Dataset& data,
                                                int64_t batch_size) const {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "Evaluate"));
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Evaluate: batch_size must be >= 1, got ", batch_size));
  }
  if (state_->inputs.has_value()) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
                            internal::OpenCriteo(data, "Evaluate"));
    STRATA_ASSIGN_OR_RETURN(
        BinaryEvaluation e,
        EvaluateBinary(state_->embedding->embedding_model(), state_->tables(),
                       state_->model(), Model::Views(state_->params()),
                       *reader, batch_size));
    EvalResult r;
    r.loss = e.loss;
    r.accuracy = e.accuracy;
    r.examples = e.examples;
    r.auc = e.auc;
    r.log_loss = e.log_loss;
    return r;
  }
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const ::strata::Dataset> loaded,
                          data.Load());
  STRATA_RETURN_IF_ERROR(
      internal::CheckFeatures(*loaded, state_->model(), "Evaluate"));
  STRATA_ASSIGN_OR_RETURN(
      StepStats stats,
      state_->model().Evaluate(Model::Views(state_->params()), *loaded,
                               batch_size,
                               state_->local_layers().workspace()));
  EvalResult r;
  r.loss = stats.loss;
  r.accuracy = stats.accuracy;
  r.examples = stats.examples;
  return r;
}

absl::StatusOr<std::vector<float>> Sequential::Predict(
    const Dataset& data, int64_t batch_size) const {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "Predict"));
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Predict: batch_size must be >= 1, got ", batch_size));
  }
  if (state_->inputs.has_value()) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> reader,
                            internal::OpenCriteo(data, "Predict"));
    std::vector<float> out;
    STRATA_RETURN_IF_ERROR(
        EvaluateBinary(state_->embedding->embedding_model(), state_->tables(),
                       state_->model(), Model::Views(state_->params()),
                       *reader, batch_size, &out)
            .status());
    return out;
  }
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const ::strata::Dataset> loaded,
                          data.Load());
  STRATA_RETURN_IF_ERROR(
      internal::CheckFeatures(*loaded, state_->model(), "Predict"));
  const Model& model = state_->model();
  const std::vector<absl::Span<const float>> views =
      Model::Views(state_->params());
  std::vector<float> out;
  out.reserve(loaded->size * model.num_outputs());
  std::vector<float> chunk;
  // The trainer's workspace: it holds the model's state (moving statistics).
  ModelWorkspace* workspace = state_->local_layers().workspace();
  for (int64_t start = 0; start < loaded->size; start += batch_size) {
    const int64_t b = std::min(batch_size, loaded->size - start);
    STRATA_RETURN_IF_ERROR(model.Predict(
        views, loaded->x.data() + start * loaded->features, b, &chunk,
        workspace));
    out.insert(out.end(), chunk.begin(), chunk.end());
  }
  return out;
}

absl::StatusOr<std::vector<float>> Sequential::Predict(
    absl::Span<const float> x) const {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "Predict"));
  if (state_->inputs.has_value()) {
    return absl::InvalidArgumentError(
        "Predict: a model with embeddings takes categorical ids beside the "
        "dense features; pass a datasets::Criteo dataset");
  }
  const Model& model = state_->model();
  const int64_t features = model.num_features();
  if (static_cast<int64_t>(x.size()) % features != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Predict: ", x.size(), " values are not a whole number of examples of ",
        features, " features"));
  }
  const int64_t n = static_cast<int64_t>(x.size()) / features;
  const std::vector<absl::Span<const float>> views =
      Model::Views(state_->params());
  std::vector<float> out;
  out.reserve(n * model.num_outputs());
  std::vector<float> chunk;
  ModelWorkspace workspace;
  constexpr int64_t kBatch = 1024;
  for (int64_t start = 0; start < n; start += kBatch) {
    const int64_t b = std::min(kBatch, n - start);
    STRATA_RETURN_IF_ERROR(model.Predict(views, x.data() + start * features,
                                         b, &chunk, &workspace));
    out.insert(out.end(), chunk.begin(), chunk.end());
  }
  return out;
}

absl::StatusOr<std::string> Sequential::Summary() const {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "Summary"));
  const internal::ModelState& s = *state_;
  bool dense_chain = !s.keras.has_value();
  for (const Layer& l : s.layers) {
    dense_chain = dense_chain && (l.type == "dense" || l.type == "dropout" ||
                                  l.type == "flatten");
  }
  if (!dense_chain) {
    // A layer graph: each layer's output shape and parameters from it.
    const model::Graph& g = s.model().graph();
    std::string out = absl::StrFormat(
        "Model: \"%s\" (%s, %d replicas in sync)\n", s.options.name,
        s.strategy->name(), s.strategy->num_replicas_in_sync());
    const std::string rule(65, '=');
    absl::StrAppendFormat(&out, "%-30s%-20s%s\n%s\n", "Layer (type)",
                          "Output Shape", "Param #", rule);
    int64_t state = 0;
    for (int i = 0; i < g.num_layers(); ++i) {
      const model::Layer& l = g.layer(i);
      int64_t params = 0;
      for (const model::WeightDef& w : l.weights()) {
        params += NumElements(w.shape);
        if (!w.trainable) state += NumElements(w.shape);
      }
      absl::StrAppendFormat(&out, "%-30s%-20s%d\n",
                            absl::StrCat(l.name(), " (", l.class_name(), ")"),
                            KerasShape(l.output_shape()), params);
    }
    absl::StrAppendFormat(
        &out, "%s\nTotal params: %d\nTrainable params: %d\n"
              "Non-trainable params: %d\n",
        rule, s.model().num_parameters() + state, s.model().num_parameters(),
        state);
    return out;
  }
  ModelSpec spec;
  for (const Layer& l : s.layers) {
    // Compile accepted the layers, so every type is one of these.
    LayerSpec ls;
    ls.type = l.type == "dense"     ? LayerType::kDense
              : l.type == "dropout" ? LayerType::kDropout
                                    : LayerType::kFlatten;
    ls.name = l.name;
    spec.layers.push_back(std::move(ls));
  }
  const std::vector<std::string> names = ResolveLayerNames(spec);
  int64_t width = 1;
  for (int64_t d : s.layers[0].input_shape) width *= d;
  if (s.inputs.has_value()) width = s.model().num_features();
  const std::string rule(65, '=');
  std::string out = absl::StrFormat("Model: \"%s\" (%s, %d replicas in sync)\n",
                                    s.options.name, s.strategy->name(),
                                    s.strategy->num_replicas_in_sync());
  absl::StrAppendFormat(&out, "%-30s%-20s%s\n%s\n", "Layer (type)",
                        "Output Shape", "Param #", rule);
  if (s.inputs.has_value()) {
    // Tables have no vocabulary: their rows come and go as ids are seen.
    for (const Embedding& e : s.inputs->embeddings) {
      const int64_t dim =
          e.combiner == "concat"
              ? e.output_dim * static_cast<int64_t>(e.columns.size())
              : e.output_dim;
      absl::StrAppendFormat(&out, "%-30s%-20s%s\n",
                            absl::StrCat(e.table, " (Embedding)"),
                            ShapeString(dim),
                            absl::StrCat(e.output_dim, " per row"));
    }
  }
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const Layer& l = s.layers[i];
    int64_t params = 0;
    if (l.type == "dense") {
      params = width * l.units + (l.use_bias ? l.units : 0);
      width = l.units;
    }
    absl::StrAppendFormat(
        &out, "%-30s%-20s%d\n",
        absl::StrCat(names[i], " (", KerasTypeName(l.type), ")"),
        ShapeString(width), params);
  }
  absl::StrAppendFormat(&out, "%s\nTotal params: %d\n", rule,
                        s.model().num_parameters());
  return out;
}

std::vector<std::pair<std::string, int64_t>> Sequential::TableRows() const {
  const internal::ModelState& s = *state_;
  if (s.cluster_tables != nullptr) return s.cluster_table_rows;
  std::vector<std::pair<std::string, int64_t>> out;
  if (s.embedding == nullptr) return out;
  for (const auto& [name, stats] : s.embedding->tables().Stats()) {
    out.emplace_back(name, stats.rows);
  }
  return out;
}

bool Sequential::compiled() const { return state_->compiled; }

int64_t Sequential::num_features() const {
  return state_->compiled ? state_->model().num_features() : 0;
}

int64_t Sequential::num_outputs() const {
  return state_->compiled ? state_->model().num_outputs() : 0;
}

const Strategy& Sequential::strategy() const { return *state_->strategy; }

}  // namespace strata::sdk

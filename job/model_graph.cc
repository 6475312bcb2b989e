// The model part of a job as a layer graph: the GraphSpec of any model
// form (Keras JSON, the short list), and the checks of models that are not
// dense chains (the graph builds; one [units] output that fits the loss).
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "job/job.h"
#include "job/job_internal.h"
#include "model/graph.h"

namespace strata {

using job_internal::PathError;
using job_internal::Quote;
using json = nlohmann::json;

namespace {

json InitializerJson(const InitializerSpec& init, bool seed_set) {
  json j = {{"type", InitializerTypeName(init.type)},
            {"value", init.value},
            {"minval", init.minval},
            {"maxval", init.maxval},
            {"mean", init.mean},
            {"stddev", init.stddev}};
  if (seed_set) j["seed"] = init.seed;
  return j;
}

}  // namespace

namespace job_internal {

// Keras's automatic layer name base: the class in snake_case ("Conv2D" ->
// "conv2d", "BatchNormalization" -> "batch_normalization").
std::string KerasAutoName(const std::string& cls) {
  std::string out;
  for (size_t i = 0; i < cls.size(); ++i) {
    const char c = cls[i];
    const bool upper = c >= 'A' && c <= 'Z';
    if (upper && i > 0) {
      const char prev = cls[i - 1];
      const bool prev_lower = (prev >= 'a' && prev <= 'z');
      const bool next_lower =
          i + 1 < cls.size() && cls[i + 1] >= 'a' && cls[i + 1] <= 'z';
      const bool prev_upper = prev >= 'A' && prev <= 'Z';
      if (prev_lower || (prev_upper && next_lower)) out.push_back('_');
    }
    out.push_back(upper ? static_cast<char>(c - 'A' + 'a') : c);
  }
  return out;
}


// The checks of a model that is not a dense chain: the graph builds (every
// layer, argument and shape), one output of shape [units] that fits the
// loss.
absl::Status ValidateGraphAndLoss(const ModelSpec& model,
                                  absl::string_view loss) {
  absl::StatusOr<model::GraphSpec> spec = ModelGraphSpec(model);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<model::Graph> graph =
      model::Graph::Build(*spec, 0, "job.model");
  if (!graph.ok()) return graph.status();
  if (graph->num_outputs() != 1) {
    return PathError("job.model",
                     absl::StrCat("the model has ", graph->num_outputs(),
                                  " outputs; training takes one (the data "
                                  "holds one label per example)"));
  }
  const Shape& out = graph->output_shape(0);
  const std::string name = graph->output_layer(0).name();
  if (out.size() != 1) {
    return PathError("job.model",
                     absl::StrCat("the output (layer '", name, "') is ",
                                  ShapeString(out),
                                  " per example; it must be [units] (add a "
                                  "Flatten or a global pooling before the "
                                  "output layer)"));
  }
  const std::string act = graph->output_layer(0).output_activation();
  const int64_t units = out[0];
  if (loss == "sparse_categorical_crossentropy" ||
      loss == "categorical_crossentropy") {
    if (act != "softmax" && !model.from_logits) {
      return PathError("job.loss",
                       absl::StrCat(loss, " needs a softmax output (layer '",
                                    name, "' ends in ",
                                    act.empty() ? "no activation" : act,
                                    "), or {\"from_logits\": true}"));
    }
    if (units < 2) {
      return PathError("job.loss",
                       absl::StrCat(loss, " needs an output of >= 2 units "
                                    "(one per class); layer '", name,
                                    "' gives ", units));
    }
  } else if (loss == "binary_crossentropy") {
    if (act != "sigmoid" && !model.from_logits) {
      return PathError("job.loss",
                       absl::StrCat(loss, " needs a sigmoid output (layer '",
                                    name, "' ends in ",
                                    act.empty() ? "no activation" : act,
                                    "), or {\"from_logits\": true}"));
    }
    if (units != 1) {
      return PathError("job.loss",
                       absl::StrCat(loss, " needs an output of 1 unit "
                                    "(labels 0/1); layer '", name,
                                    "' gives ", units));
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

}  // namespace job_internal

bool IsDenseChain(const ModelSpec& model) {
  if (model.keras.has_value()) return false;
  for (const LayerSpec& l : model.layers) {
    if (l.type == LayerType::kOther) return false;
  }
  return true;
}

absl::StatusOr<model::GraphSpec> ModelGraphSpec(const ModelSpec& spec) {
  if (!spec.embeddings.empty() && !spec.keras.has_value()) {
    return ModelGraphSpec(DenseModelSpec(spec));
  }
  if (spec.keras.has_value()) return *spec.keras;
  if (spec.input_shape.empty()) {
    return PathError("job.model.input_shape", "must not be empty");
  }
  if (spec.layers.empty()) {
    return PathError("job.model.layers", "must hold at least one layer");
  }
  model::GraphSpec g;
  g.name = "sequential";
  g.sequential = true;
  g.inputs.push_back({"input_1", spec.input_shape});
  const std::vector<std::string> names = ResolveLayerNames(spec);
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    model::LayerConfig c;
    c.name = names[i];
    switch (l.type) {
      case LayerType::kDense:
        c.class_name = "Dense";
        c.config = {{"units", l.units},
                    {"activation", ActivationName(l.activation)},
                    {"use_bias", l.use_bias},
                    {"kernel_initializer",
                     InitializerJson(l.kernel_initializer,
                                     l.kernel_seed_set)},
                    {"bias_initializer",
                     InitializerJson(l.bias_initializer, l.bias_seed_set)}};
        break;
      case LayerType::kDropout:
        c.class_name = "Dropout";
        c.config = {{"rate", l.rate}};
        break;
      case LayerType::kFlatten:
        c.class_name = "Flatten";
        c.config = json::object();
        break;
      case LayerType::kOther:
        c.class_name = l.class_name;
        c.config = l.config.is_object() ? l.config : json::object();
        break;
    }
    g.layers.push_back(std::move(c));
  }
  return g;
}



}  // namespace strata

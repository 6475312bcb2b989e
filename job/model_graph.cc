// The model part of a job as a layer graph: the GraphSpec of any model
// form (Keras JSON, the short list), and the checks of models that are not
// dense chains (the graph builds; one [units] output that fits the loss).
#include <map>
#include <set>
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
  }
  return job_internal::CheckKnownLoss(loss);
}

// Binds each input of a Keras model with embeddings to the data by name:
// job.model.inputs maps an input's name to its sources, "dense" (the
// example's dense columns) and embedding table names (the outputs of the
// embeddings on that table, in job.model.embeddings order), one string or
// a list. Without job.model.inputs, a model whose every input is named
// "dense" or after a table is bound by those names; any other model reads
// its inputs in order (the dense columns, then the embeddings' outputs).
//
// One example's row holds the graph's inputs side by side, the dense
// columns first, then the embeddings' outputs in job.model.embeddings
// order: binding reorders graph->inputs and model->embeddings to that
// layout, so the runtime needs no gather.
absl::Status BindInputs(const Object& o, ModelSpec* model,
                        model::GraphSpec* graph) {
  std::set<std::string> tables;
  for (const EmbeddingSpec& e : model->embeddings) tables.insert(e.table);
  const bool named = o.Has("inputs");
  std::vector<std::vector<std::string>> sources(graph->inputs.size());
  if (named) {
    const std::string path = o.Path("inputs");
    const json& inputs = o.At("inputs");
    if (!inputs.is_object()) {
      return PathError(path, absl::StrCat("expected an object of input name "
                                          "to sources, got ",
                                          Show(inputs)));
    }
    if (tables.count("dense") > 0) {
      return PathError(path, "a table named 'dense' is ambiguous with the "
                             "dense columns; rename the table");
    }
    for (const auto& item : inputs.items()) {
      const std::string ipath = absl::StrCat(path, ".", item.key());
      size_t i = 0;
      while (i < graph->inputs.size() && graph->inputs[i].name != item.key()) {
        ++i;
      }
      if (i == graph->inputs.size()) {
        std::string names;
        for (const model::InputSpec& in : graph->inputs) {
          absl::StrAppend(&names, names.empty() ? "" : ", ", in.name);
        }
        return PathError(ipath, absl::StrCat("the model has no input ",
                                             Quote(item.key()),
                                             "; its inputs: ", names));
      }
      const json& v = item.value();
      std::vector<std::string> list;
      if (v.is_string()) {
        list.push_back(v.get<std::string>());
      } else if (v.is_array() && !v.empty()) {
        for (const json& s : v) {
          if (!s.is_string()) {
            return PathError(ipath, absl::StrCat("expected source names, got ",
                                                 Show(s)));
          }
          list.push_back(s.get<std::string>());
        }
      } else {
        return PathError(ipath,
                         absl::StrCat("expected \"dense\", a table name or a "
                                      "non-empty list of them, got ",
                                      Show(v)));
      }
      for (const std::string& s : list) {
        if (s != "dense" && tables.count(s) == 0) {
          return PathError(ipath, absl::StrCat(Quote(s), " is neither \"dense\" "
                                               "nor a table of "
                                               "job.model.embeddings"));
        }
      }
      sources[i] = std::move(list);
    }
    for (size_t i = 0; i < graph->inputs.size(); ++i) {
      if (sources[i].empty()) {
        return PathError(path, absl::StrCat("input ",
                                            Quote(graph->inputs[i].name),
                                            " is bound to nothing"));
      }
    }
  } else {
    for (size_t i = 0; i < graph->inputs.size(); ++i) {
      const std::string& name = graph->inputs[i].name;
      if (name != "dense" && tables.count(name) == 0) return absl::OkStatus();
      sources[i] = {name};
    }
    if (graph->inputs.size() == 1 && sources[0][0] == "dense") {
      return absl::OkStatus();
    }
  }
  // Each source once; "dense" first in its input; every table used.
  const std::string where = named ? o.Path("inputs") : o.Path("keras");
  std::map<std::string, std::string> used;  // source -> input
  int dense_input = -1;
  for (size_t i = 0; i < sources.size(); ++i) {
    for (size_t k = 0; k < sources[i].size(); ++k) {
      const std::string& s = sources[i][k];
      auto [it, fresh] = used.emplace(s, graph->inputs[i].name);
      if (!fresh) {
        return PathError(where, absl::StrCat(Quote(s), " feeds both input ",
                                             Quote(it->second), " and input ",
                                             Quote(graph->inputs[i].name)));
      }
      if (s == "dense") {
        if (k != 0) {
          return PathError(where, absl::StrCat(
              "input ", Quote(graph->inputs[i].name),
              ": \"dense\" must be its first source"));
        }
        dense_input = static_cast<int>(i);
      }
    }
  }
  for (const std::string& t : tables) {
    if (used.count(t) == 0) {
      return PathError(where, absl::StrCat("the embeddings on table ",
                                           Quote(t), " feed no input"));
    }
  }
  // Widths: each input's floats are its sources' (dense takes the rest).
  std::map<std::string, int64_t> table_width;
  for (const EmbeddingSpec& e : model->embeddings) {
    table_width[e.table] += e.combiner == "concat"
                                ? static_cast<int64_t>(e.columns.size()) *
                                      e.output_dim
                                : e.output_dim;
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    int64_t width = 0;
    for (const std::string& s : sources[i]) {
      if (s != "dense") width += table_width[s];
    }
    const int64_t floats = NumElements(graph->inputs[i].shape);
    const bool dense = static_cast<int>(i) == dense_input;
    if (dense ? floats <= width : floats != width) {
      return PathError(where, absl::StrCat(
          "input ", Quote(graph->inputs[i].name), " takes ", floats,
          " floats per example; its embeddings give ", width,
          dense ? ", leaving no dense columns" : ""));
    }
  }
  // The row's layout: the dense input first, then the others in order;
  // the embeddings in the order their tables are read.
  std::vector<size_t> order;
  if (dense_input >= 0) order.push_back(static_cast<size_t>(dense_input));
  for (size_t i = 0; i < sources.size(); ++i) {
    if (static_cast<int>(i) != dense_input) order.push_back(i);
  }
  std::vector<model::InputSpec> inputs;
  std::vector<EmbeddingSpec> embeddings;
  for (size_t i : order) {
    inputs.push_back(graph->inputs[i]);
    for (const std::string& s : sources[i]) {
      for (const EmbeddingSpec& e : model->embeddings) {
        if (e.table == s) embeddings.push_back(e);
      }
    }
  }
  graph->inputs = std::move(inputs);
  model->embeddings = std::move(embeddings);
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

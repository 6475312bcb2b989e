#include "model/keras_format.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace strata {
namespace model {
namespace {

using json = nlohmann::json;

absl::Status Err(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// [null, 28, 28, 1] -> {28, 28, 1}.
absl::Status ShapeWithoutBatch(const json& v, const std::string& path,
                               Shape* out) {
  if (!v.is_array() || v.size() < 2) {
    return Err(path, absl::StrCat("expected [null, d1, ...] (the batch "
                                  "dimension first), got ",
                                  ShowJson(v)));
  }
  out->clear();
  for (size_t i = 1; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || v[i].get<int64_t>() < 1) {
      return Err(path, absl::StrCat("dimension ", i, " is ", ShowJson(v[i]),
                                    ": every dimension but the batch must be "
                                    "a known positive integer"));
    }
    out->push_back(v[i].get<int64_t>());
  }
  return absl::OkStatus();
}

// The input shape a layer config declares, if any.
absl::Status DeclaredShape(const json& layer, const std::string& path,
                           bool* found, Shape* shape) {
  *found = false;
  const json& config = layer.contains("config") ? layer["config"] : json();
  if (config.is_object()) {
    for (const char* key : {"batch_input_shape", "batch_shape"}) {
      if (config.contains(key) && !config[key].is_null()) {
        *found = true;
        return ShapeWithoutBatch(config[key], absl::StrCat(path, ".config.", key),
                                 shape);
      }
    }
    if (config.contains("input_shape") && config["input_shape"].is_array()) {
      json with_batch = json::array({nullptr});
      for (const json& d : config["input_shape"]) with_batch.push_back(d);
      *found = true;
      return ShapeWithoutBatch(with_batch, path + ".config.input_shape",
                               shape);
    }
  }
  if (layer.contains("build_config") && layer["build_config"].is_object() &&
      layer["build_config"].contains("input_shape") &&
      layer["build_config"]["input_shape"].is_array()) {
    *found = true;
    return ShapeWithoutBatch(layer["build_config"]["input_shape"],
                             path + ".build_config.input_shape", shape);
  }
  return absl::OkStatus();
}

std::string LayerName(const json& layer) {
  if (layer.contains("name") && layer["name"].is_string()) {
    return layer["name"].get<std::string>();
  }
  if (layer.contains("config") && layer["config"].is_object() &&
      layer["config"].contains("name") && layer["config"]["name"].is_string()) {
    return layer["config"]["name"].get<std::string>();
  }
  return "";
}

// A [name, node, tensor(, kwargs)] list.
absl::Status ParseRefList(const json& v, const std::string& path,
                          TensorRef* ref) {
  if (!v.is_array() || v.size() < 3 || !v[0].is_string() ||
      !v[1].is_number_integer() || !v[2].is_number_integer()) {
    return Err(path, absl::StrCat("expected [layer_name, node_index, "
                                  "tensor_index], got ",
                                  ShowJson(v)));
  }
  ref->layer = v[0].get<std::string>();
  ref->node_index = v[1].get<int>();
  ref->tensor_index = v[2].get<int>();
  return absl::OkStatus();
}

// True for a [name, node, tensor] reference.
bool IsRefList(const json& v) {
  return v.is_array() && v.size() >= 3 && v[0].is_string() &&
         v[1].is_number_integer() && v[2].is_number_integer();
}

// tf.keras 2.x call keyword arguments (the fourth entry of an inbound
// reference): tensors passed as further arguments (Cross()(x0, x)) are
// further inputs; training and mask are ignored; anything else is refused.
absl::Status ParseCallKwargs(const json& v, const std::string& path,
                             std::vector<TensorRef>* extra) {
  if (!v.is_object()) return absl::OkStatus();
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() == "training" || it.key() == "mask") continue;
    if (IsRefList(it.value())) {
      TensorRef ref;
      STRATA_RETURN_IF_ERROR(ParseRefList(it.value(), path, &ref));
      extra->push_back(ref);
      continue;
    }
    return Err(path, absl::StrCat("call argument '", it.key(),
                                  "' is not supported"));
  }
  return absl::OkStatus();
}

// Keras 3: every __keras_tensor__ under `v`, in order.
absl::Status CollectKerasTensors(const json& v, const std::string& path,
                                 std::vector<TensorRef>* refs) {
  if (v.is_object()) {
    if (v.contains("class_name") && v["class_name"] == "__keras_tensor__") {
      if (!v.contains("config") || !v["config"].contains("keras_history")) {
        return Err(path, "a __keras_tensor__ without keras_history");
      }
      TensorRef ref;
      STRATA_RETURN_IF_ERROR(ParseRefList(v["config"]["keras_history"],
                                          path + ".keras_history", &ref));
      refs->push_back(ref);
      return absl::OkStatus();
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      STRATA_RETURN_IF_ERROR(
          CollectKerasTensors(it.value(), path + "." + it.key(), refs));
    }
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      STRATA_RETURN_IF_ERROR(
          CollectKerasTensors(v[i], absl::StrCat(path, "[", i, "]"), refs));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseInboundNodes(const json& nodes, const std::string& path,
                               std::vector<std::vector<TensorRef>>* calls) {
  if (!nodes.is_array()) {
    return Err(path, absl::StrCat("expected a list, got ", ShowJson(nodes)));
  }
  for (size_t c = 0; c < nodes.size(); ++c) {
    const json& node = nodes[c];
    const std::string npath = absl::StrCat(path, "[", c, "]");
    std::vector<TensorRef> refs;
    if (node.is_object()) {  // Keras 3
      if (node.contains("args")) {
        STRATA_RETURN_IF_ERROR(
            CollectKerasTensors(node["args"], npath + ".args", &refs));
      }
      if (node.contains("kwargs") && node["kwargs"].is_object()) {
        for (auto it = node["kwargs"].begin(); it != node["kwargs"].end();
             ++it) {
          std::vector<TensorRef> kw;
          STRATA_RETURN_IF_ERROR(CollectKerasTensors(
              it.value(), npath + ".kwargs." + it.key(), &kw));
          if (!kw.empty()) {
            return Err(npath, absl::StrCat("tensor keyword argument '",
                                           it.key(), "' is not supported"));
          }
        }
      }
    } else if (node.is_array()) {  // tf.keras 2.x
      std::vector<TensorRef> extra;
      for (size_t i = 0; i < node.size(); ++i) {
        TensorRef ref;
        const std::string rpath = absl::StrCat(npath, "[", i, "]");
        STRATA_RETURN_IF_ERROR(ParseRefList(node[i], rpath, &ref));
        refs.push_back(ref);
        if (node[i].size() > 3) {
          STRATA_RETURN_IF_ERROR(ParseCallKwargs(node[i][3], rpath, &extra));
        }
      }
      refs.insert(refs.end(), extra.begin(), extra.end());
    } else {
      return Err(npath, absl::StrCat("expected a call, got ", ShowJson(node)));
    }
    calls->push_back(std::move(refs));
  }
  return absl::OkStatus();
}

// input_layers / output_layers: [[name, 0, 0], ...], one [name, 0, 0], or
// (Keras 3) a dict of them.
absl::Status ParseEndpoints(const json& v, const std::string& path,
                            std::vector<TensorRef>* refs) {
  if (v.is_array() && !v.empty() && v[0].is_string()) {
    TensorRef ref;
    STRATA_RETURN_IF_ERROR(ParseRefList(v, path, &ref));
    refs->push_back(ref);
    return absl::OkStatus();
  }
  if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      STRATA_RETURN_IF_ERROR(
          ParseEndpoints(v[i], absl::StrCat(path, "[", i, "]"), refs));
    }
    return absl::OkStatus();
  }
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      STRATA_RETURN_IF_ERROR(
          ParseEndpoints(it.value(), path + "." + it.key(), refs));
    }
    return absl::OkStatus();
  }
  return Err(path, absl::StrCat("expected [layer_name, 0, 0] entries, got ",
                                ShowJson(v)));
}

const char* const kShortTypes[][2] = {
    {"dense", "Dense"},
    {"activation", "Activation"},
    {"dropout", "Dropout"},
    {"flatten", "Flatten"},
    {"reshape", "Reshape"},
    {"conv1d", "Conv1D"},
    {"conv2d", "Conv2D"},
    {"max_pooling1d", "MaxPooling1D"},
    {"max_pooling2d", "MaxPooling2D"},
    {"average_pooling1d", "AveragePooling1D"},
    {"average_pooling2d", "AveragePooling2D"},
    {"global_average_pooling1d", "GlobalAveragePooling1D"},
    {"global_average_pooling2d", "GlobalAveragePooling2D"},
    {"global_max_pooling1d", "GlobalMaxPooling1D"},
    {"global_max_pooling2d", "GlobalMaxPooling2D"},
    {"batch_normalization", "BatchNormalization"},
    {"layer_normalization", "LayerNormalization"},
    {"concatenate", "Concatenate"},
    {"add", "Add"},
    {"multiply", "Multiply"},
    {"dot", "Dot"},
    {"embedding", "Embedding"},
    {"dot_interaction", "DotInteraction"},
    {"cross", "Cross"},
};

}  // namespace

std::string ClassOfShortType(const std::string& type) {
  for (const auto& e : kShortTypes) {
    if (type == e[0]) return e[1];
  }
  return "";
}

std::string ShortTypeNames() {
  std::string out;
  for (const auto& e : kShortTypes) {
    if (!out.empty()) out += ", ";
    out += e[0];
  }
  return out;
}

bool IsKerasModelJson(const json& value) {
  return value.is_object() && value.contains("class_name") &&
         value.contains("config");
}

absl::StatusOr<GraphSpec> ParseKerasModel(const json& value,
                                          const std::string& path) {
  if (!value.is_object() || !value.contains("class_name") ||
      !value["class_name"].is_string()) {
    return Err(path, "expected a Keras model config {\"class_name\", "
                     "\"config\"}");
  }
  const std::string cls = value["class_name"].get<std::string>();
  if (cls != "Sequential" && cls != "Functional" && cls != "Model") {
    return Err(path + ".class_name",
               absl::StrCat("\"", cls, "\" is not a model class this runtime "
                            "reads (Sequential, Functional, Model); a "
                            "subclassed model has no config to read"));
  }
  const json& config = value["config"];
  if (!config.is_object() || !config.contains("layers") ||
      !config["layers"].is_array()) {
    return Err(path + ".config", "expected an object with \"layers\"");
  }
  GraphSpec spec;
  spec.sequential = cls == "Sequential";
  if (config.contains("name") && config["name"].is_string()) {
    spec.name = config["name"].get<std::string>();
  }
  const json& layers = config["layers"];
  const std::string lpath = path + ".config.layers";
  for (size_t i = 0; i < layers.size(); ++i) {
    const json& l = layers[i];
    const std::string p = absl::StrCat(lpath, "[", i, "]");
    if (!l.is_object() || !l.contains("class_name") ||
        !l["class_name"].is_string()) {
      return Err(p, "expected a layer {\"class_name\", \"config\"}");
    }
    const std::string lcls = l["class_name"].get<std::string>();
    const std::string name = LayerName(l);
    if (name.empty()) return Err(p, "the layer has no name");
    if (lcls == "Sequential" || lcls == "Functional" || lcls == "Model") {
      return Err(p, absl::StrCat("layer '", name, "' is a nested model (",
                                 lcls, "); flatten it into one model"));
    }
    if (lcls == "InputLayer") {
      InputSpec in;
      in.name = name;
      bool found = false;
      STRATA_RETURN_IF_ERROR(DeclaredShape(l, p, &found, &in.shape));
      if (!found) {
        return Err(p, absl::StrCat("InputLayer '", name,
                                   "' gives no batch_input_shape or "
                                   "batch_shape"));
      }
      spec.inputs.push_back(std::move(in));
      continue;
    }
    if (spec.sequential && spec.inputs.empty() && spec.layers.empty()) {
      InputSpec in;
      in.name = "input_1";
      bool found = false;
      STRATA_RETURN_IF_ERROR(DeclaredShape(l, p, &found, &in.shape));
      if (!found && config.contains("build_input_shape")) {
        found = true;
        STRATA_RETURN_IF_ERROR(ShapeWithoutBatch(
            config["build_input_shape"], path + ".config.build_input_shape",
            &in.shape));
      }
      if (!found) {
        return Err(p, "the model's input shape is unknown: start with an "
                      "InputLayer or give the first layer batch_input_shape");
      }
      spec.inputs.push_back(std::move(in));
    }
    LayerConfig lc;
    lc.class_name = lcls;
    lc.name = name;
    lc.config = l.contains("config") ? l["config"] : json::object();
    if (lc.config.is_object()) {
      // The input shape of a first layer is the model's, read above.
      lc.config.erase("batch_input_shape");
      lc.config.erase("batch_shape");
      lc.config.erase("input_shape");
    }
    if (!spec.sequential) {
      if (!l.contains("inbound_nodes")) {
        return Err(p, absl::StrCat("layer '", name, "' has no inbound_nodes"));
      }
      STRATA_RETURN_IF_ERROR(
          ParseInboundNodes(l["inbound_nodes"], p + ".inbound_nodes", &lc.calls));
    }
    spec.layers.push_back(std::move(lc));
  }
  if (!spec.sequential) {
    std::vector<TensorRef> ins;
    if (!config.contains("input_layers") || !config.contains("output_layers")) {
      return Err(path + ".config",
                 "a Functional model needs input_layers and output_layers");
    }
    STRATA_RETURN_IF_ERROR(ParseEndpoints(config["input_layers"],
                                          path + ".config.input_layers", &ins));
    STRATA_RETURN_IF_ERROR(ParseEndpoints(config["output_layers"],
                                          path + ".config.output_layers",
                                          &spec.outputs));
    // Inputs in input_layers' order.
    std::vector<InputSpec> ordered;
    for (const TensorRef& r : ins) {
      bool found = false;
      for (const InputSpec& in : spec.inputs) {
        if (in.name == r.layer) {
          ordered.push_back(in);
          found = true;
        }
      }
      if (!found) {
        return Err(path + ".config.input_layers",
                   absl::StrCat("'", r.layer, "' is not an InputLayer"));
      }
    }
    if (ordered.size() != spec.inputs.size()) {
      return Err(path + ".config.input_layers",
                 absl::StrCat("names ", ordered.size(), " inputs; the model "
                              "has ", spec.inputs.size(), " InputLayers"));
    }
    spec.inputs = std::move(ordered);
  }
  if (spec.inputs.empty()) {
    return Err(path + ".config.layers", "the model has no input");
  }
  return spec;
}

json ToKerasJson(const GraphSpec& spec) {
  json layers = json::array();
  for (const InputSpec& in : spec.inputs) {
    json shape = json::array({nullptr});
    for (int64_t d : in.shape) shape.push_back(d);
    json l = {{"class_name", "InputLayer"},
              {"config",
               {{"batch_input_shape", shape},
                {"dtype", "float32"},
                {"sparse", false},
                {"ragged", false},
                {"name", in.name}}}};
    if (!spec.sequential) {
      l["name"] = in.name;
      l["inbound_nodes"] = json::array();
    }
    layers.push_back(std::move(l));
  }
  for (const LayerConfig& lc : spec.layers) {
    json config = lc.config.is_object() ? lc.config : json::object();
    config["name"] = lc.name;
    json l = {{"class_name", lc.class_name}, {"config", config}};
    if (!spec.sequential) {
      l["name"] = lc.name;
      json nodes = json::array();
      for (const auto& call : lc.calls) {
        json refs = json::array();
        for (const TensorRef& r : call) {
          refs.push_back({r.layer, r.node_index, r.tensor_index,
                          json::object()});
        }
        nodes.push_back(refs);
      }
      l["inbound_nodes"] = nodes;
    }
    layers.push_back(std::move(l));
  }
  json config = {{"name", spec.name}, {"layers", layers}};
  if (!spec.sequential) {
    json ins = json::array();
    for (const InputSpec& in : spec.inputs) ins.push_back({in.name, 0, 0});
    json outs = json::array();
    for (const TensorRef& r : spec.outputs) {
      outs.push_back({r.layer, r.node_index, r.tensor_index});
    }
    config["input_layers"] = ins;
    config["output_layers"] = outs;
  }
  return {{"class_name", spec.sequential ? "Sequential" : "Functional"},
          {"config", config},
          {"keras_version", "2.15.0"},
          {"backend", "tensorflow"}};
}

}  // namespace model
}  // namespace strata

// A model as configuration: Keras's layer configs wired into a graph
// (GraphSpec), and ConfigReader, which reads one layer's Keras arguments
// with Keras's names and defaults and refuses what the runtime does not
// support, naming the layer and the argument.
#ifndef STRATA_MODEL_LAYER_CONFIG_H_
#define STRATA_MODEL_LAYER_CONFIG_H_

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/tensor.h"
#include "kernels/initializers.h"
#include "model/activation.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace model {

struct WeightDef;  // model/layer.h

// One tensor of the graph: output `tensor_index` of call `node_index` of
// layer `layer` (Keras's keras_history). An input is its InputLayer's name.
struct TensorRef {
  std::string layer;
  int node_index = 0;
  int tensor_index = 0;
};

// One layer: Keras's class name, its name, and its config object as Keras
// writes it. `calls` lists the layer's calls (Keras's inbound_nodes), each
// the tensors it was called on; empty in a Sequential model (each layer
// takes the one before).
struct LayerConfig {
  std::string class_name;
  std::string name;
  nlohmann::json config = nlohmann::json::object();
  std::vector<std::vector<TensorRef>> calls;
};

// One model input: its name and per-example shape.
struct InputSpec {
  std::string name;
  Shape shape;
};

// A model: inputs, layers (InputLayers excluded), outputs. Sequential
// models have one input, no calls, and their last layer as the output.
struct GraphSpec {
  std::string name = "model";
  bool sequential = true;
  std::vector<InputSpec> inputs;
  std::vector<LayerConfig> layers;
  std::vector<TensorRef> outputs;  // empty in a Sequential model
};

// Reads a layer's config. Every argument read is marked; Finish() refuses
// any other key, except the ones every Keras layer carries whose values
// the runtime honours (name, dtype float32, trainable true, input shapes,
// null regularizers and constraints, channels_last).
// Errors: INVALID_ARGUMENT "<path>: layer 'name' (Class): argument 'arg':
// ..." for a wrong type or value.
class ConfigReader {
 public:
  ConfigReader(const LayerConfig& layer, std::string path);

  const std::string& name() const { return layer_.name; }
  const std::string& class_name() const { return layer_.class_name; }
  bool Has(const std::string& key) const;
  const nlohmann::json& At(const std::string& key) const;
  // "<path>: layer 'name' (Class): argument 'key': what".
  absl::Status ArgError(const std::string& key, const std::string& what) const;
  // "<path>: layer 'name' (Class): what".
  absl::Status LayerError(const std::string& what) const;

  absl::Status Int(const std::string& key, bool required, int64_t def,
                   int64_t min, int64_t max, int64_t* out);
  // An int, or a list of `n` ints (Keras's kernel_size, strides ...).
  absl::Status IntTuple(const std::string& key, size_t n,
                        std::vector<int64_t> def, int64_t min,
                        std::vector<int64_t>* out);
  // A list of ints of any length (Reshape's target_shape), -1 allowed
  // when `allow_minus_one`.
  absl::Status IntList(const std::string& key, bool required,
                       bool allow_minus_one, std::vector<int64_t>* out);
  absl::Status Number(const std::string& key, double def, double min,
                      double max, bool max_inclusive, double* out);
  absl::Status Bool(const std::string& key, bool def, bool* out);
  absl::Status Enum(const std::string& key, const std::string& def,
                    std::initializer_list<const char*> allowed,
                    std::string* out);
  // A name, {"class_name", "config"} object, or null (linear).
  absl::Status ActivationArg(const std::string& key, const std::string& def,
                             Activation* out);
  // An initializer name ("glorot_uniform", "GlorotUniform"), a Keras
  // {"class_name", "config"} object, or the short form {"type", ...}.
  absl::Status Initializer(const std::string& key, InitializerType def,
                           InitializerSpec* out, bool* seed_set);
  // null, "l1", "l2", "l1_l2", or {"class_name": "L1"|"L2"|"L1L2",
  // "config": {"l1", "l2"}}.
  absl::Status Regularizer(const std::string& key, double* l1, double* l2);
  // A weighted layer's kernel_initializer (default `kernel_default`),
  // bias_initializer (zeros), kernel_regularizer and bias_regularizer.
  absl::Status KernelAndBias(InitializerType kernel_default,
                             WeightDef* kernel, WeightDef* bias);
  // Marks `key` as read when absent or equal to `def`; otherwise refuses it
  // as unsupported ("argument 'groups': 2 is not supported (only 1)").
  absl::Status Unsupported(const std::string& key,
                           const nlohmann::json& def);
  // Refuses every key not read and not common to all layers.
  absl::Status Finish();

 private:
  const LayerConfig& layer_;
  std::string path_;
  std::set<std::string> read_;
};

// Short JSON of a value for messages (nlohmann dump, clipped).
std::string ShowJson(const nlohmann::json& value);

}  // namespace model
}  // namespace strata

#endif  // STRATA_MODEL_LAYER_CONFIG_H_

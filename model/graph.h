// A model as a graph of layer nodes: built from a GraphSpec (Keras's
// Sequential or Functional config), shapes inferred, variables named
// "<layer>/<weight>", run forward and backward. Sequential is a chain.
//
// Variables are trainable weights; state variables are the non-trainable
// ones (BatchNormalization's moving statistics), which a training forward
// pass updates. Both are caller-owned float buffers in the order of
// variables() and states(); a layer called several times (shared) has its
// weights once.
//
// The inputs of one example are one row of floats: the graph's inputs in
// order, each flattened (row-major), side by side.
#ifndef STRATA_MODEL_GRAPH_H_
#define STRATA_MODEL_GRAPH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "kernels/initializers.h"
#include "model/layer.h"
#include "model/layer_config.h"

namespace strata {
namespace model {

// One variable of the model. FillInitializer(init, name, kFloat32, shape,
// ...) yields its initial value anywhere (here or on a parameter server).
struct GraphVariable {
  std::string name;   // "conv2d/kernel"
  Shape shape;
  InitializerSpec init;
  double l1 = 0.0;    // regularization (trainable variables only)
  double l2 = 0.0;
};

// Scratch for Graph's passes: per tensor values and gradients, per node
// layer scratch. Thread-compatible: one per thread; it only grows.
class GraphWorkspace {
 public:
  GraphWorkspace() = default;
  GraphWorkspace(GraphWorkspace&&) noexcept = default;
  GraphWorkspace& operator=(GraphWorkspace&&) noexcept = default;

 private:
  friend class Graph;
  std::vector<AlignedFloats> values_;   // per tensor
  std::vector<const float*> value_ptrs_;
  std::vector<AlignedFloats> grads_;    // per tensor
  std::vector<char> grad_set_;          // per tensor: written this pass
  std::vector<LayerScratch> scratch_;   // per node
  // Per node, reused across steps so that a step allocates nothing once
  // the buffers have grown.
  std::vector<ForwardArgs> forward_args_;
  std::vector<BackwardArgs> backward_args_;
  std::vector<char> needs_;             // per tensor
  std::vector<char> fused_;             // per tensor
  std::vector<char> written_;           // per variable
  std::vector<AlignedFloats> temps_;
  std::vector<std::pair<int, float*>> input_adds_;
  std::vector<std::pair<int, float*>> weight_adds_;
};

class Graph {
 public:
  // Builds every layer (CreateLayer) and wires the calls. `seed` derives
  // the seed of every initializer the config leaves unseeded (seed + the
  // layer's index in spec.layers). `path` prefixes error messages
  // ("job.model"). Errors: INVALID_ARGUMENT naming the layer and the field
  // for an unknown class or argument, a call of an unknown layer or input,
  // a cycle, shapes that do not fit, duplicate names, no inputs or outputs.
  static absl::StatusOr<Graph> Build(const GraphSpec& spec, uint64_t seed,
                                     const std::string& path);

  Graph(Graph&&) noexcept = default;
  Graph& operator=(Graph&&) noexcept = default;

  const std::vector<InputSpec>& inputs() const { return inputs_; }
  // Floats per example of all inputs together.
  int64_t num_features() const { return num_features_; }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  const Shape& output_shape(int i) const;
  // The layer that computes output i, and whether that output is the raw
  // output of the layer's activation (for loss fusion).
  const Layer& output_layer(int i) const;
  // True when output i also feeds other layers.
  bool OutputIsConsumed(int i) const {
    return tensor_consumers_[outputs_[i]] > 0;
  }

  const std::vector<GraphVariable>& variables() const { return variables_; }
  const std::vector<GraphVariable>& states() const { return states_; }
  int64_t num_parameters() const;
  int64_t num_state_values() const;
  // Floats of activations, gradients and scratch per example (footprint).
  int64_t ActivationFloatsPerExample() const;
  // Layers in spec order, with their class names ("Conv2D").
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const Layer& layer(int i) const { return *layers_[i]; }
  // The names of the layer classes that appear, for messages.
  bool HasLayerClass(const std::string& class_name) const;

  // Forward pass over `batch` examples of x (batch x num_features()).
  // `states` may be empty when the model has none; `state_out`, when not
  // null and training, receives every state variable's new value (resized
  // to states()'s layout). Errors: INVALID_ARGUMENT from a layer's input
  // check (an Embedding id out of range).
  absl::Status Forward(absl::Span<const absl::Span<const float>> params,
                       absl::Span<const absl::Span<const float>> states,
                       const float* x, int64_t batch, bool training,
                       uint64_t seed, GraphWorkspace* ws,
                       std::vector<std::vector<float>>* state_out) const;
  // Output i of the last Forward (batch x size of output_shape(i)).
  const float* Output(const GraphWorkspace& ws, int i) const;

  // Backward pass after Forward with training true: `output_grads[i]` is
  // d loss / d output i (null: no gradient from it); `preactivation[i]`
  // says it is already d loss / d(pre-activation) of the output layer.
  // Writes every trainable variable's gradient into grads (resized to
  // variables()'s layout) and, when input_grad is not null, d loss / d x
  // (batch x num_features()).
  void Backward(absl::Span<const absl::Span<const float>> params,
                absl::Span<const absl::Span<const float>> states,
                const float* x, int64_t batch, uint64_t seed,
                const std::vector<const float*>& output_grads,
                const std::vector<bool>& preactivation, GraphWorkspace* ws,
                std::vector<std::vector<float>>* grads,
                float* input_grad) const;

  // Adds the regularization losses (sum of l1 |w| + l2 w^2 over the
  // variables) and returns them; when grads is not null adds their
  // gradients too.
  double Regularization(absl::Span<const absl::Span<const float>> params,
                        std::vector<std::vector<float>>* grads) const;

 private:
  // Where a layer weight lives: trainable variable or state, and index.
  struct WeightSlot {
    bool trainable = true;
    int index = 0;
  };
  struct Node {
    int layer = 0;                 // index into layers_
    std::vector<int> inputs;       // tensor ids
    int output = 0;                // tensor id
    bool first_call = true;        // the layer's first node
    bool needs_grad = false;       // its output needs a gradient
  };

  Graph() = default;
  void Prepare(GraphWorkspace* ws, int64_t batch) const;
  // The node's weights, in its layer's order, into *out.
  void NodeWeights(const Node& node,
                   absl::Span<const absl::Span<const float>> params,
                   absl::Span<const absl::Span<const float>> states,
                   std::vector<absl::Span<const float>>* out) const;

  std::vector<InputSpec> inputs_;
  std::vector<int64_t> input_offsets_;  // per input, into an example's row
  int64_t num_features_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::vector<WeightSlot>> layer_weights_;  // per layer
  std::vector<Node> nodes_;                // topological order
  std::vector<Shape> tensor_shapes_;       // inputs first, then nodes
  std::vector<int64_t> tensor_sizes_;      // per example
  std::vector<int> tensor_consumers_;      // per tensor
  std::vector<int> outputs_;               // tensor ids
  std::vector<int> output_nodes_;          // node computing each output
  std::vector<GraphVariable> variables_;
  std::vector<GraphVariable> states_;
  std::vector<bool> input_needs_grad_;     // unused: inputs get grads on demand
};

}  // namespace model
}  // namespace strata

#endif  // STRATA_MODEL_GRAPH_H_

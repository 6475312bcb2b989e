// The Layer interface of the model runtime: a Keras layer built from its
// input shapes, run forward, and run backward into input and weight
// gradients. Layers know nothing of strategies or the wire; a Graph
// (model/graph.h) wires them into a model.
//
// Data is channels-last and row-major, one contiguous Real buffer per
// tensor of `batch` examples, each of the per-example shape (no batch
// dimension). Weights are views in the order of weights(), Keras's order
// (Dense: kernel [in, units], bias; Conv2D: kernel [kh, kw, in, out], bias;
// BatchNormalization: gamma, beta, moving_mean, moving_variance).
#ifndef STRATA_MODEL_LAYER_H_
#define STRATA_MODEL_LAYER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "kernels/initializers.h"
#include "model/real.h"

namespace strata {
namespace model {

// A 64-byte aligned Real array that only grows; contents are scratch.
// Every buffer an Eigen reduction writes into is one of these, so the SIMD
// split of each loop (and with it the rounding) depends only on the
// shapes, never on where malloc put things.
class AlignedFloats {
 public:
  AlignedFloats() = default;
  AlignedFloats(AlignedFloats&& other) noexcept;
  AlignedFloats& operator=(AlignedFloats&& other) noexcept;
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  ~AlignedFloats();
  Real* Resize(size_t n);  // returns data(); n floats are usable
  Real* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  Real* data_ = nullptr;
  size_t capacity_ = 0;
};

// One weight of a layer. `name` is the layer-relative name ("kernel");
// the graph names the variable "<layer>/<name>". Non-trainable weights
// (BatchNormalization's moving statistics) are state: forward in training
// writes their new values, they have no gradient.
struct WeightDef {
  std::string name;
  Shape shape;
  InitializerSpec init;
  bool trainable = true;
  bool seed_set = false;  // init.seed given by the config, else derived
  double l1 = 0.0;        // kernel_regularizer: loss += l1 * sum |w|
  double l2 = 0.0;        //                     loss += l2 * sum w^2
};

// Scratch a layer keeps between its forward and backward pass of one step
// (masks, normalized inputs, argmax positions). One per graph node per
// thread (the graph's workspace owns them).
class LayerScratch {
 public:
  // Buffer `i`, resized to hold n floats.
  Real* Get(size_t i, size_t n);
  // Buffer `i` as written by the last Get(i, ...).
  Real* At(size_t i) const { return buffers_[i].data(); }

 private:
  std::vector<AlignedFloats> buffers_;
};

struct ForwardArgs {
  int64_t batch = 0;
  bool training = false;
  uint64_t seed = 0;          // the step's seed (dropout masks)
  uint64_t layer_index = 0;   // the node's index in the model
  std::vector<const Real*> inputs;        // per input, batch x size
  std::vector<absl::Span<const Real>> weights;  // per weights() entry
  Real* output = nullptr;                 // batch x output size
  // Training only: per weights() entry, where a non-trainable weight's new
  // value goes (null for trainable ones, or when not training).
  std::vector<Real*> state_out;
  LayerScratch* scratch = nullptr;
};

struct BackwardArgs {
  int64_t batch = 0;
  bool training = true;  // as the forward pass this follows
  uint64_t seed = 0;
  uint64_t layer_index = 0;
  std::vector<const Real*> inputs;
  std::vector<absl::Span<const Real>> weights;
  const Real* output = nullptr;        // as forward wrote it
  const Real* output_grad = nullptr;   // d loss / d output
  // True when output_grad is already d loss / d(pre-activation) (the
  // compiled step fuses softmax or sigmoid with its cross-entropy).
  bool grad_is_preactivation = false;
  // Per input: where d loss / d input goes (overwritten), or null when not
  // needed.
  std::vector<Real*> input_grads;
  // Per weights() entry: where d loss / d weight goes (overwritten), null
  // for non-trainable weights.
  std::vector<Real*> weight_grads;
  LayerScratch* scratch = nullptr;
};

// A built layer. Build once, then thread-safe: Forward and Backward are
// const and keep their scratch in the caller's LayerScratch.
class Layer {
 public:
  virtual ~Layer() = default;

  // Keras's class name ("Conv2D") and this layer's name ("conv2d_1").
  virtual std::string class_name() const = 0;
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Sets the input shapes, then the output shape and weights (BuildShapes)
  // for these per-example input shapes. Errors: INVALID_ARGUMENT naming
  // the layer and the argument or input that does not fit ("layer 'conv2d'
  // (Conv2D): expects an input of rank 3 (height, width, channels), got
  // [784]"), or a count of inputs the layer does not take.
  absl::Status Build(const std::vector<Shape>& inputs);

  // Inputs the layer takes: 1 for most; -1: any >= 1; -2: any >= 2.
  virtual int num_inputs() const { return 1; }
  // The output layer's activation, for the compiled step's fusion with the
  // loss: "softmax", "sigmoid", "linear", or "" when the layer has none.
  virtual std::string output_activation() const { return ""; }
  // False when backward does not read its inputs' values and the gradient
  // to its inputs is not needed (lets the graph skip work).
  virtual bool has_weights() const { return !weights_.empty(); }

  // Checks input values the layer cannot take (an Embedding id out of
  // range); the graph calls it before Forward. Errors: INVALID_ARGUMENT
  // naming the layer, the value and where it is.
  virtual absl::Status CheckInputs(const ForwardArgs& args) const {
    return absl::OkStatus();
  }
  virtual void Forward(const ForwardArgs& args) const = 0;
  virtual void Backward(const BackwardArgs& args) const = 0;

  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  const Shape& output_shape() const { return output_shape_; }
  const std::vector<WeightDef>& weights() const { return weights_; }
  std::vector<WeightDef>* mutable_weights() { return &weights_; }

  // The floats a forward pass of one example keeps in scratch (for the
  // footprint estimate); 0 by default.
  virtual int64_t ScratchPerExample() const { return 0; }

 protected:
  // Called by Build with input_shapes_ set: sets output_shape_ and the
  // weights' shapes.
  virtual absl::Status BuildShapes(const std::vector<Shape>& inputs) = 0;
  // "layer 'name' (Class): " + what.
  absl::Status Error(const std::string& what) const;
  // The input of a convolution or pooling over `rank` (1 or 2) spatial
  // axes, (steps, channels) or (height, width, channels): sets its height
  // (1 for rank 1), width and channels. Errors: Error for another rank.
  absl::Status SpatialInput(const Shape& in, int rank, int64_t* h, int64_t* w,
                            int64_t* c) const;

  std::vector<Shape> input_shapes_;
  Shape output_shape_;
  std::vector<WeightDef> weights_;

 private:
  std::string name_;
};

}  // namespace model
}  // namespace strata

#endif  // STRATA_MODEL_LAYER_H_

// The compiled model of a job: a layer graph of the model runtime
// (model/graph.h) with its loss and metrics, run on the CPU (Eigen), plus
// LocalTrainer, the single-process training loop used as the baseline and
// by the SDK. A dense chain (dense / dropout / flatten layers) built for a
// CUDA device ("cuda:N") computes the same on that GPU
// (worker/gpu_model.h): host parameters in, host gradients out.
//
// Parameters live outside the model, one contiguous float buffer per
// trainable variable, in the order of variables() (Keras's weights order:
// per layer, e.g. a Dense's kernel [in, units] then its bias [units]).
// Non-trainable state (BatchNormalization's moving statistics,
// state_variables()) lives in the caller's ModelWorkspace unless passed
// explicitly.
#ifndef STRATA_WORKER_MODEL_H_
#define STRATA_WORKER_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "kernels/initializers.h"
#include "kernels/optimizers.h"
#include "worker/dataset.h"
#include "job/job.h"
#include "model/graph.h"
#include "model/random.h"

namespace strata {

// One trainable variable, named as Keras names it ("dense/kernel",
// "dense/bias", "dense_1/kernel", ...). `init` is complete (type, seed,
// parameters): FillInitializer(init, name, kFloat32, shape, ...) anywhere
// (here or on a parameter server) yields the same values.
struct VariableDef {
  std::string name;
  Shape shape;
  InitializerSpec init;
};

// Results of a step or an evaluation. `loss` is the mean over the examples
// (Keras's reported loss), `accuracy` the fraction classified correctly
// (argmax against the label; a threshold of 0.5 for one output unit).
struct StepStats {
  double loss = 0.0;
  double accuracy = 0.0;
  int64_t examples = 0;
};

class Model;
class GpuWorkspace;  // worker/gpu_model.cc: a stream, cuBLAS, device buffers
struct GpuWorkspaceDeleter {
  void operator()(GpuWorkspace* workspace) const;
};
using GpuWorkspacePtr = std::unique_ptr<GpuWorkspace, GpuWorkspaceDeleter>;
struct GpuModelPlan;  // worker/gpu_model.h

// Scratch buffers for Model's forward and backward passes, and the model's
// non-trainable state for the steps run with this workspace. Reusing one
// across calls avoids allocating in the training loop. Thread-compatible:
// one workspace per thread; it may be shared by models (it grows as
// needed; the state belongs to the last model that used it). For a model
// on a GPU it also holds, created on first use, that thread's CUDA stream,
// cuBLAS handle and device buffers.
class ModelWorkspace {
 public:
  ModelWorkspace();
  ~ModelWorkspace();
  ModelWorkspace(ModelWorkspace&&) noexcept;
  ModelWorkspace& operator=(ModelWorkspace&&) noexcept;

 private:
  friend class Model;
  model::GraphWorkspace graph_;
  model::AlignedFloats loss_grad_;  // d loss / d output
  model::AlignedFloats probs_;      // from_logits: softmax / sigmoid
  // State (per state variable), for the model whose graph is state_owner_.
  std::vector<std::vector<float>> state_;
  std::vector<std::vector<float>> new_state_;
  const void* state_owner_ = nullptr;
  GpuWorkspacePtr gpu_;                    // models on a GPU only
};

// An immutable, validated model. Thread-safe: every method is const and
// keeps its scratch in a caller-owned ModelWorkspace (or a per-call one
// when none is given).
class Model {
 public:
  // Builds the model for `loss` (as JobSpec::loss; Keras's aliases are
  // accepted, CanonicalLoss). mse, mae and huber (spec.huber_delta) compare
  // the outputs with the one-hot labels (the label with one output). `seed` (the job's) derives each kernel
  // initializer's seed (seed + layer index) unless the spec set one.
  // Errors: INVALID_ARGUMENT as ValidateModelAndLoss.
  static absl::StatusOr<Model> Build(const ModelSpec& spec,
                                     const std::string& loss, uint64_t seed);
  // As above, computing on `device`: "cpu", "cuda" or "cuda:N" (as
  // ParseDeviceName). TrainStep, Evaluate and Predict then run on that GPU;
  // the parameters and gradients stay host buffers. Errors: as above;
  // INVALID_ARGUMENT for a malformed device name; FAILED_PRECONDITION as
  // CheckDevice when the device cannot be used.
  static absl::StatusOr<Model> Build(const ModelSpec& spec,
                                     const std::string& loss, uint64_t seed,
                                     const std::string& device);

  // "cpu" or "cuda:N".
  const std::string& device() const { return device_; }
  bool on_gpu() const { return gpu_ != nullptr; }

  const std::vector<VariableDef>& variables() const { return variables_; }
  // Non-trainable state variables (BatchNormalization's moving_mean and
  // moving_variance), in the graph's order.
  const std::vector<VariableDef>& state_variables() const { return states_; }
  const model::Graph& graph() const { return *graph_; }
  // Values per example (the product of input_shape) and output units.
  int64_t num_features() const { return num_features_; }
  int64_t num_outputs() const { return num_outputs_; }
  int64_t num_parameters() const;
  const std::string& loss() const { return loss_; }

  // Resizes *params to the variables' layout and fills each with its
  // initializer. Errors: INVALID_ARGUMENT from FillInitializer.
  absl::Status InitializeParams(std::vector<std::vector<float>>* params) const;
  // As above for the state variables.
  absl::Status InitializeState(std::vector<std::vector<float>>* state) const;
  // The state the workspace holds for this model (its initial values when
  // it holds none yet). TrainStep updates it; Evaluate and Predict read it.
  absl::StatusOr<std::vector<std::vector<float>>> GetState(
      ModelWorkspace* workspace) const;
  // Replaces the workspace's state (restored from a checkpoint, averaged
  // across replicas). Errors: INVALID_ARGUMENT naming the variable for a
  // count or size that differs, or a non-finite value; nothing changes.
  absl::Status SetState(ModelWorkspace* workspace,
                        std::vector<std::vector<float>> state) const;

  // One training step on `batch` examples: x is batch x num_features()
  // row-major, y the sparse labels. Dropout is on, its masks a pure function
  // of (dropout_seed, layer, element). Writes into *grads (resized to the
  // params' layout) the gradients of the mean loss over the batch. The
  // results are a pure function of the values passed (bitwise, wherever
  // the buffers lie). On a GPU they agree with the CPU's within float
  // rounding (the same dropout masks, bit for bit).
  // Errors: INVALID_ARGUMENT for params of the wrong count or sizes, batch
  // < 1, null x or y, an input a layer refuses (an Embedding id out of
  // range), or a label out of range (>= num_outputs() for several
  // outputs; not 0 or 1 for binary_crossentropy). On a GPU also the CUDA
  // and cuBLAS errors (FAILED_PRECONDITION, RESOURCE_EXHAUSTED, INTERNAL),
  // each naming the failed call with its file and line.
  // `input_grad`, when not null, gets the gradient of the loss with
  // respect to x (batch x num_features(); embedding models feed it to their
  // rows); on a GPU that is FAILED_PRECONDITION.
  absl::StatusOr<StepStats> TrainStep(
      const std::vector<absl::Span<const float>>& params, const float* x,
      const int32_t* y, int64_t batch, uint64_t dropout_seed,
      std::vector<std::vector<float>>* grads,
      ModelWorkspace* workspace = nullptr, float* input_grad = nullptr) const;

  // Loss and accuracy over all of `data`, in batches of `batch`, without
  // dropout. An empty dataset gives zeros. Errors: as TrainStep, plus
  // INVALID_ARGUMENT when data.features != num_features().
  absl::StatusOr<StepStats> Evaluate(
      const std::vector<absl::Span<const float>>& params, const Dataset& data,
      int64_t batch = 1024, ModelWorkspace* workspace = nullptr) const;

  // The model's outputs (batch x num_outputs(), row-major) for x, without
  // dropout. Errors: as TrainStep.
  absl::Status Predict(const std::vector<absl::Span<const float>>& params,
                       const float* x, int64_t batch, std::vector<float>* out,
                       ModelWorkspace* workspace = nullptr) const;

  // Views of `params` for the methods above.
  static std::vector<absl::Span<const float>> Views(
      const std::vector<std::vector<float>>& params);

 private:
  enum class LossKind { kCrossEntropy, kBinaryCrossEntropy, kMse, kMae, kHuber };

  // A computing layer of a dense chain, for the GPU backend.
  struct Stage {
    LayerType type = LayerType::kDense;
    int64_t in = 0;
    int64_t out = 0;
    Activation activation = Activation::kLinear;
    int kernel = -1;  // index into variables_
    int bias = -1;    // index into variables_, -1 without bias
    double rate = 0;  // dropout
    uint64_t layer_index = 0;
  };

  Model() = default;

  // The GPU backend's view of this model.
  std::shared_ptr<const GpuModelPlan> MakeGpuPlan(int device) const;

  absl::Status CheckParams(
      const std::vector<absl::Span<const float>>& params) const;
  absl::Status CheckLabels(const int32_t* y, int64_t batch) const;
  // The workspace's state for this model, initialized on first use.
  absl::Status EnsureState(ModelWorkspace* ws) const;
  // Runs the graph; the output is graph_->Output(ws->graph_, 0).
  absl::Status Forward(const std::vector<absl::Span<const float>>& params,
                       const float* x, int64_t batch, bool training,
                       uint64_t dropout_seed, ModelWorkspace* ws) const;
  // Adds the batch's loss sum and correct count; when `grad` is not null,
  // writes d(mean loss)/d(output) there (d/d(pre-activation) when
  // fuse_output_). `scratch` holds the probabilities of logits.
  void Loss(const float* out, const int32_t* y, int64_t batch,
            int64_t mean_over, double* loss_sum, int64_t* correct,
            float* grad, ModelWorkspace* ws) const;

  std::shared_ptr<const model::Graph> graph_;
  std::vector<Stage> stages_;  // dense chains only (the GPU plan)
  std::vector<VariableDef> variables_;
  std::vector<VariableDef> states_;
  std::string loss_;
  LossKind loss_kind_ = LossKind::kCrossEntropy;
  // kHuber: where the loss turns from quadratic to linear (ModelSpec).
  double huber_delta_ = 1.0;
  bool from_logits_ = false;
  // The loss's gradient is taken with respect to the output layer's
  // pre-activation (softmax / sigmoid fused with the cross-entropy).
  bool fuse_output_ = false;
  int64_t num_features_ = 0;
  int64_t num_outputs_ = 0;
  int first_trainable_stage_ = 0;
  std::string device_ = "cpu";
  std::shared_ptr<const GpuModelPlan> gpu_;  // null on the CPU
};

// OK when `device` ("cpu", "cuda", "cuda:N") can run a Model here. Errors:
// INVALID_ARGUMENT for a malformed name; FAILED_PRECONDITION for a CUDA
// device that cannot be used, the message starting with `what` and the
// device ("job.device cuda:0: no usable CUDA device: cudaErrorNoDevice: ...";
// "... this build has no CUDA support (configure with -DSTRATA_WITH_CUDA=ON
// where nvcc is found)").
absl::Status CheckDevice(const std::string& device,
                         const std::string& what = "device");

// Model::Build with the job's model, loss, seed and device; a device that
// cannot be used fails as CheckDevice(job.device, "job.device").
absl::StatusOr<Model> BuildModelForJob(const JobSpec& job);

// Single-process training: a Model, its parameters, and an Optimizer with
// its slots per variable, updated locally. Thread-compatible.
class LocalTrainer {
 public:
  // Builds the model (Model::Build), initializes its parameters and creates
  // the optimizer. Errors: INVALID_ARGUMENT from either.
  static absl::StatusOr<std::unique_ptr<LocalTrainer>> Create(
      const ModelSpec& model, const std::string& loss,
      const OptimizerConfig& optimizer, uint64_t seed);
  // As above with the job's model, loss, optimizer and seed, on the job's
  // device (BuildModelForJob).
  static absl::StatusOr<std::unique_ptr<LocalTrainer>> Create(
      const JobSpec& job);
  // As above with a model already built (on any device).
  static absl::StatusOr<std::unique_ptr<LocalTrainer>> Create(
      Model model, const OptimizerConfig& optimizer, uint64_t seed);

  // One step on a batch (as Model::TrainStep) followed by the optimizer's
  // update with iterations = `step` (the number of updates before this
  // one). Dropout's seed derives from the model seed and `step`.
  // Errors: as Model::TrainStep and Optimizer::ApplyDense.
  // `input_grad` as Model::TrainStep's.
  absl::StatusOr<StepStats> Step(const float* x, const int32_t* y,
                                 int64_t batch, int64_t step,
                                 float* input_grad = nullptr);

  // One epoch over `train`: EpochPermutation(train.size, shuffle_seed,
  // epoch), batches of `batch_size` (the last one partial), one Step each
  // with consecutive step numbers continuing from iterations(). Returns the
  // example-weighted mean loss and accuracy over the epoch, as Keras reports
  // them. `on_step`, when set, is called after each step with the steps
  // done and the means so far. Errors: as Step.
  absl::StatusOr<StepStats> TrainEpoch(
      const Dataset& train, int64_t batch_size, uint64_t shuffle_seed,
      int epoch,
      const std::function<void(int64_t steps_done, const StepStats& so_far)>&
          on_step = nullptr);

  // Model::Evaluate with the current parameters.
  absl::StatusOr<StepStats> Evaluate(const Dataset& data,
                                     int64_t batch = 1024);

  const Model& model() const { return model_; }
  const std::vector<std::vector<float>>& params() const { return params_; }
  // Replaces the parameters (the optimizer's slots and iterations stay, as
  // Keras's set_weights). Errors: INVALID_ARGUMENT (naming the variable)
  // for a count or size that differs from the model's, or a non-finite
  // value; nothing changes then.
  absl::Status SetParams(std::vector<std::vector<float>> params);
  // The optimizer's learning rate for the steps that follow (finite, > 0:
  // the caller checks).
  void SetLearningRate(double learning_rate) {
    optimizer_->set_learning_rate(learning_rate);
  }
  double learning_rate() const { return optimizer_->config().learning_rate; }
  // Updates applied so far (the last step + 1).
  int64_t iterations() const { return iterations_; }
  // The optimizer's slots, [variable][slot] in Optimizer::SlotNames order.
  const std::vector<std::vector<std::vector<float>>>& slots() const {
    return slots_;
  }
  std::vector<std::string> SlotNames() const {
    return optimizer_->SlotNames();
  }
  // Replaces the optimizer's state (a restored Keras optimizer: its
  // iterations and slots). Errors: INVALID_ARGUMENT naming the variable and
  // slot whose count or size differs, a non-finite value or iterations < 0;
  // nothing changes then.
  absl::Status SetOptimizerState(
      int64_t iterations,
      const std::vector<std::vector<std::vector<float>>>& slots);
  // The workspace Step and Evaluate use; it holds the model's
  // non-trainable state (Model::GetState / SetState).
  ModelWorkspace* workspace() { return &workspace_; }

 private:
  LocalTrainer(Model model, std::unique_ptr<Optimizer> optimizer,
               uint64_t seed);

  Model model_;
  std::unique_ptr<Optimizer> optimizer_;
  uint64_t seed_;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<std::vector<float>>> slots_;  // [variable][slot]
  std::vector<std::vector<void*>> slot_ptrs_;           // into slots_
  std::vector<std::vector<float>> grads_;
  ModelWorkspace workspace_;
  int64_t iterations_ = 0;
  std::vector<float> batch_x_;
  std::vector<int32_t> batch_y_;
};

}  // namespace strata

#endif  // STRATA_WORKER_MODEL_H_

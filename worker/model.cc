// Model's construction and validation, its GPU plan, and ModelWorkspace's
// buffers. The forward and backward passes are in model_compute.cc,
// LocalTrainer in local_trainer.cc.
#include "worker/model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/gpu_model.h"

namespace strata {
namespace {

// The model's kernels may be compiled for AVX2+FMA (worker/CMakeLists.txt);
// refuse to run rather than die of SIGILL on a CPU without them.
absl::Status CheckCpu() {
#if defined(STRATA_WORKER_AVX2_FMA)
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  if (!supported) {
    return absl::FailedPreconditionError(
        "this build of the worker's model kernels needs a CPU with AVX2 and "
        "FMA; rebuild with -DSTRATA_WORKER_AVX2=OFF");
  }
#endif
  return absl::OkStatus();
}

}  // namespace

// ModelWorkspace -------------------------------------------------------------

ModelWorkspace::ModelWorkspace() = default;
ModelWorkspace::~ModelWorkspace() = default;
ModelWorkspace::ModelWorkspace(ModelWorkspace&&) noexcept = default;
ModelWorkspace& ModelWorkspace::operator=(ModelWorkspace&&) noexcept =
    default;

absl::Status CheckDevice(const std::string& device, const std::string& what) {
  STRATA_ASSIGN_OR_RETURN(const int cuda_device,
                          ParseDeviceName(device, what));
  if (cuda_device < 0) return absl::OkStatus();
  absl::Status usable = GpuCheckDevice(cuda_device);
  if (usable.ok()) return usable;
  return absl::Status(usable.code(),
                      absl::StrCat(what, " cuda:", cuda_device, ": ",
                                   usable.message()));
}

absl::StatusOr<Model> BuildModelForJob(const JobSpec& job) {
  STRATA_RETURN_IF_ERROR(CheckDevice(job.device, "job.device"));
  return Model::Build(job.model, job.loss, job.seed, job.device);
}

absl::StatusOr<Model> Model::Build(const ModelSpec& spec,
                                   const std::string& loss, uint64_t seed,
                                   const std::string& device) {
  STRATA_ASSIGN_OR_RETURN(const int cuda_device,
                          ParseDeviceName(device, "device"));
  STRATA_ASSIGN_OR_RETURN(Model model, Build(spec, loss, seed));
  if (cuda_device < 0) return model;
  STRATA_RETURN_IF_ERROR(CheckDevice(device, "device"));
  if (model.loss_kind_ == LossKind::kMae ||
      model.loss_kind_ == LossKind::kHuber) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device cuda:", cuda_device, ": the GPU backend has no ",
        model.loss_, " loss (it computes the cross-entropies and mse); "
        "train with device \"cpu\""));
  }
  if (model.stages_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device cuda:", cuda_device, ": the GPU backend runs models of "
        "dense, dropout and flatten layers; this model's other layers run "
        "on the CPU (device \"cpu\")"));
  }
  if (model.from_logits_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device cuda:", cuda_device, ": the GPU backend's cross-entropy "
        "takes softmax or sigmoid outputs, not from_logits"));
  }
  model.device_ = absl::StrCat("cuda:", cuda_device);
  model.gpu_ = model.MakeGpuPlan(cuda_device);
  return model;
}

std::shared_ptr<const GpuModelPlan> Model::MakeGpuPlan(int device) const {
  auto plan = std::make_shared<GpuModelPlan>();
  plan->device = device;
  switch (loss_kind_) {
    case LossKind::kCrossEntropy:
      plan->loss = GpuModelPlan::Loss::kCrossEntropy;
      break;
    case LossKind::kBinaryCrossEntropy:
      plan->loss = GpuModelPlan::Loss::kBinaryCrossEntropy;
      break;
    case LossKind::kMse:
    case LossKind::kMae:  // refused on a GPU device before a plan is made
    case LossKind::kHuber:
      plan->loss = GpuModelPlan::Loss::kMse;
      break;
  }
  for (const Stage& st : stages_) {
    plan->stages.push_back({st.type, st.in, st.out, st.activation, st.kernel,
                            st.bias, st.rate, st.layer_index});
  }
  plan->num_features = num_features_;
  plan->num_outputs = num_outputs_;
  plan->first_trainable_stage = first_trainable_stage_;
  int64_t offset = 0;
  for (const VariableDef& v : variables_) {
    const int64_t n = NumElements(v.shape);
    plan->variable_sizes.push_back(n);
    plan->variable_offsets.push_back(offset);
    // 256-byte aligned starts, as cuBLAS prefers.
    offset += (n + 63) / 64 * 64;
  }
  plan->total_floats = offset;
  return plan;
}

absl::StatusOr<Model> Model::Build(const ModelSpec& spec,
                                   const std::string& loss, uint64_t seed) {
  // With embeddings: the layers, whose input holds their outputs.
  if (!spec.embeddings.empty()) return Build(DenseModelSpec(spec), loss, seed);
  STRATA_RETURN_IF_ERROR(CheckCpu());
  const std::string canonical_loss = CanonicalLoss(loss);
  STRATA_RETURN_IF_ERROR(ValidateModelAndLoss(spec, canonical_loss));
  if (!(spec.huber_delta > 0) || !std::isfinite(spec.huber_delta)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "huber delta must be finite and > 0, got ", spec.huber_delta));
  }
  Model model;
  model.loss_ = canonical_loss;
  model.from_logits_ = spec.from_logits;
  model.huber_delta_ = spec.huber_delta;
  if (canonical_loss == "mse") {
    model.loss_kind_ = LossKind::kMse;
  } else if (canonical_loss == "mae") {
    model.loss_kind_ = LossKind::kMae;
  } else if (canonical_loss == "huber") {
    model.loss_kind_ = LossKind::kHuber;
  } else if (canonical_loss == "binary_crossentropy") {
    model.loss_kind_ = LossKind::kBinaryCrossEntropy;
  } else {
    model.loss_kind_ = LossKind::kCrossEntropy;
  }
  STRATA_ASSIGN_OR_RETURN(model::GraphSpec graph_spec, ModelGraphSpec(spec));
  STRATA_ASSIGN_OR_RETURN(model::Graph graph,
                          model::Graph::Build(graph_spec, seed, "job.model"));
  auto g = std::make_shared<const model::Graph>(std::move(graph));
  model.graph_ = g;
  model.num_features_ = g->num_features();
  model.num_outputs_ = NumElements(g->output_shape(0));
  for (const model::GraphVariable& v : g->variables()) {
    model.variables_.push_back({v.name, v.shape, v.init});
  }
  for (const model::GraphVariable& v : g->states()) {
    model.states_.push_back({v.name, v.shape, v.init});
  }
  const std::string act = g->output_layer(0).output_activation();
  model.fuse_output_ =
      !model.from_logits_ && !g->OutputIsConsumed(0) &&
      ((model.loss_kind_ == LossKind::kCrossEntropy && act == "softmax") ||
       (model.loss_kind_ == LossKind::kBinaryCrossEntropy && act == "sigmoid"));
  // A dense chain: the stages the GPU backend runs.
  if (IsDenseChain(spec)) {
    int64_t width = NumElements(spec.input_shape);
    model.first_trainable_stage_ = -1;
    int variable = 0;
    for (size_t i = 0; i < spec.layers.size(); ++i) {
      const LayerSpec& layer = spec.layers[i];
      Stage stage;
      stage.type = layer.type;
      stage.layer_index = i;
      stage.in = width;
      if (layer.type == LayerType::kFlatten) continue;
      if (layer.type == LayerType::kDropout) {
        stage.out = width;
        stage.rate = layer.rate;
      } else {
        stage.out = layer.units;
        stage.activation = layer.activation;
        stage.kernel = variable++;
        if (layer.use_bias) stage.bias = variable++;
        if (model.first_trainable_stage_ < 0) {
          model.first_trainable_stage_ =
              static_cast<int>(model.stages_.size());
        }
        width = layer.units;
      }
      model.stages_.push_back(stage);
    }
  }
  return model;
}

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const VariableDef& v : variables_) n += NumElements(v.shape);
  return n;
}

absl::Status Model::InitializeParams(
    std::vector<std::vector<float>>* params) const {
  params->resize(variables_.size());
  for (size_t i = 0; i < variables_.size(); ++i) {
    const VariableDef& v = variables_[i];
    std::vector<float>& p = (*params)[i];
    p.resize(static_cast<size_t>(NumElements(v.shape)));
    STRATA_RETURN_IF_ERROR(FillInitializer(v.init, v.name, DType::kFloat32,
                                           v.shape, 0, p.data(),
                                           static_cast<int64_t>(p.size())));
  }
  return absl::OkStatus();
}

absl::Status Model::InitializeState(
    std::vector<std::vector<float>>* state) const {
  state->resize(states_.size());
  for (size_t i = 0; i < states_.size(); ++i) {
    const VariableDef& v = states_[i];
    std::vector<float>& p = (*state)[i];
    p.resize(static_cast<size_t>(NumElements(v.shape)));
    STRATA_RETURN_IF_ERROR(FillInitializer(v.init, v.name, DType::kFloat32,
                                           v.shape, 0, p.data(),
                                           static_cast<int64_t>(p.size())));
  }
  return absl::OkStatus();
}

absl::Status Model::EnsureState(ModelWorkspace* ws) const {
  if (ws->state_owner_ == graph_.get() &&
      ws->state_.size() == states_.size()) {
    return absl::OkStatus();
  }
  STRATA_RETURN_IF_ERROR(InitializeState(&ws->state_));
  ws->state_owner_ = graph_.get();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<float>>> Model::GetState(
    ModelWorkspace* workspace) const {
  STRATA_RETURN_IF_ERROR(EnsureState(workspace));
  return workspace->state_;
}

absl::Status Model::SetState(ModelWorkspace* workspace,
                             std::vector<std::vector<float>> state) const {
  if (state.size() != states_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has ", states_.size(),
                     " state variables, got ", state.size()));
  }
  for (size_t i = 0; i < states_.size(); ++i) {
    const int64_t want = NumElements(states_[i].shape);
    if (static_cast<int64_t>(state[i].size()) != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state variable ", states_[i].name, " ",
          ShapeString(states_[i].shape), " needs ", want, " values, got ",
          state[i].size()));
    }
    for (size_t j = 0; j < state[i].size(); ++j) {
      if (!std::isfinite(state[i][j])) {
        return absl::InvalidArgumentError(
            absl::StrCat("state variable ", states_[i].name, " value ", j,
                         " is not finite (", state[i][j], ")"));
      }
    }
  }
  workspace->state_ = std::move(state);
  workspace->state_owner_ = graph_.get();
  return absl::OkStatus();
}

std::vector<absl::Span<const float>> Model::Views(
    const std::vector<std::vector<float>>& params) {
  std::vector<absl::Span<const float>> views;
  views.reserve(params.size());
  for (const std::vector<float>& p : params) views.emplace_back(p);
  return views;
}

absl::Status Model::CheckParams(
    const std::vector<absl::Span<const float>>& params) const {
  if (params.size() != variables_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", variables_.size(), " parameter tensors, got ",
                     params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = NumElements(variables_[i].shape);
    if (static_cast<int64_t>(params[i].size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter ", variables_[i].name, " ",
          ShapeString(variables_[i].shape), " needs ", n, " values, got ",
          params[i].size()));
    }
  }
  return absl::OkStatus();
}

absl::Status Model::CheckLabels(const int32_t* y, int64_t batch) const {
  if (y == nullptr) return absl::InvalidArgumentError("labels are null");
  if (loss_kind_ == LossKind::kBinaryCrossEntropy) {
    for (int64_t b = 0; b < batch; ++b) {
      if (y[b] != 0 && y[b] != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "label ", y[b], " of example ", b,
            " is not 0 or 1 (binary_crossentropy)"));
      }
    }
  } else if (num_outputs_ > 1) {
    for (int64_t b = 0; b < batch; ++b) {
      if (y[b] < 0 || y[b] >= num_outputs_) {
        return absl::InvalidArgumentError(
            absl::StrCat("label ", y[b], " of example ", b,
                         " is outside [0, ", num_outputs_,
                         "): the output layer has ", num_outputs_, " units"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace strata

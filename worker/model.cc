#include "worker/model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/gpu_model.h"

namespace strata {
namespace {

using RowMatrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using RowVectorMap = Eigen::Map<Eigen::RowVectorXf>;
using ConstRowVectorMap = Eigen::Map<const Eigen::RowVectorXf>;

// Keras's backend epsilon: probabilities are clipped to [eps, 1 - eps]
// before the log of the cross-entropies.
constexpr double kEpsilon = 1e-7;

// SplitMix64's finalizer: a bijective 64-bit mix.
uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void ApplyActivation(Activation activation, MatrixMap* z) {
  switch (activation) {
    case Activation::kLinear:
      return;
    case Activation::kRelu:
      z->array() = z->array().max(0.0f);
      return;
    case Activation::kSigmoid:
      z->array() = ((-z->array()).exp() + 1.0f).inverse();
      return;
    case Activation::kTanh:
      z->array() = z->array().tanh();
      return;
    case Activation::kSoftmax:
      for (Eigen::Index r = 0; r < z->rows(); ++r) {
        auto row = z->row(r).array();
        row = (row - row.maxCoeff()).exp();
        row /= row.sum();
      }
      return;
  }
}

// Turns d(loss)/d(output) in *g into d(loss)/d(pre-activation), given the
// activation's output `a`.
void ActivationBackward(Activation activation, const ConstMatrixMap& a,
                        MatrixMap* g) {
  switch (activation) {
    case Activation::kLinear:
      return;
    case Activation::kRelu:
      g->array() *= (a.array() > 0.0f).cast<float>();
      return;
    case Activation::kSigmoid:
      g->array() *= a.array() * (1.0f - a.array());
      return;
    case Activation::kTanh:
      g->array() *= 1.0f - a.array().square();
      return;
    case Activation::kSoftmax:
      for (Eigen::Index r = 0; r < g->rows(); ++r) {
        const float dot = g->row(r).dot(a.row(r));
        g->row(r).array() = a.row(r).array() * (g->row(r).array() - dot);
      }
      return;
  }
}

}  // namespace

// Inverted dropout: each element kept with probability 1 - rate and scaled
// by 1 / (1 - rate). The draw for element e is a pure function of (seed,
// layer, e). kernels/cuda/dense_kernels.cu repeats it on the device.
void FillDropoutMask(uint64_t seed, uint64_t layer, double rate, float* mask,
                     int64_t n) {
  const uint64_t key = Mix64(seed ^ Mix64(layer + 0x5bd1e995ULL));
  const float keep_scale = static_cast<float>(1.0 / (1.0 - rate));
  // 24-bit uniforms: u = bits * 2^-24 is kept when u >= rate.
  const uint64_t threshold =
      static_cast<uint64_t>(std::ceil(rate * 16777216.0));
  for (int64_t e = 0; e < n; ++e) {
    const uint64_t bits =
        Mix64(key + static_cast<uint64_t>(e) * 0xd1b54a32d192ed03ULL) >> 40;
    mask[e] = bits >= threshold ? keep_scale : 0.0f;
  }
}

namespace {

// This file may be compiled for AVX2+FMA (worker/CMakeLists.txt); refuse to
// run rather than die of SIGILL on a CPU without them.
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

ModelWorkspace::Floats::Floats(Floats&& other) noexcept
    : data_(other.data_), capacity_(other.capacity_) {
  other.data_ = nullptr;
  other.capacity_ = 0;
}

ModelWorkspace::Floats& ModelWorkspace::Floats::operator=(
    Floats&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = other.data_;
    capacity_ = other.capacity_;
    other.data_ = nullptr;
    other.capacity_ = 0;
  }
  return *this;
}

ModelWorkspace::Floats::~Floats() { std::free(data_); }

float* ModelWorkspace::Floats::Resize(size_t n) {
  if (n <= capacity_) return data_;
  constexpr size_t kAlign = 64;
  // aligned_alloc wants a size that is a multiple of the alignment; grow
  // geometrically so that alternating batch sizes do not reallocate.
  size_t capacity = std::max(n, capacity_ * 2);
  const size_t bytes = (capacity * sizeof(float) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::free(data_);
  data_ = static_cast<float*>(p);
  capacity_ = bytes / sizeof(float);
  return data_;
}

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
      plan->loss = GpuModelPlan::Loss::kMse;
      break;
  }
  for (const Stage& st : stages_) {
    GpuModelPlan::Stage g;
    g.type = st.type;
    g.in = st.in;
    g.out = st.out;
    g.activation = st.activation;
    g.kernel = st.kernel;
    g.bias = st.bias;
    g.rate = st.rate;
    g.layer_index = st.layer_index;
    plan->stages.push_back(g);
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
  STRATA_RETURN_IF_ERROR(CheckCpu());
  const std::string canonical_loss =
      loss == "mean_squared_error" ? std::string("mse") : loss;
  STRATA_RETURN_IF_ERROR(ValidateModelAndLoss(spec, canonical_loss));
  Model model;
  model.loss_ = canonical_loss;
  if (canonical_loss == "mse") {
    model.loss_kind_ = LossKind::kMse;
  } else if (canonical_loss == "binary_crossentropy") {
    model.loss_kind_ = LossKind::kBinaryCrossEntropy;
  } else {
    model.loss_kind_ = LossKind::kCrossEntropy;
  }
  const std::vector<std::string> names = ResolveLayerNames(spec);
  int64_t width = NumElements(spec.input_shape);
  model.num_features_ = width;
  model.first_trainable_stage_ = -1;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& layer = spec.layers[i];
    Stage stage;
    stage.type = layer.type;
    stage.layer_index = i;
    stage.in = width;
    switch (layer.type) {
      case LayerType::kFlatten:
        continue;  // examples are already flat
      case LayerType::kDropout:
        stage.out = width;
        stage.rate = layer.rate;
        break;
      case LayerType::kDense: {
        stage.out = layer.units;
        stage.activation = layer.activation;
        VariableDef kernel{absl::StrCat(names[i], "/kernel"),
                           {width, layer.units}, layer.kernel_initializer};
        if (!layer.kernel_seed_set) kernel.init.seed = seed + i;
        stage.kernel = static_cast<int>(model.variables_.size());
        model.variables_.push_back(std::move(kernel));
        if (layer.use_bias) {
          VariableDef bias{absl::StrCat(names[i], "/bias"),
                           {layer.units}, layer.bias_initializer};
          if (!layer.bias_seed_set) bias.init.seed = seed + i;
          stage.bias = static_cast<int>(model.variables_.size());
          model.variables_.push_back(std::move(bias));
        }
        if (model.first_trainable_stage_ < 0) {
          model.first_trainable_stage_ =
              static_cast<int>(model.stages_.size());
        }
        width = layer.units;
        break;
      }
    }
    model.stages_.push_back(stage);
  }
  model.num_outputs_ = width;
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

void Model::Forward(const std::vector<absl::Span<const float>>& params,
                    const float* x, int64_t batch, bool training,
                    uint64_t dropout_seed, ModelWorkspace* ws) const {
  const size_t num_stages = stages_.size();
  ws->outputs_.resize(num_stages);
  ws->output_ptrs_.resize(num_stages);
  ws->masks_.resize(num_stages);
  const float* in = x;
  for (size_t s = 0; s < num_stages; ++s) {
    const Stage& st = stages_[s];
    ModelWorkspace::Floats& buf = ws->outputs_[s];
    if (st.type == LayerType::kDense) {
      buf.Resize(static_cast<size_t>(batch * st.out));
      ConstMatrixMap a(in, batch, st.in);
      ConstMatrixMap w(params[st.kernel].data(), st.in, st.out);
      MatrixMap z(buf.data(), batch, st.out);
      z.noalias() = a * w;
      if (st.bias >= 0) {
        z.rowwise() += ConstRowVectorMap(params[st.bias].data(), st.out);
      }
      ApplyActivation(st.activation, &z);
      in = buf.data();
    } else if (training && st.rate > 0) {  // dropout
      const int64_t n = batch * st.out;
      float* mask = ws->masks_[s].Resize(static_cast<size_t>(n));
      FillDropoutMask(dropout_seed, st.layer_index, st.rate, mask, n);
      buf.Resize(static_cast<size_t>(n));
      Eigen::Map<Eigen::ArrayXf>(buf.data(), n) =
          Eigen::Map<const Eigen::ArrayXf>(in, n) *
          Eigen::Map<const Eigen::ArrayXf>(mask, n);
      in = buf.data();
    }
    // An inactive dropout passes its input through.
    ws->output_ptrs_[s] = in;
  }
}

void Model::Loss(const float* out, const int32_t* y, int64_t batch,
                 int64_t mean_over, double* loss_sum, int64_t* correct,
                 float* grad) const {
  const int64_t c = num_outputs_;
  const float inv = 1.0f / static_cast<float>(mean_over);
  ConstMatrixMap p(out, batch, c);
  double loss = 0;
  int64_t right = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t label = y[b];
    // Accuracy: argmax for several outputs, a 0.5 threshold for one.
    if (c > 1) {
      Eigen::Index arg = 0;
      p.row(b).maxCoeff(&arg);
      right += arg == label ? 1 : 0;
    } else {
      right += (p(b, 0) > 0.5f ? 1 : 0) == label ? 1 : 0;
    }
    switch (loss_kind_) {
      case LossKind::kCrossEntropy: {
        const double q = std::clamp<double>(p(b, label), kEpsilon,
                                            1.0 - kEpsilon);
        loss -= std::log(q);
        break;
      }
      case LossKind::kBinaryCrossEntropy: {
        const double q =
            std::clamp<double>(p(b, 0), kEpsilon, 1.0 - kEpsilon);
        loss -= label == 1 ? std::log(q) : std::log(1.0 - q);
        break;
      }
      case LossKind::kMse: {
        double sum = 0;
        for (int64_t k = 0; k < c; ++k) {
          const double t = c > 1 ? (k == label ? 1.0 : 0.0) : label;
          const double d = p(b, k) - t;
          sum += d * d;
        }
        loss += sum / static_cast<double>(c);
        break;
      }
    }
  }
  *loss_sum += loss;
  *correct += right;
  if (grad == nullptr) return;

  MatrixMap g(grad, batch, c);
  switch (loss_kind_) {
    case LossKind::kCrossEntropy:
      // Softmax + cross-entropy, fused: (p - onehot) / batch w.r.t. logits.
      g = p * inv;
      for (int64_t b = 0; b < batch; ++b) g(b, y[b]) -= inv;
      return;
    case LossKind::kBinaryCrossEntropy:
      // Sigmoid + binary cross-entropy, fused: (p - y) / batch.
      for (int64_t b = 0; b < batch; ++b) {
        g(b, 0) = (p(b, 0) - static_cast<float>(y[b])) * inv;
      }
      return;
    case LossKind::kMse: {
      // d/dp of mean_k (p - t)^2, averaged over the batch.
      const float scale = 2.0f * inv / static_cast<float>(c);
      g = p * scale;
      for (int64_t b = 0; b < batch; ++b) {
        if (c > 1) {
          g(b, y[b]) -= scale;
        } else {
          g(b, 0) -= scale * static_cast<float>(y[b]);
        }
      }
      return;
    }
  }
}

absl::StatusOr<StepStats> Model::TrainStep(
    const std::vector<absl::Span<const float>>& params, const float* x,
    const int32_t* y, int64_t batch, uint64_t dropout_seed,
    std::vector<std::vector<float>>* grads, ModelWorkspace* workspace) const {
  STRATA_RETURN_IF_ERROR(CheckParams(params));
  if (batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch must be >= 1, got ", batch));
  }
  if (x == nullptr) return absl::InvalidArgumentError("inputs are null");
  STRATA_RETURN_IF_ERROR(CheckLabels(y, batch));
  ModelWorkspace local;
  ModelWorkspace* ws = workspace != nullptr ? workspace : &local;
  grads->resize(variables_.size());
  for (size_t i = 0; i < variables_.size(); ++i) {
    (*grads)[i].resize(static_cast<size_t>(NumElements(variables_[i].shape)));
  }
  if (gpu_ != nullptr) {
    return GpuTrainStep(*gpu_, params, x, y, batch, dropout_seed, grads,
                        &ws->gpu_);
  }

  Forward(params, x, batch, /*training=*/true, dropout_seed, ws);
  const int num_stages = static_cast<int>(stages_.size());
  ws->gradients_.resize(stages_.size());
  float* top =
      ws->gradients_[num_stages - 1].Resize(static_cast<size_t>(
          batch * num_outputs_));
  double loss_sum = 0;
  int64_t correct = 0;
  Loss(ws->output_ptrs_.back(), y, batch, batch, &loss_sum, &correct, top);

  for (int s = num_stages - 1; s >= first_trainable_stage_; --s) {
    const Stage& st = stages_[s];
    float* g = ws->gradients_[s].data();
    const bool need_input_grad = s > first_trainable_stage_;
    float* below =
        need_input_grad
            ? ws->gradients_[s - 1].Resize(static_cast<size_t>(batch * st.in))
            : nullptr;
    if (st.type == LayerType::kDense) {
      const float* in = s == 0 ? x : ws->output_ptrs_[s - 1];
      MatrixMap dz(g, batch, st.out);
      // The output layer's cross-entropy gradient is already w.r.t. logits.
      const bool fused = s == num_stages - 1 && loss_kind_ != LossKind::kMse;
      if (!fused) {
        ActivationBackward(st.activation,
                           ConstMatrixMap(ws->output_ptrs_[s], batch, st.out),
                           &dz);
      }
      // Eigen's matrix products round the same wherever their destination
      // lies (unlike its reductions), so this may write to the caller's
      // buffer directly; ModelTest.TrainStepIsBitwiseReproducible checks it.
      MatrixMap dw((*grads)[st.kernel].data(), st.in, st.out);
      dw.noalias() = ConstMatrixMap(in, batch, st.in).transpose() * dz;
      if (st.bias >= 0) {
        // Row by row: exact adds, so the rounding is the same wherever the
        // caller's buffer lies (a column reduction's is not).
        RowVectorMap db((*grads)[st.bias].data(), st.out);
        db = dz.row(0);
        for (int64_t r = 1; r < batch; ++r) db += dz.row(r);
      }
      if (below != nullptr) {
        MatrixMap(below, batch, st.in).noalias() =
            dz * ConstMatrixMap(params[st.kernel].data(), st.in, st.out)
                     .transpose();
      }
    } else if (below != nullptr) {  // dropout
      const int64_t n = batch * st.out;
      Eigen::Map<Eigen::ArrayXf> dst(below, n);
      Eigen::Map<const Eigen::ArrayXf> src(g, n);
      if (st.rate > 0) {
        dst = src * Eigen::Map<const Eigen::ArrayXf>(ws->masks_[s].data(),
                                                     n);
      } else {
        dst = src;
      }
    }
  }
  StepStats stats;
  stats.examples = batch;
  stats.loss = loss_sum / static_cast<double>(batch);
  stats.accuracy = static_cast<double>(correct) / static_cast<double>(batch);
  return stats;
}

absl::StatusOr<StepStats> Model::Evaluate(
    const std::vector<absl::Span<const float>>& params, const Dataset& data,
    int64_t batch, ModelWorkspace* workspace) const {
  STRATA_RETURN_IF_ERROR(CheckParams(params));
  if (batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch must be >= 1, got ", batch));
  }
  if (data.features != num_features_) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset examples have ", data.features,
                     " features; the model takes ", num_features_));
  }
  if (static_cast<int64_t>(data.x.size()) != data.size * data.features ||
      static_cast<int64_t>(data.labels.size()) != data.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset of ", data.size, " examples holds ", data.x.size(),
        " values and ", data.labels.size(), " labels"));
  }
  StepStats stats;
  if (data.size == 0) return stats;
  ModelWorkspace local;
  ModelWorkspace* ws = workspace != nullptr ? workspace : &local;
  double loss_sum = 0;
  int64_t correct = 0;
  if (gpu_ != nullptr) {
    // The labels first, batch by batch, so that errors read as the CPU's.
    for (int64_t start = 0; start < data.size; start += batch) {
      STRATA_RETURN_IF_ERROR(CheckLabels(data.labels.data() + start,
                                         std::min(batch, data.size - start)));
    }
    STRATA_RETURN_IF_ERROR(GpuEvaluate(*gpu_, params, data, batch, &loss_sum,
                                       &correct, &ws->gpu_));
  }
  for (int64_t start = 0; gpu_ == nullptr && start < data.size;
       start += batch) {
    const int64_t b = std::min(batch, data.size - start);
    const int32_t* y = data.labels.data() + start;
    STRATA_RETURN_IF_ERROR(CheckLabels(y, b));
    Forward(params, data.x.data() + start * data.features, b,
            /*training=*/false, 0, ws);
    Loss(ws->output_ptrs_.back(), y, b, b, &loss_sum, &correct, nullptr);
  }
  stats.examples = data.size;
  stats.loss = loss_sum / static_cast<double>(data.size);
  stats.accuracy =
      static_cast<double>(correct) / static_cast<double>(data.size);
  return stats;
}

absl::Status Model::Predict(const std::vector<absl::Span<const float>>& params,
                            const float* x, int64_t batch,
                            std::vector<float>* out,
                            ModelWorkspace* workspace) const {
  STRATA_RETURN_IF_ERROR(CheckParams(params));
  if (batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch must be >= 1, got ", batch));
  }
  if (x == nullptr) return absl::InvalidArgumentError("inputs are null");
  ModelWorkspace local;
  ModelWorkspace* ws = workspace != nullptr ? workspace : &local;
  if (gpu_ != nullptr) {
    return GpuPredict(*gpu_, params, x, batch, out, &ws->gpu_);
  }
  Forward(params, x, batch, /*training=*/false, 0, ws);
  const float* result = ws->output_ptrs_.back();
  out->assign(result, result + batch * num_outputs_);
  return absl::OkStatus();
}

// LocalTrainer ---------------------------------------------------------------

LocalTrainer::LocalTrainer(Model model, std::unique_ptr<Optimizer> optimizer,
                           uint64_t seed)
    : model_(std::move(model)), optimizer_(std::move(optimizer)), seed_(seed) {}

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(
    const ModelSpec& model_spec, const std::string& loss,
    const OptimizerConfig& optimizer_config, uint64_t seed) {
  STRATA_ASSIGN_OR_RETURN(Model model, Model::Build(model_spec, loss, seed));
  return Create(std::move(model), optimizer_config, seed);
}

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(
    Model model, const OptimizerConfig& optimizer_config, uint64_t seed) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                          Optimizer::Create(optimizer_config));
  std::unique_ptr<LocalTrainer> trainer(
      new LocalTrainer(std::move(model), std::move(optimizer), seed));
  STRATA_RETURN_IF_ERROR(trainer->model_.InitializeParams(&trainer->params_));
  const std::vector<std::string> slot_names = trainer->optimizer_->SlotNames();
  trainer->slots_.resize(trainer->params_.size());
  trainer->slot_ptrs_.resize(trainer->params_.size());
  for (size_t v = 0; v < trainer->params_.size(); ++v) {
    for (size_t k = 0; k < slot_names.size(); ++k) {
      trainer->slots_[v].emplace_back(
          trainer->params_[v].size(),
          static_cast<float>(trainer->optimizer_->SlotInitialValue(k)));
    }
    // The slot buffers are never resized, so these stay valid.
    for (std::vector<float>& slot : trainer->slots_[v]) {
      trainer->slot_ptrs_[v].push_back(slot.data());
    }
  }
  return trainer;
}

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(
    const JobSpec& job) {
  STRATA_ASSIGN_OR_RETURN(Model model, BuildModelForJob(job));
  return Create(std::move(model), job.optimizer, job.seed);
}

absl::StatusOr<StepStats> LocalTrainer::Step(const float* x, const int32_t* y,
                                             int64_t batch, int64_t step) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step must be >= 0, got ", step));
  }
  const std::vector<absl::Span<const float>> views = Model::Views(params_);
  STRATA_ASSIGN_OR_RETURN(
      StepStats stats,
      model_.TrainStep(views, x, y, batch,
                       Mix64(seed_ ^ Mix64(static_cast<uint64_t>(step))),
                       &grads_, &workspace_));
  for (size_t v = 0; v < params_.size(); ++v) {
    STRATA_RETURN_IF_ERROR(optimizer_->ApplyDense(
        DType::kFloat32, step, params_[v].data(), slot_ptrs_[v],
        grads_[v].data(), static_cast<int64_t>(params_[v].size())));
  }
  iterations_ = step + 1;
  return stats;
}

absl::StatusOr<StepStats> LocalTrainer::TrainEpoch(const Dataset& train,
                                                   int64_t batch_size,
                                                   uint64_t shuffle_seed,
                                                   int epoch) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be >= 1, got ", batch_size));
  }
  if (train.features != model_.num_features()) {
    return absl::InvalidArgumentError(
        absl::StrCat("training examples have ", train.features,
                     " features; the model takes ", model_.num_features()));
  }
  const std::vector<int64_t> perm =
      EpochPermutation(train.size, shuffle_seed, epoch);
  const int64_t steps = StepsPerEpoch(train.size, batch_size);
  double loss_sum = 0;
  double correct = 0;
  StepStats epoch_stats;
  for (int64_t i = 0; i < steps; ++i) {
    GatherBatch(train, perm, i, batch_size, &batch_x_, &batch_y_);
    const int64_t b = static_cast<int64_t>(batch_y_.size());
    STRATA_ASSIGN_OR_RETURN(
        StepStats stats,
        Step(batch_x_.data(), batch_y_.data(), b, iterations_));
    loss_sum += stats.loss * static_cast<double>(b);
    correct += stats.accuracy * static_cast<double>(b);
    epoch_stats.examples += b;
  }
  if (epoch_stats.examples > 0) {
    epoch_stats.loss = loss_sum / static_cast<double>(epoch_stats.examples);
    epoch_stats.accuracy = correct / static_cast<double>(epoch_stats.examples);
  }
  return epoch_stats;
}

absl::StatusOr<StepStats> LocalTrainer::Evaluate(const Dataset& data,
                                                 int64_t batch) {
  return model_.Evaluate(Model::Views(params_), data, batch, &workspace_);
}

}  // namespace strata

// Model's forward pass, loss and backward pass on the CPU (Eigen), and the
// dispatch of TrainStep, Evaluate and Predict to the GPU backend.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/float_env.h"
#include "common/status_macros.h"
#include "worker/gpu_model.h"
#include "worker/model.h"
#include "worker/model_internal.h"

namespace strata {
namespace {

using model_internal::Mix64;

using RowMatrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using RowVectorMap = Eigen::Map<Eigen::RowVectorXf>;
using ConstRowVectorMap = Eigen::Map<const Eigen::RowVectorXf>;

// Keras's backend epsilon: probabilities are clipped to [eps, 1 - eps]
// before the log of the cross-entropies.
constexpr double kEpsilon = 1e-7;

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
    std::vector<std::vector<float>>* grads, ModelWorkspace* workspace,
    float* input_grad) const {
  const ScopedFlushDenormals flush_denormals;
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
    if (input_grad != nullptr) {
      return absl::FailedPreconditionError(
          "input gradients (embedding models) are computed on the CPU only");
    }
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

  // Down to the first trainable stage, or to the input for input_grad.
  const int lowest = input_grad != nullptr ? 0 : first_trainable_stage_;
  for (int s = num_stages - 1; s >= lowest; --s) {
    const Stage& st = stages_[s];
    float* g = ws->gradients_[s].data();
    float* below =
        s > lowest ? ws->gradients_[s - 1].Resize(static_cast<size_t>(
                         batch * st.in))
        : s == 0   ? input_grad
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
  const ScopedFlushDenormals flush_denormals;
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
  const ScopedFlushDenormals flush_denormals;
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

}  // namespace strata

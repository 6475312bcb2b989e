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
#include "model/activation.h"
#include "worker/model_internal.h"

namespace strata {
namespace {

// A step's inputs: at least one example, and inputs to read.
absl::Status CheckBatchInputs(const float* x, int64_t batch) {
  if (batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch must be >= 1, got ", batch));
  }
  if (x == nullptr) return absl::InvalidArgumentError("inputs are null");
  return absl::OkStatus();
}

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

}  // namespace

absl::Status Model::Forward(const std::vector<absl::Span<const float>>& params,
                            const float* x, int64_t batch, bool training,
                            uint64_t dropout_seed, ModelWorkspace* ws) const {
  STRATA_RETURN_IF_ERROR(EnsureState(ws));
  std::vector<absl::Span<const float>> state;
  state.reserve(ws->state_.size());
  for (const std::vector<float>& v : ws->state_) state.emplace_back(v);
  const bool stateful = training && !states_.empty();
  STRATA_RETURN_IF_ERROR(graph_->Forward(
      params, state, x, batch, training, dropout_seed, &ws->graph_,
      stateful ? &ws->new_state_ : nullptr));
  return absl::OkStatus();
}

void Model::Loss(const float* out, const int32_t* y, int64_t batch,
                 int64_t mean_over, double* loss_sum, int64_t* correct,
                 float* grad, ModelWorkspace* ws) const {
  const int64_t c = num_outputs_;
  const float inv = 1.0f / static_cast<float>(mean_over);
  const bool regression = loss_kind_ == LossKind::kMse ||
                          loss_kind_ == LossKind::kMae ||
                          loss_kind_ == LossKind::kHuber;
  if (from_logits_ && !regression) {
    // The probabilities of the logits; the gradient below is then taken
    // with respect to the logits, as a fused softmax (sigmoid) is.
    float* probs = ws->probs_.Resize(static_cast<size_t>(batch * c));
    std::copy(out, out + batch * c, probs);
    model::Activation act;
    act.kind = loss_kind_ == LossKind::kCrossEntropy
                   ? model::ActivationKind::kSoftmax
                   : model::ActivationKind::kSigmoid;
    model::ApplyActivation(act, probs, batch, c);
    out = probs;
  }
  const bool wrt_logits = fuse_output_ || from_logits_;
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
      case LossKind::kMse:
      case LossKind::kMae:
      case LossKind::kHuber: {
        // Against the one-hot label (the label itself with one output).
        const double delta = huber_delta_;
        double sum = 0;
        for (int64_t k = 0; k < c; ++k) {
          const double t = c > 1 ? (k == label ? 1.0 : 0.0) : label;
          const double d = p(b, k) - t;
          const double a = std::abs(d);
          sum += loss_kind_ == LossKind::kMse   ? d * d
                 : loss_kind_ == LossKind::kMae ? a
                 : a <= delta                   ? 0.5 * d * d
                                                : delta * (a - 0.5 * delta);
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
  if (!wrt_logits && !regression) {
    // The output also feeds other layers: d loss / d probabilities.
    g.setZero();
    for (int64_t b = 0; b < batch; ++b) {
      if (loss_kind_ == LossKind::kCrossEntropy) {
        const float q = std::clamp<float>(p(b, y[b]), kEpsilon, 1 - kEpsilon);
        g(b, y[b]) = -inv / q;
      } else {
        const float q = std::clamp<float>(p(b, 0), kEpsilon, 1 - kEpsilon);
        g(b, 0) = y[b] == 1 ? -inv / q : inv / (1 - q);
      }
    }
    return;
  }
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
    }    case LossKind::kMae:
    case LossKind::kHuber: {
      // d/dp of mean_k l(p - t), averaged over the batch: sign(d) for the
      // absolute error; d, or delta * sign(d) past delta, for Huber.
      const float scale = inv / static_cast<float>(c);
      const float delta = static_cast<float>(huber_delta_);
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t k = 0; k < c; ++k) {
          const float t = c > 1 ? (k == y[b] ? 1.0f : 0.0f)
                                : static_cast<float>(y[b]);
          const float d = p(b, k) - t;
          const float sign = d > 0 ? 1.0f : d < 0 ? -1.0f : 0.0f;
          const float dl = loss_kind_ == LossKind::kMae ? sign
                           : std::abs(d) <= delta       ? d
                                                        : delta * sign;
          g(b, k) = dl * scale;
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
  STRATA_RETURN_IF_ERROR(CheckBatchInputs(x, batch));
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

  STRATA_RETURN_IF_ERROR(
      Forward(params, x, batch, /*training=*/true, dropout_seed, ws));
  float* top = ws->loss_grad_.Resize(static_cast<size_t>(batch * num_outputs_));
  double loss_sum = 0;
  int64_t correct = 0;
  Loss(graph_->Output(ws->graph_, 0), y, batch, batch, &loss_sum, &correct,
       top, ws);
  std::vector<absl::Span<const float>> state;
  for (const std::vector<float>& v : ws->state_) state.emplace_back(v);
  graph_->Backward(params, state, x, batch, dropout_seed, {top},
                   {fuse_output_}, &ws->graph_, grads, input_grad);
  // Keras adds the regularization losses to the reported loss.
  const double regularization = graph_->Regularization(params, grads);
  loss_sum += regularization * static_cast<double>(batch);
  if (!states_.empty()) std::swap(ws->state_, ws->new_state_);
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
    STRATA_RETURN_IF_ERROR(Forward(params, data.x.data() + start * data.features,
                                   b, /*training=*/false, 0, ws));
    Loss(graph_->Output(ws->graph_, 0), y, b, b, &loss_sum, &correct, nullptr,
         ws);
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
  STRATA_RETURN_IF_ERROR(CheckBatchInputs(x, batch));
  ModelWorkspace local;
  ModelWorkspace* ws = workspace != nullptr ? workspace : &local;
  if (gpu_ != nullptr) {
    return GpuPredict(*gpu_, params, x, batch, out, &ws->gpu_);
  }
  STRATA_RETURN_IF_ERROR(
      Forward(params, x, batch, /*training=*/false, 0, ws));
  const float* result = graph_->Output(ws->graph_, 0);
  out->assign(result, result + batch * num_outputs_);
  return absl::OkStatus();
}

}  // namespace strata

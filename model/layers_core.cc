// Dense, Activation, Dropout, Flatten, Reshape.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "model/activation.h"
#include "model/layers.h"
#include "model/random.h"
#include "model/eigen_maps.h"

namespace strata {

void FillDropoutMask(uint64_t seed, uint64_t layer, double rate,
                     model::Real* mask, int64_t n) {
  using model::Real;
  const uint64_t key = Mix64(seed ^ Mix64(layer + 0x5bd1e995ULL));
  const Real keep_scale = static_cast<Real>(1.0 / (1.0 - rate));
  // 24-bit uniforms: u = bits * 2^-24 is kept when u >= rate.
  const uint64_t threshold =
      static_cast<uint64_t>(std::ceil(rate * 16777216.0));
  for (int64_t e = 0; e < n; ++e) {
    const uint64_t bits =
        Mix64(key + static_cast<uint64_t>(e) * 0xd1b54a32d192ed03ULL) >> 40;
    mask[e] = bits >= threshold ? keep_scale : 0.0f;
  }
}

namespace model {
namespace {

using namespace eigen_maps;  // NOLINT: the layer files' Eigen views


std::string ShapeText(const Shape& s) { return ShapeString(s); }

// Dense: y = f(x W + b) on the last axis (Keras applies it to the last
// axis of any rank; earlier axes are batch-like).
class Dense : public Layer {
 public:
  Dense(int64_t units, Activation activation, bool use_bias,
        WeightDef kernel, WeightDef bias)
      : units_(units), activation_(activation), use_bias_(use_bias) {
    weights_.push_back(std::move(kernel));
    if (use_bias_) weights_.push_back(std::move(bias));
  }
  std::string class_name() const override { return "Dense"; }
  std::string output_activation() const override {
    return ActivationKindName(activation_.kind);
  }

  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    const Shape& in = inputs[0];
    if (in.empty()) return Error("expects an input of rank >= 1, got []");
    in_ = in.back();
    rows_ = NumElements(in) / in_;
    output_shape_ = in;
    output_shape_.back() = units_;
    weights_[0].shape = {in_, units_};
    if (use_bias_) weights_[1].shape = {units_};
    return absl::OkStatus();
  }

  int64_t ScratchPerExample() const override {
    return NeedsPreactivation(activation_) ? rows_ * units_ : 0;
  }

  void Forward(const ForwardArgs& a) const override {
    const int64_t n = a.batch * rows_;
    ConstMatrixMap x(a.inputs[0], n, in_);
    ConstMatrixMap w(a.weights[0].data(), in_, units_);
    MatrixMap z(a.output, n, units_);
    z.noalias() = x * w;
    if (use_bias_) {
      z.rowwise() += ConstRowVectorMap(a.weights[1].data(), units_);
    }
    if (NeedsPreactivation(activation_)) {
      Real* pre = a.scratch->Get(0, static_cast<size_t>(n * units_));
      std::memcpy(pre, a.output, sizeof(Real) * n * units_);
    }
    ApplyActivation(activation_, a.output, n, units_);
  }

  void Backward(const BackwardArgs& a) const override {
    const int64_t n = a.batch * rows_;
    Real* g = a.scratch->Get(1, static_cast<size_t>(n * units_));
    std::memcpy(g, a.output_grad, sizeof(Real) * n * units_);
    if (!a.grad_is_preactivation) {
      ActivationBackward(activation_, a.output,
                         NeedsPreactivation(activation_) ? a.scratch->At(0)
                                                         : nullptr,
                         g, n, units_);
    }
    MatrixMap dz(g, n, units_);
    if (a.weight_grads[0] != nullptr) {
      MatrixMap dw(a.weight_grads[0], in_, units_);
      dw.noalias() = ConstMatrixMap(a.inputs[0], n, in_).transpose() * dz;
    }
    if (use_bias_ && a.weight_grads[1] != nullptr) {
      // Row by row: exact adds, so the rounding is the same wherever the
      // caller's buffer lies (a column reduction's is not).
      RowVectorMap db(a.weight_grads[1], units_);
      db = dz.row(0);
      for (int64_t r = 1; r < n; ++r) db += dz.row(r);
    }
    if (a.input_grads[0] != nullptr) {
      MatrixMap(a.input_grads[0], n, in_).noalias() =
          dz * ConstMatrixMap(a.weights[0].data(), in_, units_).transpose();
    }
  }

 private:
  int64_t units_;
  Activation activation_;
  bool use_bias_;
  int64_t in_ = 0;
  int64_t rows_ = 1;
};

class ActivationLayer : public Layer {
 public:
  explicit ActivationLayer(Activation a) : activation_(a) {}
  std::string class_name() const override { return "Activation"; }
  std::string output_activation() const override {
    return ActivationKindName(activation_.kind);
  }
  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    if (inputs[0].empty()) return Error("expects an input of rank >= 1");
    output_shape_ = inputs[0];
    cols_ = inputs[0].back();
    rows_ = NumElements(inputs[0]) / cols_;
    return absl::OkStatus();
  }
  void Forward(const ForwardArgs& a) const override {
    const int64_t n = a.batch * rows_;
    std::memcpy(a.output, a.inputs[0], sizeof(Real) * n * cols_);
    ApplyActivation(activation_, a.output, n, cols_);
  }
  void Backward(const BackwardArgs& a) const override {
    if (a.input_grads[0] == nullptr) return;
    const int64_t n = a.batch * rows_;
    std::memcpy(a.input_grads[0], a.output_grad, sizeof(Real) * n * cols_);
    if (!a.grad_is_preactivation) {
      ActivationBackward(activation_, a.output, a.inputs[0], a.input_grads[0],
                         n, cols_);
    }
  }

 private:
  Activation activation_;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
};

class Dropout : public Layer {
 public:
  explicit Dropout(double rate) : rate_(rate) {}
  std::string class_name() const override { return "Dropout"; }
  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    output_shape_ = inputs[0];
    size_ = NumElements(inputs[0]);
    return absl::OkStatus();
  }
  int64_t ScratchPerExample() const override { return size_; }
  void Forward(const ForwardArgs& a) const override {
    const int64_t n = a.batch * size_;
    if (!a.training || rate_ <= 0) {
      std::memcpy(a.output, a.inputs[0], sizeof(Real) * n);
      return;
    }
    Real* mask = a.scratch->Get(0, static_cast<size_t>(n));
    FillDropoutMask(a.seed, a.layer_index, rate_, mask, n);
    Eigen::Map<ArrayXr>(a.output, n) =
        Eigen::Map<const ArrayXr>(a.inputs[0], n) *
        Eigen::Map<const ArrayXr>(mask, n);
  }
  void Backward(const BackwardArgs& a) const override {
    if (a.input_grads[0] == nullptr) return;
    const int64_t n = a.batch * size_;
    Eigen::Map<ArrayXr> dst(a.input_grads[0], n);
    Eigen::Map<const ArrayXr> src(a.output_grad, n);
    if (a.training && rate_ > 0) {
      dst = src * Eigen::Map<const ArrayXr>(a.scratch->At(0), n);
    } else {
      dst = src;
    }
  }

 private:
  double rate_;
  int64_t size_ = 0;
};

// Flatten and Reshape: the same values under another per-example shape.
class ReshapeLayer : public Layer {
 public:
  ReshapeLayer(std::string cls, std::vector<int64_t> target)
      : class_(std::move(cls)), target_(std::move(target)) {}
  std::string class_name() const override { return class_; }
  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    size_ = NumElements(inputs[0]);
    if (class_ == "Flatten") {
      output_shape_ = {size_};
      return absl::OkStatus();
    }
    int64_t known = 1;
    int unknown = -1;
    for (size_t i = 0; i < target_.size(); ++i) {
      if (target_[i] == -1) {
        if (unknown >= 0) {
          return Error("argument 'target_shape': at most one -1");
        }
        unknown = static_cast<int>(i);
      } else {
        known *= target_[i];
      }
    }
    output_shape_ = target_;
    if (unknown >= 0) {
      if (known == 0 || size_ % known != 0) {
        return Error(absl::StrCat("argument 'target_shape' ",
                                  ShapeText(target_), " cannot hold input ",
                                  ShapeText(inputs[0])));
      }
      output_shape_[unknown] = size_ / known;
    } else if (known != size_) {
      return Error(absl::StrCat("argument 'target_shape' ", ShapeText(target_),
                                " holds ", known, " values; the input ",
                                ShapeText(inputs[0]), " holds ", size_));
    }
    return absl::OkStatus();
  }
  void Forward(const ForwardArgs& a) const override {
    std::memcpy(a.output, a.inputs[0], sizeof(Real) * a.batch * size_);
  }
  void Backward(const BackwardArgs& a) const override {
    if (a.input_grads[0] == nullptr) return;
    std::memcpy(a.input_grads[0], a.output_grad,
                sizeof(Real) * a.batch * size_);
  }

 private:
  std::string class_;
  std::vector<int64_t> target_;
  int64_t size_ = 0;
};

}  // namespace

LayerOr CreateDense(ConfigReader* r) {
  int64_t units = 0;
  Activation act;
  bool use_bias = true;
  WeightDef kernel{"kernel"};
  WeightDef bias{"bias"};
  absl::Status s = r->Int("units", true, 0, 1, int64_t{1} << 31, &units);
  if (s.ok()) s = r->ActivationArg("activation", "linear", &act);
  if (s.ok()) s = r->Bool("use_bias", true, &use_bias);
  if (s.ok()) s = r->KernelAndBias(InitializerType::kGlorotUniform, &kernel, &bias);
  if (s.ok()) s = r->Unsupported("lora_rank", nullptr);
  if (s.ok()) s = r->Unsupported("lora_alpha", nullptr);
  if (s.ok()) s = r->Unsupported("quantization_config", nullptr);
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<Dense>(units, act, use_bias, std::move(kernel),
                                 std::move(bias));
}

LayerOr CreateActivation(ConfigReader* r) {
  Activation act;
  if (!r->Has("activation")) {
    return r->ArgError("activation", "is required");
  }
  absl::Status s = r->ActivationArg("activation", "linear", &act);
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<ActivationLayer>(act);
}

LayerOr CreateDropout(ConfigReader* r) {
  double rate = 0;
  if (!r->Has("rate")) return r->ArgError("rate", "is required");
  absl::Status s = r->Number("rate", 0, 0, 1, false, &rate);
  if (s.ok()) s = r->Unsupported("noise_shape", nullptr);
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<Dropout>(rate);
}

LayerOr CreateFlatten(ConfigReader* r) {
  absl::Status s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<ReshapeLayer>("Flatten", std::vector<int64_t>{});
}

LayerOr CreateReshape(ConfigReader* r) {
  std::vector<int64_t> target;
  absl::Status s = r->IntList("target_shape", true, true, &target);
  if (s.ok() && target.empty()) {
    s = r->ArgError("target_shape", "must not be empty");
  }
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<ReshapeLayer>("Reshape", std::move(target));
}

}  // namespace model
}  // namespace strata

// TensorFlow Recommenders' feature-interaction layers: DotInteraction
// (DLRM's pairwise dot products) and Cross (DCN-v2's cross layer).
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "model/activation.h"
#include "model/layers.h"
#include "model/eigen_maps.h"

namespace strata {
namespace model {
namespace {

using namespace eigen_maps;  // NOLINT: the layer files' Eigen views


// DotInteraction (tfrs.layers.feature_interaction.DotInteraction, also
// keras_rs.layers.DotInteraction): n >= 2 inputs of one shape [d] stacked
// into X [n, d]; G = X X^T. Output, as TFRS's boolean_mask takes it (row
// major over the kept entries):
//   self_interaction false: G[i, j] for i > j: (1,0), (2,0), (2,1), (3,0) ...
//   self_interaction true:  G[i, j] for i >= j: (0,0), (1,0), (1,1), (2,0) ...
//   skip_gather true: all of G row-major [n * n], the entries not kept
//   above set to 0.
class DotInteraction : public Layer {
 public:
  DotInteraction(bool self_interaction, bool skip_gather)
      : self_interaction_(self_interaction), skip_gather_(skip_gather) {}
  std::string class_name() const override { return "DotInteraction"; }
  int num_inputs() const override { return -2; }

  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    const Shape& first = inputs[0];
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].size() != 1) {
        return Error(absl::StrCat(
            "expects inputs of rank 1 (features), input ", i, " has shape ",
            ShapeString(inputs[i])));
      }
      if (inputs[i] != first) {
        return Error(absl::StrCat(
            "every input must have the shape of input 0, ",
            ShapeString(first), "; input ", i, " has shape ",
            ShapeString(inputs[i])));
      }
    }
    n_ = static_cast<int64_t>(inputs.size());
    d_ = first[0];
    kept_.clear();
    for (int64_t i = 0; i < n_; ++i) {
      for (int64_t j = 0; j < n_; ++j) {
        if (Kept(i, j)) kept_.push_back(i * n_ + j);
      }
    }
    output_shape_ = {skip_gather_ ? n_ * n_
                                  : static_cast<int64_t>(kept_.size())};
    return absl::OkStatus();
  }

  void Forward(const ForwardArgs& a) const override {
    const int64_t out_n = output_shape_[0];
    Real* x = a.scratch->Get(0, static_cast<size_t>(n_ * d_));
    Real* g = a.scratch->Get(1, static_cast<size_t>(n_ * n_));
    MatrixMap xm(x, n_, d_);
    MatrixMap gm(g, n_, n_);
    for (int64_t b = 0; b < a.batch; ++b) {
      Stack(a.inputs, b, x);
      gm.noalias() = xm * xm.transpose();
      Real* out = a.output + b * out_n;
      if (skip_gather_) {
        std::memset(out, 0, sizeof(Real) * static_cast<size_t>(out_n));
      }
      for (size_t k = 0; k < kept_.size(); ++k) {
        out[skip_gather_ ? kept_[k] : static_cast<int64_t>(k)] = g[kept_[k]];
      }
    }
  }

  // d G[i, j] = x_i . x_j, so with M the n x n matrix of the output's
  // gradient at the kept entries (0 elsewhere), dX = (M + M^T) X.
  void Backward(const BackwardArgs& a) const override {
    bool any = false;
    for (Real* p : a.input_grads) any = any || p != nullptr;
    if (!any) return;
    const int64_t out_n = output_shape_[0];
    Real* x = a.scratch->Get(0, static_cast<size_t>(n_ * d_));
    Real* m = a.scratch->Get(1, static_cast<size_t>(n_ * n_));
    Real* dx = a.scratch->Get(2, static_cast<size_t>(n_ * d_));
    MatrixMap xm(x, n_, d_);
    MatrixMap mm(m, n_, n_);
    MatrixMap dxm(dx, n_, d_);
    for (int64_t b = 0; b < a.batch; ++b) {
      Stack(a.inputs, b, x);
      const Real* dy = a.output_grad + b * out_n;
      mm.setZero();
      for (size_t k = 0; k < kept_.size(); ++k) {
        const int64_t i = kept_[k] / n_;
        const int64_t j = kept_[k] % n_;
        const Real gk = dy[skip_gather_ ? kept_[k] : static_cast<int64_t>(k)];
        mm(i, j) += gk;
        mm(j, i) += gk;
      }
      dxm.noalias() = mm * xm;
      for (int64_t i = 0; i < n_; ++i) {
        if (a.input_grads[i] == nullptr) continue;
        std::memcpy(a.input_grads[i] + b * d_, dx + i * d_,
                    sizeof(Real) * static_cast<size_t>(d_));
      }
    }
  }

 private:
  bool Kept(int64_t i, int64_t j) const {
    return self_interaction_ ? i >= j : i > j;
  }
  // Example b's inputs as the rows of x [n, d].
  void Stack(const std::vector<const Real*>& inputs, int64_t b,
             Real* x) const {
    for (int64_t i = 0; i < n_; ++i) {
      std::memcpy(x + i * d_, inputs[i] + b * d_,
                  sizeof(Real) * static_cast<size_t>(d_));
    }
  }

  bool self_interaction_;
  bool skip_gather_;
  int64_t n_ = 0;
  int64_t d_ = 0;
  std::vector<int64_t> kept_;  // flat i * n + j of the output's entries
};

// Cross (tfrs.layers.dcn.Cross = tfrs.layers.feature_interaction.Cross):
// inputs x0 alone (x = x0) or [x0, x], one shape of rank >= 1 (applied on
// the last axis, d; earlier axes are rows, as Dense does).
//   full rank: P = x W + b           W "kernel" [d, d], "bias" [d]
//   low rank:  P = (x U) V + b       U "u_kernel" [d, p] (TFRS's _dense_u,
//              no bias), V "v_kernel" [p, d], "bias" [d] (its _dense_v)
//   P += diag_scale * x;  y = x0 * P + x.
// Weights in TFRS's order (its sub-layers' variables as created).
class Cross : public Layer {
 public:
  Cross(int64_t projection_dim, double diag_scale, bool use_bias,
        std::vector<WeightDef> weights)
      : projection_dim_(projection_dim),
        diag_scale_(static_cast<Real>(diag_scale)),
        use_bias_(use_bias) {
    weights_ = std::move(weights);
  }
  std::string class_name() const override { return "Cross"; }
  int num_inputs() const override { return -1; }

  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    if (inputs.size() > 2) {
      return Error(absl::StrCat("takes 1 or 2 inputs (x0, or x0 and x), got ",
                                inputs.size()));
    }
    const Shape& x0 = inputs[0];
    if (x0.empty()) return Error("expects an input of rank >= 1, got []");
    if (inputs.size() == 2 && inputs[1] != x0) {
      return Error(absl::StrCat("input x has shape ", ShapeString(inputs[1]),
                                ", x0 has shape ", ShapeString(x0),
                                "; they must match"));
    }
    d_ = x0.back();
    rows_ = NumElements(x0) / d_;
    output_shape_ = x0;
    size_t w = 0;
    if (low_rank()) {
      weights_[w++].shape = {d_, projection_dim_};
      weights_[w++].shape = {projection_dim_, d_};
    } else {
      weights_[w++].shape = {d_, d_};
    }
    if (use_bias_) weights_[w].shape = {d_};
    return absl::OkStatus();
  }

  int64_t ScratchPerExample() const override {
    return rows_ * (d_ + (low_rank() ? projection_dim_ : 0));
  }

  void Forward(const ForwardArgs& a) const override {
    const int64_t n = a.batch * rows_;
    const Real* x0 = a.inputs[0];
    const Real* x = a.inputs.size() == 2 ? a.inputs[1] : a.inputs[0];
    ConstMatrixMap xm(x, n, d_);
    // P stays in scratch 0 for backward (dy/dx0 = P); x U in scratch 1.
    MatrixMap p(a.scratch->Get(0, static_cast<size_t>(n * d_)), n, d_);
    if (low_rank()) {
      MatrixMap h(a.scratch->Get(1, static_cast<size_t>(n * projection_dim_)),
                  n, projection_dim_);
      h.noalias() = xm * ConstMatrixMap(a.weights[0].data(), d_,
                                        projection_dim_);
      p.noalias() = h * ConstMatrixMap(a.weights[1].data(), projection_dim_,
                                       d_);
    } else {
      p.noalias() = xm * ConstMatrixMap(a.weights[0].data(), d_, d_);
    }
    if (use_bias_) {
      p.rowwise() += ConstRowVectorMap(a.weights[bias_index()].data(), d_);
    }
    if (diag_scale_ != 0.0f) p += diag_scale_ * xm;
    const int64_t total = n * d_;
    ArrayMap(a.output, total) =
        ConstArrayMap(x0, total) * ConstArrayMap(p.data(), total) +
        ConstArrayMap(x, total);
  }

  // With g = dL/dy and dP = g * x0 (elementwise):
  //   dx0 += g * P;  dx += g + diag_scale * dP + dP W^T (or dP V^T U^T);
  //   dW = x^T dP (or dV = (x U)^T dP, dU = x^T (dP V^T)); db = sum dP.
  // With one input, x0's gradient is the sum of both.
  void Backward(const BackwardArgs& a) const override {
    const int64_t n = a.batch * rows_;
    const int64_t total = n * d_;
    const bool two = a.inputs.size() == 2;
    const Real* x0 = a.inputs[0];
    const Real* x = two ? a.inputs[1] : a.inputs[0];
    Real* dx0 = a.input_grads[0];
    Real* dx = two ? a.input_grads[1] : a.input_grads[0];
    ConstMatrixMap xm(x, n, d_);
    ConstArrayMap g(a.output_grad, total);
    Real* dp_buf = a.scratch->Get(2, static_cast<size_t>(total));
    ArrayMap(dp_buf, total) = g * ConstArrayMap(x0, total);
    MatrixMap dp(dp_buf, n, d_);

    const bool need_dh =
        low_rank() && (dx != nullptr || a.weight_grads[0] != nullptr);
    Real* dh_buf = nullptr;
    if (need_dh) {
      dh_buf = a.scratch->Get(3, static_cast<size_t>(n * projection_dim_));
      MatrixMap(dh_buf, n, projection_dim_).noalias() =
          dp * ConstMatrixMap(a.weights[1].data(), projection_dim_, d_)
                   .transpose();
    }
    // Weight gradients.
    if (low_rank()) {
      if (a.weight_grads[0] != nullptr) {
        MatrixMap(a.weight_grads[0], d_, projection_dim_).noalias() =
            xm.transpose() * ConstMatrixMap(dh_buf, n, projection_dim_);
      }
      if (a.weight_grads[1] != nullptr) {
        MatrixMap(a.weight_grads[1], projection_dim_, d_).noalias() =
            ConstMatrixMap(a.scratch->At(1), n, projection_dim_).transpose() *
            dp;
      }
    } else if (a.weight_grads[0] != nullptr) {
      MatrixMap(a.weight_grads[0], d_, d_).noalias() = xm.transpose() * dp;
    }
    if (use_bias_ && a.weight_grads[bias_index()] != nullptr) {
      // Row by row, as Dense: the rounding does not depend on where the
      // caller's buffer lies.
      RowVectorMap db(a.weight_grads[bias_index()], d_);
      db = dp.row(0);
      for (int64_t r = 1; r < n; ++r) db += dp.row(r);
    }
    // Gradient through x (the linear path and the residual).
    if (dx != nullptr) {
      MatrixMap dxm(dx, n, d_);
      if (low_rank()) {
        dxm.noalias() = ConstMatrixMap(dh_buf, n, projection_dim_) *
                        ConstMatrixMap(a.weights[0].data(), d_,
                                       projection_dim_)
                            .transpose();
      } else {
        dxm.noalias() =
            dp * ConstMatrixMap(a.weights[0].data(), d_, d_).transpose();
      }
      ArrayMap dxa(dx, total);
      dxa += g;
      if (diag_scale_ != 0.0f) dxa += diag_scale_ * ArrayMap(dp_buf, total);
    }
    // Gradient through x0 (the product with P).
    if (dx0 != nullptr) {
      ConstArrayMap p(a.scratch->At(0), total);
      if (two) {
        ArrayMap(dx0, total) = g * p;
      } else {
        ArrayMap(dx0, total) += g * p;
      }
    }
  }

 private:
  bool low_rank() const { return projection_dim_ > 0; }
  size_t bias_index() const { return low_rank() ? 2 : 1; }

  int64_t projection_dim_;  // 0: full rank
  Real diag_scale_;
  bool use_bias_;
  int64_t d_ = 0;
  int64_t rows_ = 1;
};

}  // namespace

// TFRS's DotInteraction takes self_interaction and skip_gather but writes
// neither in its get_config (its JSON carries the base keys only);
// keras_rs's DotInteraction writes both.
LayerOr CreateDotInteraction(ConfigReader* r) {
  bool self_interaction = false;
  bool skip_gather = false;
  absl::Status s = r->Bool("self_interaction", false, &self_interaction);
  if (s.ok()) s = r->Bool("skip_gather", false, &skip_gather);
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<DotInteraction>(self_interaction, skip_gather);
}

// TFRS's Cross: projection_dim (null: full rank), diag_scale (>= 0),
// use_bias, preactivation (null or linear only), kernel_initializer
// (truncated_normal, for every kernel), bias_initializer (zeros),
// kernel_regularizer (every kernel), bias_regularizer.
LayerOr CreateCross(ConfigReader* r) {
  int64_t projection_dim = 0;
  double diag_scale = 0;
  bool use_bias = true;
  Activation preactivation;
  WeightDef kernel{"kernel"};
  WeightDef bias{"bias"};
  absl::Status s = r->Int("projection_dim", false, 0, 1, int64_t{1} << 31,
                          &projection_dim);
  if (s.ok()) {
    s = r->Number("diag_scale", 0.0, 0.0,
                  std::numeric_limits<double>::max(), true, &diag_scale);
  }
  if (s.ok()) s = r->Bool("use_bias", true, &use_bias);
  if (s.ok()) s = r->ActivationArg("preactivation", "linear", &preactivation);
  if (s.ok() && preactivation.kind != ActivationKind::kLinear) {
    s = r->ArgError("preactivation",
                    absl::StrCat(ShowJson(r->At("preactivation")),
                                 " is not supported (only null or linear)"));
  }
  if (s.ok()) s = r->KernelAndBias(InitializerType::kTruncatedNormal, &kernel, &bias);
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  std::vector<WeightDef> weights;
  if (projection_dim > 0) {
    WeightDef u = kernel;
    u.name = "u_kernel";
    WeightDef v = kernel;
    v.name = "v_kernel";
    weights.push_back(std::move(u));
    weights.push_back(std::move(v));
  } else {
    weights.push_back(std::move(kernel));
  }
  if (use_bias) weights.push_back(std::move(bias));
  return std::make_unique<Cross>(projection_dim, diag_scale, use_bias,
                                 std::move(weights));
}

}  // namespace model
}  // namespace strata

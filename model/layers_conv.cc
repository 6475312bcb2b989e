// Conv1D and Conv2D: im2col and one GEMM forward; backward into the
// kernel (cols^T dZ), the bias (column sums) and the input (dZ W^T,
// scattered back by col2im). Conv1D is Conv2D over a height of 1.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "model/activation.h"
#include "model/layers.h"
#include "model/eigen_maps.h"

namespace strata {
namespace model {
namespace {

using namespace eigen_maps;  // NOLINT: the layer files' Eigen views


// Scratch buffers.
constexpr size_t kPreactivation = 0;  // forward: z before the activation
constexpr size_t kCols = 1;           // forward: im2col of the batch
constexpr size_t kGrad = 2;           // backward: d loss / dz
constexpr size_t kColGrad = 3;        // backward: one chunk of dCols

// Rows of dCols computed per GEMM in backward (bounded so that the input
// gradient needs no second batch-sized buffer): about 4 MiB of floats.
constexpr int64_t kColGradChunkFloats = int64_t{1} << 20;

// Output size and leading padding of one spatial axis, TensorFlow's rules.
// Returns false when a 'valid' window does not fit the input.
bool AxisGeometry(const std::string& padding, int64_t in, int64_t k,
                  int64_t stride, int64_t dilation, int64_t* out,
                  int64_t* pad_before) {
  const int64_t eff = (k - 1) * dilation + 1;
  if (padding == "valid") {
    if (in < eff) return false;
    *out = (in - eff) / stride + 1;
    *pad_before = 0;
  } else if (padding == "same") {
    *out = (in + stride - 1) / stride;
    const int64_t total =
        std::max<int64_t>((*out - 1) * stride + eff - in, 0);
    *pad_before = total / 2;
  } else {  // causal (Conv1D): all of the padding before
    *out = (in + stride - 1) / stride;
    *pad_before = eff - 1;
  }
  return true;
}

class Conv : public Layer {
 public:
  // `rank` 1 or 2; the tuples have `rank` entries.
  Conv(int rank, int64_t filters, std::vector<int64_t> kernel_size,
       std::vector<int64_t> strides, std::string padding,
       std::vector<int64_t> dilation, Activation activation, bool use_bias,
       WeightDef kernel, WeightDef bias)
      : rank_(rank),
        filters_(filters),
        kernel_size_(std::move(kernel_size)),
        strides_(std::move(strides)),
        padding_(std::move(padding)),
        dilation_(std::move(dilation)),
        activation_(activation),
        use_bias_(use_bias) {
    weights_.push_back(std::move(kernel));
    if (use_bias_) weights_.push_back(std::move(bias));
  }

  std::string class_name() const override {
    return rank_ == 1 ? "Conv1D" : "Conv2D";
  }
  std::string output_activation() const override {
    return ActivationKindName(activation_.kind);
  }

  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    const Shape& in = inputs[0];
    // Conv1D is a Conv2D of height 1 with a 1-high kernel.
    STRATA_RETURN_IF_ERROR(SpatialInput(in, rank_, &h_, &w_, &c_));
    kh_ = rank_ == 1 ? 1 : kernel_size_[0];
    kw_ = kernel_size_[rank_ - 1];
    sh_ = rank_ == 1 ? 1 : strides_[0];
    sw_ = strides_[rank_ - 1];
    dh_ = rank_ == 1 ? 1 : dilation_[0];
    dw_ = dilation_[rank_ - 1];
    bool fits = true;
    if (rank_ == 2) {
      fits = AxisGeometry(padding_, h_, kh_, sh_, dh_, &oh_, &pt_);
    } else {
      oh_ = 1;
      pt_ = 0;
    }
    fits = fits && AxisGeometry(padding_, w_, kw_, sw_, dw_, &ow_, &pl_);
    if (!fits) {
      return Error(absl::StrCat(
          "argument 'kernel_size' (", absl::StrJoin(kernel_size_, ", "),
          ") with dilation_rate (", absl::StrJoin(dilation_, ", "),
          ") does not fit the input ", ShapeString(in),
          " with padding 'valid'"));
    }
    k_ = kh_ * kw_ * c_;
    direct_ = kh_ == 1 && kw_ == 1 && sh_ == 1 && sw_ == 1 && pt_ == 0 &&
              pl_ == 0;
    if (rank_ == 1) {
      output_shape_ = {ow_, filters_};
      weights_[0].shape = {kw_, c_, filters_};
    } else {
      output_shape_ = {oh_, ow_, filters_};
      weights_[0].shape = {kh_, kw_, c_, filters_};
    }
    if (use_bias_) weights_[1].shape = {filters_};
    return absl::OkStatus();
  }

  int64_t ScratchPerExample() const override {
    const int64_t positions = oh_ * ow_;
    int64_t n = direct_ ? 0 : positions * k_;
    if (NeedsPreactivation(activation_)) n += positions * filters_;
    if (activation_.kind != ActivationKind::kLinear) {
      n += positions * filters_;  // the gradient's copy in backward
    }
    return n;
  }

  void Forward(const ForwardArgs& a) const override {
    const int64_t n = a.batch * oh_ * ow_;
    const Real* cols = a.inputs[0];
    if (!direct_) {
      Real* buf = a.scratch->Get(kCols, static_cast<size_t>(n * k_));
      Im2Col(a.inputs[0], a.batch, buf);
      cols = buf;
    }
    MatrixMap z(a.output, n, filters_);
    z.noalias() = ConstMatrixMap(cols, n, k_) *
                  ConstMatrixMap(a.weights[0].data(), k_, filters_);
    if (use_bias_) {
      z.rowwise() += ConstRowVectorMap(a.weights[1].data(), filters_);
    }
    if (NeedsPreactivation(activation_)) {
      Real* pre =
          a.scratch->Get(kPreactivation, static_cast<size_t>(n * filters_));
      std::memcpy(pre, a.output, sizeof(Real) * n * filters_);
    }
    if (activation_.kind != ActivationKind::kLinear) {
      ApplyActivation(activation_, a.output, n, filters_);
    }
  }

  void Backward(const BackwardArgs& a) const override {
    const int64_t n = a.batch * oh_ * ow_;
    const Real* dz_data = a.output_grad;
    if (!a.grad_is_preactivation &&
        activation_.kind != ActivationKind::kLinear) {
      Real* g = a.scratch->Get(kGrad, static_cast<size_t>(n * filters_));
      ActivationBackwardInto(activation_, a.output,
                             NeedsPreactivation(activation_)
                                 ? a.scratch->At(kPreactivation)
                                 : nullptr,
                             a.output_grad, g, n, filters_);
      dz_data = g;
    }
    ConstMatrixMap dz(dz_data, n, filters_);
    ConstMatrixMap w(a.weights[0].data(), k_, filters_);
    if (a.weight_grads[0] != nullptr) {
      const Real* cols = direct_ ? a.inputs[0] : a.scratch->At(kCols);
      MatrixMap(a.weight_grads[0], k_, filters_).noalias() =
          ConstMatrixMap(cols, n, k_).transpose() * dz;
    }
    if (use_bias_ && a.weight_grads[1] != nullptr) {
      // Row by row, as Dense: the rounding does not depend on alignment.
      RowVectorMap db(a.weight_grads[1], filters_);
      db = dz.row(0);
      for (int64_t r = 1; r < n; ++r) db += dz.row(r);
    }
    Real* dx = a.input_grads[0];
    if (dx == nullptr) return;
    if (direct_) {
      MatrixMap(dx, n, k_).noalias() = dz * w.transpose();
      return;
    }
    std::fill(dx, dx + a.batch * h_ * w_ * c_, 0.0f);
    const int64_t chunk =
        std::max<int64_t>(1, std::min<int64_t>(n, kColGradChunkFloats / k_));
    Real* dcols = a.scratch->Get(kColGrad, static_cast<size_t>(chunk * k_));
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
      const int64_t rows = std::min(chunk, n - r0);
      MatrixMap(dcols, rows, k_).noalias() =
          dz.middleRows(r0, rows) * w.transpose();
      Col2Im(dcols, r0, rows, dx);
    }
  }

 private:
  // The valid kx range [lo, hi) of an output column whose window starts at
  // input column ix0.
  void KxRange(int64_t ix0, int64_t* lo, int64_t* hi) const {
    *lo = ix0 >= 0 ? 0 : (-ix0 + dw_ - 1) / dw_;
    *hi = ix0 > w_ - 1 ? 0 : std::min(kw_, (w_ - 1 - ix0) / dw_ + 1);
    if (*hi < *lo) *hi = *lo;
  }

  // cols[(b, oy, ox), (ky, kx, c)] = x[b, oy*sh - pt + ky*dh,
  // ox*sw - pl + kx*dw, c], zero in the padding.
  void Im2Col(const Real* x, int64_t batch, Real* cols) const {
    const int64_t wc = w_ * c_;
    const int64_t row_kx = kw_ * c_;
    Real* dst = cols;
    for (int64_t b = 0; b < batch; ++b) {
      const Real* xb = x + b * h_ * wc;
      for (int64_t oy = 0; oy < oh_; ++oy) {
        const int64_t iy0 = oy * sh_ - pt_;
        for (int64_t ox = 0; ox < ow_; ++ox, dst += k_) {
          const int64_t ix0 = ox * sw_ - pl_;
          int64_t lo, hi;
          KxRange(ix0, &lo, &hi);
          for (int64_t ky = 0; ky < kh_; ++ky) {
            Real* d = dst + ky * row_kx;
            const int64_t iy = iy0 + ky * dh_;
            if (iy < 0 || iy >= h_ || lo == hi) {
              std::memset(d, 0, sizeof(Real) * row_kx);
              continue;
            }
            if (lo > 0) std::memset(d, 0, sizeof(Real) * lo * c_);
            // Offsets stay integers: ix0 may be negative.
            const int64_t base = iy * wc + ix0 * c_;
            if (dw_ == 1) {
              std::memcpy(d + lo * c_, xb + (base + lo * c_),
                          sizeof(Real) * (hi - lo) * c_);
            } else {
              for (int64_t kx = lo; kx < hi; ++kx) {
                std::memcpy(d + kx * c_, xb + (base + kx * dw_ * c_),
                            sizeof(Real) * c_);
              }
            }
            if (hi < kw_) {
              std::memset(d + hi * c_, 0, sizeof(Real) * (kw_ - hi) * c_);
            }
          }
        }
      }
    }
  }

  // dx += the scatter of rows [r0, r0 + rows) of dCols (held at dcols).
  void Col2Im(const Real* dcols, int64_t r0, int64_t rows, Real* dx) const {
    const int64_t wc = w_ * c_;
    const int64_t row_kx = kw_ * c_;
    const int64_t positions = oh_ * ow_;
    for (int64_t r = r0; r < r0 + rows; ++r) {
      const Real* src = dcols + (r - r0) * k_;
      const int64_t b = r / positions;
      const int64_t p = r - b * positions;
      const int64_t oy = p / ow_;
      const int64_t ox = p - oy * ow_;
      const int64_t iy0 = oy * sh_ - pt_;
      const int64_t ix0 = ox * sw_ - pl_;
      int64_t lo, hi;
      KxRange(ix0, &lo, &hi);
      if (lo == hi) continue;
      Real* xb = dx + b * h_ * wc;
      for (int64_t ky = 0; ky < kh_; ++ky) {
        const int64_t iy = iy0 + ky * dh_;
        if (iy < 0 || iy >= h_) continue;
        const Real* s = src + ky * row_kx;
        const int64_t base = iy * wc + ix0 * c_;  // may be negative
        if (dw_ == 1) {
          Real* d = xb + (base + lo * c_);
          const Real* ss = s + lo * c_;
          const int64_t len = (hi - lo) * c_;
          for (int64_t i = 0; i < len; ++i) d[i] += ss[i];
        } else {
          for (int64_t kx = lo; kx < hi; ++kx) {
            Real* dd = xb + (base + kx * dw_ * c_);
            const Real* ss = s + kx * c_;
            for (int64_t i = 0; i < c_; ++i) dd[i] += ss[i];
          }
        }
      }
    }
  }

  int rank_;
  int64_t filters_;
  std::vector<int64_t> kernel_size_;
  std::vector<int64_t> strides_;
  std::string padding_;
  std::vector<int64_t> dilation_;
  Activation activation_;
  bool use_bias_;
  // Set by BuildShapes (Conv1D: h 1).
  int64_t h_ = 0, w_ = 0, c_ = 0;
  int64_t kh_ = 1, kw_ = 1, sh_ = 1, sw_ = 1, dh_ = 1, dw_ = 1;
  int64_t oh_ = 0, ow_ = 0, pt_ = 0, pl_ = 0;
  int64_t k_ = 0;        // kh * kw * c: one row of cols
  bool direct_ = false;  // 1x1, stride 1, no padding: cols is the input
};

LayerOr CreateConv(ConfigReader* r, int rank) {
  int64_t filters = 0;
  std::vector<int64_t> kernel_size, strides, dilation;
  std::string padding;
  Activation act;
  bool use_bias = true;
  WeightDef kernel{"kernel"};
  WeightDef bias{"bias"};
  const size_t n = static_cast<size_t>(rank);
  absl::Status s =
      r->Int("filters", true, 0, 1, int64_t{1} << 31, &filters);
  if (s.ok()) s = r->IntTuple("kernel_size", n, {}, 1, &kernel_size);
  if (s.ok()) {
    s = r->IntTuple("strides", n, std::vector<int64_t>(n, 1), 1, &strides);
  }
  if (s.ok()) {
    if (rank == 1) {
      s = r->Enum("padding", "valid", {"valid", "same", "causal"}, &padding);
    } else {
      s = r->Enum("padding", "valid", {"valid", "same"}, &padding);
    }
  }
  if (s.ok()) {
    s = r->IntTuple("dilation_rate", n, std::vector<int64_t>(n, 1), 1,
                    &dilation);
  }
  if (s.ok() && *std::max_element(strides.begin(), strides.end()) > 1 &&
      *std::max_element(dilation.begin(), dilation.end()) > 1) {
    s = r->ArgError("dilation_rate",
                    absl::StrCat("dilation_rate (",
                                 absl::StrJoin(dilation, ", "),
                                 ") > 1 cannot be combined with strides (",
                                 absl::StrJoin(strides, ", "), ") > 1"));
  }
  if (s.ok()) s = r->Unsupported("groups", 1);
  if (s.ok()) s = r->ActivationArg("activation", "linear", &act);
  if (s.ok()) s = r->Bool("use_bias", true, &use_bias);
  if (s.ok()) s = r->KernelAndBias(InitializerType::kGlorotUniform, &kernel, &bias);
  for (const char* key : {"lora_rank", "lora_alpha", "dora_rank",
                          "dora_alpha"}) {
    if (s.ok()) s = r->Unsupported(key, nullptr);
  }
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<Conv>(rank, filters, std::move(kernel_size),
                                std::move(strides), std::move(padding),
                                std::move(dilation), act, use_bias,
                                std::move(kernel), std::move(bias));
}

}  // namespace

LayerOr CreateConv1D(ConfigReader* r) { return CreateConv(r, 1); }
LayerOr CreateConv2D(ConfigReader* r) { return CreateConv(r, 2); }

}  // namespace model
}  // namespace strata

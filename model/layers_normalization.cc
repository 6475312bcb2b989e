// BatchNormalization and LayerNormalization, both on the last axis.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "model/layers.h"
#include "model/eigen_maps.h"

namespace strata {
namespace model {
namespace {

using namespace eigen_maps;  // NOLINT: the layer files' Eigen views


// Rows summed in Real before each partial sum is added in double: column
// sums over a large batch x spatial extent stay accurate.
constexpr int64_t kChunkRows = 256;

// Rows per block of about 16 KiB (at most kChunkRows: the block's Real
// column sums are added in double).
int64_t BlockRows(int64_t c) {
  return std::max<int64_t>(1, std::min<int64_t>(kChunkRows, 4096 / c));
}

// `n` doubles in scratch buffer `i` (a 64-byte aligned Real buffer; only
// ever read back as doubles after being written as doubles).
double* ScratchDoubles(LayerScratch* scratch, size_t i, int64_t n) {
  return reinterpret_cast<double*>(
      scratch->Get(i, static_cast<size_t>(2 * std::max<int64_t>(n, 1))));
}

// out[j] = the sum over rows r < n of a per-row term, as Real sums of
// kChunkRows rows added in double. add_row(r, partial) adds row r's term
// (1 x c) to the partial. Row by row, vectorized along the row: faster
// than Eigen's column-wise reductions of row-major blocks, and the
// rounding depends only on the shapes.
template <typename AddRow>
void ColumnSums(int64_t n, int64_t c, Real* partial, double* out,
                AddRow add_row) {
  std::fill(out, out + c, 0.0);
  RowVectorMap p(partial, c);
  for (int64_t r0 = 0; r0 < n; r0 += kChunkRows) {
    const int64_t end = std::min(n, r0 + kChunkRows);
    p.setZero();
    for (int64_t r = r0; r < end; ++r) add_row(r, p);
    for (int64_t j = 0; j < c; ++j) out[j] += p[j];
  }
}

// Two sums in one pass: add_row(r, partial0, partial1).
template <typename AddRow>
void ColumnSums2(int64_t n, int64_t c, Real* partials, double* out0,
                 double* out1, AddRow add_row) {
  std::fill(out0, out0 + c, 0.0);
  std::fill(out1, out1 + c, 0.0);
  RowVectorMap p0(partials, c);
  RowVectorMap p1(partials + c, c);
  for (int64_t r0 = 0; r0 < n; r0 += kChunkRows) {
    const int64_t end = std::min(n, r0 + kChunkRows);
    p0.setZero();
    p1.setZero();
    for (int64_t r = r0; r < end; ++r) add_row(r, p0, p1);
    for (int64_t j = 0; j < c; ++j) {
      out0[j] += p0[j];
      out1[j] += p1[j];
    }
  }
}

// The normalized axis, as Keras writes it: an int or a one-element list
// (tf.keras writes the built, batch-inclusive list, e.g. [3] for a rank-3
// per-example input). Checked against the input's rank in BuildShapes.
absl::Status ReadAxis(ConfigReader* r, int64_t* axis) {
  *axis = -1;
  if (!r->Has("axis")) {
    return r->Int("axis", false, -1, 0, 0, axis);  // marks it read
  }
  const nlohmann::json& v = r->At("axis");
  if (v.is_array()) {
    if (v.size() != 1 || !v[0].is_number_integer()) {
      return r->ArgError(
          "axis", absl::StrCat(ShowJson(v), " is not supported (only the "
                               "last axis, -1)"));
    }
    *axis = v[0].get<int64_t>();
    // Marks the key read; the value was checked above.
    return r->Unsupported("axis", v);
  }
  return r->Int("axis", false, -1, std::numeric_limits<int32_t>::min(),
                std::numeric_limits<int32_t>::max(), axis);
}

// OK when `axis` names the last axis of a per-example shape of rank `rank`
// (-1, or `rank` counting the batch axis as 0).
bool IsLastAxis(int64_t axis, size_t rank) {
  return axis == -1 || axis == static_cast<int64_t>(rank);
}

// Common shape handling of both layers: rows of `channels` values.
struct RowShape {
  int64_t rows_per_example = 0;
  int64_t channels = 0;
};

// What both layers share: the last axis's channels, an optional gamma
// (scale) and beta (center) of one value per channel, and rows of
// `channels` values.
class LastAxisNormalization : public Layer {
 public:
  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    const Shape& in = inputs[0];
    if (in.empty()) return Error("expects an input of rank >= 1, got []");
    if (!IsLastAxis(axis_, in.size())) {
      return Error(absl::StrCat(
          "argument 'axis': only the last axis (-1 or ", in.size(),
          ") is supported; got ", axis_, " for input ", ShapeString(in)));
    }
    shape_.channels = in.back();
    shape_.rows_per_example = NumElements(in) / shape_.channels;
    output_shape_ = in;
    for (WeightDef& w : weights_) w.shape = {shape_.channels};
    return absl::OkStatus();
  }

 protected:
  LastAxisNormalization(int64_t axis, double epsilon, bool center, bool scale,
                        WeightDef gamma, WeightDef beta)
      : axis_(axis), epsilon_(epsilon), center_(center), scale_(scale) {
    if (scale_) {
      gamma_ = static_cast<int>(weights_.size());
      weights_.push_back(std::move(gamma));
    }
    if (center_) {
      beta_ = static_cast<int>(weights_.size());
      weights_.push_back(std::move(beta));
    }
  }

  const int64_t axis_;
  const double epsilon_;
  const bool center_;
  const bool scale_;
  int gamma_ = -1;
  int beta_ = -1;
  RowShape shape_;
};

// BatchNormalization over the last axis: per channel, the statistics over
// the batch and every other axis.
class BatchNormalization : public LastAxisNormalization {
 public:
  BatchNormalization(int64_t axis, double momentum, double epsilon,
                     bool center, bool scale, WeightDef gamma, WeightDef beta,
                     WeightDef moving_mean, WeightDef moving_variance)
      : LastAxisNormalization(axis, epsilon, center, scale, std::move(gamma),
                              std::move(beta)),
        momentum_(momentum) {
    mean_ = static_cast<int>(weights_.size());
    moving_mean.trainable = false;
    weights_.push_back(std::move(moving_mean));
    var_ = static_cast<int>(weights_.size());
    moving_variance.trainable = false;
    weights_.push_back(std::move(moving_variance));
  }
  std::string class_name() const override { return "BatchNormalization"; }


  // Only per-channel statistics are kept: backward recomputes x_hat from
  // the input (the same reads as a stored x_hat, one write pass less).
  int64_t ScratchPerExample() const override { return 0; }

  void Forward(const ForwardArgs& a) const override {
    const int64_t c = shape_.channels;
    const int64_t n = a.batch * shape_.rows_per_example;
    // stats: [mean | delta | inv_std], mean + delta the exact mean.
    Real* stats = a.scratch->Get(1, static_cast<size_t>(3 * c));
    Real* mean = stats;
    Real* delta = stats + c;
    Real* inv_std = stats + 2 * c;
    double* sums = ScratchDoubles(a.scratch, 4, 2 * c);
    double* mean_d = sums;
    double* var_d = sums + c;
    if (a.training) {
      // The mean in double, from sums of x - x[0] (shifted data: the
      // rounding scales with the spread of x, not with its mean), rounded
      // to Real as `mean` with the rest in `delta`; then the biased
      // variance about `mean`, less delta^2. x - mean is exact in Real for
      // x near the mean, so a mean far from 0 costs no accuracy.
      Real* partial = a.scratch->Get(3, static_cast<size_t>(2 * c));
      ConstRowVectorMap first(a.inputs[0], c);
      ColumnSums(n, c, partial, mean_d, [&](int64_t r, RowVectorMap& p) {
        p += ConstRowVectorMap(a.inputs[0] + r * c, c) - first;
      });
      for (int64_t j = 0; j < c; ++j) {
        mean_d[j] = first[j] + mean_d[j] / static_cast<double>(n);
        mean[j] = static_cast<Real>(mean_d[j]);
        delta[j] = static_cast<Real>(mean_d[j] - mean[j]);
      }
      ConstRowVectorMap mean_v(mean, c);
      ColumnSums(n, c, partial, var_d, [&](int64_t r, RowVectorMap& p) {
        p.array() += (ConstRowVectorMap(a.inputs[0] + r * c, c) - mean_v)
                         .array()
                         .square();
      });
      for (int64_t j = 0; j < c; ++j) {
        const double d = mean_d[j] - mean[j];
        var_d[j] = std::max(0.0, var_d[j] / static_cast<double>(n) - d * d);
      }
    } else {
      const Real* mm = a.weights[mean_].data();
      const Real* mv = a.weights[var_].data();
      for (int64_t j = 0; j < c; ++j) {
        mean[j] = mm[j];
        delta[j] = 0.0f;
        var_d[j] = mv[j];
      }
    }
    for (int64_t j = 0; j < c; ++j) {
      inv_std[j] = static_cast<Real>(1.0 / std::sqrt(var_d[j] + epsilon_));
    }

    // y = (x - mean - delta) * inv_std * gamma + beta
    //   = (x - mean) * k + (beta - delta * k), k = gamma * inv_std.
    Real* coef = a.scratch->Get(5, static_cast<size_t>(2 * c));
    RowVectorMap k(coef, c);
    RowVectorMap shift(coef + c, c);
    const Real* gamma = scale_ ? a.weights[gamma_].data() : nullptr;
    const Real* beta = center_ ? a.weights[beta_].data() : nullptr;
    for (int64_t j = 0; j < c; ++j) {
      k[j] = inv_std[j] * (gamma != nullptr ? gamma[j] : 1.0f);
      shift[j] = (beta != nullptr ? beta[j] : 0.0f) - delta[j] * k[j];
    }
    ConstMatrixMap x(a.inputs[0], n, c);
    MatrixMap y(a.output, n, c);
    y.array() =
        (x.rowwise() - ConstRowVectorMap(mean, c)).array().rowwise() *
        k.array();
    y.rowwise() += shift;
    if (!a.training) return;

    // Keras 3: moving = moving * momentum + batch_stat * (1 - momentum),
    // with the biased batch variance.
    const double m = momentum_;
    if (static_cast<size_t>(mean_) < a.state_out.size() &&
        a.state_out[mean_] != nullptr) {
      const Real* old = a.weights[mean_].data();
      for (int64_t j = 0; j < c; ++j) {
        a.state_out[mean_][j] =
            static_cast<Real>(old[j] * m + mean_d[j] * (1.0 - m));
      }
    }
    if (static_cast<size_t>(var_) < a.state_out.size() &&
        a.state_out[var_] != nullptr) {
      const Real* old = a.weights[var_].data();
      for (int64_t j = 0; j < c; ++j) {
        a.state_out[var_][j] =
            static_cast<Real>(old[j] * m + var_d[j] * (1.0 - m));
      }
    }
  }

  void Backward(const BackwardArgs& a) const override {
    const int64_t c = shape_.channels;
    const int64_t n = a.batch * shape_.rows_per_example;
    const Real* stats = a.scratch->At(1);  // as forward left them
    const Real* mean = stats;
    const Real* delta = stats + c;
    const Real* inv_std = stats + 2 * c;
    ConstRowVectorMap mean_v(mean, c);
    // sum_g = sum g; sum_gx = sum g * x_hat
    //       = inv_std * (sum g * (x - mean) - delta * sum g).
    Real* partial = a.scratch->Get(3, static_cast<size_t>(2 * c));
    double* sums = ScratchDoubles(a.scratch, 4, 2 * c);
    double* sum_g = sums;
    double* sum_gx = sums + c;
    ColumnSums2(n, c, partial, sum_g, sum_gx,
                [&](int64_t r, RowVectorMap& p0, RowVectorMap& p1) {
                  ConstRowVectorMap g(a.output_grad + r * c, c);
                  p0 += g;
                  p1.array() +=
                      g.array() *
                      (ConstRowVectorMap(a.inputs[0] + r * c, c) - mean_v)
                          .array();
                });
    for (int64_t j = 0; j < c; ++j) {
      sum_gx[j] = inv_std[j] * (sum_gx[j] - delta[j] * sum_g[j]);
    }
    const Real* gamma = scale_ ? a.weights[gamma_].data() : nullptr;
    if (gamma != nullptr && a.weight_grads[gamma_] != nullptr) {
      for (int64_t j = 0; j < c; ++j) {
        a.weight_grads[gamma_][j] = static_cast<Real>(sum_gx[j]);
      }
    }
    if (center_ && a.weight_grads[beta_] != nullptr) {
      for (int64_t j = 0; j < c; ++j) {
        a.weight_grads[beta_][j] = static_cast<Real>(sum_g[j]);
      }
    }
    if (a.input_grads[0] == nullptr) return;
    ConstMatrixMap g(a.output_grad, n, c);
    MatrixMap dx(a.input_grads[0], n, c);
    Real* coef = a.scratch->Get(5, static_cast<size_t>(3 * c));
    RowVectorMap k(coef, c);  // gamma * inv_std
    for (int64_t j = 0; j < c; ++j) {
      k[j] = inv_std[j] * (gamma != nullptr ? gamma[j] : 1.0f);
    }
    if (!a.training) {
      dx.array() = g.array().rowwise() * k.array();
      return;
    }
    // dx = k * (g - mean(g) - x_hat * mean(g * x_hat)) with
    // x_hat = (x - mean - delta) * inv_std:
    // dx = g * k - (x - mean) * b + e, b = k * inv_std * mean(g * x_hat),
    // e = k * (inv_std * delta * mean(g * x_hat) - mean(g)).
    RowVectorMap b(coef + c, c);
    RowVectorMap e(coef + 2 * c, c);
    for (int64_t j = 0; j < c; ++j) {
      const double mg = sum_g[j] / static_cast<double>(n);
      const double mgx = sum_gx[j] / static_cast<double>(n);
      b[j] = static_cast<Real>(k[j] * inv_std[j] * mgx);
      e[j] = static_cast<Real>(k[j] * (inv_std[j] * delta[j] * mgx - mg));
    }
    ConstMatrixMap x(a.inputs[0], n, c);
    dx.array() = g.array().rowwise() * k.array() -
                 (x.rowwise() - mean_v).array().rowwise() * b.array();
    dx.rowwise() += e;
  }

 private:
  double momentum_;
  int mean_ = -1;
  int var_ = -1;
};

// LayerNormalization over the last axis: each row of `channels` values
// normalized by its own mean and (biased) variance.
class LayerNormalization : public LastAxisNormalization {
 public:
  LayerNormalization(int64_t axis, double epsilon, bool center, bool scale,
                     WeightDef gamma, WeightDef beta)
      : LastAxisNormalization(axis, epsilon, center, scale, std::move(gamma),
                              std::move(beta)) {}
  std::string class_name() const override { return "LayerNormalization"; }


  // Per row: the mean and 1 / sqrt(var + epsilon); backward recomputes
  // x_hat from the input.
  int64_t ScratchPerExample() const override {
    return 2 * shape_.rows_per_example;
  }

  void Forward(const ForwardArgs& a) const override {
    const int64_t c = shape_.channels;
    const int64_t n = a.batch * shape_.rows_per_example;
    Real* mean = a.scratch->Get(1, static_cast<size_t>(n));
    Real* inv = a.scratch->Get(2, static_cast<size_t>(n));
    const Real eps = static_cast<Real>(epsilon_);
    // Blocks of rows that stay in cache: x read once, y written once.
    const int64_t block = BlockRows(c);
    for (int64_t r0 = 0; r0 < n; r0 += block) {
      const int64_t rows = std::min(block, n - r0);
      ConstMatrixMap x(a.inputs[0] + r0 * c, rows, c);
      MatrixMap y(a.output + r0 * c, rows, c);
      VectorMap m(mean + r0, rows);
      VectorMap iv(inv + r0, rows);
      m = x.rowwise().mean();
      y = x.colwise() - m;
      iv = (y.array().square().rowwise().mean() + eps).rsqrt();
      y.array().colwise() *= iv.array();
      if (scale_) {
        y.array().rowwise() *=
            ConstRowVectorMap(a.weights[gamma_].data(), c).array();
      }
      if (center_) {
        y.rowwise() += ConstRowVectorMap(a.weights[beta_].data(), c);
      }
    }
  }

  void Backward(const BackwardArgs& a) const override {
    const int64_t c = shape_.channels;
    const int64_t n = a.batch * shape_.rows_per_example;
    const Real* mean = a.scratch->At(1);
    const Real* inv = a.scratch->At(2);
    const int64_t block = BlockRows(c);
    Real* xh_buf = a.scratch->Get(3, static_cast<size_t>(block * c));
    Real* gg_buf = a.scratch->Get(4, static_cast<size_t>(block * c));
    Real* row_buf = a.scratch->Get(5, static_cast<size_t>(2 * block));
    Real* partials = a.scratch->Get(6, static_cast<size_t>(2 * c));
    double* sums = ScratchDoubles(a.scratch, 7, 2 * c);
    const bool want_gamma = scale_ && a.weight_grads[gamma_] != nullptr;
    const bool want_beta = center_ && a.weight_grads[beta_] != nullptr;
    std::fill(sums, sums + 2 * c, 0.0);
    RowVectorMap p_gx(partials, c);
    RowVectorMap p_g(partials + c, c);
    for (int64_t r0 = 0; r0 < n; r0 += block) {
      const int64_t rows = std::min(block, n - r0);
      ConstMatrixMap x(a.inputs[0] + r0 * c, rows, c);
      ConstMatrixMap g(a.output_grad + r0 * c, rows, c);
      ConstVectorMap m(mean + r0, rows);
      ConstVectorMap iv(inv + r0, rows);
      MatrixMap xh(xh_buf, rows, c);
      xh = x.colwise() - m;
      xh.array().colwise() *= iv.array();
      if (want_gamma || want_beta) {
        // Column sums of the block, row by row, added in double.
        p_gx.setZero();
        p_g.setZero();
        for (int64_t r = 0; r < rows; ++r) {
          if (want_gamma) p_gx += g.row(r).cwiseProduct(xh.row(r));
          if (want_beta) p_g += g.row(r);
        }
        for (int64_t j = 0; j < c; ++j) {
          sums[j] += p_gx[j];
          sums[c + j] += p_g[j];
        }
      }
      if (a.input_grads[0] == nullptr) continue;
      // gg = g * gamma; dx = inv * (gg - mean(gg) - x_hat * mean(gg x_hat))
      // per row.
      MatrixMap gg(gg_buf, rows, c);
      if (scale_) {
        gg.array() = g.array().rowwise() *
                     ConstRowVectorMap(a.weights[gamma_].data(), c).array();
      } else {
        gg = g;
      }
      VectorMap mg(row_buf, rows);
      VectorMap mgx(row_buf + block, rows);
      mg = gg.rowwise().mean();
      mgx = gg.cwiseProduct(xh).rowwise().mean();
      MatrixMap dx(a.input_grads[0] + r0 * c, rows, c);
      dx.array() = ((gg.colwise() - mg).array() -
                    xh.array().colwise() * mgx.array())
                       .colwise() *
                   iv.array();
    }
    if (want_gamma) {
      for (int64_t j = 0; j < c; ++j) {
        a.weight_grads[gamma_][j] = static_cast<Real>(sums[j]);
      }
    }
    if (want_beta) {
      for (int64_t j = 0; j < c; ++j) {
        a.weight_grads[beta_][j] = static_cast<Real>(sums[c + j]);
      }
    }
  }
};

// gamma/beta: initializer and regularizer under Keras's names.
absl::Status ReadAffine(ConfigReader* r, WeightDef* gamma, WeightDef* beta) {
  absl::Status s = r->Initializer("beta_initializer", InitializerType::kZeros,
                                  &beta->init, &beta->seed_set);
  if (s.ok()) {
    s = r->Initializer("gamma_initializer", InitializerType::kOnes,
                       &gamma->init, &gamma->seed_set);
  }
  if (s.ok()) s = r->Regularizer("beta_regularizer", &beta->l1, &beta->l2);
  if (s.ok()) s = r->Regularizer("gamma_regularizer", &gamma->l1, &gamma->l2);
  if (s.ok()) s = r->Unsupported("beta_constraint", nullptr);
  if (s.ok()) s = r->Unsupported("gamma_constraint", nullptr);
  return s;
}

// The arguments both layers take, read in Keras's order (BatchNormalization's
// momentum after the axis when `momentum` is given).
struct NormArgs {
  int64_t axis = -1;
  double epsilon = 1e-3;
  bool center = true;
  bool scale = true;
  WeightDef gamma{"gamma"};
  WeightDef beta{"beta"};
};

absl::Status ReadNormArgs(ConfigReader* r, NormArgs* a, double* momentum) {
  absl::Status s = ReadAxis(r, &a->axis);
  if (s.ok() && momentum != nullptr) {
    s = r->Number("momentum", 0.99, 0, 1, true, momentum);
  }
  if (s.ok()) {
    s = r->Number("epsilon", 1e-3, 0, std::numeric_limits<double>::max(),
                  true, &a->epsilon);
  }
  if (s.ok()) s = r->Bool("center", true, &a->center);
  if (s.ok()) s = r->Bool("scale", true, &a->scale);
  if (s.ok()) s = ReadAffine(r, &a->gamma, &a->beta);
  return s;
}

}  // namespace

LayerOr CreateBatchNormalization(ConfigReader* r) {
  NormArgs a;
  double momentum = 0.99;
  WeightDef moving_mean{"moving_mean"};
  WeightDef moving_variance{"moving_variance"};
  absl::Status s = ReadNormArgs(r, &a, &momentum);
  if (s.ok()) {
    s = r->Initializer("moving_mean_initializer", InitializerType::kZeros,
                       &moving_mean.init, &moving_mean.seed_set);
  }
  if (s.ok()) {
    s = r->Initializer("moving_variance_initializer", InitializerType::kOnes,
                       &moving_variance.init, &moving_variance.seed_set);
  }
  // Cross-replica statistics, batch renormalization, ghost batches and
  // adjustments are not supported.
  if (s.ok()) s = r->Unsupported("synchronized", false);
  if (s.ok()) s = r->Unsupported("renorm", false);
  // Only read by Keras with renorm true: any value is accepted here.
  if (s.ok()) {
    const bool is_object =
        r->Has("renorm_clipping") && r->At("renorm_clipping").is_object();
    s = r->Unsupported("renorm_clipping",
                       is_object ? r->At("renorm_clipping")
                                 : nlohmann::json(nullptr));
  }
  double renorm_momentum = 0.99;
  if (s.ok()) {
    s = r->Number("renorm_momentum", 0.99, 0, 1, true, &renorm_momentum);
  }
  if (s.ok()) s = r->Unsupported("virtual_batch_size", nullptr);
  if (s.ok()) s = r->Unsupported("adjustment", nullptr);
  // tf.keras's fused kernel choice: the same math either way.
  bool fused = false;
  if (s.ok()) s = r->Bool("fused", false, &fused);
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<BatchNormalization>(
      a.axis, momentum, a.epsilon, a.center, a.scale, std::move(a.gamma),
      std::move(a.beta), std::move(moving_mean), std::move(moving_variance));
}

LayerOr CreateLayerNormalization(ConfigReader* r) {
  NormArgs a;
  absl::Status s = ReadNormArgs(r, &a, /*momentum=*/nullptr);
  if (s.ok()) s = r->Unsupported("rms_scaling", false);
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<LayerNormalization>(a.axis, a.epsilon, a.center,
                                              a.scale, std::move(a.gamma),
                                              std::move(a.beta));
}

}  // namespace model
}  // namespace strata

// Concatenate, Add, Multiply, Dot: layers of several inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/layers.h"
#include "model/eigen_maps.h"

namespace strata {
namespace model {
namespace {

using namespace eigen_maps;  // NOLINT: the layer files' Eigen views


std::string ShapesText(const std::vector<Shape>& shapes) {
  std::vector<std::string> parts;
  for (const Shape& s : shapes) parts.push_back(ShapeString(s));
  return absl::StrJoin(parts, ", ");
}

// Concatenate along one per-example axis.
class Concatenate : public Layer {
 public:
  explicit Concatenate(int64_t axis) : axis_(axis) {}
  std::string class_name() const override { return "Concatenate"; }
  int num_inputs() const override { return -2; }

  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    const size_t rank = inputs[0].size();
    if (rank == 0) return Error("expects inputs of rank >= 1, got []");
    for (const Shape& s : inputs) {
      if (s.size() != rank) {
        return Error(absl::StrCat("inputs must have the same rank, got ",
                                  ShapesText(inputs)));
      }
    }
    // Keras counts the batch axis as 0.
    const int64_t r = static_cast<int64_t>(rank);
    const int64_t k = axis_ < 0 ? axis_ + r : axis_ - 1;
    if (k < 0 || k >= r) {
      return Error(absl::StrCat(
          "argument 'axis': ", axis_, " is not a per-example axis of inputs ",
          ShapesText(inputs), " (1 to ", r, " or -1 to -", r,
          "; 0 is the batch axis)"));
    }
    output_shape_ = inputs[0];
    output_shape_[k] = 0;
    for (const Shape& s : inputs) {
      for (int64_t d = 0; d < r; ++d) {
        if (d != k && s[d] != inputs[0][d]) {
          return Error(absl::StrCat(
              "inputs must match except on the concatenation axis ", axis_,
              ", got ", ShapesText(inputs)));
        }
      }
      output_shape_[k] += s[k];
    }
    outer_ = 1;
    for (int64_t d = 0; d < k; ++d) outer_ *= inputs[0][d];
    int64_t tail = 1;
    for (int64_t d = k + 1; d < r; ++d) tail *= inputs[0][d];
    inner_.clear();
    for (const Shape& s : inputs) inner_.push_back(s[k] * tail);
    out_inner_ = output_shape_[k] * tail;
    return absl::OkStatus();
  }

  void Forward(const ForwardArgs& a) const override {
    const int64_t blocks = a.batch * outer_;
    for (int64_t o = 0; o < blocks; ++o) {
      Real* dst = a.output + o * out_inner_;
      for (size_t i = 0; i < inner_.size(); ++i) {
        std::memcpy(dst, a.inputs[i] + o * inner_[i],
                    sizeof(Real) * inner_[i]);
        dst += inner_[i];
      }
    }
  }

  void Backward(const BackwardArgs& a) const override {
    const int64_t blocks = a.batch * outer_;
    for (int64_t o = 0; o < blocks; ++o) {
      const Real* src = a.output_grad + o * out_inner_;
      for (size_t i = 0; i < inner_.size(); ++i) {
        if (a.input_grads[i] != nullptr) {
          std::memcpy(a.input_grads[i] + o * inner_[i], src,
                      sizeof(Real) * inner_[i]);
        }
        src += inner_[i];
      }
    }
  }

 private:
  int64_t axis_;
  int64_t outer_ = 1;
  std::vector<int64_t> inner_;
  int64_t out_inner_ = 0;
};

// Add and Multiply: element-wise over >= 2 inputs of one shape.
class ElementwiseMerge : public Layer {
 public:
  explicit ElementwiseMerge(bool multiply) : multiply_(multiply) {}
  std::string class_name() const override {
    return multiply_ ? "Multiply" : "Add";
  }
  int num_inputs() const override { return -2; }

  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    for (const Shape& s : inputs) {
      if (s != inputs[0]) {
        return Error(absl::StrCat(
            "inputs must have identical shapes (no broadcasting), got ",
            ShapesText(inputs)));
      }
    }
    output_shape_ = inputs[0];
    size_ = NumElements(inputs[0]);
    return absl::OkStatus();
  }

  void Forward(const ForwardArgs& a) const override {
    const int64_t n = a.batch * size_;
    ArrayMap out(a.output, n);
    out = ConstArrayMap(a.inputs[0], n);
    for (size_t i = 1; i < a.inputs.size(); ++i) {
      if (multiply_) {
        out *= ConstArrayMap(a.inputs[i], n);
      } else {
        out += ConstArrayMap(a.inputs[i], n);
      }
    }
  }

  void Backward(const BackwardArgs& a) const override {
    const int64_t n = a.batch * size_;
    for (size_t i = 0; i < a.input_grads.size(); ++i) {
      if (a.input_grads[i] == nullptr) continue;
      ArrayMap dx(a.input_grads[i], n);
      dx = ConstArrayMap(a.output_grad, n);
      if (!multiply_) continue;
      // The product of the other inputs (no division: inputs may be 0).
      for (size_t j = 0; j < a.inputs.size(); ++j) {
        if (j != i) dx *= ConstArrayMap(a.inputs[j], n);
      }
    }
  }

 private:
  bool multiply_;
  int64_t size_ = 0;
};

// Dot: Keras's batch_dot of two inputs of per-example rank 1 or 2 along one
// axis of each, optionally L2-normalized along those axes first (cosine
// proximity). Each input is seen as an [m, n] matrix (n the contracted
// axis; m = 1 for rank 1); per example the output is X Y^T, [m, k],
// shaped as the rest of x's axes, then the rest of y's, or [1].
class Dot : public Layer {
 public:
  Dot(std::vector<int64_t> axes, bool normalize)
      : axes_(std::move(axes)), normalize_(normalize) {}
  std::string class_name() const override { return "Dot"; }
  int num_inputs() const override { return 2; }

  absl::Status BuildShapes(const std::vector<Shape>& inputs) override {
    for (const Shape& s : inputs) {
      if (s.size() != 1 && s.size() != 2) {
        return Error(absl::StrCat(
            "expects inputs of rank 1 or 2 per example, got ",
            ShapesText(inputs)));
      }
    }
    int64_t contracted[2];
    Shape out;
    for (int i = 0; i < 2; ++i) {
      const Shape& s = inputs[i];
      // Batch-inclusive rank; negative axes wrap as Python's %.
      const int64_t full = static_cast<int64_t>(s.size()) + 1;
      int64_t ax = axes_[i];
      if (ax < 0) ax = ((ax % full) + full) % full;
      if (ax == 0) {
        return Error(absl::StrCat("argument 'axes': ", axes_[i],
                                  " is the batch axis of input ", i,
                                  "; inputs ", ShapesText(inputs)));
      }
      if (ax >= full) {
        return Error(absl::StrCat("argument 'axes': ", axes_[i],
                                  " is out of range for input ", i, " ",
                                  ShapeString(s), " (1 to ", full - 1, ")"));
      }
      side_[i].transposed = s.size() == 2 && ax == 1;
      side_[i].n = s[ax - 1];
      side_[i].m = s.size() == 2 ? s[2 - ax] : 1;
      if (s.size() == 2) out.push_back(side_[i].m);
      contracted[i] = ax;
    }
    if (side_[0].n != side_[1].n) {
      return Error(absl::StrCat(
          "argument 'axes': the contracted axes differ in size: ",
          side_[0].n, " (axis ", contracted[0], ") != ", side_[1].n,
          " (axis ", contracted[1], "); inputs ", ShapesText(inputs)));
    }
    if (out.empty()) out.push_back(1);
    output_shape_ = out;
    return absl::OkStatus();
  }

  int64_t ScratchPerExample() const override {
    int64_t s = 0;
    for (const Side& side : side_) {
      if (normalize_ || side.transposed) s += side.m * (side.n + 1);
    }
    return s;
  }

  void Forward(const ForwardArgs& a) const override {
    const Real* xc[2];
    for (int i = 0; i < 2; ++i) xc[i] = Canonical(a, i);
    Product(a.batch, xc[0], xc[1], a.output);
  }

  void Backward(const BackwardArgs& a) const override {
    const int64_t b = a.batch;
    const int64_t n = side_[0].n;
    const int64_t m = side_[0].m;
    const int64_t k = side_[1].m;
    const Real* xc[2];
    for (int i = 0; i < 2; ++i) {
      xc[i] = Stored(i) ? a.inputs[i] : a.scratch->At(static_cast<size_t>(i));
    }
    for (int i = 0; i < 2; ++i) {
      if (a.input_grads[i] == nullptr) continue;
      const Side& side = side_[i];
      const int64_t rows = side.m;
      // d canonical input: G Y for x, G^T X for y, per example [rows, n].
      Real* d = Stored(i) ? a.input_grads[i]
                           : a.scratch->Get(4, static_cast<size_t>(
                                                   b * rows * n));
      const Real* other = xc[1 - i];
      if (m == 1 && k == 1) {
        // One [n] row per example: columns of n x batch arrays.
        Eigen::Map<ArrayXXr> dst(d, n, b);
        Eigen::Map<const ArrayXXr> src(other, n, b);
        dst = src.rowwise() *
              Eigen::Map<const ArrayXr>(a.output_grad, b)
                  .transpose();
      } else {
        for (int64_t e = 0; e < b; ++e) {
          ConstMatrixMap g(a.output_grad + e * m * k, m, k);
          MatrixMap de(d + e * rows * n, rows, n);
          ConstMatrixMap o(other + e * side_[1 - i].m * n, side_[1 - i].m,
                           n);
          if (i == 0) {
            de.noalias() = g * o;
          } else {
            de.noalias() = g.transpose() * o;
          }
        }
      }
      if (normalize_) {
        // Through x / |x|: inv * (d - x_n (x_n . d)), or inv * d where the
        // norm was clamped.
        MatrixMap dr(d, b * rows, n);
        ConstMatrixMap xn(xc[i], b * rows, n);
        const Real* inv = a.scratch->At(static_cast<size_t>(2 + i));
        for (int64_t r = 0; r < b * rows; ++r) {
          if (inv[r] < kInvEpsilon) {
            const Real dot = xn.row(r).dot(dr.row(r));
            dr.row(r) -= dot * xn.row(r);
          }
          dr.row(r) *= inv[r];
        }
      }
      if (side.transposed) {
        // Back to the stored [n, m] layout.
        for (int64_t e = 0; e < b; ++e) {
          MatrixMap(a.input_grads[i] + e * rows * n, n, rows) =
              ConstMatrixMap(d + e * rows * n, rows, n).transpose();
        }
      } else if (!Stored(i)) {
        std::memcpy(a.input_grads[i], d, sizeof(Real) * b * rows * n);
      }
    }
  }

 private:
  struct Side {
    int64_t m = 1;            // rows (1 for rank 1)
    int64_t n = 0;            // the contracted axis
    bool transposed = false;  // stored [n, m]: contracted on axis 1
  };
  // Keras 3's normalize: x * min(1 / |x|, 1 / epsilon), epsilon 1e-7.
  static constexpr Real kInvEpsilon = 1e7f;

  // Input i is used as stored (no copy in scratch).
  bool Stored(int i) const { return !normalize_ && !side_[i].transposed; }

  // Input i as [m, n] rows per example, normalized when asked: the input
  // itself, or scratch buffer i (inverse norms in buffer 2 + i).
  const Real* Canonical(const ForwardArgs& a, int i) const {
    if (Stored(i)) return a.inputs[i];
    const Side& s = side_[i];
    const int64_t b = a.batch;
    Real* c = a.scratch->Get(static_cast<size_t>(i),
                              static_cast<size_t>(b * s.m * s.n));
    if (s.transposed) {
      for (int64_t e = 0; e < b; ++e) {
        MatrixMap(c + e * s.m * s.n, s.m, s.n) =
            ConstMatrixMap(a.inputs[i] + e * s.m * s.n, s.n, s.m).transpose();
      }
    } else {
      std::memcpy(c, a.inputs[i], sizeof(Real) * b * s.m * s.n);
    }
    if (normalize_) {
      MatrixMap rows(c, b * s.m, s.n);
      VectorMap inv(a.scratch->Get(static_cast<size_t>(2 + i),
                                   static_cast<size_t>(b * s.m)),
                    b * s.m);
      inv = rows.rowwise().squaredNorm();
      for (int64_t r = 0; r < b * s.m; ++r) {
        inv[r] = std::min(1.0f / std::sqrt(inv[r]), kInvEpsilon);
      }
      rows.array().colwise() *= inv.array();
    }
    return c;
  }

  void Product(int64_t b, const Real* x, const Real* y, Real* out) const {
    const int64_t n = side_[0].n;
    const int64_t m = side_[0].m;
    const int64_t k = side_[1].m;
    if (m == 1 && k == 1) {
      Eigen::Map<ArrayXr>(out, b) =
          (Eigen::Map<const ArrayXXr>(x, n, b) *
           Eigen::Map<const ArrayXXr>(y, n, b))
              .colwise()
              .sum()
              .transpose();
      return;
    }
    for (int64_t e = 0; e < b; ++e) {
      MatrixMap(out + e * m * k, m, k).noalias() =
          ConstMatrixMap(x + e * m * n, m, n) *
          ConstMatrixMap(y + e * k * n, k, n).transpose();
    }
  }

  std::vector<int64_t> axes_;
  bool normalize_;
  Side side_[2];
};

}  // namespace

LayerOr CreateConcatenate(ConfigReader* r) {
  int64_t axis = -1;
  absl::Status s =
      r->Int("axis", false, -1, std::numeric_limits<int32_t>::min(),
             std::numeric_limits<int32_t>::max(), &axis);
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<Concatenate>(axis);
}

LayerOr CreateAdd(ConfigReader* r) {
  absl::Status s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<ElementwiseMerge>(false);
}

LayerOr CreateMultiply(ConfigReader* r) {
  absl::Status s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<ElementwiseMerge>(true);
}

LayerOr CreateDot(ConfigReader* r) {
  std::vector<int64_t> axes;
  bool normalize = false;
  // An int (both inputs) or a pair; no default in Keras.
  absl::Status s = r->IntTuple("axes", 2, {},
                               std::numeric_limits<int32_t>::min(), &axes);
  if (s.ok()) s = r->Bool("normalize", false, &normalize);
  if (s.ok()) s = r->Finish();
  if (!s.ok()) return s;
  return std::make_unique<Dot>(std::move(axes), normalize);
}

}  // namespace model
}  // namespace strata

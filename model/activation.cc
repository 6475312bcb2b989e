#include "model/activation.h"
#include "model/eigen_maps.h"

#include <algorithm>
#include <cmath>

#include "Eigen/Core"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace model {
namespace {

using namespace eigen_maps;  // NOLINT: the layer files' Eigen views


constexpr Real kSqrtHalf = 0.70710678118654752440f;
constexpr Real kInvSqrt2Pi = 0.39894228040143267794f;
constexpr Real kSqrt2OverPi = 0.79788456080286535588f;

}  // namespace

const char* ActivationNames() {
  return "linear, relu, sigmoid, tanh, softmax, gelu, silu, swish, elu, "
         "leaky_relu, softplus";
}

absl::StatusOr<Activation> ParseActivationName(absl::string_view name) {
  Activation a;
  if (name == "linear" || name.empty()) {
    a.kind = ActivationKind::kLinear;
  } else if (name == "relu") {
    a.kind = ActivationKind::kRelu;
  } else if (name == "sigmoid") {
    a.kind = ActivationKind::kSigmoid;
  } else if (name == "tanh") {
    a.kind = ActivationKind::kTanh;
  } else if (name == "softmax") {
    a.kind = ActivationKind::kSoftmax;
  } else if (name == "gelu") {
    a.kind = ActivationKind::kGelu;
  } else if (name == "silu" || name == "swish") {
    a.kind = ActivationKind::kSilu;
  } else if (name == "elu") {
    a.kind = ActivationKind::kElu;
    a.alpha = 1.0;
  } else if (name == "leaky_relu") {
    a.kind = ActivationKind::kLeakyRelu;
    a.alpha = 0.2;
  } else if (name == "softplus") {
    a.kind = ActivationKind::kSoftplus;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", name, "\" is not one of ", ActivationNames()));
  }
  return a;
}

std::string ActivationKindName(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::kLinear: return "linear";
    case ActivationKind::kRelu: return "relu";
    case ActivationKind::kSigmoid: return "sigmoid";
    case ActivationKind::kTanh: return "tanh";
    case ActivationKind::kSoftmax: return "softmax";
    case ActivationKind::kGelu: return "gelu";
    case ActivationKind::kSilu: return "silu";
    case ActivationKind::kElu: return "elu";
    case ActivationKind::kLeakyRelu: return "leaky_relu";
    case ActivationKind::kSoftplus: return "softplus";
  }
  return "unknown";
}

bool NeedsPreactivation(const Activation& a) {
  return a.kind == ActivationKind::kGelu || a.kind == ActivationKind::kSilu ||
         a.kind == ActivationKind::kSoftplus;
}

void ApplyActivation(const Activation& a, Real* data, int64_t rows,
                     int64_t cols) {
  MatrixMap z(data, rows, cols);
  ArrayMap v(data, rows * cols);
  switch (a.kind) {
    case ActivationKind::kLinear:
      return;
    case ActivationKind::kRelu:
      z.array() = z.array().max(0.0f);
      return;
    case ActivationKind::kSigmoid:
      z.array() = ((-z.array()).exp() + 1.0f).inverse();
      return;
    case ActivationKind::kTanh:
      z.array() = z.array().tanh();
      return;
    case ActivationKind::kSoftmax:
      for (Eigen::Index r = 0; r < z.rows(); ++r) {
        auto row = z.row(r).array();
        row = (row - row.maxCoeff()).exp();
        row /= row.sum();
      }
      return;
    case ActivationKind::kGelu:
      if (a.gelu_approximate) {
        v = 0.5f * v *
            (1.0f + (kSqrt2OverPi * (v + 0.044715f * v.cube())).tanh());
      } else {
        for (int64_t i = 0; i < rows * cols; ++i) {
          data[i] = 0.5f * data[i] * (1.0f + std::erf(data[i] * kSqrtHalf));
        }
      }
      return;
    case ActivationKind::kSilu:
      v = v * ((-v).exp() + 1.0f).inverse();
      return;
    case ActivationKind::kElu: {
      const Real alpha = static_cast<Real>(a.alpha);
      v = (v > 0.0f).select(v, alpha * (v.exp() - 1.0f));
      return;
    }
    case ActivationKind::kLeakyRelu: {
      const Real alpha = static_cast<Real>(a.alpha);
      v = (v > 0.0f).select(v, alpha * v);
      return;
    }
    case ActivationKind::kSoftplus:
      // log(1 + e^z) computed as max(z, 0) + log1p(e^-|z|).
      v = v.max(0.0f) + (-v.abs()).exp().log1p();
      return;
  }
}

void ActivationBackward(const Activation& a, const Real* y_data,
                        const Real* z_data, Real* g_data, int64_t rows,
                        int64_t cols) {
  const int64_t n = rows * cols;
  MatrixMap g(g_data, rows, cols);
  ConstMatrixMap y(y_data, rows, cols);
  ArrayMap gv(g_data, n);
  ConstArrayMap yv(y_data, n);
  switch (a.kind) {
    case ActivationKind::kLinear:
      return;
    case ActivationKind::kRelu:
      g.array() *= (y.array() > 0.0f).cast<Real>();
      return;
    case ActivationKind::kSigmoid:
      g.array() *= y.array() * (1.0f - y.array());
      return;
    case ActivationKind::kTanh:
      g.array() *= 1.0f - y.array().square();
      return;
    case ActivationKind::kSoftmax:
      for (Eigen::Index r = 0; r < g.rows(); ++r) {
        const Real dot = g.row(r).dot(y.row(r));
        g.row(r).array() = y.row(r).array() * (g.row(r).array() - dot);
      }
      return;
    case ActivationKind::kGelu: {
      ConstArrayMap zv(z_data, n);
      if (a.gelu_approximate) {
        for (int64_t i = 0; i < n; ++i) {
          const Real x = z_data[i];
          const Real u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
          const Real t = std::tanh(u);
          const Real du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
          g_data[i] *= 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
        }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const Real x = z_data[i];
          const Real cdf = 0.5f * (1.0f + std::erf(x * kSqrtHalf));
          const Real pdf = kInvSqrt2Pi * std::exp(-0.5f * x * x);
          g_data[i] *= cdf + x * pdf;
        }
      }
      return;
    }
    case ActivationKind::kSilu: {
      ConstArrayMap zv(z_data, n);
      // d/dz z s(z) = s(z) (1 + z (1 - s(z))).
      gv *= ((-zv).exp() + 1.0f).inverse() *
            (1.0f + zv * (1.0f - ((-zv).exp() + 1.0f).inverse()));
      return;
    }
    case ActivationKind::kElu: {
      const Real alpha = static_cast<Real>(a.alpha);
      gv *= (yv > 0.0f).select(ArrayXr::Ones(n), yv + alpha);
      return;
    }
    case ActivationKind::kLeakyRelu: {
      const Real alpha = static_cast<Real>(a.alpha);
      gv *= (yv > 0.0f).select(ArrayXr::Ones(n),
                               ArrayXr::Constant(n, alpha));
      return;
    }
    case ActivationKind::kSoftplus: {
      ConstArrayMap zv(z_data, n);
      gv *= ((-zv).exp() + 1.0f).inverse();
      return;
    }
  }
}

void ActivationBackwardInto(const Activation& a, const Real* y,
                            const Real* z, const Real* g_in, Real* g_out,
                            int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  if (a.kind == ActivationKind::kRelu) {
    ArrayMap(g_out, n) = (ConstArrayMap(y, n) > 0.0f)
                             .select(ConstArrayMap(g_in, n), 0.0f);
    return;
  }
  std::copy(g_in, g_in + n, g_out);
  ActivationBackward(a, y, z, g_out, rows, cols);
}

}  // namespace model
}  // namespace strata

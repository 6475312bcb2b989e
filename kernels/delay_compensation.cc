#include "kernels/delay_compensation.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

template <typename T>
void Compensate(const DelayCompensationConfig& c, const T* grad, const T* now,
                const T* then, T* ms, T* out, int64_t n) {
  const T lambda = static_cast<T>(c.lambda);
  if (!c.adaptive) {
    if (then == nullptr) {
      if (out != grad) {
        for (int64_t i = 0; i < n; ++i) out[i] = grad[i];
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      const T g = grad[i];
      out[i] = g + lambda * g * g * (now[i] - then[i]);
    }
    return;
  }
  const T decay = static_cast<T>(c.mean_square_decay);
  const T keep = static_cast<T>(1) - decay;
  const T eps = static_cast<T>(kDelayCompensationEpsilon);
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i];
    const T m = decay * ms[i] + keep * g * g;
    ms[i] = m;
    out[i] = then == nullptr
                 ? g
                 : g + lambda / (std::sqrt(m) + eps) * g * g *
                           (now[i] - then[i]);
  }
}

}  // namespace

absl::Status DelayCompensate(DType dtype, const DelayCompensationConfig& c,
                             const void* grad, const void* now,
                             const void* then, void* mean_square, void* out,
                             int64_t n) {
  switch (dtype) {
    case DType::kFloat32:
      Compensate(c, static_cast<const float*>(grad),
                 static_cast<const float*>(now),
                 static_cast<const float*>(then),
                 static_cast<float*>(mean_square), static_cast<float*>(out),
                 n);
      return absl::OkStatus();
    case DType::kFloat64:
      Compensate(c, static_cast<const double*>(grad),
                 static_cast<const double*>(now),
                 static_cast<const double*>(then),
                 static_cast<double*>(mean_square), static_cast<double*>(out),
                 n);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("delay compensation needs a float32 or float64 "
                       "variable, got ",
                       DTypeName(dtype)));
  }
}

}  // namespace strata

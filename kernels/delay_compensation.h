// Delay compensation of stale gradients (DC-ASGD, Zheng et al., ICML 2017).
//
// A gradient g computed at the values w_then and applied to w_now is
// corrected by the diagonal approximation of the Hessian, g * g:
//
//   g' = g + lambda * g * g * (w_now - w_then)
//
// The adaptive variant (the paper's DC-ASGD-a) keeps a mean square of the
// gradients per element, ms = decay * ms + (1 - decay) * g * g, and uses
// lambda / (sqrt(ms) + kDelayCompensationEpsilon) in place of lambda.
// The optimizer then applies g' as it would any gradient, so the correction
// holds for every optimizer.
#ifndef STRATA_KERNELS_DELAY_COMPENSATION_H_
#define STRATA_KERNELS_DELAY_COMPENSATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/tensor.h"

namespace strata {

inline constexpr double kDelayCompensationEpsilon = 1e-7;

struct DelayCompensationConfig {
  double lambda = 0;  // > 0 turns it on
  bool adaptive = false;
  double mean_square_decay = 0.95;  // adaptive: in [0, 1)
};

// Writes the corrected gradient of `n` elements to `out` (which may be
// `grad`). `now` and `then` are the variable's current values and those the
// gradient was computed from. `mean_square` (adaptive only, else ignored)
// is updated with `grad` in place, also when `then` is null (a gradient
// computed from the current values: out = grad, the mean square still
// moves). Errors: INVALID_ARGUMENT for a dtype other than float32 and
// float64.
absl::Status DelayCompensate(DType dtype, const DelayCompensationConfig& c,
                             const void* grad, const void* now,
                             const void* then, void* mean_square, void* out,
                             int64_t n);

}  // namespace strata

#endif  // STRATA_KERNELS_DELAY_COMPENSATION_H_

// Keras's activations, applied in place to a batch x width row-major
// buffer, and their backward passes.
#ifndef STRATA_MODEL_ACTIVATION_H_
#define STRATA_MODEL_ACTIVATION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/real.h"

namespace strata {
namespace model {

enum class ActivationKind {
  kLinear,
  kRelu,
  kSigmoid,
  kTanh,
  kSoftmax,
  kGelu,       // Keras's default: the tanh approximation is off (erf form)
  kSilu,       // "silu" and "swish"
  kElu,        // alpha 1
  kLeakyRelu,  // negative_slope 0.2 (Keras 3's default; tf.keras's alpha 0.3)
  kSoftplus,
};

struct Activation {
  ActivationKind kind = ActivationKind::kLinear;
  double alpha = 0.0;  // leaky_relu's slope, elu's alpha
  bool gelu_approximate = false;
};

// "linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "silu", "swish",
// "elu", "leaky_relu", "softplus". Errors: INVALID_ARGUMENT listing them.
absl::StatusOr<Activation> ParseActivationName(absl::string_view name);
std::string ActivationKindName(ActivationKind kind);
const char* ActivationNames();

// True when the backward pass needs the pre-activation values (it cannot
// be computed from the output alone).
bool NeedsPreactivation(const Activation& a);

// y = f(z) over rows x cols (softmax along each row), in place: on entry
// `z` holds the pre-activation, on return the activation.
void ApplyActivation(const Activation& a, Real* z, int64_t rows,
                     int64_t cols);

// On entry g holds d loss / d y; on return d loss / d z. `y` is the
// activation's output, `z` its input (needed only where
// NeedsPreactivation; may be null otherwise).
void ActivationBackward(const Activation& a, const Real* y, const Real* z,
                        Real* g, int64_t rows, int64_t cols);

// As ActivationBackward, out of place: g_out = d loss / d z from g_in =
// d loss / d y (one pass over the data for relu, else a copy and the
// in-place pass).
void ActivationBackwardInto(const Activation& a, const Real* y,
                            const Real* z, const Real* g_in, Real* g_out,
                            int64_t rows, int64_t cols);

}  // namespace model
}  // namespace strata

#endif  // STRATA_MODEL_ACTIVATION_H_

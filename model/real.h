// The model runtime's floating type. Every build trains in float; the
// layers' gradient tests compile the layer library a second time with
// STRATA_MODEL_FLOAT64 (strata_model_f64, tests only), so that central
// finite differences check each layer's Backward in float64.
#ifndef STRATA_MODEL_REAL_H_
#define STRATA_MODEL_REAL_H_

namespace strata {
namespace model {

#ifdef STRATA_MODEL_FLOAT64
using Real = double;
#else
using Real = float;
#endif

}  // namespace model
}  // namespace strata

#endif  // STRATA_MODEL_REAL_H_

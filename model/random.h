// Counter-based randomness of the model runtime (dropout masks): pure
// functions of their arguments, computed alike on the CPU and the GPU.
#ifndef STRATA_MODEL_RANDOM_H_
#define STRATA_MODEL_RANDOM_H_

#include <cstdint>

#include "common/hash.h"
#include "model/real.h"

namespace strata {

// Inverted dropout's mask: n elements, each kept (1 / (1 - rate)) with
// probability 1 - rate or dropped (0), a pure function of (seed, layer,
// element) that the CPU and the GPU (kernels/cuda/dense_kernels.cu)
// compute alike.
void FillDropoutMask(uint64_t seed, uint64_t layer, double rate, model::Real* mask,
                     int64_t n);

}  // namespace strata

#endif  // STRATA_MODEL_RANDOM_H_

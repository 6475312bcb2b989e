// Counter-based randomness of the model runtime (dropout masks): pure
// functions of their arguments, computed alike on the CPU and the GPU.
#ifndef STRATA_MODEL_RANDOM_H_
#define STRATA_MODEL_RANDOM_H_

#include <cstdint>

#include "model/real.h"

namespace strata {

// SplitMix64's finalizer: a bijective 64-bit mix.
inline uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Inverted dropout's mask: n elements, each kept (1 / (1 - rate)) with
// probability 1 - rate or dropped (0), a pure function of (seed, layer,
// element) that the CPU and the GPU (kernels/cuda/dense_kernels.cu)
// compute alike.
void FillDropoutMask(uint64_t seed, uint64_t layer, double rate, model::Real* mask,
                     int64_t n);

}  // namespace strata

#endif  // STRATA_MODEL_RANDOM_H_

// Helpers shared by the Model's source files (model.cc, model_compute.cc,
// local_trainer.cc). Pure functions; thread-safe.
#ifndef STRATA_WORKER_MODEL_INTERNAL_H_
#define STRATA_WORKER_MODEL_INTERNAL_H_

#include <cstdint>

namespace strata {
namespace model_internal {

// SplitMix64's finalizer: a bijective 64-bit mix.
inline uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace model_internal
}  // namespace strata

#endif  // STRATA_WORKER_MODEL_INTERNAL_H_

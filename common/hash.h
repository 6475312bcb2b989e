// Stable 64-bit hashes, the same on every platform and in every run (unlike
// std::hash): what seeds, initializer streams, dropout masks, shuffles and
// table placement are keyed by. Pure functions, safe from any thread.
#ifndef STRATA_COMMON_HASH_H_
#define STRATA_COMMON_HASH_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace strata {

// SplitMix64's finalizer (with its golden-ratio step): a bijective 64-bit
// mix. kernels/cuda/dense_kernels.cu has the device copy of it.
inline uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// FNV-1a of a name (a variable's, a table's).
inline uint64_t HashName(absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace strata

#endif  // STRATA_COMMON_HASH_H_

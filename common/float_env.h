// ScopedFlushDenormals: SSE float math flushes denormal results to zero and
// reads denormal inputs as zero (MXCSR FTZ and DAZ) while in scope, on this
// thread; the previous mode comes back at scope exit. Training math enters
// it: as weights and gradients shrink, denormals made the reference model's
// CPU steps about 40% slower by its third epoch (bench/RESULTS.md), and
// values below 1e-38 change nothing a model computes. No-op without SSE.
#ifndef STRATA_COMMON_FLOAT_ENV_H_
#define STRATA_COMMON_FLOAT_ENV_H_

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace strata {

class ScopedFlushDenormals {
 public:
#if defined(__SSE__)
  ScopedFlushDenormals() : saved_(_mm_getcsr()) {
    _mm_setcsr(saved_ | kFtz | kDaz);
  }
  ~ScopedFlushDenormals() { _mm_setcsr(saved_); }
#else
  ScopedFlushDenormals() = default;
#endif
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
#if defined(__SSE__)
  static constexpr unsigned int kFtz = 0x8000;  // flush to zero
  static constexpr unsigned int kDaz = 0x0040;  // denormals are zero
  unsigned int saved_;
#endif
};

}  // namespace strata

#endif  // STRATA_COMMON_FLOAT_ENV_H_

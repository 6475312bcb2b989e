// Wire compression of float32 gradients: bfloat16 or IEEE half precision on
// the wire, decoded back to float32 by the parameter server before the NaN
// check and the optimizer, with error feedback on the sender so that what
// rounding drops from one step's gradient is added to the next one's
// (1-bit SGD's and EF-SGD's remedy: the sum of what was applied tracks the
// sum of the true gradients, off by at most one step's rounding).
//
// Per job (job.strategy.gradient_compression), off by default. Only the
// gRPC paths compress: shared memory moves no bytes over a wire.
#ifndef STRATA_COMMON_GRADIENT_ENCODING_H_
#define STRATA_COMMON_GRADIENT_ENCODING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace strata {

enum class GradientEncoding {
  kNone = 0,      // float32 as is
  kBfloat16 = 1,  // the top 16 bits, rounded to nearest even
  kFloat16 = 2,   // IEEE binary16, rounded to nearest even
};

// "none", "bf16", "fp16".
absl::string_view GradientEncodingName(GradientEncoding e);
// The inverse of GradientEncodingName. Errors: INVALID_ARGUMENT naming the
// value and the allowed names.
absl::StatusOr<GradientEncoding> ParseGradientEncoding(absl::string_view name);

// Bytes of `n` float32 values on the wire.
size_t EncodedBytes(GradientEncoding e, size_t n);

// Rounds one value to nearest even; NaN stays NaN, infinities stay
// infinite. float16: finite values beyond its range become +-65504 (its
// largest finite value) rather than infinities, so that a large but finite
// gradient is not refused as Inf by the server; error feedback carries the
// rest to the next step. Values below its subnormal range become zero.
uint16_t FloatToBfloat16(float f);
float Bfloat16ToFloat(uint16_t h);
uint16_t FloatToFloat16(float f);
float Float16ToFloat(uint16_t h);

// Writes `n` values of `src` as `e` into `dst` (EncodedBytes(e, n) bytes;
// any alignment). kNone copies.
void EncodeFloat32(GradientEncoding e, const float* src, size_t n, char* dst);
// Reads `n` values of `e` from `src` (any alignment) into `dst`.
void DecodeToFloat32(GradientEncoding e, const char* src, size_t n,
                     float* dst);

// The residuals of one sender (a PsClient: per variable name). Thread-safe;
// concurrent encodes of one variable are serialized, each taking the
// residual the previous one left.
class ErrorFeedback {
 public:
  explicit ErrorFeedback(GradientEncoding encoding);
  ~ErrorFeedback();
  ErrorFeedback(const ErrorFeedback&) = delete;
  ErrorFeedback& operator=(const ErrorFeedback&) = delete;

  GradientEncoding encoding() const { return encoding_; }

  // Encodes `grad` + the variable's residual into `dst` (EncodedBytes
  // bytes) and keeps what the encoding lost as the new residual. Elements
  // whose sum is not finite are encoded as they are (the server refuses the
  // push) and leave their residual unchanged. A variable's first encode (or
  // one of a different size, which restarts its residual) starts from zero.
  void Encode(const std::string& name, const float* grad, size_t n, char* dst);

  // The residual of `name` (empty when none); for tests.
  std::vector<float> Residual(const std::string& name) const;

 private:
  // One variable's residual, locked on its own so that encodes of
  // different variables run concurrently.
  struct Entry;
  std::shared_ptr<Entry> EntryFor(const std::string& name) const;

  const GradientEncoding encoding_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, std::shared_ptr<Entry>> entries_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_COMMON_GRADIENT_ENCODING_H_

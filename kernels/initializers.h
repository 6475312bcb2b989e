// Variable initializers computed on the parameter server.
//
// Every value is a pure function of (seed, variable name, global element
// index), so a variable split over shards on axis 0 holds exactly what the
// unsplit variable would: a shard passes the full shape and its row offset.
#ifndef STRATA_KERNELS_INITIALIZERS_H_
#define STRATA_KERNELS_INITIALIZERS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"

namespace strata {

enum class InitializerType {
  kZeros,
  kOnes,
  kConstant,
  kRandomUniform,
  kRandomNormal,
  kTruncatedNormal,
  kGlorotUniform,
  kGlorotNormal,
  kHeNormal,
  kHeUniform,
};

// Parameters of an initializer. Fields unused by a type are ignored; the
// defaults are Keras's (RandomUniform(-0.05, 0.05), RandomNormal(0, 0.05),
// TruncatedNormal(0, 0.05)).
struct InitializerSpec {
  InitializerType type = InitializerType::kZeros;
  uint64_t seed = 0;
  double value = 0.0;    // kConstant
  double minval = -0.05;  // kRandomUniform
  double maxval = 0.05;   // kRandomUniform
  double mean = 0.0;      // kRandomNormal, kTruncatedNormal
  double stddev = 0.05;   // kRandomNormal, kTruncatedNormal
};

// "zeros", "ones", "constant", "random_uniform", "random_normal",
// "truncated_normal", "glorot_uniform", "glorot_normal", "he_normal",
// "he_uniform".
absl::StatusOr<InitializerType> ParseInitializerType(absl::string_view name);
std::string InitializerTypeName(InitializerType type);

// Keras's fan computation (_compute_fans) for `full_shape`.
void ComputeFans(const Shape& full_shape, double* fan_in, double* fan_out);

// Fills `out` (a shard of `full_shape`, starting at row `row_offset` of axis
// 0, holding `out_elements` elements of `dtype`) with the initializer's
// values. `variable` is the name of the whole (unsplit) variable.
// Errors: INVALID_ARGUMENT when the initializer does not apply to the dtype
// (random initializers other than random_uniform on integer types) or the
// shard does not fit inside `full_shape`.
absl::Status FillInitializer(const InitializerSpec& spec,
                             absl::string_view variable, DType dtype,
                             const Shape& full_shape, int64_t row_offset,
                             void* out, int64_t out_elements);

}  // namespace strata

#endif  // STRATA_KERNELS_INITIALIZERS_H_

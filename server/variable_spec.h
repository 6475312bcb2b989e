// Validation of a v1::VariableSpec (its fields' conversions are
// codec/spec_codec.h's).
// Pure functions, safe from any thread.
#ifndef STRATA_SERVER_VARIABLE_SPEC_H_
#define STRATA_SERVER_VARIABLE_SPEC_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "codec/spec_codec.h"
#include "common/tensor.h"
#include "kernels/delay_compensation.h"
#include "kernels/initializers.h"
#include "kernels/optimizers.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

// UpdateMode.delay_compensation with its defaults filled in: the
// kernel's settings, and the versions a variable keeps for it.
inline constexpr int kDefaultDelayCompensationVersions = 8;
inline constexpr int kMaxDelayCompensationVersions = 1024;
DelayCompensationConfig DelayCompensationFromProto(
    const v1::DelayCompensation& dc);
int DelayCompensationVersions(const v1::DelayCompensation& dc);

// What ValidateVariableSpec derives from a valid spec.
struct ValidatedVariableSpec {
  DType dtype = DType::kInvalid;
  Shape shape;
  std::unique_ptr<Optimizer> optimizer;
  InitializerSpec initializer;
};

// Checks, in this order: the name is not empty; every initializer and
// optimizer number is finite; the dtype; the shape (at most `max_bytes`)
// with its full shape and row offset; the optimizer (only assign_add and
// assign for integer dtypes); the update mode (num_replicas >= 1 and
// staleness >= 0 for SYNC and STALENESS; delay compensation: lambda finite
// and >= 0, > 0 only for ASYNC, mean_square_decay in [0, 1), versions in
// [0, kMaxDelayCompensationVersions]); the initializer. Errors:
// INVALID_ARGUMENT naming the variable and the field; RESOURCE_EXHAUSTED
// for a value over `max_bytes`.
absl::StatusOr<ValidatedVariableSpec> ValidateVariableSpec(
    const v1::VariableSpec& spec, uint64_t max_bytes);

}  // namespace strata

#endif  // STRATA_SERVER_VARIABLE_SPEC_H_

// The wire forms of the kernel specs: DType, InitializerSpec and
// OptimizerConfig to and from their v1 protos, the one converter each for
// every side (the PS validating a VariableSpec, the worker and the Python
// PS client writing one). Pure functions, safe from any thread.
//
// A zero in a proto field that has a non-zero default means "the default"
// (proto3 cannot tell unset from 0): an initializer's minval and maxval
// (both 0), its stddev, and an optimizer's learning_rate, beta_1, beta_2,
// epsilon, initial_accumulator_value and rho read back as
// InitializerSpec's and OptimizerConfig's defaults.
#ifndef STRATA_CODEC_SPEC_CODEC_H_
#define STRATA_CODEC_SPEC_CODEC_H_

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "kernels/initializers.h"
#include "kernels/optimizers.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

// Errors (the *FromProto functions): INVALID_ARGUMENT for an unknown
// dtype, initializer or optimizer type, naming it.
absl::StatusOr<DType> DTypeFromProto(v1::DType dtype);
v1::DType DTypeToProto(DType dtype);

absl::StatusOr<InitializerSpec> InitializerFromProto(
    const v1::Initializer& init);
v1::Initializer InitializerToProto(const InitializerSpec& spec);

absl::StatusOr<OptimizerConfig> OptimizerFromProto(const v1::OptimizerSpec& o);
// A learning rate <= 0 ("the optimizer's default") is written as 0.
v1::OptimizerSpec OptimizerToProto(const OptimizerConfig& config);

}  // namespace strata

#endif  // STRATA_CODEC_SPEC_CODEC_H_

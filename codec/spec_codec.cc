#include "codec/spec_codec.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace strata {

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype) {
  switch (dtype) {
    case v1::DT_FLOAT32:
      return DType::kFloat32;
    case v1::DT_FLOAT64:
      return DType::kFloat64;
    case v1::DT_INT32:
      return DType::kInt32;
    case v1::DT_INT64:
      return DType::kInt64;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", static_cast<int>(dtype),
                       " is not one of float32, float64, int32, int64"));
  }
}

v1::DType DTypeToProto(DType dtype) {
  return static_cast<v1::DType>(static_cast<int>(dtype));
}

absl::StatusOr<InitializerSpec> InitializerFromProto(
    const v1::Initializer& init) {
  InitializerSpec spec;
  if (!init.type().empty()) {
    STRATA_ASSIGN_OR_RETURN(spec.type, ParseInitializerType(init.type()));
  }
  spec.seed = init.seed();
  spec.value = init.value();
  if (init.minval() != 0 || init.maxval() != 0) {
    spec.minval = init.minval();
    spec.maxval = init.maxval();
  }
  spec.mean = init.mean();
  if (init.stddev() != 0) spec.stddev = init.stddev();
  return spec;
}

v1::Initializer InitializerToProto(const InitializerSpec& s) {
  v1::Initializer p;
  p.set_type(InitializerTypeName(s.type));
  p.set_seed(s.seed);
  p.set_value(s.value);
  p.set_minval(s.minval);
  p.set_maxval(s.maxval);
  p.set_mean(s.mean);
  p.set_stddev(s.stddev);
  return p;
}

absl::StatusOr<OptimizerConfig> OptimizerFromProto(const v1::OptimizerSpec& o) {
  OptimizerConfig c;
  if (!o.type().empty()) {
    STRATA_ASSIGN_OR_RETURN(c.type, ParseOptimizerType(o.type()));
  }
  if (o.learning_rate() != 0) c.learning_rate = o.learning_rate();
  c.momentum = o.momentum();
  c.nesterov = o.nesterov();
  if (o.beta_1() != 0) c.beta_1 = o.beta_1();
  if (o.beta_2() != 0) c.beta_2 = o.beta_2();
  if (o.epsilon() != 0) c.epsilon = o.epsilon();
  c.amsgrad = o.amsgrad();
  if (o.initial_accumulator_value() != 0) {
    c.initial_accumulator_value = o.initial_accumulator_value();
  }
  if (o.rho() != 0) c.rho = o.rho();
  c.centered = o.centered();
  return c;
}

v1::OptimizerSpec OptimizerToProto(const OptimizerConfig& c) {
  v1::OptimizerSpec p;
  p.set_type(OptimizerTypeName(c.type));
  if (c.learning_rate > 0) p.set_learning_rate(c.learning_rate);
  p.set_momentum(c.momentum);
  p.set_nesterov(c.nesterov);
  p.set_beta_1(c.beta_1);
  p.set_beta_2(c.beta_2);
  p.set_epsilon(c.epsilon);
  p.set_amsgrad(c.amsgrad);
  p.set_initial_accumulator_value(c.initial_accumulator_value);
  p.set_rho(c.rho);
  p.set_centered(c.centered);
  return p;
}

}  // namespace strata

#include "server/variable_spec.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/variable_internal.h"

namespace strata {
namespace {

using variable_internal::Quote;

absl::Status ValidateSpecShape(const v1::VariableSpec& spec, DType dtype,
                               uint64_t max_bytes, Shape* shape) {
  const std::string var = absl::StrCat("variable ", Quote(spec.name()));
  shape->assign(spec.shape().begin(), spec.shape().end());
  absl::Status s = ValidateShape(*shape, DTypeSize(dtype), max_bytes);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(var, ": ", s.message()));
  }
  if (spec.full_shape_size() == 0) {
    if (spec.row_offset() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          var, ": row_offset ", spec.row_offset(),
          " given without full_shape"));
    }
    return absl::OkStatus();
  }
  Shape full(spec.full_shape().begin(), spec.full_shape().end());
  if (full.size() != shape->size() || full.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        var, ": full_shape ", ShapeString(full), " must have the rank of shape ",
        ShapeString(*shape), " and rank >= 1"));
  }
  for (size_t i = 1; i < full.size(); ++i) {
    if (full[i] != (*shape)[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          var, ": shard shape ", ShapeString(*shape),
          " differs from full_shape ", ShapeString(full), " beyond axis 0"));
    }
  }
  if (spec.row_offset() < 0 || spec.row_offset() + (*shape)[0] > full[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        var, ": rows [", spec.row_offset(), ", ",
        spec.row_offset() + (*shape)[0], ") are outside full_shape ",
        ShapeString(full)));
  }
  return absl::OkStatus();
}

// Every number of the initializer and optimizer specs must be finite, also
// the ones their type does not use: a NaN would make the spec differ from
// itself, so re-creating the same variable (CreateVariable is idempotent)
// would get ALREADY_EXISTS. Errors: INVALID_ARGUMENT naming the field.
absl::Status CheckSpecNumbersFinite(const v1::VariableSpec& spec,
                                    const std::string& var) {
  const v1::Initializer& i = spec.initializer();
  const v1::OptimizerSpec& o = spec.optimizer();
  const std::pair<const char*, double> fields[] = {
      {"initializer.value", i.value()},
      {"initializer.minval", i.minval()},
      {"initializer.maxval", i.maxval()},
      {"initializer.mean", i.mean()},
      {"initializer.stddev", i.stddev()},
      {"optimizer.learning_rate", o.learning_rate()},
      {"optimizer.momentum", o.momentum()},
      {"optimizer.beta_1", o.beta_1()},
      {"optimizer.beta_2", o.beta_2()},
      {"optimizer.epsilon", o.epsilon()},
      {"optimizer.initial_accumulator_value", o.initial_accumulator_value()},
      {"optimizer.rho", o.rho()}};
  for (const auto& [field, value] : fields) {
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(var, ": ", field, " must be finite, got ", value));
    }
  }
  return absl::OkStatus();
}

// The optimizer of `spec`, which must suit `dtype`.
absl::StatusOr<std::unique_ptr<Optimizer>> ValidateOptimizer(
    const v1::VariableSpec& spec, DType dtype, const std::string& var) {
  auto config = OptimizerFromProto(spec.optimizer());
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(var, ": optimizer: ", config.status().message()));
  }
  if (!IsFloating(dtype) && config->type != OptimizerType::kAssignAdd &&
      config->type != OptimizerType::kAssign) {
    return absl::InvalidArgumentError(absl::StrCat(
        var, ": optimizer ", OptimizerTypeName(config->type),
        " needs float32 or float64; ", DTypeName(dtype),
        " variables allow only assign_add"));
  }
  auto optimizer = Optimizer::Create(*config);
  if (!optimizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(var, ": optimizer: ", optimizer.status().message()));
  }
  return optimizer;
}

absl::Status ValidateDelayCompensation(const v1::UpdateMode& mode,
                                       const std::string& var) {
  if (!mode.has_delay_compensation()) return absl::OkStatus();
  const v1::DelayCompensation& dc = mode.delay_compensation();
  const std::string field = var + ": update_mode.delay_compensation.";
  if (!std::isfinite(dc.lambda()) || dc.lambda() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "lambda must be finite and >= 0, got ", dc.lambda()));
  }
  if (!std::isfinite(dc.mean_square_decay()) || dc.mean_square_decay() < 0 ||
      dc.mean_square_decay() >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "mean_square_decay must be in [0, 1), got ",
                     dc.mean_square_decay()));
  }
  if (dc.versions() < 0 || dc.versions() > kMaxDelayCompensationVersions) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "versions must be in [0, ",
                     kMaxDelayCompensationVersions, "], got ", dc.versions()));
  }
  if (dc.lambda() > 0 && mode.kind() != v1::UpdateMode::ASYNC) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "lambda is for ASYNC variables only (their gradients are "
        "applied to newer values than they were computed from), got ",
        v1::UpdateMode::Kind_Name(mode.kind())));
  }
  return absl::OkStatus();
}

absl::Status ValidateUpdateMode(const v1::UpdateMode& mode,
                                const std::string& var) {
  if (mode.first_step() != 0 && mode.kind() != v1::UpdateMode::SYNC) {
    return absl::InvalidArgumentError(absl::StrCat(
        var, ": update_mode.first_step is for SYNC variables only, got ",
        mode.first_step(), " for ", v1::UpdateMode::Kind_Name(mode.kind())));
  }
  if (mode.first_step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(var, ": update_mode.first_step must be >= 0, got ",
                     mode.first_step()));
  }
  if (mode.scale_by_staleness() && mode.kind() != v1::UpdateMode::ASYNC) {
    return absl::InvalidArgumentError(absl::StrCat(
        var, ": update_mode.scale_by_staleness is for ASYNC variables only, "
        "got ", v1::UpdateMode::Kind_Name(mode.kind())));
  }
  if (mode.staleness_tolerance() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        var, ": update_mode.staleness_tolerance must be >= 0, got ",
        mode.staleness_tolerance()));
  }
  STRATA_RETURN_IF_ERROR(ValidateDelayCompensation(mode, var));
  switch (mode.kind()) {
    case v1::UpdateMode::ASYNC:
      return absl::OkStatus();
    case v1::UpdateMode::SYNC:
    case v1::UpdateMode::STALENESS:
      if (mode.num_replicas() < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            var, ": update_mode.num_replicas must be >= 1 for ",
            v1::UpdateMode::Kind_Name(mode.kind()), ", got ",
            mode.num_replicas()));
      }
      if (mode.staleness() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(var, ": update_mode.staleness must be >= 0, got ",
                         mode.staleness()));
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          var, ": update_mode.kind ", static_cast<int>(mode.kind()),
          " is not one of ASYNC, SYNC, STALENESS"));
  }
}

}  // namespace

absl::StatusOr<ValidatedVariableSpec> ValidateVariableSpec(
    const v1::VariableSpec& spec, uint64_t max_bytes) {
  if (spec.name().empty()) {
    return absl::InvalidArgumentError("variable spec: name is empty");
  }
  const std::string var = absl::StrCat("variable ", Quote(spec.name()));
  STRATA_RETURN_IF_ERROR(CheckSpecNumbersFinite(spec, var));
  ValidatedVariableSpec out;
  auto dtype = DTypeFromProto(spec.dtype());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(var, ": ", dtype.status().message()));
  }
  out.dtype = *dtype;
  STRATA_RETURN_IF_ERROR(
      ValidateSpecShape(spec, out.dtype, max_bytes, &out.shape));
  STRATA_ASSIGN_OR_RETURN(out.optimizer,
                          ValidateOptimizer(spec, out.dtype, var));
  STRATA_RETURN_IF_ERROR(ValidateUpdateMode(spec.update_mode(), var));
  auto init = InitializerFromProto(spec.initializer());
  if (!init.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(var, ": initializer: ", init.status().message()));
  }
  out.initializer = *init;
  return out;
}

DelayCompensationConfig DelayCompensationFromProto(
    const v1::DelayCompensation& dc) {
  DelayCompensationConfig c;
  c.lambda = dc.lambda();
  c.adaptive = dc.adaptive();
  c.mean_square_decay =
      dc.mean_square_decay() > 0 ? dc.mean_square_decay() : 0.95;
  return c;
}

int DelayCompensationVersions(const v1::DelayCompensation& dc) {
  return dc.versions() > 0 ? dc.versions() : kDefaultDelayCompensationVersions;
}

}  // namespace strata

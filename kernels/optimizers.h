// Server-side optimizers with Keras's formulas and defaults.
//
// An Optimizer is stateless apart from its hyper-parameters; its slots
// (momentum, Adam's m and v, ...) live beside the variable and are passed in.
// The apply step count (`iterations`, Keras's optimizer.iterations before the
// update) is kept per variable by the caller.
#ifndef STRATA_KERNELS_OPTIMIZERS_H_
#define STRATA_KERNELS_OPTIMIZERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor.h"

namespace strata {

enum class OptimizerType {
  kSgd,
  kAdam,
  kAdagrad,
  kRmsprop,
  kAssignAdd,
  // var = grad: a PS variable that holds the latest (averaged) gradient,
  // through which multi_worker_mirrored's "ps" backend sums gradients.
  kAssign,
};

// Hyper-parameters. learning_rate <= 0 means "the Keras default for this
// optimizer" (filled in by Create()); the other fields are used as given.
// Fields an optimizer does not use are ignored and not validated.
struct OptimizerConfig {
  OptimizerType type = OptimizerType::kSgd;
  double learning_rate = -1;  // SGD 0.01; Adam, Adagrad, RMSprop 0.001
  double momentum = 0.0;      // SGD, RMSprop
  bool nesterov = false;      // SGD
  double beta_1 = 0.9;        // Adam
  double beta_2 = 0.999;      // Adam
  double epsilon = 1e-7;      // Adam, Adagrad, RMSprop
  bool amsgrad = false;       // Adam
  double initial_accumulator_value = 0.1;  // Adagrad
  double rho = 0.9;           // RMSprop
  bool centered = false;      // RMSprop
};

// "sgd", "adam", "adagrad", "rmsprop", "assign_add", "assign".
absl::StatusOr<OptimizerType> ParseOptimizerType(absl::string_view name);
std::string OptimizerTypeName(OptimizerType type);

// Applies one optimizer step to float32 or float64 variables. Thread-compatible:
// the caller serializes applies to one variable.
class Optimizer {
 public:
  // Validates the fields the optimizer uses (learning rate finite, <= 0
  // meaning the default, ignored by assign_add; momentum in [0, 1]; betas and
  // rho in [0, 1); epsilon and initial_accumulator_value >= 0) and fills
  // defaults. Errors: INVALID_ARGUMENT naming the field and its range.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const OptimizerConfig& config);
  virtual ~Optimizer() = default;

  const OptimizerConfig& config() const { return config_; }
  // Replaces the learning rate for the updates that follow (Keras's
  // `optimizer.learning_rate = ...` between epochs); the caller checks that
  // it is finite and > 0. Not thread-safe against a running update.
  void set_learning_rate(double learning_rate) {
    config_.learning_rate = learning_rate;
  }

  // Names of the slots this optimizer needs, in a fixed order, e.g.
  // {"momentum"} for SGD with momentum > 0, {"m", "v"} for Adam
  // ({"m", "v", "vhat"} with amsgrad), {"accumulator"} for Adagrad,
  // {"velocity"} (+ "momentum" when momentum > 0, + "average_gradient" when
  // centered) for RMSprop, none for plain SGD and assign_add.
  virtual std::vector<std::string> SlotNames() const = 0;
  // Initial value of slot `index` (0 except Adagrad's accumulator).
  virtual double SlotInitialValue(size_t index) const;

  // Dense update: var, each slot and grad hold `n` elements of `dtype`
  // (float32 or float64; integers only for assign_add). `iterations` is the
  // number of applies made before this one.
  virtual absl::Status ApplyDense(DType dtype, int64_t iterations, void* var,
                                  absl::Span<void* const> slots,
                                  const void* grad, int64_t n) const = 0;
  // As ApplyDense, with the learning rate times `lr_scale` (finite, > 0)
  // for this update only: a stale gradient's smaller step (UpdateMode's
  // scale_by_staleness). Errors: INVALID_ARGUMENT for another scale; the
  // default, for optimizers that cannot scale, refuses any scale but 1
  // (UNIMPLEMENTED).
  virtual absl::Status ApplyDenseScaled(DType dtype, int64_t iterations,
                                        double lr_scale, void* var,
                                        absl::Span<void* const> slots,
                                        const void* grad, int64_t n) const;

  // Sparse (row) update on a 2-D variable of `row_width` columns: row ids[i]
  // of var and of each slot is updated with row i of `grad` (ids are unique
  // and in range: the caller sums duplicates and checks bounds). Rows not
  // named are left untouched (lazy semantics, as TF's sparse apply ops).
  virtual absl::Status ApplySparse(DType dtype, int64_t iterations, void* var,
                                   absl::Span<void* const> slots,
                                   absl::Span<const int64_t> ids,
                                   const void* grad, int64_t row_width) const;

 protected:
  explicit Optimizer(const OptimizerConfig& config) : config_(config) {}
  OptimizerConfig config_;
};

}  // namespace strata

#endif  // STRATA_KERNELS_OPTIMIZERS_H_

// Row-wise optimizers for the rows of a dynamic embedding table, with
// Keras's formulas and defaults.
//
// A RowOptimizer updates one row of `dim` floats at a time with the row's own
// slots (Adagrad's accumulator, Adam's m and v, FTRL's accumulator and
// linear) and the row's own step count: lazy semantics, as TF's sparse apply
// ops and tfa.optimizers.LazyAdam, so rows not touched by a batch are not
// decayed. Slots are laid out slot-major: slot k of a row occupies
// slots[k * dim, (k + 1) * dim).
#ifndef STRATA_KERNELS_ROW_OPTIMIZERS_H_
#define STRATA_KERNELS_ROW_OPTIMIZERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace strata {

enum class RowOptimizerType {
  kSgd,
  kAdagrad,
  kLazyAdam,
  kFtrl,
};

// "sgd", "adagrad", "lazy_adam", "ftrl".
absl::StatusOr<RowOptimizerType> ParseRowOptimizerType(absl::string_view name);
std::string RowOptimizerTypeName(RowOptimizerType type);

// Hyper-parameters. learning_rate <= 0 means "the Keras default for this
// optimizer" (SGD 0.01; Adagrad, Adam, FTRL 0.001), filled in by Create().
// Fields an optimizer does not use are ignored and not validated.
struct RowOptimizerConfig {
  RowOptimizerType type = RowOptimizerType::kSgd;
  double learning_rate = -1;
  double epsilon = 1e-7;                   // Adagrad, lazy Adam
  double initial_accumulator_value = 0.1;  // Adagrad, FTRL
  double beta_1 = 0.9;                     // lazy Adam
  double beta_2 = 0.999;                   // lazy Adam
  double learning_rate_power = -0.5;       // FTRL, <= 0
  double l1_regularization_strength = 0.0;            // FTRL
  double l2_regularization_strength = 0.0;            // FTRL
  double l2_shrinkage_regularization_strength = 0.0;  // FTRL
  double beta = 0.0;  // FTRL: adds beta / (2 * learning_rate) to l2
};

// Stateless apart from its hyper-parameters: thread-safe; the caller
// serializes updates to one row.
class RowOptimizer {
 public:
  // Validates the fields the optimizer uses and fills the default learning
  // rate. Errors: INVALID_ARGUMENT naming the field and its allowed range
  // (learning_rate finite; epsilon, initial_accumulator_value, l1, l2,
  // l2_shrinkage, beta finite and >= 0; beta_1, beta_2 in [0, 1);
  // learning_rate_power finite and <= 0).
  static absl::StatusOr<std::unique_ptr<RowOptimizer>> Create(
      const RowOptimizerConfig& config);
  virtual ~RowOptimizer() = default;

  // The config with defaults filled in.
  const RowOptimizerConfig& config() const { return config_; }

  // Slots per row element: SGD 0, Adagrad 1 ("accumulator"), lazy Adam 2
  // ("m", "v"), FTRL 2 ("accumulator", "linear"). A row of `dim` floats has
  // num_slots() * dim slot floats.
  int num_slots() const { return static_cast<int>(SlotNames().size()); }
  virtual std::vector<std::string> SlotNames() const = 0;

  // Fills the slots of a new row of `dim` elements with their initial values
  // (initial_accumulator_value for the accumulators, 0 otherwise). Fills
  // what `slots` holds when it is not num_slots() * dim long.
  void InitSlots(absl::Span<float> slots, int64_t dim) const;

  // Applies one update to `row` with `grad` (both `dim` = row.size() floats)
  // and the row's `slots` (num_slots() * dim floats). `row_step` is the
  // number of updates the row has had before this one, incremented on
  // success; lazy Adam uses it for its bias correction (t = *row_step + 1)
  // and requires it, the others accept null.
  // Errors (nothing changed): INVALID_ARGUMENT for a size mismatch, a null
  // row_step where required, a negative *row_step, or a NaN or infinite
  // gradient element.
  absl::Status ApplyRow(absl::Span<float> row, absl::Span<float> slots,
                        int64_t* row_step, absl::Span<const float> grad) const;

 protected:
  explicit RowOptimizer(const RowOptimizerConfig& config) : config_(config) {}

  // The update proper, on validated arguments; `t` is the 1-based step.
  virtual void Update(absl::Span<float> row, absl::Span<float> slots,
                      int64_t t, absl::Span<const float> grad) const = 0;
  virtual bool NeedsStep() const { return false; }

  RowOptimizerConfig config_;
};

}  // namespace strata

#endif  // STRATA_KERNELS_ROW_OPTIMIZERS_H_

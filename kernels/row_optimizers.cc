#include "kernels/row_optimizers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// Element math runs in double and is stored back as float: rows are short
// (an embedding dimension), so the conversions cost nothing that matters and
// the results match a double reference to float precision.

class Sgd final : public RowOptimizer {
 public:
  explicit Sgd(const RowOptimizerConfig& config) : RowOptimizer(config) {}
  std::vector<std::string> SlotNames() const override { return {}; }

 protected:
  void Update(absl::Span<float> row, absl::Span<float> /*slots*/,
              int64_t /*t*/, absl::Span<const float> grad) const override {
    const double lr = config_.learning_rate;
    for (size_t i = 0; i < row.size(); ++i) {
      row[i] = static_cast<float>(row[i] - lr * grad[i]);
    }
  }
};

// Keras Adagrad: acc += g^2; w -= lr * g / (sqrt(acc) + epsilon).
class Adagrad final : public RowOptimizer {
 public:
  explicit Adagrad(const RowOptimizerConfig& config) : RowOptimizer(config) {}
  std::vector<std::string> SlotNames() const override {
    return {"accumulator"};
  }

 protected:
  void Update(absl::Span<float> row, absl::Span<float> slots, int64_t /*t*/,
              absl::Span<const float> grad) const override {
    const double lr = config_.learning_rate;
    const double eps = config_.epsilon;
    float* const acc = slots.data();
    for (size_t i = 0; i < row.size(); ++i) {
      const double g = grad[i];
      const double a = static_cast<double>(acc[i]) + g * g;
      acc[i] = static_cast<float>(a);
      row[i] = static_cast<float>(row[i] - lr * g / (std::sqrt(a) + eps));
    }
  }
};

// Keras Adam applied to the touched rows only, with the row's own step t:
// lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t);
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// w -= lr_t * m / (sqrt(v) + epsilon).
class LazyAdam final : public RowOptimizer {
 public:
  explicit LazyAdam(const RowOptimizerConfig& config) : RowOptimizer(config) {}
  std::vector<std::string> SlotNames() const override { return {"m", "v"}; }

 protected:
  bool NeedsStep() const override { return true; }

  void Update(absl::Span<float> row, absl::Span<float> slots, int64_t t,
              absl::Span<const float> grad) const override {
    const double b1 = config_.beta_1;
    const double b2 = config_.beta_2;
    const double td = static_cast<double>(t);
    const double lr_t = config_.learning_rate *
                        std::sqrt(1.0 - std::pow(b2, td)) /
                        (1.0 - std::pow(b1, td));
    const double eps = config_.epsilon;
    const size_t dim = row.size();
    float* const m = slots.data();
    float* const v = slots.data() + dim;
    for (size_t i = 0; i < dim; ++i) {
      const double g = grad[i];
      const double mi = b1 * m[i] + (1.0 - b1) * g;
      const double vi = b2 * v[i] + (1.0 - b2) * g * g;
      m[i] = static_cast<float>(mi);
      v[i] = static_cast<float>(vi);
      row[i] = static_cast<float>(row[i] - lr_t * mi / (std::sqrt(vi) + eps));
    }
  }
};

// FTRL-proximal. Matches TensorFlow's CPU kernel ApplyFtrlV2 (the version of
// tensorflow/core/kernels/training_ops.cc with multiply_linear_by_lr, TF >=
// 2.4, multiply_linear_by_lr = false), which is also what the Python update
// of tf.keras.optimizers.Ftrl (Keras >= 2.11) computes:
//   g' = g + 2 * l2_shrinkage * w
//   n_new = n + g^2                       (the raw gradient, not g')
//   z += g' - (n_new^(-p) - n^(-p)) / lr * w        (p = learning_rate_power)
//   quadratic = n_new^(-p) / lr + 2 * (l2 + beta / (2 * lr))
//   w = (sign(z) * l1 - z) / quadratic if |z| > l1 else 0
//   n = n_new
// (equivalently w = (clip(z, -l1, l1) - z) / quadratic, as Keras writes it).
class Ftrl final : public RowOptimizer {
 public:
  explicit Ftrl(const RowOptimizerConfig& config) : RowOptimizer(config) {}
  std::vector<std::string> SlotNames() const override {
    return {"accumulator", "linear"};
  }

 protected:
  void Update(absl::Span<float> row, absl::Span<float> slots, int64_t /*t*/,
              absl::Span<const float> grad) const override {
    const double lr = config_.learning_rate;
    const double neg_p = -config_.learning_rate_power;
    const double l1 = config_.l1_regularization_strength;
    const double l2 =
        config_.l2_regularization_strength + config_.beta / (2 * lr);
    const double shrinkage = config_.l2_shrinkage_regularization_strength;
    const size_t dim = row.size();
    float* const n = slots.data();
    float* const z = slots.data() + dim;
    // n^0.5 through sqrt, as the kernel's special case for lr_power = -0.5.
    auto power = [neg_p](double x) {
      return neg_p == 0.5 ? std::sqrt(x) : std::pow(x, neg_p);
    };
    for (size_t i = 0; i < dim; ++i) {
      const double g = grad[i];
      const double w = row[i];
      const double g_shrunk = g + 2.0 * shrinkage * w;
      const double n_old = n[i];
      const double n_new = n_old + g * g;
      const double sigma = (power(n_new) - power(n_old)) / lr;
      const double zi = static_cast<double>(z[i]) + g_shrunk - sigma * w;
      const double quadratic = power(n_new) / lr + 2.0 * l2;
      const double w_new =
          std::abs(zi) > l1 ? ((zi > 0 ? l1 : -l1) - zi) / quadratic : 0.0;
      n[i] = static_cast<float>(n_new);
      z[i] = static_cast<float>(zi);
      row[i] = static_cast<float>(w_new);
    }
  }
};

// ---------------------------------------------------------------------------
// Config validation.

absl::Status CheckNonNegative(RowOptimizerType type, const char* field,
                              double value) {
  if (value >= 0 && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(RowOptimizerTypeName(type), ": ", field,
                   " must be finite and >= 0, got ", value));
}

absl::Status CheckBeta(RowOptimizerType type, const char* field, double value) {
  if (value >= 0 && value < 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      RowOptimizerTypeName(type), ": ", field, " must be in [0, 1), got ",
      value));
}

// learning_rate <= 0 selects `default_lr`.
absl::Status ResolveLearningRate(double default_lr, RowOptimizerConfig* c) {
  if (!std::isfinite(c->learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        RowOptimizerTypeName(c->type),
        ": learning_rate must be finite (<= 0 selects the default ",
        default_lr, "), got ", c->learning_rate));
  }
  if (c->learning_rate <= 0) c->learning_rate = default_lr;
  return absl::OkStatus();
}

constexpr RowOptimizerType kAllTypes[] = {
    RowOptimizerType::kSgd, RowOptimizerType::kAdagrad,
    RowOptimizerType::kLazyAdam, RowOptimizerType::kFtrl};

}  // namespace

absl::StatusOr<RowOptimizerType> ParseRowOptimizerType(absl::string_view name) {
  for (RowOptimizerType type : kAllTypes) {
    if (name == RowOptimizerTypeName(type)) return type;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown row optimizer '", name,
                   "'; allowed: sgd, adagrad, lazy_adam, ftrl"));
}

std::string RowOptimizerTypeName(RowOptimizerType type) {
  switch (type) {
    case RowOptimizerType::kSgd:
      return "sgd";
    case RowOptimizerType::kAdagrad:
      return "adagrad";
    case RowOptimizerType::kLazyAdam:
      return "lazy_adam";
    case RowOptimizerType::kFtrl:
      return "ftrl";
  }
  return absl::StrCat("unknown(", static_cast<int>(type), ")");
}

absl::StatusOr<std::unique_ptr<RowOptimizer>> RowOptimizer::Create(
    const RowOptimizerConfig& config) {
  RowOptimizerConfig c = config;
  const RowOptimizerType t = c.type;
  switch (t) {
    case RowOptimizerType::kSgd:
      STRATA_RETURN_IF_ERROR(ResolveLearningRate(0.01, &c));
      return std::unique_ptr<RowOptimizer>(new Sgd(c));
    case RowOptimizerType::kAdagrad:
      STRATA_RETURN_IF_ERROR(ResolveLearningRate(0.001, &c));
      STRATA_RETURN_IF_ERROR(CheckNonNegative(t, "epsilon", c.epsilon));
      STRATA_RETURN_IF_ERROR(CheckNonNegative(t, "initial_accumulator_value",
                                              c.initial_accumulator_value));
      return std::unique_ptr<RowOptimizer>(new Adagrad(c));
    case RowOptimizerType::kLazyAdam:
      STRATA_RETURN_IF_ERROR(ResolveLearningRate(0.001, &c));
      STRATA_RETURN_IF_ERROR(CheckBeta(t, "beta_1", c.beta_1));
      STRATA_RETURN_IF_ERROR(CheckBeta(t, "beta_2", c.beta_2));
      STRATA_RETURN_IF_ERROR(CheckNonNegative(t, "epsilon", c.epsilon));
      return std::unique_ptr<RowOptimizer>(new LazyAdam(c));
    case RowOptimizerType::kFtrl:
      STRATA_RETURN_IF_ERROR(ResolveLearningRate(0.001, &c));
      if (!(c.learning_rate_power <= 0) ||
          !std::isfinite(c.learning_rate_power)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ftrl: learning_rate_power must be finite and <= 0, got ",
            c.learning_rate_power));
      }
      STRATA_RETURN_IF_ERROR(CheckNonNegative(t, "initial_accumulator_value",
                                              c.initial_accumulator_value));
      STRATA_RETURN_IF_ERROR(CheckNonNegative(
          t, "l1_regularization_strength", c.l1_regularization_strength));
      STRATA_RETURN_IF_ERROR(CheckNonNegative(
          t, "l2_regularization_strength", c.l2_regularization_strength));
      STRATA_RETURN_IF_ERROR(
          CheckNonNegative(t, "l2_shrinkage_regularization_strength",
                           c.l2_shrinkage_regularization_strength));
      STRATA_RETURN_IF_ERROR(CheckNonNegative(t, "beta", c.beta));
      return std::unique_ptr<RowOptimizer>(new Ftrl(c));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown row optimizer type ", static_cast<int>(t)));
}

void RowOptimizer::InitSlots(absl::Span<float> slots, int64_t dim) const {
  const std::vector<std::string> names = SlotNames();
  if (dim <= 0) return;
  for (size_t k = 0; k < names.size(); ++k) {
    const size_t begin = std::min(slots.size(), k * static_cast<size_t>(dim));
    const size_t end =
        std::min(slots.size(), (k + 1) * static_cast<size_t>(dim));
    const float value =
        names[k] == "accumulator"
            ? static_cast<float>(config_.initial_accumulator_value)
            : 0.0f;
    std::fill(slots.begin() + begin, slots.begin() + end, value);
  }
}

absl::Status RowOptimizer::ApplyRow(absl::Span<float> row,
                                    absl::Span<float> slots, int64_t* row_step,
                                    absl::Span<const float> grad) const {
  const std::string name = RowOptimizerTypeName(config_.type);
  if (grad.size() != row.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": gradient has ", grad.size(),
                     " elements, the row has ", row.size()));
  }
  const size_t want_slots = static_cast<size_t>(num_slots()) * row.size();
  if (slots.size() != want_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expects ", want_slots, " slot floats (",
                     num_slots(), " per element), got ", slots.size()));
  }
  if (NeedsStep() && row_step == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": needs the row's step count"));
  }
  if (row_step != nullptr && *row_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": row step must be >= 0, got ", *row_step));
  }
  for (size_t i = 0; i < grad.size(); ++i) {
    if (!std::isfinite(grad[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": gradient element ", i, " is not finite (", grad[i], ")"));
    }
  }
  const int64_t t = (row_step != nullptr ? *row_step : 0) + 1;
  Update(row, slots, t, grad);
  if (row_step != nullptr) ++*row_step;
  return absl::OkStatus();
}

}  // namespace strata

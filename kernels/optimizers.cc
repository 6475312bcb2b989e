#include "kernels/optimizers.h"

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/float_env.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// The most slots any optimizer here uses (Adam with amsgrad, centered RMSprop
// with momentum).
constexpr size_t kMaxSlots = 3;
// Elements per block: the multi-pass Eigen expressions of one block (a few
// arrays of 16 KiB at most) stay in L1/L2 instead of streaming memory once per
// pass.
constexpr int64_t kBlock = 2048;

template <typename T>
using ArrayX = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using MapX = Eigen::Map<ArrayX<T>>;
template <typename T>
using ConstMapX = Eigen::Map<const ArrayX<T>>;

template <typename T>
using SlotPtrs = std::array<T*, kMaxSlots>;

template <typename T>
SlotPtrs<T> TypedSlots(absl::Span<void* const> slots, int64_t offset) {
  SlotPtrs<T> s{};
  for (size_t k = 0; k < slots.size(); ++k) {
    s[k] = static_cast<T*>(slots[k]) + offset;
  }
  return s;
}

// Runs `kernel` over `n` elements of var, slots and grad, block by block.
template <typename T, typename Kernel>
void RunBlocks(const Kernel& kernel, T* var, const SlotPtrs<T>& slots,
               size_t num_slots, const T* grad, int64_t n) {
  for (int64_t off = 0; off < n; off += kBlock) {
    const Eigen::Index len = std::min(kBlock, n - off);
    SlotPtrs<T> s{};
    for (size_t k = 0; k < num_slots; ++k) s[k] = slots[k] + off;
    kernel(var + off, s, grad + off, len);
  }
}

// Calls f(T{}) for the element type of `dtype`; integer types only when
// kIntegers. Unsupported dtypes are rejected before this is reached.
template <bool kIntegers, typename F>
void VisitDType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f(float{});
      break;
    case DType::kFloat64:
      f(double{});
      break;
    case DType::kInt32:
      if constexpr (kIntegers) f(int32_t{});
      break;
    case DType::kInt64:
      if constexpr (kIntegers) f(int64_t{});
      break;
    case DType::kInvalid:
      break;
  }
}

// ---------------------------------------------------------------------------
// Kernels: one step on a contiguous run of `n` elements. `s` holds the slots
// in SlotNames() order, already offset to the run.

struct SgdKernel {
  static constexpr bool kIntegers = false;
  double lr;
  double momentum;
  bool nesterov;

  template <typename T>
  void operator()(T* w, const SlotPtrs<T>& s, const T* g,
                  Eigen::Index n) const {
    MapX<T> var(w, n);
    ConstMapX<T> grad(g, n);
    const T lr_t = static_cast<T>(lr);
    if (momentum == 0) {
      var -= lr_t * grad;
      return;
    }
    MapX<T> m(s[0], n);
    const T mom = static_cast<T>(momentum);
    m = mom * m - lr_t * grad;
    if (nesterov) {
      var += mom * m - lr_t * grad;
    } else {
      var += m;
    }
  }
};

struct AdamKernel {
  static constexpr bool kIntegers = false;
  double alpha;  // lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
  double one_minus_beta_1;
  double one_minus_beta_2;
  double epsilon;
  bool amsgrad;

  template <typename T>
  void operator()(T* w, const SlotPtrs<T>& s, const T* g,
                  Eigen::Index n) const {
    MapX<T> var(w, n);
    MapX<T> m(s[0], n);
    MapX<T> v(s[1], n);
    ConstMapX<T> grad(g, n);
    const T alpha_t = static_cast<T>(alpha);
    const T eps = static_cast<T>(epsilon);
    m += (grad - m) * static_cast<T>(one_minus_beta_1);
    v += (grad.square() - v) * static_cast<T>(one_minus_beta_2);
    if (amsgrad) {
      MapX<T> vhat(s[2], n);
      vhat = vhat.max(v);
      var -= alpha_t * m / (vhat.sqrt() + eps);
    } else {
      var -= alpha_t * m / (v.sqrt() + eps);
    }
  }
};

struct AdagradKernel {
  static constexpr bool kIntegers = false;
  double lr;
  double epsilon;

  template <typename T>
  void operator()(T* w, const SlotPtrs<T>& s, const T* g,
                  Eigen::Index n) const {
    MapX<T> var(w, n);
    MapX<T> acc(s[0], n);
    ConstMapX<T> grad(g, n);
    acc += grad.square();
    var -= static_cast<T>(lr) * grad / (acc.sqrt() + static_cast<T>(epsilon));
  }
};

struct RmspropKernel {
  static constexpr bool kIntegers = false;
  double lr;
  double rho;
  double momentum;
  double epsilon;
  bool centered;
  size_t momentum_slot;  // valid when momentum > 0
  size_t average_slot;   // valid when centered

  template <typename T>
  void operator()(T* w, const SlotPtrs<T>& s, const T* g,
                  Eigen::Index n) const {
    MapX<T> var(w, n);
    MapX<T> velocity(s[0], n);
    ConstMapX<T> grad(g, n);
    const T rho_t = static_cast<T>(rho);
    const T one_minus_rho = static_cast<T>(1.0 - rho);
    const T lr_t = static_cast<T>(lr);
    const T eps = static_cast<T>(epsilon);
    velocity = rho_t * velocity + one_minus_rho * grad.square();
    auto step = [&](const auto& denominator) {
      if (momentum > 0) {
        MapX<T> mom(s[momentum_slot], n);
        mom = static_cast<T>(momentum) * mom + lr_t * grad / denominator.sqrt();
        var -= mom;
      } else {
        var -= lr_t * grad / denominator.sqrt();
      }
    };
    if (centered) {
      MapX<T> average(s[average_slot], n);
      average = rho_t * average + one_minus_rho * grad;
      step(velocity - average.square() + eps);
    } else {
      step(velocity + eps);
    }
  }
};

struct AssignAddKernel {
  static constexpr bool kIntegers = true;

  template <typename T>
  void operator()(T* w, const SlotPtrs<T>& /*s*/, const T* g,
                  Eigen::Index n) const {
    if constexpr (std::is_integral_v<T>) {
      // Wraps on overflow (as TF's integer add) without signed-overflow UB.
      using U = std::make_unsigned_t<T>;
      for (Eigen::Index i = 0; i < n; ++i) {
        w[i] = static_cast<T>(static_cast<U>(w[i]) + static_cast<U>(g[i]));
      }
    } else {
      MapX<T>(w, n) += ConstMapX<T>(g, n);
    }
  }
};

// ---------------------------------------------------------------------------
// Shared validation and dispatch. Derived provides:
//   using Kernel = ...;
//   Kernel MakeKernel(int64_t iterations, double learning_rate) const;
//   size_t NumSlots() const;
template <typename Derived>
class KernelOptimizer : public Optimizer {
 public:
  explicit KernelOptimizer(const OptimizerConfig& config) : Optimizer(config) {}

  absl::Status ApplyDense(DType dtype, int64_t iterations, void* var,
                          absl::Span<void* const> slots, const void* grad,
                          int64_t n) const final {
    return ApplyDenseScaled(dtype, iterations, 1.0, var, slots, grad, n);
  }

  absl::Status ApplyDenseScaled(DType dtype, int64_t iterations,
                                double lr_scale, void* var,
                                absl::Span<void* const> slots,
                                const void* grad, int64_t n) const final {
    STRATA_RETURN_IF_ERROR(CheckArgs(dtype, iterations, slots));
    STRATA_RETURN_IF_ERROR(CheckScale(lr_scale));
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("element count must be >= 0, got ", n));
    }
    if (n == 0) return absl::OkStatus();
    STRATA_RETURN_IF_ERROR(CheckPointers(var, slots, grad));
    const ScopedFlushDenormals flush_denormals;
    const auto kernel =
        derived().MakeKernel(iterations, config_.learning_rate * lr_scale);
    VisitDType<Derived::Kernel::kIntegers>(dtype, [&](auto tag) {
      using T = decltype(tag);
      RunBlocks<T>(kernel, static_cast<T*>(var), TypedSlots<T>(slots, 0),
                   slots.size(), static_cast<const T*>(grad), n);
    });
    return absl::OkStatus();
  }

  absl::Status ApplySparse(DType dtype, int64_t iterations, void* var,
                           absl::Span<void* const> slots,
                           absl::Span<const int64_t> ids, const void* grad,
                           int64_t row_width) const final {
    STRATA_RETURN_IF_ERROR(CheckArgs(dtype, iterations, slots));
    if (row_width < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("row width must be >= 0, got ", row_width));
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "row id ", ids[i], " at position ", i, " is negative"));
      }
    }
    if (ids.empty() || row_width == 0) return absl::OkStatus();
    STRATA_RETURN_IF_ERROR(CheckPointers(var, slots, grad));
    const auto kernel = derived().MakeKernel(iterations, config_.learning_rate);
    VisitDType<Derived::Kernel::kIntegers>(dtype, [&](auto tag) {
      using T = decltype(tag);
      T* const w = static_cast<T*>(var);
      const T* const g = static_cast<const T*>(grad);
      const SlotPtrs<T> s = TypedSlots<T>(slots, 0);
      for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t row = ids[i] * row_width;
        SlotPtrs<T> row_slots{};
        for (size_t k = 0; k < slots.size(); ++k) row_slots[k] = s[k] + row;
        RunBlocks<T>(kernel, w + row, row_slots, slots.size(),
                     g + static_cast<int64_t>(i) * row_width, row_width);
      }
    });
    return absl::OkStatus();
  }

 private:
  const Derived& derived() const { return static_cast<const Derived&>(*this); }

  absl::Status CheckArgs(DType dtype, int64_t iterations,
                         absl::Span<void* const> slots) const {
    const bool integer = dtype == DType::kInt32 || dtype == DType::kInt64;
    if (!IsFloating(dtype) && !(Derived::Kernel::kIntegers && integer)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer ", OptimizerTypeName(config_.type),
          " does not support dtype ", DTypeName(dtype), "; allowed: ",
          Derived::Kernel::kIntegers ? "float32, float64, int32, int64"
                                     : "float32, float64"));
    }
    if (iterations < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("iterations must be >= 0, got ", iterations));
    }
    if (slots.size() != derived().NumSlots()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer ", OptimizerTypeName(config_.type), " expects ",
          derived().NumSlots(), " slot(s) [", absl::StrJoin(SlotNames(), ", "),
          "], got ", slots.size()));
    }
    return absl::OkStatus();
  }

  static absl::Status CheckScale(double lr_scale) {
    if (!(lr_scale > 0) || !std::isfinite(lr_scale)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "learning rate scale must be finite and > 0, got ", lr_scale));
    }
    return absl::OkStatus();
  }

  static absl::Status CheckPointers(const void* var,
                                    absl::Span<void* const> slots,
                                    const void* grad) {
    if (var == nullptr || grad == nullptr) {
      return absl::InvalidArgumentError("variable or gradient buffer is null");
    }
    for (size_t k = 0; k < slots.size(); ++k) {
      if (slots[k] == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("slot buffer ", k, " is null"));
      }
    }
    return absl::OkStatus();
  }
};

class Sgd final : public KernelOptimizer<Sgd> {
 public:
  using Kernel = SgdKernel;
  explicit Sgd(const OptimizerConfig& config) : KernelOptimizer(config) {}

  std::vector<std::string> SlotNames() const override {
    if (config_.momentum > 0) return {"momentum"};
    return {};
  }
  size_t NumSlots() const { return config_.momentum > 0 ? 1 : 0; }
  Kernel MakeKernel(int64_t /*iterations*/, double learning_rate) const {
    return Kernel{learning_rate, config_.momentum, config_.nesterov};
  }
};

class Adam final : public KernelOptimizer<Adam> {
 public:
  using Kernel = AdamKernel;
  explicit Adam(const OptimizerConfig& config) : KernelOptimizer(config) {}

  std::vector<std::string> SlotNames() const override {
    if (config_.amsgrad) return {"m", "v", "vhat"};
    return {"m", "v"};
  }
  size_t NumSlots() const { return config_.amsgrad ? 3 : 2; }
  Kernel MakeKernel(int64_t iterations, double learning_rate) const {
    const double t = static_cast<double>(iterations) + 1.0;
    const double alpha = learning_rate *
                         std::sqrt(1.0 - std::pow(config_.beta_2, t)) /
                         (1.0 - std::pow(config_.beta_1, t));
    return Kernel{alpha, 1.0 - config_.beta_1, 1.0 - config_.beta_2,
                  config_.epsilon, config_.amsgrad};
  }
};

class Adagrad final : public KernelOptimizer<Adagrad> {
 public:
  using Kernel = AdagradKernel;
  explicit Adagrad(const OptimizerConfig& config) : KernelOptimizer(config) {}

  std::vector<std::string> SlotNames() const override {
    return {"accumulator"};
  }
  double SlotInitialValue(size_t index) const override {
    return index == 0 ? config_.initial_accumulator_value : 0.0;
  }
  size_t NumSlots() const { return 1; }
  Kernel MakeKernel(int64_t /*iterations*/, double learning_rate) const {
    return Kernel{learning_rate, config_.epsilon};
  }
};

class Rmsprop final : public KernelOptimizer<Rmsprop> {
 public:
  using Kernel = RmspropKernel;
  explicit Rmsprop(const OptimizerConfig& config) : KernelOptimizer(config) {}

  std::vector<std::string> SlotNames() const override {
    std::vector<std::string> names = {"velocity"};
    if (config_.momentum > 0) names.push_back("momentum");
    if (config_.centered) names.push_back("average_gradient");
    return names;
  }
  size_t NumSlots() const {
    return 1 + (config_.momentum > 0 ? 1 : 0) + (config_.centered ? 1 : 0);
  }
  Kernel MakeKernel(int64_t /*iterations*/, double learning_rate) const {
    const size_t momentum_slot = 1;
    const size_t average_slot = config_.momentum > 0 ? 2 : 1;
    return Kernel{learning_rate,   config_.rho,      config_.momentum,
                  config_.epsilon, config_.centered, momentum_slot,
                  average_slot};
  }
};

class AssignAdd final : public KernelOptimizer<AssignAdd> {
 public:
  using Kernel = AssignAddKernel;
  explicit AssignAdd(const OptimizerConfig& config) : KernelOptimizer(config) {}

  std::vector<std::string> SlotNames() const override { return {}; }
  size_t NumSlots() const { return 0; }
  Kernel MakeKernel(int64_t /*iterations*/, double /*learning_rate*/) const {
    return Kernel{};
  }
};

struct AssignKernel {
  static constexpr bool kIntegers = true;

  template <typename T>
  void operator()(T* w, const SlotPtrs<T>& /*s*/, const T* g,
                  Eigen::Index n) const {
    std::copy(g, g + n, w);
  }
};

class Assign final : public KernelOptimizer<Assign> {
 public:
  using Kernel = AssignKernel;
  explicit Assign(const OptimizerConfig& config) : KernelOptimizer(config) {}

  std::vector<std::string> SlotNames() const override { return {}; }
  size_t NumSlots() const { return 0; }
  Kernel MakeKernel(int64_t /*iterations*/, double /*learning_rate*/) const {
    return Kernel{};
  }
};

// ---------------------------------------------------------------------------
// Config validation.

// `lo <= value <= hi`, or `lo <= value < hi` when hi_open.
absl::Status CheckRange(OptimizerType type, absl::string_view field,
                        double value, double lo, double hi, bool hi_open) {
  const bool ok = value >= lo && (hi_open ? value < hi : value <= hi);
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(OptimizerTypeName(type), ": ", field, " must be in [", lo,
                   ", ", hi, hi_open ? ")" : "]", ", got ", value));
}

absl::Status CheckNonNegative(OptimizerType type, absl::string_view field,
                              double value) {
  if (value >= 0 && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(OptimizerTypeName(type), ": ", field,
                   " must be finite and >= 0, got ", value));
}

// learning_rate <= 0 selects `default_lr`.
absl::Status ResolveLearningRate(double default_lr, OptimizerConfig* config) {
  if (!std::isfinite(config->learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        OptimizerTypeName(config->type),
        ": learning_rate must be finite (<= 0 selects the default ", default_lr,
        "), got ", config->learning_rate));
  }
  if (config->learning_rate <= 0) config->learning_rate = default_lr;
  return absl::OkStatus();
}

constexpr char kAllowedOptimizers[] =
    "sgd, adam, adagrad, rmsprop, assign_add, assign";

}  // namespace

absl::StatusOr<OptimizerType> ParseOptimizerType(absl::string_view name) {
  static constexpr OptimizerType kAll[] = {
      OptimizerType::kSgd, OptimizerType::kAdam, OptimizerType::kAdagrad,
      OptimizerType::kRmsprop, OptimizerType::kAssignAdd,
      OptimizerType::kAssign};
  for (OptimizerType type : kAll) {
    if (name == OptimizerTypeName(type)) return type;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown optimizer '", name, "'; allowed: ", kAllowedOptimizers));
}

std::string OptimizerTypeName(OptimizerType type) {
  switch (type) {
    case OptimizerType::kSgd:
      return "sgd";
    case OptimizerType::kAdam:
      return "adam";
    case OptimizerType::kAdagrad:
      return "adagrad";
    case OptimizerType::kRmsprop:
      return "rmsprop";
    case OptimizerType::kAssignAdd:
      return "assign_add";
    case OptimizerType::kAssign:
      return "assign";
  }
  return absl::StrCat("unknown(", static_cast<int>(type), ")");
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const OptimizerConfig& config) {
  OptimizerConfig c = config;
  const OptimizerType t = c.type;
  switch (t) {
    case OptimizerType::kSgd:
      STRATA_RETURN_IF_ERROR(ResolveLearningRate(0.01, &c));
      STRATA_RETURN_IF_ERROR(
          CheckRange(t, "momentum", c.momentum, 0, 1, false));
      return std::unique_ptr<Optimizer>(std::make_unique<Sgd>(c));
    case OptimizerType::kAdam:
      STRATA_RETURN_IF_ERROR(ResolveLearningRate(0.001, &c));
      STRATA_RETURN_IF_ERROR(CheckRange(t, "beta_1", c.beta_1, 0, 1, true));
      STRATA_RETURN_IF_ERROR(CheckRange(t, "beta_2", c.beta_2, 0, 1, true));
      STRATA_RETURN_IF_ERROR(CheckNonNegative(t, "epsilon", c.epsilon));
      return std::unique_ptr<Optimizer>(std::make_unique<Adam>(c));
    case OptimizerType::kAdagrad:
      STRATA_RETURN_IF_ERROR(ResolveLearningRate(0.001, &c));
      STRATA_RETURN_IF_ERROR(CheckNonNegative(t, "initial_accumulator_value",
                                              c.initial_accumulator_value));
      STRATA_RETURN_IF_ERROR(CheckNonNegative(t, "epsilon", c.epsilon));
      return std::unique_ptr<Optimizer>(std::make_unique<Adagrad>(c));
    case OptimizerType::kRmsprop:
      STRATA_RETURN_IF_ERROR(ResolveLearningRate(0.001, &c));
      STRATA_RETURN_IF_ERROR(CheckRange(t, "rho", c.rho, 0, 1, true));
      STRATA_RETURN_IF_ERROR(
          CheckRange(t, "momentum", c.momentum, 0, 1, false));
      STRATA_RETURN_IF_ERROR(CheckNonNegative(t, "epsilon", c.epsilon));
      return std::unique_ptr<Optimizer>(std::make_unique<Rmsprop>(c));
    case OptimizerType::kAssignAdd:
      // The learning rate and every other hyper-parameter are ignored.
      return std::unique_ptr<Optimizer>(std::make_unique<AssignAdd>(c));
    case OptimizerType::kAssign:
      return std::unique_ptr<Optimizer>(std::make_unique<Assign>(c));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer type ", static_cast<int>(t),
                   "; allowed: ", kAllowedOptimizers));
}

double Optimizer::SlotInitialValue(size_t /*index*/) const { return 0.0; }

absl::Status Optimizer::ApplyDenseScaled(DType dtype, int64_t iterations,
                                         double lr_scale, void* var,
                                         absl::Span<void* const> slots,
                                         const void* grad, int64_t n) const {
  if (lr_scale != 1.0) {
    return absl::UnimplementedError(absl::StrCat(
        "optimizer ", OptimizerTypeName(config_.type),
        " cannot scale its learning rate"));
  }
  return ApplyDense(dtype, iterations, var, slots, grad, n);
}

// Fallback for optimizers without their own sparse path: one dense apply per
// named row. (The optimizers above override it with a single dispatch.)
absl::Status Optimizer::ApplySparse(DType dtype, int64_t iterations, void* var,
                                    absl::Span<void* const> slots,
                                    absl::Span<const int64_t> ids,
                                    const void* grad, int64_t row_width) const {
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  if (elem == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported dtype ", DTypeName(dtype)));
  }
  if (row_width < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("row width must be >= 0, got ", row_width));
  }
  if (ids.empty() || row_width == 0) return absl::OkStatus();
  if (var == nullptr || grad == nullptr ||
      std::find(slots.begin(), slots.end(), nullptr) != slots.end()) {
    return absl::InvalidArgumentError(
        "variable, slot or gradient buffer is null");
  }
  const int64_t row_bytes = row_width * elem;
  std::vector<void*> row_slots(slots.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("row id ", ids[i], " at position ", i, " is negative"));
    }
    const int64_t offset = ids[i] * row_bytes;
    for (size_t k = 0; k < slots.size(); ++k) {
      row_slots[k] = static_cast<char*>(slots[k]) + offset;
    }
    STRATA_RETURN_IF_ERROR(ApplyDense(
        dtype, iterations, static_cast<char*>(var) + offset, row_slots,
        static_cast<const char*>(grad) + static_cast<int64_t>(i) * row_bytes,
        row_width));
  }
  return absl::OkStatus();
}

}  // namespace strata

#include "kernels/initializers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace strata {
namespace {

constexpr char kAllowedNames[] =
    "zeros, ones, constant, random_uniform, random_normal, truncated_normal, "
    "glorot_uniform, glorot_normal, he_normal, he_uniform";

// stddev of a standard normal truncated to [-2, 2]; Keras divides by it so the
// truncated distribution keeps the intended variance.
constexpr double kTruncatedNormalStddev = 0.87962566103423978;
constexpr double kTwoPi = 6.283185307179586476925286766559;
// Re-draws of truncated_normal before giving up (each accepts with p=0.954,
// so the fallback is never reached in practice; it keeps the loop bounded).
constexpr uint64_t kMaxTruncatedDraws = 64;

// Counter-based generator: every output is a pure function of (key, global
// element index, draw number), so shards can compute any element on their own.
class ElementRng {
 public:
  ElementRng(uint64_t seed, absl::string_view variable)
      : key_(Mix64(Mix64(seed) ^ HashName(variable))) {}

  uint64_t Bits(uint64_t index, uint64_t draw) const {
    return Mix64(Mix64(key_ + index * 0x9e3779b97f4a7c15ULL) +
                 draw * 0xd1b54a32d192ed03ULL);
  }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform(uint64_t index, uint64_t draw) const {
    return static_cast<double>(Bits(index, draw) >> 11) * 0x1.0p-53;
  }
  // Standard normal by Box-Muller from draws 2k and 2k+1.
  double Normal(uint64_t index, uint64_t k) const {
    const double u1 = 1.0 - Uniform(index, 2 * k);  // (0, 1]: log is finite
    const double u2 = Uniform(index, 2 * k + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
  }
  // Standard normal truncated to [-2, 2] by re-drawing.
  double TruncatedNormal(uint64_t index) const {
    for (uint64_t k = 0; k < kMaxTruncatedDraws; ++k) {
      const double z = Normal(index, k);
      if (std::fabs(z) <= 2.0) return z;
    }
    return 0.0;
  }

 private:
  uint64_t key_;
};

// What each element is drawn from, with the parameters already resolved.
enum class Distribution { kConstant, kUniform, kNormal, kTruncatedNormal };

struct Resolved {
  Distribution distribution = Distribution::kConstant;
  double a = 0.0;  // constant value, uniform low, or normal mean
  double b = 0.0;  // uniform high or normal stddev
};

template <typename T>
void FillFloating(const Resolved& r, const ElementRng& rng, uint64_t base,
                  T* out, int64_t n) {
  switch (r.distribution) {
    case Distribution::kConstant: {
      const T v = static_cast<T>(r.a);
      for (int64_t i = 0; i < n; ++i) out[i] = v;
      return;
    }
    case Distribution::kUniform: {
      const double range = r.b - r.a;
      for (int64_t i = 0; i < n; ++i) {
        out[i] = static_cast<T>(r.a + range * rng.Uniform(base + i, 0));
      }
      return;
    }
    case Distribution::kNormal:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = static_cast<T>(r.a + r.b * rng.Normal(base + i, 0));
      }
      return;
    case Distribution::kTruncatedNormal:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = static_cast<T>(r.a + r.b * rng.TruncatedNormal(base + i));
      }
      return;
  }
}

// Integers uniform in [lo, hi), lo < hi.
template <typename T>
void FillIntegerUniform(int64_t lo, int64_t hi, const ElementRng& rng,
                        uint64_t base, T* out, int64_t n) {
  const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  for (int64_t i = 0; i < n; ++i) {
    // Multiply-shift maps 64 random bits onto [0, range) with bias < 2^-64 *
    // range, far below anything observable.
    const uint64_t offset = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(rng.Bits(base + i, 0)) * range) >> 64);
    out[i] = static_cast<T>(
        static_cast<int64_t>(static_cast<uint64_t>(lo) + offset));
  }
}

template <typename T>
void FillIntegerConstant(T value, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = value;
}

// True when the integral double `v` converts to T without overflow: v lies in
// [-2^(bits-1), 2^(bits-1)), both bounds exact doubles.
template <typename T>
bool FitsInteger(double v) {
  constexpr double kLimit =
      static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
  return v >= -kLimit && v < kLimit;
}

absl::Status CheckFiniteParam(const InitializerSpec& spec,
                              absl::string_view field, double value) {
  if (std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(InitializerTypeName(spec.type), ": ", field,
                   " must be finite, got ", value));
}

absl::Status CheckStddev(const InitializerSpec& spec) {
  STRATA_RETURN_IF_ERROR(CheckFiniteParam(spec, "mean", spec.mean));
  STRATA_RETURN_IF_ERROR(CheckFiniteParam(spec, "stddev", spec.stddev));
  if (spec.stddev < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(InitializerTypeName(spec.type),
                     ": stddev must be >= 0, got ", spec.stddev));
  }
  return absl::OkStatus();
}

// Checks that the shard [row_offset, row_offset + out_elements / row_width)
// lies inside `full_shape` and returns the global index of its first element.
absl::StatusOr<uint64_t> ShardBase(const Shape& full_shape, int64_t row_offset,
                                   const void* out, int64_t out_elements) {
  int64_t total = 1;
  for (size_t i = 0; i < full_shape.size(); ++i) {
    const int64_t d = full_shape[i];
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("full shape ", ShapeString(full_shape),
                       " has a negative dimension ", i));
    }
    if (d != 0 && total > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("full shape ", ShapeString(full_shape),
                       " has more than 2^63 elements"));
    }
    total *= d;
  }
  if (out_elements < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("out_elements must be >= 0, got ", out_elements));
  }
  if (out_elements > 0 && out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output buffer is null but out_elements is ", out_elements));
  }
  if (full_shape.empty()) {  // a scalar: one element, no axis to shard
    if (row_offset != 0 || out_elements != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a scalar variable must be filled whole (row_offset 0, 1 element); "
          "got row_offset ",
          row_offset, " and ", out_elements, " elements"));
    }
    return 0;
  }
  const int64_t rows = full_shape[0];
  const int64_t row_width = full_shape[0] == 0 ? 0 : total / full_shape[0];
  if (row_offset < 0 || row_offset > rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("row_offset ", row_offset, " is outside [0, ", rows,
                     "] for full shape ", ShapeString(full_shape)));
  }
  if (row_width == 0) {
    // Rows are empty (or there are none): any shard holds zero elements. The
    // row width is unknown when rows == 0, so trailing zeros are not checked.
    if (out_elements != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "full shape ", ShapeString(full_shape), " has no elements but ",
          out_elements, " were requested"));
    }
    return 0;
  }
  if (out_elements % row_width != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "out_elements ", out_elements, " is not a multiple of the row width ",
        row_width, " of full shape ", ShapeString(full_shape)));
  }
  const int64_t num_rows = out_elements / row_width;
  if (num_rows > rows - row_offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard rows [", row_offset, ", ", row_offset + num_rows,
                     ") exceed the ", rows, " rows of full shape ",
                     ShapeString(full_shape)));
  }
  return static_cast<uint64_t>(row_offset) * static_cast<uint64_t>(row_width);
}

// Maps the spec to a distribution for a floating dtype.
absl::StatusOr<Resolved> ResolveFloating(const InitializerSpec& spec,
                                         const Shape& full_shape) {
  Resolved r;
  double fan_in = 0;
  double fan_out = 0;
  ComputeFans(full_shape, &fan_in, &fan_out);
  switch (spec.type) {
    case InitializerType::kZeros:
      r.a = 0.0;
      return r;
    case InitializerType::kOnes:
      r.a = 1.0;
      return r;
    case InitializerType::kConstant:
      STRATA_RETURN_IF_ERROR(CheckFiniteParam(spec, "value", spec.value));
      r.a = spec.value;
      return r;
    case InitializerType::kRandomUniform:
      STRATA_RETURN_IF_ERROR(CheckFiniteParam(spec, "minval", spec.minval));
      STRATA_RETURN_IF_ERROR(CheckFiniteParam(spec, "maxval", spec.maxval));
      if (!(spec.minval < spec.maxval)) {
        return absl::InvalidArgumentError(
            absl::StrCat("random_uniform: minval (", spec.minval,
                         ") must be < maxval (", spec.maxval, ")"));
      }
      r.distribution = Distribution::kUniform;
      r.a = spec.minval;
      r.b = spec.maxval;
      return r;
    case InitializerType::kRandomNormal:
      STRATA_RETURN_IF_ERROR(CheckStddev(spec));
      r.distribution = Distribution::kNormal;
      r.a = spec.mean;
      r.b = spec.stddev;
      return r;
    case InitializerType::kTruncatedNormal:
      STRATA_RETURN_IF_ERROR(CheckStddev(spec));
      r.distribution = Distribution::kTruncatedNormal;
      r.a = spec.mean;
      r.b = spec.stddev;
      return r;
    // VarianceScaling: scale / max(1, fan), as Keras guards empty shapes.
    case InitializerType::kGlorotUniform: {
      const double limit =
          std::sqrt(3.0 / std::max(1.0, (fan_in + fan_out) / 2.0));
      r.distribution = Distribution::kUniform;
      r.a = -limit;
      r.b = limit;
      return r;
    }
    case InitializerType::kGlorotNormal:
      r.distribution = Distribution::kTruncatedNormal;
      r.b = std::sqrt(1.0 / std::max(1.0, (fan_in + fan_out) / 2.0)) /
            kTruncatedNormalStddev;
      return r;
    case InitializerType::kHeNormal:
      r.distribution = Distribution::kTruncatedNormal;
      r.b = std::sqrt(2.0 / std::max(1.0, fan_in)) / kTruncatedNormalStddev;
      return r;
    case InitializerType::kHeUniform: {
      const double limit = std::sqrt(6.0 / std::max(1.0, fan_in));
      r.distribution = Distribution::kUniform;
      r.a = -limit;
      r.b = limit;
      return r;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown initializer type ", static_cast<int>(spec.type)));
}

template <typename T>
absl::Status FillInteger(const InitializerSpec& spec, DType dtype,
                         const ElementRng& rng, uint64_t base, T* out,
                         int64_t n) {
  switch (spec.type) {
    case InitializerType::kZeros:
      FillIntegerConstant<T>(0, out, n);
      return absl::OkStatus();
    case InitializerType::kOnes:
      FillIntegerConstant<T>(1, out, n);
      return absl::OkStatus();
    case InitializerType::kConstant: {
      const double v = std::trunc(spec.value);
      if (!FitsInteger<T>(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("constant: value ", spec.value, " does not fit in ",
                         DTypeName(dtype)));
      }
      FillIntegerConstant<T>(static_cast<T>(v), out, n);
      return absl::OkStatus();
    }
    case InitializerType::kRandomUniform: {
      // Bounds are truncated toward zero; the range is [minval, maxval).
      const double lo = std::trunc(spec.minval);
      const double hi = std::trunc(spec.maxval);
      if (!FitsInteger<T>(lo) || !FitsInteger<T>(hi)) {
        return absl::InvalidArgumentError(
            absl::StrCat("random_uniform: minval ", spec.minval, " and maxval ",
                         spec.maxval, " must fit in ", DTypeName(dtype)));
      }
      if (!(lo < hi)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "random_uniform on ", DTypeName(dtype),
            ": minval must be < maxval after truncation to integers; got "
            "minval ",
            spec.minval, ", maxval ", spec.maxval));
      }
      FillIntegerUniform<T>(static_cast<int64_t>(lo), static_cast<int64_t>(hi),
                            rng, base, out, n);
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "initializer ", InitializerTypeName(spec.type),
          " does not apply to dtype ", DTypeName(dtype),
          "; integer variables allow zeros, ones, constant, random_uniform"));
  }
}

}  // namespace

absl::StatusOr<InitializerType> ParseInitializerType(absl::string_view name) {
  static constexpr InitializerType kAll[] = {
      InitializerType::kZeros,         InitializerType::kOnes,
      InitializerType::kConstant,      InitializerType::kRandomUniform,
      InitializerType::kRandomNormal,  InitializerType::kTruncatedNormal,
      InitializerType::kGlorotUniform, InitializerType::kGlorotNormal,
      InitializerType::kHeNormal,      InitializerType::kHeUniform,
  };
  for (InitializerType type : kAll) {
    if (name == InitializerTypeName(type)) return type;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown initializer '", name, "'; allowed: ", kAllowedNames));
}

std::string InitializerTypeName(InitializerType type) {
  switch (type) {
    case InitializerType::kZeros:
      return "zeros";
    case InitializerType::kOnes:
      return "ones";
    case InitializerType::kConstant:
      return "constant";
    case InitializerType::kRandomUniform:
      return "random_uniform";
    case InitializerType::kRandomNormal:
      return "random_normal";
    case InitializerType::kTruncatedNormal:
      return "truncated_normal";
    case InitializerType::kGlorotUniform:
      return "glorot_uniform";
    case InitializerType::kGlorotNormal:
      return "glorot_normal";
    case InitializerType::kHeNormal:
      return "he_normal";
    case InitializerType::kHeUniform:
      return "he_uniform";
  }
  return absl::StrCat("unknown(", static_cast<int>(type), ")");
}

void ComputeFans(const Shape& full_shape, double* fan_in, double* fan_out) {
  const size_t rank = full_shape.size();
  if (rank == 0) {
    *fan_in = *fan_out = 1.0;
  } else if (rank == 1) {
    *fan_in = *fan_out = static_cast<double>(full_shape[0]);
  } else if (rank == 2) {
    *fan_in = static_cast<double>(full_shape[0]);
    *fan_out = static_cast<double>(full_shape[1]);
  } else {
    double receptive = 1.0;
    for (size_t i = 0; i + 2 < rank; ++i) {
      receptive *= static_cast<double>(full_shape[i]);
    }
    *fan_in = static_cast<double>(full_shape[rank - 2]) * receptive;
    *fan_out = static_cast<double>(full_shape[rank - 1]) * receptive;
  }
}

absl::Status FillInitializer(const InitializerSpec& spec,
                             absl::string_view variable, DType dtype,
                             const Shape& full_shape, int64_t row_offset,
                             void* out, int64_t out_elements) {
  STRATA_ASSIGN_OR_RETURN(const uint64_t base,
                          ShardBase(full_shape, row_offset, out, out_elements));
  const ElementRng rng(spec.seed, variable);
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64: {
      STRATA_ASSIGN_OR_RETURN(const Resolved r,
                              ResolveFloating(spec, full_shape));
      if (dtype == DType::kFloat32) {
        FillFloating(r, rng, base, static_cast<float*>(out), out_elements);
      } else {
        FillFloating(r, rng, base, static_cast<double*>(out), out_elements);
      }
      return absl::OkStatus();
    }
    case DType::kInt32:
      return FillInteger(spec, dtype, rng, base, static_cast<int32_t*>(out),
                         out_elements);
    case DType::kInt64:
      return FillInteger(spec, dtype, rng, base, static_cast<int64_t*>(out),
                         out_elements);
    case DType::kInvalid:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot initialize a variable of dtype ", DTypeName(dtype),
                   "; allowed: float32, float64, int32, int64"));
}

}  // namespace strata

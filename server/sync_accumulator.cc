#include "server/sync_accumulator.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "server/variable_internal.h"

namespace strata {
namespace variable_internal {
namespace {

// Calls fn(T{}) with T the C++ type of `dtype` (nothing for kInvalid).
template <typename Fn>
void VisitDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      return fn(float{});
    case DType::kFloat64:
      return fn(double{});
    case DType::kInt32:
      return fn(int32_t{});
    case DType::kInt64:
      return fn(int64_t{});
    case DType::kInvalid:
      return;
  }
}

}  // namespace

void AddInto(DType dtype, char* dst, const char* src, int64_t n) {
  VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* d = reinterpret_cast<T*>(dst);
    const T* s = reinterpret_cast<const T*>(src);
    if constexpr (std::is_integral_v<T>) {
      // Wraps on overflow, as assign_add does, without signed-overflow UB.
      using U = std::make_unsigned_t<T>;
      for (int64_t i = 0; i < n; ++i) {
        d[i] = static_cast<T>(static_cast<U>(d[i]) + static_cast<U>(s[i]));
      }
    } else {
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
    }
  });
}

void DivideBy(DType dtype, char* buf, int64_t n, int64_t divisor) {
  if (divisor == 1) return;
  VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = reinterpret_cast<T*>(buf);
    for (int64_t i = 0; i < n; ++i) p[i] /= static_cast<T>(divisor);
  });
}

}  // namespace variable_internal

using variable_internal::AddInto;
using variable_internal::Quote;

SyncAccumulator::SyncAccumulator(DType dtype, int64_t num_elements,
                                 int64_t row_width, int num_replicas)
    : dtype_(dtype),
      num_elements_(num_elements),
      row_width_(row_width),
      row_bytes_(row_width * DTypeSize(dtype)),
      num_replicas_(num_replicas) {}

absl::Status SyncAccumulator::Add(const std::string& variable,
                                  int64_t version, const PushMeta& meta,
                                  const char* dense,
                                  absl::Span<const int64_t> ids,
                                  const char* rows) {
  if (meta.step < version) {
    return absl::AbortedError(absl::StrCat(
        "variable ", Quote(variable), ": gradient for step ", meta.step,
        " is stale; the variable is at version ", version,
        " (steps below it were applied)"));
  }
  if (meta.step >= version + kMaxStepsAhead) {
    return absl::FailedPreconditionError(absl::StrCat(
        "variable ", Quote(variable), ": gradient for step ", meta.step,
        " is more than ", kMaxStepsAhead, " steps ahead of version ",
        version));
  }
  auto found = steps_.find(meta.step);
  if (found != steps_.end() && meta.group < found->second.group) {
    return absl::AbortedError(absl::StrCat(
        "variable ", Quote(variable), ": gradient for step ", meta.step,
        " comes from group ", meta.group, ", older than group ",
        found->second.group, " that is running the step"));
  }
  Step& acc = steps_[meta.step];
  if (acc.sum != nullptr && meta.group > acc.group) {
    // A newer group re-runs the step: the older group's partial sum (a
    // member died before contributing) is dropped.
    acc = Step();
  }
  acc.group = meta.group;
  acc.group_size = meta.group_size;
  if (acc.sum == nullptr) {
    acc.sum = Buffer::Allocate(num_elements_ * DTypeSize(dtype_));
  }
  if (dense != nullptr) {
    AddInto(dtype_, acc.sum->data(), dense, num_elements_);
    acc.dense = true;
  } else {
    for (size_t i = 0; i < ids.size(); ++i) {
      AddInto(dtype_, acc.sum->data() + ids[i] * row_bytes_,
              rows + i * row_bytes_, row_width_);
      acc.rows.insert(ids[i]);
    }
  }
  acc.contributors.insert({meta.job, meta.worker});
  return absl::OkStatus();
}

std::optional<SyncAccumulator::Averaged> SyncAccumulator::CompleteStep(
    int64_t step) {
  auto it = steps_.find(step);
  if (it == steps_.end()) return std::nullopt;
  Step& done = it->second;
  const int needed = done.group_size > 0 ? done.group_size : num_replicas_;
  if (static_cast<int>(done.contributors.size()) < needed) return std::nullopt;
  variable_internal::DivideBy(dtype_, done.sum->data(), num_elements_, needed);
  Averaged out;
  if (done.dense) {
    out.dense = done.sum->data();
    return out;
  }
  out.rows.assign(done.rows.begin(), done.rows.end());
  out.packed = Buffer::Allocate(out.rows.size() * row_bytes_, false);
  for (size_t i = 0; i < out.rows.size(); ++i) {
    std::memcpy(out.packed->data() + i * row_bytes_,
                done.sum->data() + out.rows[i] * row_bytes_, row_bytes_);
  }
  return out;
}

nlohmann::json SyncAccumulator::Export(
    std::vector<std::shared_ptr<const Buffer>>* sums) const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [step, acc] : steps_) {
    nlohmann::json contributors = nlohmann::json::array();
    for (const auto& [job, worker] : acc.contributors) {
      contributors.push_back({job, worker});
    }
    out.push_back({{"step", step},
                   {"rows", std::vector<int64_t>(acc.rows.begin(),
                                                 acc.rows.end())},
                   {"dense", acc.dense},
                   {"contributors", contributors},
                   {"group", acc.group},
                   {"group_size", acc.group_size}});
    sums->push_back(acc.sum);
  }
  return out;
}

absl::Status SyncAccumulator::Import(const nlohmann::json& steps,
                                     const std::vector<std::string>& sums) {
  const size_t bytes = num_elements_ * DTypeSize(dtype_);
  if (!steps.is_array() || steps.size() != sums.size()) {
    return absl::DataLossError("held sync steps: malformed transfer");
  }
  std::map<int64_t, Step> imported;
  try {
    for (size_t i = 0; i < steps.size(); ++i) {
      const nlohmann::json& s = steps[i];
      if (sums[i].size() != bytes) {
        return absl::DataLossError(absl::StrCat(
            "held sync step ", s.at("step").get<int64_t>(), ": sum has ",
            sums[i].size(), " bytes, expected ", bytes));
      }
      Step acc;
      acc.sum = Buffer::Allocate(bytes, false);
      std::memcpy(acc.sum->data(), sums[i].data(), bytes);
      for (int64_t r : s.at("rows")) acc.rows.insert(r);
      acc.dense = s.at("dense").get<bool>();
      for (const auto& c : s.at("contributors")) {
        acc.contributors.insert(
            {c.at(0).get<std::string>(), c.at(1).get<int64_t>()});
      }
      acc.group = s.at("group").get<int64_t>();
      acc.group_size = s.at("group_size").get<int32_t>();
      imported[s.at("step").get<int64_t>()] = std::move(acc);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(
        absl::StrCat("held sync steps: malformed transfer: ", e.what()));
  }
  steps_.swap(imported);
  return absl::OkStatus();
}

std::set<std::tuple<std::string, int64_t, int64_t>>
SyncAccumulator::HeldPushes() const {
  std::set<std::tuple<std::string, int64_t, int64_t>> held;
  for (const auto& [step, acc] : steps_) {
    for (const auto& [job, worker] : acc.contributors) {
      held.insert({job, worker, step});
    }
  }
  return held;
}

}  // namespace strata

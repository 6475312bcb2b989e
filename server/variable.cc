#include "server/variable.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"

// ThreadSanitizer does not model std::atomic_thread_fence (gcc warns that it
// is unsupported), so UnshareLocked's fence cannot order anything for it:
// its builds copy on every write instead, which needs no fence.
#if defined(__SANITIZE_THREAD__)
#define STRATA_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRATA_TSAN_BUILD 1
#endif
#endif
#ifndef STRATA_TSAN_BUILD
#define STRATA_TSAN_BUILD 0
#endif

namespace strata {
namespace {

constexpr bool kAlwaysCopyOnWrite = STRATA_TSAN_BUILD;

// A sync push may run at most this many steps ahead of the applied version.
constexpr int64_t kMaxStepsAhead = 64;

template <typename T>
void AddT(char* dst, const char* src, int64_t n) {
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
}

void AddInto(DType dtype, char* dst, const char* src, int64_t n) {
  switch (dtype) {
    case DType::kFloat32:
      return AddT<float>(dst, src, n);
    case DType::kFloat64:
      return AddT<double>(dst, src, n);
    case DType::kInt32:
      return AddT<int32_t>(dst, src, n);
    case DType::kInt64:
      return AddT<int64_t>(dst, src, n);
    case DType::kInvalid:
      return;
  }
}

template <typename T>
void ScaleT(char* buf, int64_t n, int64_t divisor) {
  T* p = reinterpret_cast<T*>(buf);
  for (int64_t i = 0; i < n; ++i) p[i] /= static_cast<T>(divisor);
}

void DivideBy(DType dtype, char* buf, int64_t n, int64_t divisor) {
  if (divisor == 1) return;
  switch (dtype) {
    case DType::kFloat32:
      return ScaleT<float>(buf, n, divisor);
    case DType::kFloat64:
      return ScaleT<double>(buf, n, divisor);
    case DType::kInt32:
      return ScaleT<int32_t>(buf, n, divisor);
    case DType::kInt64:
      return ScaleT<int64_t>(buf, n, divisor);
    case DType::kInvalid:
      return;
  }
}

std::string Quote(const std::string& name) { return absl::StrCat("'", name, "'"); }

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

// Reads the non-negative integer `json[key]` (or `json` itself when `key`
// is null) of a checkpoint's metadata into `out`; an absent key leaves
// `out` as it is. Errors: DATA_LOSS naming `where` and the key.
absl::Status MetaInt(const nlohmann::json& json, const char* key,
                     const std::string& where, int64_t* out) {
  const nlohmann::json* value = &json;
  if (key != nullptr) {
    auto it = json.find(key);
    if (it == json.end()) return absl::OkStatus();
    value = &*it;
  }
  if (!value->is_number_integer() || value->get<int64_t>() < 0) {
    return absl::DataLossError(
        absl::StrCat(where, ": ", key != nullptr ? key : "a clock",
                     " is not a non-negative integer"));
  }
  *out = value->get<int64_t>();
  return absl::OkStatus();
}

}  // namespace

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

Variable::Variable(const v1::VariableSpec& spec, DType dtype, Shape shape,
                   std::unique_ptr<Optimizer> optimizer, const PsDevice& device)
    : spec_(spec),
      dtype_(dtype),
      shape_(std::move(shape)),
      num_elements_(NumElements(shape_)),
      byte_size_(num_elements_ * DTypeSize(dtype)),
      row_width_(shape_.empty() || shape_[0] == 0
                     ? 1
                     : num_elements_ / shape_[0]),
      optimizer_(std::move(optimizer)),
      mode_(spec.update_mode().kind()),
      num_replicas_(spec.update_mode().num_replicas()),
      staleness_(spec.update_mode().staleness()),
      device_(device) {}

namespace {

// The sequence number at the start of a mirror (see kMirrorGone).
std::atomic<uint64_t>* MirrorSeq(char* header) {
  return reinterpret_cast<std::atomic<uint64_t>*>(header);
}

}  // namespace

Variable::~Variable() {
  // Readers of a mirror of this variable pull instead from now on.
  absl::MutexLock lock(&mu_);
  RetireMirrorsLocked();
}

void Variable::RetireMirrors() {
  absl::MutexLock lock(&mu_);
  RetireMirrorsLocked();
}

void Variable::RetireMirrorsLocked() {
  for (const Mirror& m : mirrors_) {
    if (auto region = m.region.lock()) {
      MirrorSeq(region->data() + m.offset)
          ->store(kMirrorGone, std::memory_order_release);
    }
  }
  mirrors_.clear();
}

int Variable::LiveMirrorsLocked(const MappedRegion* region,
                                uint64_t offset) const {
  int live = 0;
  for (const Mirror& m : mirrors_) {
    auto r = m.region.lock();
    live += r != nullptr && !(r.get() == region && m.offset == offset);
  }
  return live;
}

absl::Status Variable::CheckMirror(const MappedRegion& region,
                                   uint64_t offset) const {
  if (offset % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mirror of variable ", Quote(name()), ": offset ", offset,
        " is not a multiple of 8"));
  }
  STRATA_RETURN_IF_ERROR(region.CheckRange(
      offset, kMirrorHeaderBytes + byte_size_,
      absl::StrCat("mirror of variable ", Quote(name())).c_str()));
  absl::ReaderMutexLock lock(&mu_);
  const int live = LiveMirrorsLocked(&region, offset);
  if (live >= kMaxMirrorsPerVariable) {
    return absl::ResourceExhaustedError(
        absl::StrCat("variable ", Quote(name()), " already has ", live,
                     " mirrors (at most ", kMaxMirrorsPerVariable, ")"));
  }
  return absl::OkStatus();
}

absl::Status Variable::AddMirror(const std::shared_ptr<MappedRegion>& region,
                                 uint64_t offset) {
  STRATA_RETURN_IF_ERROR(CheckMirror(*region, offset));
  absl::MutexLock lock(&mu_);
  // Forget mirrors of dropped regions, and one at the same place.
  mirrors_.erase(std::remove_if(mirrors_.begin(), mirrors_.end(),
                                [&](const Mirror& m) {
                                  auto r = m.region.lock();
                                  return r == nullptr ||
                                         (r == region && m.offset == offset);
                                }),
                 mirrors_.end());
  if (static_cast<int>(mirrors_.size()) >= kMaxMirrorsPerVariable) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "variable ", Quote(name()), " already has ", mirrors_.size(),
        " mirrors (at most ", kMaxMirrorsPerVariable, ")"));
  }
  mirrors_.push_back(Mirror{region, offset, -1});
  WriteMirrorsLocked();
  return absl::OkStatus();
}

void Variable::WriteMirrorsLocked() {
  for (Mirror& m : mirrors_) {
    if (m.changes == changes_) continue;
    std::shared_ptr<MappedRegion> region = m.region.lock();
    if (region == nullptr) continue;
    char* header = region->data() + m.offset;
    std::atomic<uint64_t>* seq = MirrorSeq(header);
    uint64_t s = seq->load(std::memory_order_relaxed);
    // The client may have written anything here: restart from an even
    // number below the sentinel.
    if (s == kMirrorGone || s % 2 != 0) s = 0;
    // An acquire exchange (not a store and a fence, which ThreadSanitizer
    // builds refuse): the writes below cannot move above it.
    seq->exchange(s + 1, std::memory_order_acq_rel);
    std::memcpy(header + 8, &version_, sizeof(version_));
    std::memcpy(header + kMirrorHeaderBytes, value_->data(), byte_size_);
    seq->store(s + 2, std::memory_order_release);
    m.changes = changes_;
  }
}

absl::StatusOr<std::shared_ptr<Variable>> Variable::Create(
    const v1::VariableSpec& spec, uint64_t max_bytes, const PsDevice& device) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Variable> v,
                          CreateOnHost(spec, max_bytes, device));
  if (device.is_cuda()) {
    absl::MutexLock lock(&v->mu_);
    STRATA_RETURN_IF_ERROR(v->AttachDeviceLocked());
  }
  return v;
}

absl::Status Variable::AttachDeviceLocked() {
  const std::string where =
      absl::StrCat("variable ", Quote(name()), ": device ", device_.Name());
  absl::StatusOr<std::unique_ptr<VariableDevice>> state = NewVariableDevice(
      device_, optimizer_->config(), dtype_, num_elements_, row_width_);
  if (!state.ok()) {
    return absl::Status(state.status().code(),
                        absl::StrCat(where, ": ", state.status().message()));
  }
  absl::Status s = (*state)->Init(&value_, slots_);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
  }
  slots_.clear();
  on_device_ = std::move(*state);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Variable>> Variable::CreateOnHost(
    const v1::VariableSpec& spec, uint64_t max_bytes, const PsDevice& device) {
  if (spec.name().empty()) {
    return absl::InvalidArgumentError("variable spec: name is empty");
  }
  const std::string var = absl::StrCat("variable ", Quote(spec.name()));
  STRATA_RETURN_IF_ERROR(CheckSpecNumbersFinite(spec, var));
  auto dtype = DTypeFromProto(spec.dtype());
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(var, ": ", dtype.status().message()));
  }
  Shape shape;
  STRATA_RETURN_IF_ERROR(ValidateSpecShape(spec, *dtype, max_bytes, &shape));

  auto opt_config = OptimizerFromProto(spec.optimizer());
  if (!opt_config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(var, ": optimizer: ", opt_config.status().message()));
  }
  if (!IsFloating(*dtype) && opt_config->type != OptimizerType::kAssignAdd &&
      opt_config->type != OptimizerType::kAssign) {
    return absl::InvalidArgumentError(absl::StrCat(
        var, ": optimizer ", OptimizerTypeName(opt_config->type),
        " needs float32 or float64; ", DTypeName(*dtype),
        " variables allow only assign_add"));
  }
  auto optimizer = Optimizer::Create(*opt_config);
  if (!optimizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(var, ": optimizer: ", optimizer.status().message()));
  }
  const v1::UpdateMode& mode = spec.update_mode();
  switch (mode.kind()) {
    case v1::UpdateMode::ASYNC:
      break;
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
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          var, ": update_mode.kind ", static_cast<int>(mode.kind()),
          " is not one of ASYNC, SYNC, STALENESS"));
  }

  std::shared_ptr<Variable> v(
      new Variable(spec, *dtype, shape, std::move(*optimizer), device));
  auto init = InitializerFromProto(spec.initializer());
  if (!init.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(var, ": initializer: ", init.status().message()));
  }
  auto value = Buffer::Allocate(v->byte_size_, /*zero=*/false);
  Shape full = spec.full_shape_size() == 0
                   ? shape
                   : Shape(spec.full_shape().begin(), spec.full_shape().end());
  const std::string& init_name =
      spec.full_name().empty() ? spec.name() : spec.full_name();
  absl::Status filled =
      FillInitializer(*init, init_name, *dtype, full, spec.row_offset(),
                      value->data(), v->num_elements_);
  if (!filled.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(var, ": initializer: ", filled.message()));
  }
  absl::MutexLock lock(&v->mu_);
  v->value_ = std::move(value);
  std::vector<std::string> slot_names = v->optimizer_->SlotNames();
  for (size_t i = 0; i < slot_names.size(); ++i) {
    auto slot = Buffer::Allocate(v->byte_size_);
    double init_value = v->optimizer_->SlotInitialValue(i);
    if (init_value != 0) {
      InitializerSpec c;
      c.type = InitializerType::kConstant;
      c.value = init_value;
      STRATA_RETURN_IF_ERROR(FillInitializer(c, init_name, *dtype, full,
                                             spec.row_offset(), slot->data(),
                                             v->num_elements_));
    }
    v->slots_.push_back(std::move(slot));
  }
  if (mode.kind() == v1::UpdateMode::STALENESS) {
    v->clocks_.assign(mode.num_replicas(), 0);
  }
  return v;
}

absl::StatusOr<std::shared_ptr<Variable>> Variable::FromCheckpoint(
    const CheckpointVariable& entry, uint64_t max_bytes,
    const PsDevice& device) {
  v1::VariableSpec spec;
  if (!entry.meta.contains("spec") || !entry.meta["spec"].is_string()) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint variable ", Quote(entry.name), " has no spec"));
  }
  auto parsed = google::protobuf::util::JsonStringToMessage(
      entry.meta["spec"].get<std::string>(), &spec);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint variable ",
                                            Quote(entry.name),
                                            ": bad spec: ",
                                            std::string(parsed.message().data(),
                                                        parsed.message().size())));
  }
  if (spec.name() != entry.name) {
    // The store files the variable under entry.name; pushes and pulls find
    // it there and name it by spec.name(): they must agree.
    return absl::DataLossError(absl::StrCat(
        "checkpoint variable ", Quote(entry.name), ": its spec names ",
        Quote(spec.name())));
  }
  // Start from a zero-initialized variable, then install the saved state.
  v1::VariableSpec zero_spec = spec;
  zero_spec.mutable_initializer()->Clear();
  // Built on the host; moved to `device` once the saved state is in.
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Variable> v,
                          CreateOnHost(zero_spec, max_bytes, device));
  if (entry.dtype != v->dtype_ || entry.shape != v->shape_ ||
      entry.value == nullptr || entry.value->size() != v->byte_size_) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint variable ", Quote(entry.name),
        ": stored tensor does not match its spec (", DTypeName(entry.dtype),
        " ", ShapeString(entry.shape), " vs ", DTypeName(v->dtype_), " ",
        ShapeString(v->shape_), ")"));
  }
  std::vector<std::string> slot_names = v->optimizer_->SlotNames();
  if (entry.slots.size() != slot_names.size()) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint variable ", Quote(entry.name), ": has ",
        entry.slots.size(), " optimizer slots, its optimizer needs ",
        slot_names.size()));
  }
  // Keep the full spec (with the initializer) for later comparisons.
  const_cast<v1::VariableSpec&>(v->spec_) = spec;
  absl::MutexLock lock(&v->mu_);
  v->value_ = Buffer::Copy(*entry.value);
  for (size_t i = 0; i < slot_names.size(); ++i) {
    if (entry.slots[i].first != slot_names[i] ||
        entry.slots[i].second->size() != v->byte_size_) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint variable ", Quote(entry.name), ": slot ", i, " is '",
          entry.slots[i].first, "', expected '", slot_names[i], "'"));
    }
    v->slots_[i] = Buffer::Copy(*entry.slots[i].second);
  }
  // The metadata comes from a file: every field is checked before use (a
  // wrong type is DATA_LOSS, never an exception or a read of a missing key).
  const nlohmann::json& m = entry.meta;
  const std::string where = absl::StrCat("checkpoint variable ", Quote(entry.name));
  STRATA_RETURN_IF_ERROR(MetaInt(m, "version", where, &v->version_));
  STRATA_RETURN_IF_ERROR(MetaInt(m, "iterations", where, &v->iterations_));
  if (auto dedup = m.find("dedup"); dedup != m.end() && dedup->is_array()) {
    for (const auto& d : *dedup) {
      if (!d.is_object()) {
        return absl::DataLossError(
            absl::StrCat(where, ": a dedup entry is not an object"));
      }
      DedupWindow w;
      STRATA_RETURN_IF_ERROR(MetaInt(d, "floor", where, &w.floor));
      auto job = d.find("job");
      if (job != d.end() && !job->is_string()) {
        return absl::DataLossError(
            absl::StrCat(where, ": dedup job is not a string"));
      }
      auto worker = d.find("worker");
      if (worker != d.end() && !worker->is_number_integer()) {
        return absl::DataLossError(
            absl::StrCat(where, ": dedup worker is not an integer"));
      }
      if (auto steps = d.find("steps"); steps != d.end()) {
        if (!steps->is_array()) {
          return absl::DataLossError(
              absl::StrCat(where, ": dedup steps is not an array"));
        }
        for (const auto& step : *steps) {
          if (!step.is_number_integer() || step.get<int64_t>() < 0) {
            return absl::DataLossError(absl::StrCat(
                where, ": a dedup step is not a non-negative integer"));
          }
          w.steps.insert(step.get<int64_t>());
        }
      }
      v->dedup_[{job != d.end() ? job->get<std::string>() : std::string(),
                 worker != d.end() ? worker->get<int64_t>() : int64_t{0}}] =
          std::move(w);
    }
  }
  if (auto clocks = m.find("clocks"); clocks != m.end() &&
                                      clocks->is_array() &&
                                      clocks->size() == v->clocks_.size()) {
    for (size_t i = 0; i < v->clocks_.size(); ++i) {
      STRATA_RETURN_IF_ERROR(
          MetaInt((*clocks)[i], nullptr, where, &v->clocks_[i]));
    }
  }
  if (device.is_cuda()) STRATA_RETURN_IF_ERROR(v->AttachDeviceLocked());
  return v;
}

PushMeta PushMetaFromTag(bool has_tag, const v1::PushTag& tag) {
  PushMeta meta{tag.job(),   tag.worker(), tag.step(),      tag.attempt(),
                tag.group(), tag.group_size()};
  meta.tagged = has_tag;
  return meta;
}

absl::Status Variable::CheckPushMeta(const PushMeta& meta) const {
  if (meta.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": step ", meta.step, " is negative"));
  }
  if (meta.step == std::numeric_limits<int64_t>::max()) {
    // step + 1 (the next clock, the window's floor) must not overflow.
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": step ", meta.step, " is out of range"));
  }
  if (mode_ == v1::UpdateMode::ASYNC) return absl::OkStatus();
  if (!meta.tagged) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), " is ", v1::UpdateMode::Kind_Name(mode_),
        ": its pushes need a tag (PushTag.worker and PushTag.step say which "
        "replica and step the gradient belongs to)"));
  }
  if (meta.group_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": group_size ", meta.group_size,
        " is negative"));
  }
  if (mode_ == v1::UpdateMode::SYNC && meta.group_size > 0) {
    if (meta.worker < 0 || meta.worker >= meta.group_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable ", Quote(name()), ": worker ", meta.worker,
          " is outside [0, ", meta.group_size, ") for group ", meta.group,
          " of ", meta.group_size, " replicas"));
    }
    return absl::OkStatus();
  }
  if (meta.worker < 0 || meta.worker >= num_replicas_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": worker ", meta.worker,
        " is outside [0, ", num_replicas_, ") for ",
        v1::UpdateMode::Kind_Name(mode_), " with ", num_replicas_,
        " replicas"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Variable::SeenBefore(const PushMeta& meta) const {
  if (!meta.tagged) return false;
  auto it = dedup_.find(std::make_pair(meta.job, meta.worker));
  if (it == dedup_.end()) return false;
  const DedupWindow& w = it->second;
  if (meta.step < w.floor) {
    return absl::AbortedError(absl::StrCat(
        "variable ", Quote(name()), ": step ", meta.step, " of worker ",
        meta.worker, " is older than the exactly-once window (oldest step "
        "remembered: ", w.floor, "); cannot tell whether it was applied"));
  }
  return w.steps.count(meta.step) > 0;
}

void Variable::RecordPushLocked(const PushMeta& meta) {
  if (!meta.tagged) return;
  DedupWindow& w = dedup_[{meta.job, meta.worker}];
  w.steps.insert(meta.step);
  while (static_cast<int64_t>(w.steps.size()) > kDedupWindow) {
    w.floor = *w.steps.begin() + 1;
    w.steps.erase(w.steps.begin());
  }
}

void Variable::UnshareLocked() {
  if (kAlwaysCopyOnWrite || value_.use_count() > 1) {
    value_ = Buffer::Copy(*value_);
  }
  for (auto& slot : slots_) {
    if (kAlwaysCopyOnWrite || slot.use_count() > 1) slot = Buffer::Copy(*slot);
  }
#if !STRATA_TSAN_BUILD
  // use_count() is a relaxed load. When it reports this variable as the only
  // owner, the last snapshot holder's reads of the buffer (released by its
  // reference decrement) must still happen before the writes that follow:
  // this fence makes them so; without it they are a data race (reported by
  // ThreadSanitizer in variable_store_concurrency_test).
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
}

absl::Status Variable::ApplyDenseLocked(const char* grad) {
  if (on_device_ != nullptr) {
    STRATA_RETURN_IF_ERROR(on_device_->ApplyDense(iterations_, grad, &value_));
    ++iterations_;
    ++changes_;
    return absl::OkStatus();
  }
  UnshareLocked();
  std::vector<void*> slots;
  for (auto& s : slots_) slots.push_back(s->data());
  STRATA_RETURN_IF_ERROR(optimizer_->ApplyDense(
      dtype_, iterations_, value_->data(), slots, grad, num_elements_));
  ++iterations_;
  ++changes_;
  return absl::OkStatus();
}

absl::Status Variable::ApplyRowsLocked(absl::Span<const int64_t> ids,
                                       const char* values) {
  if (on_device_ != nullptr) {
    STRATA_RETURN_IF_ERROR(
        on_device_->ApplyRows(iterations_, ids, values, &value_));
    ++iterations_;
    ++changes_;
    return absl::OkStatus();
  }
  UnshareLocked();
  std::vector<void*> slots;
  for (auto& s : slots_) slots.push_back(s->data());
  STRATA_RETURN_IF_ERROR(optimizer_->ApplySparse(
      dtype_, iterations_, value_->data(), slots, ids, values, row_width_));
  ++iterations_;
  ++changes_;
  return absl::OkStatus();
}

void Variable::AdvanceClockLocked(const PushMeta& meta) {
  if (mode_ != v1::UpdateMode::STALENESS) return;
  int64_t& c = clocks_[meta.worker];
  c = std::max(c, meta.step + 1);
}

absl::StatusOr<PushOutcome> Variable::PushDense(const PushMeta& meta,
                                                const char* grad, size_t size,
                                                bool checked) {
  if (size != byte_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": gradient has ", size,
        " bytes, expected ", byte_size_, " (", DTypeName(dtype_), " ",
        ShapeString(shape_), ")"));
  }
  STRATA_RETURN_IF_ERROR(CheckPushMeta(meta));
  if (!checked) {
    STRATA_RETURN_IF_ERROR(CheckFinite(
        dtype_, grad, num_elements_,
        absl::StrCat("gradient for variable ", Quote(name()))));
  }
  std::vector<std::function<void(absl::Status)>> ready;
  PushOutcome out;
  {
    absl::MutexLock lock(&mu_);
    STRATA_ASSIGN_OR_RETURN(bool seen, SeenBefore(meta));
    if (seen) {
      out.version = version_;
      out.duplicate = true;
      return out;
    }
    if (mode_ == v1::UpdateMode::SYNC) {
      STRATA_ASSIGN_OR_RETURN(out, SyncAccumulateLocked(meta, grad, {}, nullptr));
    } else {
      STRATA_RETURN_IF_ERROR(ApplyDenseLocked(grad));
      ++version_;
      RecordPushLocked(meta);
      AdvanceClockLocked(meta);
      out.version = version_;
      out.applied = true;
    }
    WriteMirrorsLocked();
    CollectReadyLocked(&ready);
  }
  for (auto& fn : ready) fn(absl::OkStatus());
  return out;
}

absl::StatusOr<PushOutcome> Variable::PushRows(const PushMeta& meta,
                                               absl::Span<const int64_t> ids,
                                               const char* values,
                                               size_t size) {
  if (shape_.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": row push needs a 2-D variable, it is ",
        ShapeString(shape_)));
  }
  const size_t row_bytes = row_width_ * DTypeSize(dtype_);
  if (size != ids.size() * row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": row gradient has ", size,
        " bytes, expected ", ids.size(), " rows x ", row_width_, " ",
        DTypeName(dtype_), " = ", ids.size() * row_bytes));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= shape_[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable ", Quote(name()), ": row id ", ids[i], " (position ", i,
          ") is outside [0, ", shape_[0], ")"));
    }
  }
  STRATA_RETURN_IF_ERROR(CheckPushMeta(meta));
  STRATA_RETURN_IF_ERROR(CheckFinite(
      dtype_, values, ids.size() * row_width_,
      absl::StrCat("row gradient for variable ", Quote(name()))));
  // Sum duplicate ids.
  std::vector<int64_t> unique_ids;
  std::unordered_map<int64_t, size_t> index;
  std::shared_ptr<Buffer> summed;
  const char* rows = values;
  {
    index.reserve(ids.size());
    for (int64_t id : ids) {
      if (index.emplace(id, unique_ids.size()).second) unique_ids.push_back(id);
    }
    if (unique_ids.size() != ids.size()) {
      summed = Buffer::Allocate(unique_ids.size() * row_bytes);
      for (size_t i = 0; i < ids.size(); ++i) {
        AddInto(dtype_, summed->data() + index[ids[i]] * row_bytes,
                values + i * row_bytes, row_width_);
      }
      rows = summed->data();
    }
  }
  std::vector<std::function<void(absl::Status)>> ready;
  PushOutcome out;
  {
    absl::MutexLock lock(&mu_);
    STRATA_ASSIGN_OR_RETURN(bool seen, SeenBefore(meta));
    if (seen) {
      out.version = version_;
      out.duplicate = true;
      return out;
    }
    if (mode_ == v1::UpdateMode::SYNC) {
      STRATA_ASSIGN_OR_RETURN(out,
                              SyncAccumulateLocked(meta, nullptr, unique_ids, rows));
    } else {
      STRATA_RETURN_IF_ERROR(ApplyRowsLocked(unique_ids, rows));
      ++version_;
      RecordPushLocked(meta);
      AdvanceClockLocked(meta);
      out.version = version_;
      out.applied = true;
    }
    WriteMirrorsLocked();
    CollectReadyLocked(&ready);
  }
  for (auto& fn : ready) fn(absl::OkStatus());
  return out;
}

absl::StatusOr<PushOutcome> Variable::SyncAccumulateLocked(
    const PushMeta& meta, const char* dense, absl::Span<const int64_t> ids,
    const char* rows) {
  if (meta.step < version_) {
    return absl::AbortedError(absl::StrCat(
        "variable ", Quote(name()), ": gradient for step ", meta.step,
        " is stale; the variable is at version ", version_,
        " (steps below it were applied)"));
  }
  if (meta.step >= version_ + kMaxStepsAhead) {
    return absl::FailedPreconditionError(absl::StrCat(
        "variable ", Quote(name()), ": gradient for step ", meta.step,
        " is more than ", kMaxStepsAhead, " steps ahead of version ",
        version_));
  }
  auto found = pending_.find(meta.step);
  if (found != pending_.end() && meta.group < found->second.group) {
    return absl::AbortedError(absl::StrCat(
        "variable ", Quote(name()), ": gradient for step ", meta.step,
        " comes from group ", meta.group, ", older than group ",
        found->second.group, " that is running the step"));
  }
  Accumulator& acc = pending_[meta.step];
  if (acc.sum != nullptr && meta.group > acc.group) {
    // A newer group re-runs the step: the older group's partial sum (a
    // member died before contributing) is dropped.
    acc = Accumulator();
  }
  acc.group = meta.group;
  acc.group_size = meta.group_size;
  if (acc.sum == nullptr) acc.sum = Buffer::Allocate(byte_size_);
  if (dense != nullptr) {
    AddInto(dtype_, acc.sum->data(), dense, num_elements_);
    acc.dense = true;
  } else {
    const size_t row_bytes = row_width_ * DTypeSize(dtype_);
    for (size_t i = 0; i < ids.size(); ++i) {
      AddInto(dtype_, acc.sum->data() + ids[i] * row_bytes,
              rows + i * row_bytes, row_width_);
      acc.rows.insert(ids[i]);
    }
  }
  acc.contributors.insert({meta.job, meta.worker});
  RecordPushLocked(meta);

  PushOutcome out;
  // Apply every complete step in order.
  while (true) {
    auto it = pending_.find(version_);
    if (it == pending_.end()) break;
    const int needed = it->second.group_size > 0 ? it->second.group_size
                                                 : num_replicas_;
    if (static_cast<int>(it->second.contributors.size()) < needed) break;
    Accumulator& done = it->second;
    DivideBy(dtype_, done.sum->data(), num_elements_, needed);
    if (done.dense) {
      STRATA_RETURN_IF_ERROR(ApplyDenseLocked(done.sum->data()));
    } else {
      std::vector<int64_t> touched(done.rows.begin(), done.rows.end());
      const size_t row_bytes = row_width_ * DTypeSize(dtype_);
      auto packed = Buffer::Allocate(touched.size() * row_bytes, false);
      for (size_t i = 0; i < touched.size(); ++i) {
        std::memcpy(packed->data() + i * row_bytes,
                    done.sum->data() + touched[i] * row_bytes, row_bytes);
      }
      STRATA_RETURN_IF_ERROR(ApplyRowsLocked(touched, packed->data()));
    }
    pending_.erase(it);
    ++version_;
    out.applied = true;
  }
  out.version = version_;
  return out;
}

absl::StatusOr<int64_t> Variable::Assign(const char* data, size_t size) {
  if (size != byte_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": assigned value has ", size,
        " bytes, expected ", byte_size_, " (", DTypeName(dtype_), " ",
        ShapeString(shape_), ")"));
  }
  STRATA_RETURN_IF_ERROR(CheckFinite(
      dtype_, data, num_elements_,
      absl::StrCat("value assigned to variable ", Quote(name()))));
  // On the host the copy is made before taking the lock; on a device it is
  // uploaded under it.
  std::shared_ptr<Buffer> fresh;
  if (!device_.is_cuda()) {
    fresh = Buffer::Allocate(size, false);
    std::memcpy(fresh->data(), data, size);
  }
  std::vector<std::function<void(absl::Status)>> ready;
  int64_t version;
  {
    absl::MutexLock lock(&mu_);
    if (on_device_ != nullptr) {
      STRATA_RETURN_IF_ERROR(on_device_->Assign(data, &value_));
    } else {
      value_ = std::move(fresh);
    }
    // A sync variable's version counts steps; an assignment does not move it.
    if (mode_ != v1::UpdateMode::SYNC) ++version_;
    ++changes_;
    version = version_;
    WriteMirrorsLocked();
    CollectReadyLocked(&ready);
  }
  for (auto& fn : ready) fn(absl::OkStatus());
  return version;
}

VariableSnapshot Variable::Snapshot() const {
  absl::ReaderMutexLock lock(&mu_);
  return VariableSnapshot{dtype_, shape_, value_, version_};
}

absl::StatusOr<VariableSnapshot> Variable::ReadRows(
    absl::Span<const int64_t> ids) const {
  if (shape_.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", Quote(name()), ": row pull needs a 2-D variable, it is ",
        ShapeString(shape_)));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= shape_[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable ", Quote(name()), ": row id ", ids[i], " (position ", i,
          ") is outside [0, ", shape_[0], ")"));
    }
  }
  const size_t row_bytes = row_width_ * DTypeSize(dtype_);
  auto out = Buffer::Allocate(ids.size() * row_bytes, false);
  std::shared_ptr<const Buffer> value;
  int64_t version;
  {
    absl::ReaderMutexLock lock(&mu_);
    value = value_;
    version = version_;
  }
  // The snapshot is immutable, so the gather runs outside the lock.
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(out->data() + i * row_bytes,
                value->data() + ids[i] * row_bytes, row_bytes);
  }
  return VariableSnapshot{
      dtype_, Shape{static_cast<int64_t>(ids.size()), row_width_},
      std::move(out), version};
}

bool Variable::PullReadyLocked(int64_t min_version, int64_t clock) const {
  if (version_ < min_version) return false;
  if (mode_ == v1::UpdateMode::STALENESS && clock > 0) {
    int64_t slowest = *std::min_element(clocks_.begin(), clocks_.end());
    if (slowest < clock - staleness_) return false;
  }
  return true;
}

bool Variable::PullReady(int64_t min_version, int64_t clock) const {
  absl::ReaderMutexLock lock(&mu_);
  return PullReadyLocked(min_version, clock);
}

std::string Variable::WaitDescription(int64_t min_version,
                                      int64_t clock) const {
  absl::ReaderMutexLock lock(&mu_);
  std::string out = absl::StrCat("variable ", Quote(name()), " is at version ",
                                 version_, " (pull needs >= ", min_version, ")");
  if (mode_ == v1::UpdateMode::STALENESS) {
    int64_t slowest = *std::min_element(clocks_.begin(), clocks_.end());
    absl::StrAppend(&out, "; staleness bound ", staleness_,
                    ": pull at clock ", clock,
                    " needs the slowest worker at >= ", clock - staleness_,
                    ", it is at ", slowest);
  }
  return out;
}

int64_t Variable::WaitForPull(int64_t min_version, int64_t clock,
                              std::function<void(absl::Status)> done) {
  {
    absl::MutexLock lock(&mu_);
    if (!PullReadyLocked(min_version, clock)) {
      int64_t id = next_waiter_id_++;
      waiters_.emplace(id, Waiter{min_version, clock, std::move(done)});
      return id;
    }
  }
  done(absl::OkStatus());
  return 0;
}

void Variable::ExpireWaiter(int64_t id, absl::Status status) {
  std::function<void(absl::Status)> fn;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    fn = std::move(it->second.done);
    waiters_.erase(it);
  }
  fn(std::move(status));
}

void Variable::CancelWaiters(absl::Status status) {
  std::map<int64_t, Waiter> waiters;
  {
    absl::MutexLock lock(&mu_);
    waiters.swap(waiters_);
  }
  for (auto& [id, w] : waiters) w.done(status);
}

void Variable::CollectReadyLocked(
    std::vector<std::function<void(absl::Status)>>* ready) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (PullReadyLocked(it->second.min_version, it->second.clock)) {
      ready->push_back(std::move(it->second.done));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

nlohmann::json Variable::MetaLocked() const {
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(spec_, &spec_json, opts);
  nlohmann::json m;
  m["spec"] = spec_json;
  m["version"] = version_;
  m["iterations"] = iterations_;
  // Pushes held in unapplied sync steps are not in the checkpoint's value,
  // so they are not recorded as taken: after a restore they are re-pushed.
  std::set<std::tuple<std::string, int64_t, int64_t>> pending;
  for (const auto& [step, acc] : pending_) {
    for (const auto& [job, worker] : acc.contributors) {
      pending.insert({job, worker, step});
    }
  }
  nlohmann::json dedup = nlohmann::json::array();
  for (const auto& [key, w] : dedup_) {
    nlohmann::json steps = nlohmann::json::array();
    for (int64_t s : w.steps) {
      if (!pending.count({key.first, key.second, s})) steps.push_back(s);
    }
    dedup.push_back({{"job", key.first},
                     {"worker", key.second},
                     {"floor", w.floor},
                     {"steps", steps}});
  }
  m["dedup"] = dedup;
  m["clocks"] = clocks_;
  return m;
}

absl::StatusOr<CheckpointVariable> Variable::CheckpointEntry() const {
  absl::ReaderMutexLock lock(&mu_);
  CheckpointVariable c;
  c.name = name();
  c.dtype = dtype_;
  c.shape = shape_;
  c.value = value_;
  std::vector<std::string> names = optimizer_->SlotNames();
  std::vector<std::shared_ptr<Buffer>> slots = slots_;
  if (on_device_ != nullptr) {
    absl::StatusOr<std::vector<std::shared_ptr<Buffer>>> read =
        on_device_->ReadSlots();
    if (!read.ok()) {
      return absl::Status(
          read.status().code(),
          absl::StrCat("variable ", Quote(name()), ": reading its slots from ",
                       device_.Name(), ": ", read.status().message()));
    }
    slots = *std::move(read);
  }
  for (size_t i = 0; i < slots.size() && i < names.size(); ++i) {
    c.slots.emplace_back(names[i], std::move(slots[i]));
  }
  c.meta = MetaLocked();
  return c;
}

CheckpointVariable Variable::ToCheckpoint() const {
  absl::StatusOr<CheckpointVariable> entry = CheckpointEntry();
  if (entry.ok()) return *std::move(entry);
  absl::ReaderMutexLock lock(&mu_);
  CheckpointVariable c;
  c.name = name();
  c.dtype = dtype_;
  c.shape = shape_;
  c.value = value_;
  c.meta = MetaLocked();
  return c;
}

int64_t Variable::version() const {
  absl::ReaderMutexLock lock(&mu_);
  return version_;
}

int64_t Variable::iterations() const {
  absl::ReaderMutexLock lock(&mu_);
  return iterations_;
}

}  // namespace strata

// Variable's checkpoint form: the entry it saves (CheckpointEntry,
// ToCheckpoint) and the variable rebuilt from one (FromCheckpoint).
#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "server/variable.h"
#include "server/variable_internal.h"

namespace strata {

namespace variable_internal {

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

}  // namespace variable_internal

namespace {

using variable_internal::MetaInt;
using variable_internal::Quote;

// Reads one entry of the metadata's "dedup" array into `window`. Errors:
// DATA_LOSS naming `where`.
absl::Status RestoreDedupEntry(const nlohmann::json& d,
                               const std::string& where,
                               ExactlyOnceWindow* window) {
  if (!d.is_object()) {
    return absl::DataLossError(
        absl::StrCat(where, ": a dedup entry is not an object"));
  }
  ExactlyOnceWindow::Steps w;
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
  window->Restore(
      {job != d.end() ? job->get<std::string>() : std::string(),
       worker != d.end() ? worker->get<int64_t>() : int64_t{0}},
      std::move(w));
  return absl::OkStatus();
}

}  // namespace

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
  // A zero value (the saved one replaces it) with the full spec, initializer
  // included, kept for later comparisons. Built on the host; moved to
  // `device` once the saved state is in.
  STRATA_ASSIGN_OR_RETURN(
      std::shared_ptr<Variable> v,
      CreateOnHost(spec, max_bytes, device, /*zero_value=*/true));
  if (entry.dtype != v->dtype_ || entry.shape != v->shape_ ||
      entry.value == nullptr || entry.value->size() != v->byte_size_) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint variable ", Quote(entry.name),
        ": stored tensor does not match its spec (", DTypeName(entry.dtype),
        " ", ShapeString(entry.shape), " vs ", DTypeName(v->dtype_), " ",
        ShapeString(v->shape_), ")"));
  }
  const size_t slots = v->optimizer_->SlotNames().size();
  if (entry.slots.size() != slots) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint variable ", Quote(entry.name), ": has ",
        entry.slots.size(), " optimizer slots, its optimizer needs ", slots));
  }
  absl::MutexLock lock(&v->mu_);
  STRATA_RETURN_IF_ERROR(v->RestoreLocked(entry));
  if (device.is_cuda()) STRATA_RETURN_IF_ERROR(v->AttachDeviceLocked());
  return v;
}

absl::Status Variable::RestoreLocked(const CheckpointVariable& entry) {
  value_ = Buffer::Copy(*entry.value);
  std::vector<std::string> slot_names = optimizer_->SlotNames();
  for (size_t i = 0; i < slot_names.size(); ++i) {
    if (entry.slots[i].first != slot_names[i] ||
        entry.slots[i].second->size() != byte_size_) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint variable ", Quote(entry.name), ": slot ", i, " is '",
          entry.slots[i].first, "', expected '", slot_names[i], "'"));
    }
    slots_[i] = Buffer::Copy(*entry.slots[i].second);
  }
  // The metadata comes from a file: every field is checked before use (a
  // wrong type is DATA_LOSS, never an exception or a read of a missing key).
  const nlohmann::json& m = entry.meta;
  const std::string where =
      absl::StrCat("checkpoint variable ", Quote(entry.name));
  STRATA_RETURN_IF_ERROR(MetaInt(m, "version", where, &version_));
  STRATA_RETURN_IF_ERROR(MetaInt(m, "iterations", where, &iterations_));
  if (auto dedup = m.find("dedup"); dedup != m.end() && dedup->is_array()) {
    for (const auto& d : *dedup) {
      STRATA_RETURN_IF_ERROR(RestoreDedupEntry(d, where, &dedup_));
    }
  }
  if (auto clocks = m.find("clocks"); clocks != m.end() &&
                                      clocks->is_array() &&
                                      clocks->size() == clocks_.size()) {
    for (size_t i = 0; i < clocks_.size(); ++i) {
      STRATA_RETURN_IF_ERROR(
          MetaInt((*clocks)[i], nullptr, where, &clocks_[i]));
    }
  }
  return absl::OkStatus();
}

nlohmann::json Variable::MetaLocked(bool with_held) const {
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
  // A state transfer (`with_held`) sends those steps along, so keeps them.
  const std::set<std::tuple<std::string, int64_t, int64_t>> held =
      with_held ? std::set<std::tuple<std::string, int64_t, int64_t>>()
                : pending_.HeldPushes();
  nlohmann::json dedup = nlohmann::json::array();
  for (const auto& [key, w] : dedup_.windows()) {
    nlohmann::json steps = nlohmann::json::array();
    for (int64_t s : w.steps) {
      if (!held.count({key.first, key.second, s})) steps.push_back(s);
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

CheckpointVariable Variable::EntryWithoutSlotsLocked() const {
  CheckpointVariable c;
  c.name = name();
  c.dtype = dtype_;
  c.shape = shape_;
  c.value = value_;
  c.meta = MetaLocked();
  return c;
}

absl::StatusOr<CheckpointVariable> Variable::CheckpointEntry() const {
  absl::ReaderMutexLock lock(&mu_);
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
  CheckpointVariable c = EntryWithoutSlotsLocked();
  std::vector<std::string> names = optimizer_->SlotNames();
  for (size_t i = 0; i < slots.size() && i < names.size(); ++i) {
    c.slots.emplace_back(names[i], std::move(slots[i]));
  }
  return c;
}

CheckpointVariable Variable::ToCheckpoint() const {
  absl::StatusOr<CheckpointVariable> entry = CheckpointEntry();
  if (entry.ok()) return *std::move(entry);
  absl::ReaderMutexLock lock(&mu_);
  return EntryWithoutSlotsLocked();
}

namespace {

std::shared_ptr<Buffer> BufferOf(const std::string& bytes) {
  std::shared_ptr<Buffer> b = Buffer::Allocate(bytes.size(), false);
  if (!bytes.empty()) std::memcpy(b->data(), bytes.data(), bytes.size());
  return b;
}

}  // namespace

absl::Status Variable::AppendState(ReplicationSink* sink,
                                  const std::string& owner) const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::shared_ptr<Buffer>> slots = slots_;
  if (on_device_ != nullptr) {
    STRATA_ASSIGN_OR_RETURN(slots, on_device_->ReadSlots());
  }
  v1::ReplicationEntry e;
  e.set_kind(v1::ReplicationEntry::INSTALL);
  e.set_variable(name());
  e.set_owner(owner);
  nlohmann::json wrapper;
  wrapper["meta"] = MetaLocked(/*with_held=*/true);
  wrapper["dtype"] = static_cast<int>(dtype_);
  wrapper["shape"] = shape_;
  e.set_meta_json(wrapper.dump());
  e.set_data(value_->data(), value_->size());
  std::vector<std::string> names = optimizer_->SlotNames();
  for (size_t i = 0; i < slots.size() && i < names.size(); ++i) {
    e.add_slot_names(names[i]);
    e.add_slots(slots[i]->data(), slots[i]->size());
  }
  std::vector<std::shared_ptr<const Buffer>> sums;
  e.set_pending_json(pending_.Export(&sums).dump());
  for (const auto& sum : sums) e.add_pending(sum->data(), sum->size());
  sink->Append(std::move(e));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Variable>> Variable::FromReplica(
    const v1::ReplicationEntry& entry, uint64_t max_bytes,
    const PsDevice& device) {
  const std::string where = absl::StrCat("replicated variable ",
                                         Quote(entry.variable()));
  nlohmann::json wrapper = nlohmann::json::parse(entry.meta_json(), nullptr,
                                                 /*allow_exceptions=*/false);
  nlohmann::json pending = nlohmann::json::parse(
      entry.pending_json(), nullptr, /*allow_exceptions=*/false);
  if (!wrapper.is_object() || !wrapper.contains("meta") ||
      !wrapper["dtype"].is_number_integer() || !wrapper["shape"].is_array() ||
      pending.is_discarded()) {
    return absl::DataLossError(absl::StrCat(where, ": malformed state"));
  }
  CheckpointVariable c;
  c.name = entry.variable();
  c.dtype = static_cast<DType>(wrapper["dtype"].get<int>());
  for (const auto& d : wrapper["shape"]) {
    if (!d.is_number_integer()) {
      return absl::DataLossError(absl::StrCat(where, ": malformed shape"));
    }
    c.shape.push_back(d.get<int64_t>());
  }
  c.meta = wrapper["meta"];
  c.value = BufferOf(entry.data());
  for (int i = 0; i < entry.slots_size() && i < entry.slot_names_size(); ++i) {
    c.slots.emplace_back(entry.slot_names(i),
                         BufferOf(entry.slots(i)));
  }
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Variable> v,
                          FromCheckpoint(c, max_bytes, device));
  std::vector<std::string> sums(entry.pending().begin(),
                                entry.pending().end());
  absl::MutexLock lock(&v->mu_);
  STRATA_RETURN_IF_ERROR(v->pending_.Import(pending, sums));
  return v;
}

}  // namespace strata

#include "server/variable_store.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"

namespace strata {

VariableStore::VariableStore(VariableStoreOptions options)
    : options_(std::move(options)) {}

VariableStore::~VariableStore() {
  CancelWaiters(absl::UnavailableError("parameter server is shutting down"));
}

absl::StatusOr<bool> VariableStore::Create(const v1::VariableSpec& spec) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = variables_.find(spec.name());
    if (it != variables_.end()) {
      if (google::protobuf::util::MessageDifferencer::Equals(
              it->second->spec(), spec)) {
        return false;
      }
      return absl::AlreadyExistsError(absl::StrCat(
          "variable '", spec.name(),
          "' already exists with a different spec: existing {",
          it->second->spec().ShortDebugString(), "}, requested {",
          spec.ShortDebugString(), "}"));
    }
  }
  // Initialize outside the map lock (large variables take a while).
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Variable> v,
                          Variable::Create(spec, options_.max_variable_bytes,
                                           options_.device));
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = variables_.emplace(spec.name(), v);
  if (!inserted) {
    // A concurrent create of the same name won the race.
    if (google::protobuf::util::MessageDifferencer::Equals(it->second->spec(),
                                                           spec)) {
      return false;
    }
    return absl::AlreadyExistsError(absl::StrCat(
        "variable '", spec.name(), "' already exists with a different spec"));
  }
  return true;
}

absl::StatusOr<std::shared_ptr<Variable>> VariableStore::Get(
    const std::string& name) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    return absl::NotFoundError(absl::StrCat("variable '", name,
                                            "' does not exist on this server"));
  }
  return it->second;
}

std::vector<std::shared_ptr<Variable>> VariableStore::List() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<std::shared_ptr<Variable>> out;
  out.reserve(variables_.size());
  for (const auto& [name, v] : variables_) out.push_back(v);
  return out;
}

absl::StatusOr<std::string> VariableStore::ResolvePath(
    const std::string& path) const {
  if (path.empty()) {
    return absl::InvalidArgumentError("checkpoint path is empty");
  }
  std::filesystem::path p(path);
  for (const auto& part : p) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint path '", path, "' must not contain '..'"));
    }
  }
  if (p.is_absolute()) return p.lexically_normal().string();
  if (options_.checkpoint_dir.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "relative checkpoint path '", path,
        "' needs the server to run with --checkpoint-dir"));
  }
  return (std::filesystem::path(options_.checkpoint_dir) / p)
      .lexically_normal()
      .string();
}

absl::StatusOr<SaveResult> VariableStore::Save(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string resolved, ResolvePath(path));
  Checkpoint ckpt;
  for (const auto& v : List()) {
    STRATA_ASSIGN_OR_RETURN(CheckpointVariable entry, v->CheckpointEntry());
    ckpt.variables.push_back(std::move(entry));
  }
  ckpt.extra["pushes_applied"] = pushes_applied_.load();
  STRATA_ASSIGN_OR_RETURN(int64_t bytes, WriteCheckpoint(resolved, ckpt));
  SaveResult result;
  result.path = resolved;
  result.num_variables = static_cast<int64_t>(ckpt.variables.size());
  result.bytes = bytes;
  return result;
}

absl::StatusOr<int64_t> VariableStore::Restore(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string resolved, ResolvePath(path));
  STRATA_ASSIGN_OR_RETURN(Checkpoint ckpt, ReadCheckpoint(resolved));
  std::map<std::string, std::shared_ptr<Variable>> fresh;
  for (const CheckpointVariable& entry : ckpt.variables) {
    STRATA_ASSIGN_OR_RETURN(
        std::shared_ptr<Variable> v,
        Variable::FromCheckpoint(entry, options_.max_variable_bytes,
                                 options_.device));
    if (!fresh.emplace(entry.name, std::move(v)).second) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint '", resolved, "' lists variable '", entry.name,
          "' twice"));
    }
  }
  const int64_t n = static_cast<int64_t>(fresh.size());
  {
    absl::MutexLock lock(&mu_);
    variables_.swap(fresh);
  }
  for (auto& [name, old] : fresh) {
    // A call may still hold the old variable: its mirrors are gone now.
    old->RetireMirrors();
    old->CancelWaiters(absl::AbortedError(absl::StrCat(
        "variable '", name, "' was replaced by a restore from '", resolved,
        "'; pull again")));
  }
  return n;
}

void VariableStore::RecordPush(const PushOutcome& outcome, int64_t bytes) {
  bytes_pushed_ += bytes;
  if (outcome.duplicate) {
    ++pushes_duplicate_;
  } else {
    ++pushes_applied_;
  }
}

void VariableStore::RecordPull(int64_t bytes) {
  ++pulls_;
  bytes_pulled_ += bytes;
}

StoreStats VariableStore::Stats() const {
  StoreStats s;
  for (const auto& v : List()) {
    ++s.num_variables;
    s.variable_bytes += static_cast<int64_t>(v->byte_size());
    if (v->spec().update_mode().kind() == v1::UpdateMode::SYNC) {
      s.sync_steps_applied += v->version();
    }
  }
  s.pushes_applied = pushes_applied_.load();
  s.pushes_duplicate = pushes_duplicate_.load();
  s.pulls = pulls_.load();
  s.bytes_pushed = bytes_pushed_.load();
  s.bytes_pulled = bytes_pulled_.load();
  return s;
}

void VariableStore::CancelWaiters(const absl::Status& status) {
  for (const auto& v : List()) v->CancelWaiters(status);
}

}  // namespace strata

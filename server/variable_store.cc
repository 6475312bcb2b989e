#include "server/variable_store.h"

#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"

namespace strata {

VariableStore::VariableStore(VariableStoreOptions options)
    : options_(std::move(options)), tables_(options_.tables) {}

VariableStore::~VariableStore() {
  VariableStore::CancelWaiters(
      absl::UnavailableError("parameter server is shutting down"));
}

namespace {

// No credentials, or an admin: every job's variables.
bool ReachesEveryJob(const std::optional<Caller>& caller) {
  return !caller.has_value() || caller->Has(Role::kAdmin);
}

}  // namespace

absl::Status VariableStore::CheckOwnerLocked(
    const std::optional<Caller>& caller, const std::string& name) const {
  if (ReachesEveryJob(caller)) return absl::OkStatus();
  auto it = owners_.find(name);
  if (it == owners_.end() || it->second == caller->job) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "variable '", name, "' belongs to another job than '", caller->job,
      "'"));
}

absl::Status VariableStore::CheckOwner(const std::optional<Caller>& caller,
                                       const std::string& name) const {
  if (ReachesEveryJob(caller)) return absl::OkStatus();
  absl::ReaderMutexLock lock(&mu_);
  return CheckOwnerLocked(caller, name);
}

absl::Status VariableStore::CheckTableOwnerLocked(
    const std::optional<Caller>& caller, const std::string& name) const {
  if (ReachesEveryJob(caller)) return absl::OkStatus();
  auto it = table_owners_.find(name);
  if (it == table_owners_.end() || it->second == caller->job) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "table '", name, "' belongs to another job than '", caller->job, "'"));
}

absl::Status VariableStore::CheckTableOwner(
    const std::optional<Caller>& caller, const std::string& name) const {
  if (ReachesEveryJob(caller)) return absl::OkStatus();
  absl::ReaderMutexLock lock(&mu_);
  return CheckTableOwnerLocked(caller, name);
}

bool VariableStore::TableVisibleTo(const std::optional<Caller>& caller,
                                   const std::string& name) const {
  if (ReachesEveryJob(caller)) return true;
  absl::ReaderMutexLock lock(&mu_);
  auto it = table_owners_.find(name);
  return it == table_owners_.end() || it->second == caller->job;
}

absl::StatusOr<bool> VariableStore::CreateTable(
    const v1::TableSpec& spec, const std::optional<Caller>& caller) {
  // Under mu_: two jobs creating one name cannot both come to own it.
  if (sink_ != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "table '", spec.name(), "': this ps task is replicated "
        "(ps.replication 2), and dynamic tables are not replicated yet"));
  }
  absl::MutexLock lock(&mu_);
  STRATA_RETURN_IF_ERROR(CheckTableOwnerLocked(caller, spec.name()));
  STRATA_ASSIGN_OR_RETURN(bool created, tables_.Create(spec));
  if (caller.has_value()) table_owners_.emplace(spec.name(), caller->job);
  return created;
}

absl::Status VariableStore::CheckCheckpointAccessLocked(
    const std::optional<Caller>& caller, const char* what) const {
  if (ReachesEveryJob(caller)) return absl::OkStatus();
  for (const auto& [name, v] : variables_) {
    auto it = owners_.find(name);
    if (it == owners_.end() || it->second != caller->job) {
      return absl::PermissionDeniedError(absl::StrCat(
          "this server holds variables of another job than '", caller->job,
          "': only an admin credential may ", what, " its checkpoints"));
    }
  }
  absl::StatusOr<std::vector<v1::TableInfo>> tables = tables_.Stats("");
  if (tables.ok()) {
    for (const v1::TableInfo& t : *tables) {
      auto it = table_owners_.find(t.spec().name());
      if (it == table_owners_.end() || it->second != caller->job) {
        return absl::PermissionDeniedError(absl::StrCat(
            "this server holds tables of another job than '", caller->job,
            "': only an admin credential may ", what, " its checkpoints"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status VariableStore::CheckCheckpointAccess(
    const std::optional<Caller>& caller, const char* what) const {
  if (ReachesEveryJob(caller)) return absl::OkStatus();
  absl::ReaderMutexLock lock(&mu_);
  return CheckCheckpointAccessLocked(caller, what);
}

void VariableStore::AdoptLocked(const std::optional<Caller>& caller,
                                const std::string& name) {
  if (caller.has_value()) owners_.emplace(name, caller->job);
}

std::optional<absl::StatusOr<bool>> VariableStore::FindForCreateLocked(
    const v1::VariableSpec& spec, const std::optional<Caller>& caller,
    bool detail) {
  if (absl::Status owned = CheckOwnerLocked(caller, spec.name()); !owned.ok()) {
    return absl::StatusOr<bool>(owned);
  }
  auto it = variables_.find(spec.name());
  if (it == variables_.end()) return std::nullopt;
  // update_mode.first_step is where a new variable starts, not what it
  // is: an existing one matches whatever first step is asked.
  v1::VariableSpec requested = spec;
  const int64_t first_step = it->second->spec().update_mode().first_step();
  if (requested.update_mode().first_step() != first_step) {
    requested.mutable_update_mode()->set_first_step(first_step);
  }
  if (google::protobuf::util::MessageDifferencer::Equals(it->second->spec(),
                                                         requested)) {
    AdoptLocked(caller, spec.name());
    return absl::StatusOr<bool>(false);
  }
  if (!detail) {
    return absl::StatusOr<bool>(absl::AlreadyExistsError(absl::StrCat(
        "variable '", spec.name(), "' already exists with a different spec")));
  }
  return absl::StatusOr<bool>(absl::AlreadyExistsError(absl::StrCat(
      "variable '", spec.name(),
      "' already exists with a different spec: existing {",
      it->second->spec().ShortDebugString(), "}, requested {",
      spec.ShortDebugString(), "}")));
}

absl::StatusOr<bool> VariableStore::Create(
    const v1::VariableSpec& spec, const std::optional<Caller>& caller) {
  {
    absl::MutexLock lock(&mu_);
    if (auto found = FindForCreateLocked(spec, caller, /*detail=*/true)) {
      return *std::move(found);
    }
  }
  // Initialize outside the map lock (large variables take a while).
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Variable> v,
                          Variable::Create(spec, options_.max_variable_bytes,
                                           options_.device));
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    // A concurrent create of the same name may have won the race.
    if (auto found = FindForCreateLocked(spec, caller, /*detail=*/false)) {
      return *std::move(found);
    }
    v->set_replication(sink_);
    if (sink_ != nullptr && sink_->active()) {
      v1::ReplicationEntry e;
      e.set_kind(v1::ReplicationEntry::CREATE);
      e.set_variable(spec.name());
      *e.mutable_spec() = spec;
      if (caller.has_value()) e.set_owner(caller->job);
      ticket = sink_->Append(std::move(e));
    }
    variables_.emplace(spec.name(), std::move(v));
    AdoptLocked(caller, spec.name());
  }
  if (ticket != 0) STRATA_RETURN_IF_ERROR(sink_->Wait(ticket));
  return true;
}

void VariableStore::set_replication(ReplicationSink* sink) {
  absl::MutexLock lock(&mu_);
  sink_ = sink;
  for (auto& [name, v] : variables_) v->set_replication(sink);
}

absl::Status VariableStore::AppendState() {
  if (sink_ == nullptr) return absl::OkStatus();
  std::vector<std::pair<std::shared_ptr<Variable>, std::string>> all;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [name, v] : variables_) {
      auto owner = owners_.find(name);
      all.emplace_back(v, owner == owners_.end() ? "" : owner->second);
    }
  }
  for (const auto& [v, owner] : all) {
    STRATA_RETURN_IF_ERROR(v->AppendState(sink_, owner));
  }
  return absl::OkStatus();
}

void VariableStore::Install(std::shared_ptr<Variable> v,
                            const std::string& owner) {
  std::shared_ptr<Variable> old;
  {
    absl::MutexLock lock(&mu_);
    const std::string name = v->name();
    auto it = variables_.find(name);
    if (it != variables_.end()) old = std::move(it->second);
    v->set_replication(sink_);
    variables_[name] = std::move(v);
    if (owner.empty()) {
      owners_.erase(name);
    } else {
      owners_[name] = owner;
    }
  }
  if (old != nullptr) {
    old->RetireMirrors();
    old->CancelWaiters(absl::AbortedError(absl::StrCat(
        "variable '", old->name(), "' was replaced; pull again")));
  }
}

void VariableStore::Clear() {
  std::map<std::string, std::shared_ptr<Variable>> old;
  {
    absl::MutexLock lock(&mu_);
    old.swap(variables_);
    owners_.clear();
  }
  for (auto& [name, v] : old) {
    v->RetireMirrors();
    v->CancelWaiters(absl::AbortedError(
        absl::StrCat("variable '", name, "' was dropped; pull again")));
  }
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

absl::StatusOr<SaveResult> VariableStore::Save(
    const std::string& path, const std::optional<Caller>& caller) {
  std::vector<std::shared_ptr<Variable>> variables;
  {
    absl::ReaderMutexLock lock(&mu_);
    STRATA_RETURN_IF_ERROR(CheckCheckpointAccessLocked(caller, "save"));
    variables.reserve(variables_.size());
    for (const auto& [name, v] : variables_) variables.push_back(v);
  }
  STRATA_ASSIGN_OR_RETURN(std::string resolved, ResolvePath(path));
  Checkpoint ckpt;
  for (const auto& v : variables) {
    STRATA_ASSIGN_OR_RETURN(CheckpointVariable entry, v->CheckpointEntry());
    ckpt.variables.push_back(std::move(entry));
  }
  const int64_t num_variables = static_cast<int64_t>(ckpt.variables.size());
  for (CheckpointVariable& entry : tables_.CheckpointEntries()) {
    ckpt.variables.push_back(std::move(entry));
  }
  ckpt.extra["pushes_applied"] = pushes_applied_.load();
  STRATA_ASSIGN_OR_RETURN(int64_t bytes, WriteCheckpointFiles(resolved, ckpt));
  SaveResult result;
  result.path = resolved;
  result.num_variables = num_variables;
  result.bytes = bytes;
  return result;
}

absl::StatusOr<int64_t> VariableStore::Restore(
    const std::string& path, const std::optional<Caller>& caller) {
  STRATA_RETURN_IF_ERROR(CheckCheckpointAccess(caller, "restore"));
  STRATA_ASSIGN_OR_RETURN(std::string resolved, ResolvePath(path));
  STRATA_ASSIGN_OR_RETURN(Checkpoint ckpt, ReadCheckpointFiles(resolved));
  std::map<std::string, std::shared_ptr<Variable>> fresh;
  for (const CheckpointVariable& entry : ckpt.variables) {
    if (TableStore::IsTableEntry(entry)) continue;  // restored below
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
  STRATA_ASSIGN_OR_RETURN(TableStore::Prepared restored_tables,
                          tables_.PrepareRestore(ckpt));
  const std::vector<std::string> table_names = restored_tables.names();
  {
    absl::MutexLock lock(&mu_);
    // Another job may have created a variable or a table while the files
    // were read: then nothing changes.
    STRATA_RETURN_IF_ERROR(CheckCheckpointAccessLocked(caller, "restore"));
    tables_.CommitRestore(std::move(restored_tables));
    // A job's coordinator owns what it restored; an admin (or a server
    // without credentials) keeps the owners known before.
    absl::flat_hash_map<std::string, std::string> owners;
    for (const auto& [name, v] : fresh) {
      auto known = owners_.find(name);
      if (ReachesEveryJob(caller) && known != owners_.end()) {
        owners[name] = known->second;
      } else if (caller.has_value()) {
        owners[name] = caller->job;
      }
    }
    // The same for the tables the checkpoint held.
    absl::flat_hash_map<std::string, std::string> table_owners;
    for (const std::string& name : table_names) {
      auto known = table_owners_.find(name);
      if (ReachesEveryJob(caller) && known != table_owners_.end()) {
        table_owners[name] = known->second;
      } else if (caller.has_value()) {
        table_owners[name] = caller->job;
      }
    }
    for (auto& [name, v] : fresh) v->set_replication(sink_);
    variables_.swap(fresh);
    owners_.swap(owners);
    table_owners_.swap(table_owners);
    if (sink_ != nullptr && sink_->active()) {
      // The backup drops its variables and takes the restored ones.
      v1::ReplicationEntry e;
      e.set_kind(v1::ReplicationEntry::RESET);
      sink_->Append(std::move(e));
    }
  }
  absl::Status replicated = absl::OkStatus();
  if (sink_ != nullptr && sink_->active()) {
    replicated = AppendState();
    if (replicated.ok()) replicated = sink_->Wait(sink_->Tail());
  }
  for (auto& [name, old] : fresh) {
    // A call may still hold the old variable: its mirrors are gone now.
    old->RetireMirrors();
    old->CancelWaiters(absl::AbortedError(absl::StrCat(
        "variable '", name, "' was replaced by a restore from '", resolved,
        "'; pull again")));
  }
  if (!replicated.ok()) return replicated;
  return n;
}

absl::StatusOr<int64_t> VariableStore::RestoreTables(
    const std::vector<std::string>& paths,
    const std::optional<Caller>& caller) {
  STRATA_RETURN_IF_ERROR(CheckCheckpointAccess(caller, "restore"));
  std::vector<Checkpoint> checkpoints;
  for (const std::string& path : paths) {
    STRATA_ASSIGN_OR_RETURN(std::string resolved, ResolvePath(path));
    STRATA_ASSIGN_OR_RETURN(Checkpoint ckpt, ReadCheckpointFiles(resolved));
    checkpoints.push_back(std::move(ckpt));
  }
  return tables_.Reshard(checkpoints);
}

absl::StatusOr<int64_t> VariableStore::WriteCheckpointFiles(
    const std::string& path, const Checkpoint& checkpoint) {
  return WriteCheckpoint(path, checkpoint);
}

absl::StatusOr<Checkpoint> VariableStore::ReadCheckpointFiles(
    const std::string& path) {
  return ReadCheckpoint(path);
}

void VariableStore::RecordPush(const PushOutcome& outcome, int64_t bytes) {
  bytes_pushed_ += bytes;
  if (outcome.duplicate) {
    ++pushes_duplicate_;
  } else {
    ++pushes_applied_;
  }
  if (outcome.staged == PushOutcome::Staged::kPublished) ++pushes_staged_;
  if (outcome.staged == PushOutcome::Staged::kDiscarded) ++staged_discarded_;
  if (outcome.staleness >= 0) {
    ++pushes_with_base_version_;
    staleness_sum_ += outcome.staleness;
    int64_t max = staleness_max_.load();
    while (outcome.staleness > max &&
           !staleness_max_.compare_exchange_weak(max, outcome.staleness)) {
    }
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
  s.pushes_with_base_version = pushes_with_base_version_.load();
  s.staleness_sum = staleness_sum_.load();
  s.pushes_staged = pushes_staged_.load();
  s.staged_discarded = staged_discarded_.load();
  s.staleness_max = staleness_max_.load();
  return s;
}

void VariableStore::CancelWaiters(const absl::Status& status) {
  for (const auto& v : List()) v->CancelWaiters(status);
}

}  // namespace strata

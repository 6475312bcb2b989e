// CoordinatorState: the locked facade. Each method validates what needs no
// state, takes the state lock, calls the piece that does the work
// (coordinator_internal.h), and after unlocking runs barrier callbacks and
// watchers and writes state.json.
#include "coordinator/coordinator_state.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_internal.h"

namespace strata {

using coordinator_internal::CoordinatorCore;
using coordinator_internal::TaskKey;
namespace ci = coordinator_internal;

namespace {

constexpr const char* kStateFile = "state.json";

}  // namespace

// ---------------------------------------------------------------------------
// Construction and persistence.

CoordinatorState::CoordinatorState(std::unique_ptr<CoordinatorCore> core)
    : core_(std::move(core)) {}

CoordinatorState::~CoordinatorState() = default;

const CoordinatorOptions& CoordinatorState::options() const {
  return core_->options;
}

absl::StatusOr<std::unique_ptr<CoordinatorState>> CoordinatorState::Create(
    CoordinatorOptions options, Logger* logger) {
  if (options.lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease must be positive");
  }
  if (options.heartbeat_interval <= absl::ZeroDuration() ||
      options.heartbeat_interval >= options.lease) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat interval (",
                     absl::FormatDuration(options.heartbeat_interval),
                     ") must be positive and shorter than the lease (",
                     absl::FormatDuration(options.lease), ")"));
  }
  if (options.topology_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("topology timeout must be >= 0");
  }
  if (options.retry_after <= absl::ZeroDuration() ||
      options.restore_retry <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "retry_after and restore_retry must be positive");
  }
  if (options.restore_attempts < 1) {
    return absl::InvalidArgumentError("restore_attempts must be >= 1");
  }
  if (!options.clock) options.clock = [] { return absl::Now(); };
  if (options.file_system == nullptr) options.file_system = LocalFileSystem();
  std::unique_ptr<CoordinatorState> state(new CoordinatorState(
      std::make_unique<CoordinatorCore>(std::move(options), logger)));
  if (!state->persistent()) return state;

  FileSystem* fs = state->options().file_system;
  const std::string dir = state->options().state_dir;
  if (absl::Status s = fs->CreateDirs(dir); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create coordinator state directory ", dir, ": ", s.message()));
  }
  const std::string path = state->StatePath();
  absl::StatusOr<std::string> text = fs->ReadFile(path);
  if (absl::IsNotFound(text.status())) return state;
  if (absl::IsUnavailable(text.status())) {
    // The store is out of reach for now (etcd): not a corrupt state.
    return absl::UnavailableError(absl::StrCat(
        "coordinator state ", path, " cannot be read now: ",
        text.status().message()));
  }
  if (!text.ok()) {
    return absl::DataLossError(
        absl::StrCat("coordinator state ", path, " cannot be read"));
  }
  CoordinatorCore& core = *state->core_;
  absl::MutexLock lock(&core.mu);
  absl::Status s = ci::LoadState(core, *text);
  if (!s.ok()) {
    return absl::DataLossError(
        absl::StrCat("coordinator state ", path, " is corrupt: ", s.message(),
                     " (move it away to start afresh)"));
  }
  const ci::Job* job = core.job ? &*core.job : nullptr;
  core.logger->Info(
      "state_loaded",
      {{"path", path},
       {"generation", core.generation},
       {"members", core.members.size()},
       {"job", job ? job->id : ""},
       {"job_state", job ? v1::JobStatus::State_Name(job->state) : ""},
       {"steps_completed", job ? job->completed.size() : 0},
       {"lost_steps", job ? job->lost_steps : 0}});
  return state;
}

std::string CoordinatorState::StatePath() const {
  return absl::StrCat(options().state_dir, "/", kStateFile);
}

absl::Status CoordinatorState::Flush() {
  if (!persistent()) return absl::OkStatus();
  absl::MutexLock write_lock(&write_mu_);
  std::string data;
  int64_t seq = 0;
  {
    absl::MutexLock lock(&core_->mu);
    seq = core_->change_seq;
    if (seq == durable_seq_) return absl::OkStatus();
    data = ci::SerializeState(*core_);
  }
  absl::Status s = options().file_system->WriteFileAtomically(StatePath(), data);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot write coordinator state: ", s.message()));
  }
  durable_seq_ = seq;
  return absl::OkStatus();
}

void CoordinatorState::FlushOrLog() {
  absl::Status s = Flush();
  if (!s.ok()) {
    core_->logger->Error("state_write_failed", {{"error", s.ToString()}});
  }
}

void CoordinatorState::AfterChange(Callbacks callbacks) {
  for (auto& [done, status] : callbacks) done(status);
  absl::MutexLock lock(&watchers_mu_);
  const int64_t g = generation();
  if (g <= notified_generation_) return;
  notified_generation_ = g;
  for (auto& [id, watcher] : watchers_) watcher(g);
}

// ---------------------------------------------------------------------------
// Membership.

absl::StatusOr<int64_t> CoordinatorState::Register(
    const v1::TaskId& task_id, const std::string& address,
    const std::string& incarnation, bool exclusive,
    const std::string& replaces, bool only_if_failed) {
  STRATA_ASSIGN_OR_RETURN(
      TaskKey task, ci::ValidateRegistration(*core_, task_id, incarnation));
  Callbacks callbacks;
  int64_t generation = 0;
  {
    absl::MutexLock lock(&core_->mu);
    bool state_intact = false;
    if (exclusive) {
      STRATA_ASSIGN_OR_RETURN(state_intact,
                              ci::CheckExclusiveClaim(*core_, task,
                                                      incarnation, replaces,
                                                      only_if_failed));
    }
    generation = ci::RegisterMember(*core_, task, address, incarnation,
                                    &callbacks, state_intact);
  }
  AfterChange(std::move(callbacks));
  STRATA_RETURN_IF_ERROR(Flush());
  return generation;
}

absl::StatusOr<int64_t> CoordinatorState::Heartbeat(
    const v1::TaskId& task_id, const std::string& incarnation,
    const std::string& fence) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ci::ValidateTask(task_id));
  absl::MutexLock lock(&core_->mu);
  STRATA_ASSIGN_OR_RETURN(ci::MemberRecord * m,
                          ci::LiveMember(*core_, task, incarnation));
  m->last_heartbeat = core_->Now();
  if (!fence.empty()) {
    m->fenced.push_back(fence);
    if (m->fenced.size() > 16) m->fenced.erase(m->fenced.begin());
    core_->logger->Info("ps_backup_fenced", {{"member", ci::Name(task)},
                                             {"backup", fence}});
  }
  return core_->generation;
}

absl::Status CoordinatorState::Deregister(const v1::TaskId& task_id,
                                          const std::string& incarnation) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ci::ValidateTask(task_id));
  Callbacks callbacks;
  {
    absl::MutexLock lock(&core_->mu);
    STRATA_ASSIGN_OR_RETURN(
        bool left, ci::DeregisterMember(*core_, task, incarnation, &callbacks));
    if (!left) return absl::OkStatus();  // had left already
  }
  AfterChange(std::move(callbacks));
  return Flush();
}

void CoordinatorState::CheckLeases() {
  Callbacks callbacks;
  {
    absl::MutexLock lock(&core_->mu);
    ci::ExpireLeases(*core_, &callbacks);
  }
  AfterChange(std::move(callbacks));
  FlushOrLog();
}

int64_t CoordinatorState::generation() const {
  absl::MutexLock lock(&core_->mu);
  return core_->generation;
}

v1::ClusterState CoordinatorState::GetClusterState() const {
  absl::MutexLock lock(&core_->mu);
  return ci::ClusterStateOf(*core_);
}

std::string CoordinatorState::GetClusterSpec() const {
  TfConfig config;
  if (options().static_cluster) {
    config.cluster = *options().static_cluster;
  } else {
    absl::MutexLock lock(&core_->mu);
    config.cluster = ci::AliveCluster(*core_);
  }
  return TfConfigToJson(config);
}

std::vector<PsTarget> CoordinatorState::PsTargets() const {
  std::map<int, std::pair<std::string, std::string>> by_index;
  if (options().static_cluster) {
    auto it = options().static_cluster->jobs.find("ps");
    if (it != options().static_cluster->jobs.end()) {
      for (size_t i = 0; i < it->second.size(); ++i) {
        by_index[static_cast<int>(i)] = {it->second[i], ""};
      }
    }
  }
  {
    absl::MutexLock lock(&core_->mu);
    for (auto& [index, member] : ci::AlivePsMembers(*core_)) {
      by_index[index] = std::move(member);
    }
  }
  std::vector<PsTarget> out;
  for (const auto& [index, member] : by_index) {
    out.push_back(
        PsTarget{absl::StrCat("ps:", index), member.first, member.second});
  }
  return out;
}

int64_t CoordinatorState::AddWatcher(Watcher watcher) {
  absl::MutexLock lock(&watchers_mu_);
  const int64_t id = next_watcher_id_++;
  watchers_[id] = std::move(watcher);
  return id;
}

void CoordinatorState::RemoveWatcher(int64_t id) {
  absl::MutexLock lock(&watchers_mu_);
  watchers_.erase(id);
}

int64_t CoordinatorState::WaitForChange(int64_t after_generation,
                                        absl::Time deadline) const {
  CoordinatorCore& core = *core_;
  absl::MutexLock lock(&core.mu);
  auto above = [&core, after_generation] {
    core.mu.AssertHeld();
    return core.generation > after_generation;
  };
  core.mu.AwaitWithDeadline(absl::Condition(&above), deadline);
  return core.generation;
}

// ---------------------------------------------------------------------------
// Job.

absl::StatusOr<std::string> CoordinatorState::SubmitJob(
    const std::string& job_json, int64_t train_examples) {
  STRATA_ASSIGN_OR_RETURN(ci::JobPlan plan,
                          ci::PlanJob(job_json, train_examples));
  std::string static_error;
  std::string id;
  {
    absl::MutexLock lock(&core_->mu);
    STRATA_ASSIGN_OR_RETURN(id, ci::StartJob(*core_, job_json, train_examples,
                                             plan, &static_error));
  }
  STRATA_RETURN_IF_ERROR(Flush());
  if (!static_error.empty()) {
    return absl::FailedPreconditionError(static_error);
  }
  return id;
}

v1::JobStatus::State CoordinatorState::JobState() const {
  absl::MutexLock lock(&core_->mu);
  return core_->job ? core_->job->state : v1::JobStatus::NONE;
}

v1::JobStatus CoordinatorState::GetJob() const {
  absl::MutexLock lock(&core_->mu);
  return ci::JobStatusOf(*core_);
}

absl::StatusOr<v1::WorkItem> CoordinatorState::GetWork(
    const v1::TaskId& task_id, const std::string& incarnation) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ci::ValidateTask(task_id));
  if (task.role == "ps") {
    return absl::FailedPreconditionError(
        absl::StrCat("task ", ci::Name(task), ": ps tasks take no work"));
  }
  absl::StatusOr<v1::WorkItem> item;
  bool changed = false;
  {
    absl::MutexLock lock(&core_->mu);
    const int64_t seq = core_->change_seq;
    item = ci::NextWorkItem(*core_, task, incarnation);
    changed = core_->change_seq != seq;
  }
  if (changed) FlushOrLog();
  return item;
}

absl::Status CoordinatorState::ReportWork(const v1::ReportWorkRequest& report) {
  STRATA_RETURN_IF_ERROR(ApplyReport(report));
  return Flush();
}

absl::Status CoordinatorState::ApplyReport(
    const v1::ReportWorkRequest& report) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ci::ValidateTask(report.task()));
  STRATA_RETURN_IF_ERROR(ci::ValidateReport(report));
  absl::MutexLock lock(&core_->mu);
  return ci::ApplyValidReport(*core_, task, report);
}

absl::StatusOr<int> CoordinatorState::ReleaseUnheld(
    const v1::TaskId& task_id, const std::string& incarnation,
    const std::vector<int64_t>& holding,
    const std::vector<int64_t>& holding_evaluations) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ci::ValidateTask(task_id));
  const std::set<int64_t> held(holding.begin(), holding.end());
  const std::set<int64_t> held_evaluations(holding_evaluations.begin(),
                                           holding_evaluations.end());
  absl::MutexLock lock(&core_->mu);
  return ci::ReleaseUnheldItems(*core_, task, incarnation, held,
                                held_evaluations);
}

// ---------------------------------------------------------------------------
// Checkpoints.

int64_t CoordinatorState::RequestCheckpoint() {
  absl::MutexLock lock(&core_->mu);
  return ci::RequestCheckpoint(*core_);
}

int64_t CoordinatorState::CheckpointAttempted() const {
  absl::MutexLock lock(&core_->mu);
  return core_->job ? core_->job->checkpoint_attempted : -1;
}

std::string CoordinatorState::LastCheckpoint() const {
  absl::MutexLock lock(&core_->mu);
  const ci::CheckpointRecord* newest =
      core_->job ? ci::NewestCheckpoint(*core_->job) : nullptr;
  return newest != nullptr ? newest->name : std::string();
}

std::optional<PsAction> CoordinatorState::NextPsAction() {
  std::optional<PsAction> action;
  bool changed = false;
  {
    absl::MutexLock lock(&core_->mu);
    const int64_t seq = core_->change_seq;
    ci::UpdateJob(*core_);
    changed = core_->change_seq != seq;
    action = ci::TakePsAction(*core_);
  }
  if (changed) FlushOrLog();
  return action;
}

void CoordinatorState::PruneLater(const std::vector<std::string>& names) {
  {
    absl::MutexLock lock(&core_->mu);
    if (!core_->job) return;
    ci::Job& job = *core_->job;
    for (const std::string& name : names) {
      bool kept = false;
      for (const ci::CheckpointRecord& r : job.checkpoints) {
        kept = kept || r.name == name;
      }
      if (!kept) job.unusable_checkpoints.push_back(name);
    }
    core_->MarkDirty();
  }
  FlushOrLog();
}

std::vector<std::string> CoordinatorState::FinishPsAction(
    const PsAction& action, const absl::Status& status) {
  std::vector<std::string> prune;
  {
    absl::MutexLock lock(&core_->mu);
    if (!ci::ApplyPsActionResult(*core_, action, status, &prune)) return {};
  }
  absl::Status flushed = Flush();
  if (!flushed.ok()) {
    core_->logger->Error("state_write_failed", {{"error", flushed.ToString()}});
    // Until the new checkpoint is on disk, the old ones stay.
    return {};
  }
  return prune;
}

// ---------------------------------------------------------------------------
// Groups.

absl::StatusOr<v1::GroupAssignment> CoordinatorState::JoinGroup(
    const v1::JoinGroupRequest& request) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ci::ValidateTask(request.task()));
  if (task.role != "chief" && task.role != "worker") {
    return absl::FailedPreconditionError(
        absl::StrCat("task ", ci::Name(task),
                     ": only chief and worker tasks train in groups"));
  }
  if (request.epoch_ends_size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch_ends: ", request.epoch_ends_size(),
                     " entries, at most 64"));
  }
  for (const v1::EpochEnd& e : request.epoch_ends()) {
    if (e.epoch() < 0 || e.ago_ms() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("epoch_ends: epoch ", e.epoch(), " ago_ms ",
                       e.ago_ms(), ": both must be >= 0"));
    }
  }
  absl::StatusOr<v1::GroupAssignment> out;
  bool changed = false;
  {
    absl::MutexLock lock(&core_->mu);
    out = ci::JoinGroupLocked(*core_, task, request, &changed);
  }
  if (changed) FlushOrLog();
  return out;
}

int64_t CoordinatorState::NewestGroup() {
  absl::MutexLock lock(&core_->mu);
  return ci::NewestGroupLocked(*core_);
}

// ---------------------------------------------------------------------------
// Barriers.

absl::Status CoordinatorState::ArriveAtBarrier(const std::string& name,
                                               const v1::TaskId& task_id,
                                               int count, int64_t ticket,
                                               BarrierDone done) {
  STRATA_RETURN_IF_ERROR(ci::ValidateBarrier(name, count));
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ci::ValidateTask(task_id));
  Callbacks callbacks;
  {
    absl::MutexLock lock(&core_->mu);
    STRATA_RETURN_IF_ERROR(ci::Arrive(*core_, name, task, count, ticket,
                                      std::move(done), &callbacks));
  }
  for (auto& [fn, status] : callbacks) fn(status);
  return absl::OkStatus();
}

bool CoordinatorState::CancelBarrierWait(int64_t ticket) {
  absl::MutexLock lock(&core_->mu);
  return ci::CancelWait(*core_, ticket);
}

void CoordinatorState::CancelAllBarriers(const absl::Status& status) {
  Callbacks callbacks;
  {
    absl::MutexLock lock(&core_->mu);
    ci::CancelAll(*core_, status, &callbacks);
  }
  for (auto& [fn, s] : callbacks) fn(s);
}

}  // namespace strata

// CoordinatorState: groups of synchronous strategies (see
// coordinator_state.h, "Groups").
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_state.h"

namespace strata {

bool CoordinatorState::SyncGroupJobLocked() const {
  return job_ && job_->spec.policy != nullptr &&
         job_->spec.policy->loop() == TrainingLoop::kSyncGroup;
}

std::vector<CoordinatorState::TaskKey>
CoordinatorState::GroupCandidatesLocked() const {
  std::vector<TaskKey> out;
  for (const auto& [task, m] : members_) {
    if (m.state != v1::Member::ALIVE) continue;
    if (task.role != "chief" && task.role != "worker") continue;
    out.push_back(task);
  }
  // std::map order: chief before worker, then by index.
  if (!out.empty() && !job_->spec.policy->multi_worker()) out.resize(1);
  return out;
}

void CoordinatorState::UpdateGroupLocked() {
  Job& job = *job_;
  if (job.state != v1::JobStatus::RUNNING ||
      job.started == absl::InfinitePast()) {
    return;
  }
  Group& g = job.group;
  const std::vector<TaskKey> candidates = GroupCandidatesLocked();
  if (!g.forming) {
    if (g.id == 0) return;  // the first group forms on the first join
    bool same = candidates == g.members;
    for (size_t i = 0; same && i < candidates.size(); ++i) {
      same = members_.at(candidates[i]).incarnation == g.incarnations[i];
    }
    if (same) return;
    g.forming = true;
    g.pending_id = ++group_seq_;
    g.arrivals.clear();
    MarkDirtyLocked();
    logger_->Info("group_forming", {{"job", job.id},
                                    {"group", g.pending_id},
                                    {"previous", g.id},
                                    {"reason", "membership changed"}});
  }
  if (candidates.empty()) return;
  for (const TaskKey& t : candidates) {
    auto a = g.arrivals.find(t);
    if (a == g.arrivals.end() ||
        a->second.incarnation != members_.at(t).incarnation) {
      return;  // still waiting for `t`
    }
  }
  // Every candidate joined: form the group.
  g.forming = false;
  g.id = g.pending_id;
  g.members = candidates;
  g.incarnations.clear();
  g.addresses.clear();
  int64_t max_next = -1;
  int max_rank = -1;
  for (size_t r = 0; r < candidates.size(); ++r) {
    const GroupArrival& a = g.arrivals.at(candidates[r]);
    g.incarnations.push_back(a.incarnation);
    g.addresses.push_back(a.address);
    if (a.next_step > max_next) {
      max_next = a.next_step;
      max_rank = static_cast<int>(r);
    }
  }
  const int64_t first_open = job.completed.NextAbsent(0);
  if (job.spec.policy->variable_home() == VariableHome::kReplicas) {
    if (max_next >= 0) {
      // Resume from the most advanced replica; the others copy its state.
      g.start_step = std::min(max_next, job.total_steps);
      g.source_rank = max_rank;
    } else {
      // No replica holds state: rank 0 initializes and the others copy its
      // values (the chief's initial values, broadcast).
      g.start_step = 0;
      g.source_rank = 0;
    }
    // Steps below the start are in the survivors' state: applied.
    for (int64_t s = first_open; s < g.start_step; s = job.completed.NextAbsent(s)) {
      job.completed.Insert(s);
      job.requeued.erase(s);
      EpochStats& stats = job.epochs[static_cast<size_t>(s / job.steps_per_epoch)];
      ++stats.steps;
      if (stats.steps == job.steps_per_epoch) stats.end = Now();
    }
  } else {
    // Variables live on ps tasks: a step is reported only once the store
    // applied it, so the group resumes at the first unreported step.
    g.start_step = first_open;
    g.source_rank = -1;
  }
  g.arrivals.clear();
  MarkDirtyLocked();
  std::vector<std::string> names;
  for (const TaskKey& t : g.members) names.push_back(Name(t));
  logger_->Info("group_formed", {{"job", job.id},
                                 {"group", g.id},
                                 {"members", absl::StrJoin(names, ",")},
                                 {"start_step", g.start_step},
                                 {"source_rank", g.source_rank}});
}

void CoordinatorState::FillAssignmentLocked(const TaskKey& task,
                                            v1::GroupAssignment* out) const {
  const Group& g = job_->group;
  out->set_state(v1::GroupAssignment::READY);
  out->set_group(g.id);
  out->set_size(static_cast<int>(g.members.size()));
  out->set_start_step(g.start_step);
  out->set_source_rank(g.source_rank);
  out->set_job_id(job_->id);
  for (size_t r = 0; r < g.members.size(); ++r) {
    v1::GroupMember* m = out->add_members();
    m->mutable_task()->set_role(g.members[r].role);
    m->mutable_task()->set_index(g.members[r].index);
    m->set_address(g.addresses[r]);
    m->set_rank(static_cast<int>(r));
    if (g.members[r] == task) out->set_rank(static_cast<int>(r));
  }
}

absl::StatusOr<v1::GroupAssignment> CoordinatorState::JoinGroup(
    const v1::JoinGroupRequest& request) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ValidateTask(request.task()));
  if (task.role != "chief" && task.role != "worker") {
    return absl::FailedPreconditionError(absl::StrCat(
        "task ", Name(task), ": only chief and worker tasks train in groups"));
  }
  v1::GroupAssignment out;
  out.set_state(v1::GroupAssignment::WAIT);
  out.set_retry_after_ms(20);
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    STRATA_ASSIGN_OR_RETURN(MemberRecord * member,
                            LiveMemberLocked(task, request.incarnation()));
    member->last_heartbeat = Now();
    const int64_t seq = change_seq_;
    UpdateJobLocked();
    if (!job_) return out;
    Job& job = *job_;
    out.set_job_id(job.id);
    if (job.state != v1::JobStatus::RUNNING) {
      out.set_state(v1::GroupAssignment::DONE);
      return out;
    }
    if (!SyncGroupJobLocked()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job.id, ": strategy ", job.spec.strategy,
          " does not train in groups; take steps with GetWork"));
    }
    if (job.started == absl::InfinitePast()) return out;  // topology
    Group& g = job.group;
    const bool member_of_current =
        std::find(g.members.begin(), g.members.end(), task) != g.members.end();
    if (!g.forming && g.id > request.after_group() && member_of_current) {
      FillAssignmentLocked(task, &out);  // already formed (a retry)
      return out;
    }
    if (!g.forming) {
      g.forming = true;
      g.pending_id = ++group_seq_;
      g.arrivals.clear();
      logger_->Info("group_forming",
                    {{"job", job.id},
                     {"group", g.pending_id},
                     {"previous", g.id},
                     {"reason", absl::StrCat(Name(task), " asked after group ",
                                             request.after_group())}});
    }
    g.arrivals[task] = GroupArrival{request.incarnation(), request.next_step(),
                                    request.address()};
    MarkDirtyLocked();
    UpdateGroupLocked();
    if (!g.forming &&
        std::find(g.members.begin(), g.members.end(), task) !=
            g.members.end()) {
      FillAssignmentLocked(task, &out);
    }
    changed = change_seq_ != seq;
  }
  if (changed) FlushOrLog();
  return out;
}

int64_t CoordinatorState::NewestGroup() {
  absl::MutexLock lock(&mu_);
  if (!SyncGroupJobLocked()) return 0;
  UpdateGroupLocked();
  const Group& g = job_->group;
  return g.forming ? g.pending_id : g.id;
}

}  // namespace strata

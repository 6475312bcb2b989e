// Groups of synchronous strategies: formation once every live trainer has
// joined, ranks, the start step and the state source, regrouping (see
// coordinator_internal.h and CoordinatorState::JoinGroup).
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_internal.h"

namespace strata {
namespace coordinator_internal {
namespace {

// Live trainer tasks that form the group, in rank order.
std::vector<TaskKey> GroupCandidates(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  std::vector<TaskKey> out;
  for (const auto& [task, m] : core.members) {
    if (m.state != v1::Member::ALIVE) continue;
    if (task.role != "chief" && task.role != "worker") continue;
    out.push_back(task);
  }
  // std::map order: chief before worker, then by index.
  if (!out.empty() && !core.job->spec.policy->multi_worker()) out.resize(1);
  return out;
}

void FillAssignment(const CoordinatorCore& core, const TaskKey& task,
                    v1::GroupAssignment* out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  const Group& g = core.job->group;
  out->set_state(v1::GroupAssignment::READY);
  out->set_group(g.id);
  out->set_size(static_cast<int>(g.members.size()));
  out->set_start_step(g.start_step);
  out->set_source_rank(g.source_rank);
  out->set_generation(g.generation);
  out->set_job_id(core.job->id);
  for (size_t r = 0; r < g.members.size(); ++r) {
    v1::GroupMember* m = out->add_members();
    m->mutable_task()->set_role(g.members[r].role);
    m->mutable_task()->set_index(g.members[r].index);
    m->set_address(g.addresses[r]);
    m->set_rank(static_cast<int>(r));
    if (g.members[r] == task) out->set_rank(static_cast<int>(r));
  }
}

// Whether every candidate has joined the forming group (in its current
// incarnation).
bool AllArrived(const CoordinatorCore& core,
                const std::vector<TaskKey>& candidates)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  const Group& g = core.job->group;
  if (candidates.empty()) return false;
  for (const TaskKey& t : candidates) {
    auto a = g.arrivals.find(t);
    if (a == g.arrivals.end() ||
        a->second.incarnation != core.members.at(t).incarnation) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool PsHomeGroupJob(const CoordinatorCore& core) {
  return SyncGroupJob(core) &&
         core.job->spec.policy->variable_home() == VariableHome::kPsTasks;
}

bool GroupAtBarrier(const CoordinatorCore& core) {
  if (!SyncGroupJob(core) || !core.job->group.forming) return false;
  return AllArrived(core, GroupCandidates(core));
}

void StartRegroup(CoordinatorCore& core, const std::string& reason) {
  if (!SyncGroupJob(core)) return;
  if (core.job->group.id == 0 && !core.job->group.forming) {
    return;  // none formed yet
  }
  StartBarrier(core, reason);
}

void StartBarrier(CoordinatorCore& core, const std::string& reason) {
  if (!SyncGroupJob(core)) return;
  Group& g = core.job->group;
  g.forming = true;
  g.pending_id = ++core.group_seq;
  g.arrivals.clear();
  core.MarkDirty();
  core.logger->Info("group_forming", {{"job", core.job->id},
                                      {"group", g.pending_id},
                                      {"previous", g.id},
                                      {"reason", reason}});
}

bool SyncGroupJob(const CoordinatorCore& core) {
  return core.job && core.job->spec.policy != nullptr &&
         core.job->spec.policy->loop() == TrainingLoop::kSyncGroup;
}

void UpdateGroup(CoordinatorCore& core) {
  Job& job = *core.job;
  if (job.state != v1::JobStatus::RUNNING ||
      job.started == absl::InfinitePast()) {
    return;
  }
  Group& g = job.group;
  const std::vector<TaskKey> candidates = GroupCandidates(core);
  if (!g.forming) {
    if (g.id == 0) return;  // the first group forms on the first join
    bool same = candidates == g.members;
    for (size_t i = 0; same && i < candidates.size(); ++i) {
      same = core.members.at(candidates[i]).incarnation == g.incarnations[i];
    }
    if (same) return;
    g.forming = true;
    g.pending_id = ++core.group_seq;
    g.arrivals.clear();
    core.MarkDirty();
    core.logger->Info("group_forming", {{"job", job.id},
                                        {"group", g.pending_id},
                                        {"previous", g.id},
                                        {"reason", "membership changed"}});
  }
  if (!AllArrived(core, candidates)) return;  // still waiting for some
  if (PsHomeGroupJob(core)) {
    if (job.checkpoint_pending && !job.action_in_progress &&
        !PsDown(core).empty()) {
      // The save cannot start: the group trains on, and the checkpoint is
      // due again once every ps task is back (MarkCheckpointDue).
      job.checkpoint_pending = false;
      core.logger->Warning("checkpoint_deferred",
                           {{"job", job.id},
                            {"ps_down", PsDown(core)}});
    }
    if (job.checkpoint_pending || job.restore_pending ||
        job.action_in_progress) {
      // The ps tasks save (or are restored) while nobody trains: the group
      // forms once that is done, at the first step the store lacks.
      return;
    }
  }
  // Every candidate joined: form the group.
  g.forming = false;
  g.id = g.pending_id;
  g.generation = core.generation;
  g.members = candidates;
  g.incarnations.clear();
  g.addresses.clear();
  for (size_t r = 0; r < candidates.size(); ++r) {
    const GroupArrival& a = g.arrivals.at(candidates[r]);
    g.incarnations.push_back(a.incarnation);
    g.addresses.push_back(a.address);
  }
  const int64_t first_open = job.completed.NextAbsent(0);
  // The arrival whose state is furthest along, and the step it says every
  // step before is applied.
  int64_t max_next = -1;
  int max_rank = -1;
  const bool ps_home = PsHomeGroupJob(core);
  for (size_t r = 0; r < candidates.size(); ++r) {
    const GroupArrival& a = g.arrivals.at(candidates[r]);
    // Variables on ps tasks: a member's claim is the version it last pulled
    // (steps below it are in the store), valid only if no restore replaced
    // the store since the group it pulled in.
    if (ps_home && a.after_group < job.first_group_after_restore) continue;
    if (a.next_step > max_next) {
      max_next = a.next_step;
      max_rank = static_cast<int>(r);
    }
  }
  if (!ps_home) {
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
  } else {
    // Variables live on ps tasks: a step is reported only once the store
    // applied it, so the group resumes at the first unreported step, or
    // past it where a member pulled a newer version (its reports were
    // lost with a coordinator restart: re-running those steps would only
    // have their pushes refused as stale).
    g.start_step = std::max(first_open, std::min(max_next, job.total_steps));
    g.source_rank = -1;
  }
  // Steps below the start are in the survivors' state (or the store):
  // applied. An epoch they complete ended when the source's state
  // finished it (its reports were lost), not now.
  const std::map<int64_t, absl::Time> no_ends;
  const std::map<int64_t, absl::Time>& ends =
      max_rank >= 0
          ? g.arrivals.at(candidates[static_cast<size_t>(max_rank)]).epoch_ends
          : no_ends;
  for (int64_t s = first_open; s < g.start_step;
       s = job.completed.NextAbsent(s)) {
    job.completed.Insert(s);
    job.requeued.erase(s);
    const int64_t epoch = s / job.steps_per_epoch;
    EpochStats& stats = job.epochs[static_cast<size_t>(epoch)];
    ++stats.steps;
    if (stats.steps == job.steps_per_epoch) {
      auto ended = ends.find(epoch);
      // Not before the epoch started, not after now (clocks of HA
      // leaders may disagree: no std::clamp, whose bounds could cross).
      stats.end = ended == ends.end()
                      ? core.Now()
                      : std::min(std::max(ended->second, stats.start),
                                 core.Now());
    }
  }
  g.arrivals.clear();
  core.MarkDirty();
  std::vector<std::string> names;
  for (const TaskKey& t : g.members) names.push_back(Name(t));
  core.logger->Info("group_formed", {{"job", job.id},
                                     {"group", g.id},
                                     {"members", absl::StrJoin(names, ",")},
                                     {"start_step", g.start_step},
                                     {"source_rank", g.source_rank}});
}

absl::StatusOr<v1::GroupAssignment> JoinGroupLocked(
    CoordinatorCore& core, const TaskKey& task,
    const v1::JoinGroupRequest& request, bool* changed) {
  v1::GroupAssignment out;
  out.set_state(v1::GroupAssignment::WAIT);
  out.set_retry_after_ms(20);
  STRATA_ASSIGN_OR_RETURN(MemberRecord * member,
                          LiveMember(core, task, request.incarnation()));
  member->last_heartbeat = core.Now();
  const int64_t seq = core.change_seq;
  UpdateJob(core);
  if (!core.job) return out;
  Job& job = *core.job;
  out.set_job_id(job.id);
  if (job.state != v1::JobStatus::RUNNING) {
    out.set_state(v1::GroupAssignment::DONE);
    return out;
  }
  if (!SyncGroupJob(core)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id, ": strategy ", job.spec.strategy,
        " does not train in groups; take steps with GetWork"));
  }
  if (job.started == absl::InfinitePast()) return out;  // topology
  Group& g = job.group;
  const bool member_of_current =
      std::find(g.members.begin(), g.members.end(), task) != g.members.end();
  if (!g.forming && g.id > request.after_group() && member_of_current) {
    FillAssignment(core, task, &out);  // already formed (a retry)
    return out;
  }
  if (!g.forming) {
    g.forming = true;
    g.pending_id = ++core.group_seq;
    g.arrivals.clear();
    core.logger->Info("group_forming",
                      {{"job", job.id},
                       {"group", g.pending_id},
                       {"previous", g.id},
                       {"reason", absl::StrCat(Name(task), " asked after group ",
                                               request.after_group())}});
  }
  GroupArrival arrival{request.incarnation(), request.next_step(),
                       request.address(), request.after_group(), {}};
  for (const v1::EpochEnd& e : request.epoch_ends()) {
    arrival.epoch_ends[e.epoch()] =
        core.Now() - absl::Milliseconds(e.ago_ms());
  }
  g.arrivals[task] = std::move(arrival);
  core.MarkDirty();
  UpdateGroup(core);
  if (!g.forming &&
      std::find(g.members.begin(), g.members.end(), task) != g.members.end()) {
    FillAssignment(core, task, &out);
  }
  *changed = core.change_seq != seq;
  return out;
}

int64_t NewestGroupLocked(CoordinatorCore& core) {
  if (!SyncGroupJob(core)) return 0;
  UpdateGroup(core);
  const Group& g = core.job->group;
  return g.forming ? g.pending_id : g.id;
}

}  // namespace coordinator_internal
}  // namespace strata

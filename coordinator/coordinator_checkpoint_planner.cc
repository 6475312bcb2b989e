// The checkpoint planner: when the PS tasks save (every N steps / seconds,
// on request, at the end of the job) and restore (after a ps task
// restarted), and the job's bookkeeping of both (see
// coordinator_internal.h). The PS calls themselves are CoordinatorDriver's.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/coordinator_internal.h"

namespace strata {
namespace coordinator_internal {
namespace {

bool TakesCheckpoints(const Job& job) {
  return job.spec.checkpoint_every_steps > 0 ||
         job.spec.checkpoint_every_seconds > 0;
}

// The PS tasks were restored (from the last checkpoint, or re-created when
// there is none): the steps completed since are pending again and the
// epoch results revert to the checkpoint's.
void RestoreBookkeeping(CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  Job& job = *core.job;
  const CheckpointRecord* checkpoint = NewestCheckpoint(job);
  const StepSet base = checkpoint != nullptr ? checkpoint->completed : StepSet();
  const std::vector<int64_t> redo = job.completed.Minus(base);
  const int64_t lost = job.completed.size() - base.size();
  job.lost_steps += lost;
  job.completed = base;
  std::vector<EpochStats> epochs =
      checkpoint == nullptr || checkpoint->epochs.empty()
          ? std::vector<EpochStats>(static_cast<size_t>(job.spec.epochs))
          : checkpoint->epochs;
  for (size_t e = 0; e < epochs.size(); ++e) {
    // Keep when the epoch first started; its end is redone.
    if (epochs[e].start == absl::InfinitePast()) {
      epochs[e].start = job.epochs[e].start;
    }
    if (epochs[e].steps < job.steps_per_epoch) {
      epochs[e].end = absl::InfinitePast();
    }
  }
  job.epochs = std::move(epochs);
  job.requeued.clear();
  job.cursor = 0;
  job.restore_pending = false;
  job.restore_failures_in_a_row = 0;
  job.checkpoint_pending = false;
  job.checkpoint_attempted = base.size();
  core.MarkDirty();
  // A group training on the lost variables cannot go on: the next one
  // starts at the first step the restored variables lack.
  StartRegroup(core, "the ps tasks were restored");
  job.first_group_after_restore = core.group_seq + 1;
  if (job.group.forming) job.first_group_after_restore = job.group.pending_id;
  core.logger->Warning(
      "ps_restored",
      {{"job", job.id},
       {"checkpoint",
        checkpoint == nullptr ? std::string("(none)") : checkpoint->name},
       {"checkpoint_step", base.size()},
       {"lost_steps", lost},
       {"total_lost_steps", job.lost_steps},
       {"requeued_steps", redo.size()},
       {"first_requeued", redo.empty() ? int64_t{-1} : redo.front()}});
}

}  // namespace

void NotePsRestart(CoordinatorCore& core, const TaskKey& task) {
  if (!core.job || core.job->state != v1::JobStatus::RUNNING ||
      core.job->started == absl::InfinitePast()) {
    return;
  }
  Job& job = *core.job;
  if (job.spec.policy->variable_home() != VariableHome::kPsTasks) {
    // The ps tasks hold no model state (the "ps" collective's reduction
    // buffer): the group re-forms and re-creates it; nothing is lost.
    core.logger->Warning("ps_restart_detected",
                         {{"member", Name(task)},
                          {"job", job.id},
                          {"restore", false},
                          {"steps_completed", job.completed.size()}});
    StartRegroup(core, absl::StrCat(Name(task), " restarted"));
    return;
  }
  if (!job.spec.policy->task_holds_variables(task.index)) {
    // central_storage keeps every variable on ps task 0: another task's
    // restart loses nothing, and nobody needs to regroup for it.
    core.logger->Warning("ps_restart_detected",
                         {{"member", Name(task)},
                          {"job", job.id},
                          {"restore", false},
                          {"reason", "holds none of the job's variables"},
                          {"steps_completed", job.completed.size()}});
    return;
  }
  if (SyncGroupJob(core) && job.checkpoints.empty()) {
    // The group rewinds to step 0: consistent only when no other task
    // holds variables (SYNC, at the version they reached), which could not
    // be rewound with it.
    int holding = 0;
    for (const auto& [t, m] : core.members) {
      holding += t.role == "ps" && t.index != task.index &&
                 job.spec.policy->task_holds_variables(t.index);
    }
    if (holding > 0) {
      FailJob(core,
              absl::StrCat(Name(task), " restarted and lost its variables; ",
                           job.spec.strategy, " keeps no checkpoints, and the ",
                           holding, " other ps task(s) holding variables "
                           "cannot be rewound to step 0 with it (use "
                           "checkpoints or strategy.ps_replication 2)"));
      return;
    }
  }
  job.restore_pending = true;
  ++job.restore_seq;
  job.restore_floor_generation = core.generation;
  job.next_restore_attempt = absl::InfinitePast();
  core.MarkDirty();
  core.logger->Warning("ps_restart_detected",
                       {{"member", Name(task)},
                        {"job", job.id},
                        {"steps_completed", job.completed.size()},
                        {"last_checkpoint", NewestCheckpoint(job) != nullptr
                                                ? NewestCheckpoint(job)->name
                                                : std::string()},
                        {"inflight", job.inflight.size()}});
}

bool AdvanceRestore(CoordinatorCore& core) {
  Job& job = *core.job;
  if (job.restore_pending && job.checkpoints.empty() &&
      job.inflight.empty() && !job.action_in_progress) {
    // Nothing to restore from: the workers re-create the variables and
    // every completed step is redone.
    RestoreBookkeeping(core);
  }
  return job.restore_pending || job.action_in_progress;
}

void MarkCheckpointDue(CoordinatorCore& core, bool all_done) {
  Job& job = *core.job;
  const int64_t completed = job.completed.size();
  if (job.checkpoint_pending || !TakesCheckpoints(job) ||
      completed <= job.checkpoint_attempted) {
    return;
  }
  // central_storage's replicas would wait at the barrier for a save that
  // cannot start while a ps task is down: due once it is back.
  if (!all_done && PsHomeGroupJob(core) && !PsDown(core).empty()) return;
  const int64_t every = job.spec.checkpoint_every_steps;
  bool due = all_done;
  if (every > 0 && completed / every > job.checkpoint_attempted / every) {
    due = true;
  }
  if (job.spec.checkpoint_every_seconds > 0 &&
      core.Now() - job.checkpoint_attempt_time >=
          absl::Seconds(job.spec.checkpoint_every_seconds)) {
    due = true;
  }
  if (due) {
    job.checkpoint_pending = true;
    core.logger->Info("checkpoint_due", {{"job", job.id},
                                         {"steps_completed", completed},
                                         {"inflight", job.inflight.size()}});
    // central_storage: the replicas stop between steps and wait in the
    // next group's barrier while the store saves.
    if (!all_done && PsHomeGroupJob(core)) {
      StartBarrier(core, "checkpoint due");
    }
  }
}

int64_t RequestCheckpoint(CoordinatorCore& core) {
  if (!core.job || core.job->state != v1::JobStatus::RUNNING ||
      core.job->started == absl::InfinitePast() || core.job->restore_pending ||
      (UsesPs(core) && !PsDown(core).empty())) {
    return -1;
  }
  Job& job = *core.job;
  const int64_t completed = job.completed.size();
  if (!TakesCheckpoints(job) || completed <= job.checkpoint_attempted) {
    return -1;
  }
  if (!job.checkpoint_pending) {
    job.checkpoint_pending = true;
    core.logger->Info("checkpoint_due", {{"job", job.id},
                                         {"reason", "requested"},
                                         {"steps_completed", completed},
                                         {"inflight", job.inflight.size()}});
    if (PsHomeGroupJob(core) && completed < job.total_steps) {
      StartBarrier(core, "checkpoint requested");
    }
  }
  return completed;
}

std::optional<PsAction> TakePsAction(CoordinatorCore& core) {
  if (!core.job || core.job->state != v1::JobStatus::RUNNING ||
      core.job->started == absl::InfinitePast() ||
      core.job->action_in_progress || !core.job->inflight.empty() ||
      !PsDown(core).empty()) {
    return std::nullopt;
  }
  Job& job = *core.job;
  std::optional<PsAction> action;
  if (job.restore_pending) {
    const CheckpointRecord* checkpoint = NewestCheckpoint(job);
    if (checkpoint != nullptr && core.Now() >= job.next_restore_attempt) {
      action = PsAction{PsAction::Kind::kRestore, checkpoint->name, {}, job.id,
                        job.restore_seq};
      core.logger->Info("restore_started", {{"job", job.id},
                                            {"checkpoint", checkpoint->name}});
    }
  } else if (job.checkpoint_pending &&
             (!PsHomeGroupJob(core) || GroupAtBarrier(core) ||
              job.completed.size() == job.total_steps)) {
    // A group job's store saves at a barrier (or once every step is done):
    // between two of its steps, which every replica either pushed whole or
    // not at all. It may hold one step more than `completed` (applied, not
    // yet reported when the replicas left): restored, that step is pushed
    // again, refused as stale, and reported.
    job.save_completed = job.completed;
    job.save_epochs = job.epochs;
    action = PsAction{PsAction::Kind::kSave,
                      absl::StrCat("ckpt-", job.completed.size()), {}, job.id,
                      job.restore_seq};
    // Once this one is saved: the kept ones beyond the newest `keep`, and
    // those a restore skipped (this save overwrites one of the same name).
    const size_t keep =
        static_cast<size_t>(std::max(1, job.spec.checkpoint_keep));
    for (const std::string& name : job.unusable_checkpoints) {
      if (name != action->checkpoint) action->prune.push_back(name);
    }
    for (size_t i = 0; i + keep < job.checkpoints.size() + 1; ++i) {
      action->prune.push_back(job.checkpoints[i].name);
    }
    core.logger->Info("checkpoint_started",
                      {{"job", job.id}, {"checkpoint", action->checkpoint}});
  }
  if (action) job.action_in_progress = true;
  return action;
}

bool ApplyPsActionResult(CoordinatorCore& core, const PsAction& action,
                         const absl::Status& status,
                         std::vector<std::string>* prune) {
  if (!core.job || core.job->id != action.job_id ||
      !core.job->action_in_progress) {
    return false;  // the job ended or was replaced meanwhile
  }
  Job& job = *core.job;
  job.action_in_progress = false;
  const absl::Time now = core.Now();
  if (action.kind == PsAction::Kind::kSave) {
    job.checkpoint_pending = false;
    job.checkpoint_attempted = job.save_completed.size();
    job.checkpoint_attempt_time = now;
    if (action.ticket != job.restore_seq) {
      // Some task may have written it (even from a restarted, empty
      // store): deleted with the next pruning.
      job.unusable_checkpoints.push_back(action.checkpoint);
      core.logger->Warning("checkpoint_discarded",
                           {{"job", job.id},
                            {"checkpoint", action.checkpoint},
                            {"reason", "a ps task restarted during the save"}});
    } else if (status.ok()) {
      CheckpointRecord record;
      record.name = action.checkpoint;
      record.step = job.save_completed.size();
      record.completed = job.save_completed;
      record.epochs = job.save_epochs;
      job.checkpoints.push_back(std::move(record));
      // What action.prune names is gone now (the driver deletes it).
      auto pruned = [&action](const std::string& name) {
        return std::find(action.prune.begin(), action.prune.end(), name) !=
               action.prune.end();
      };
      job.checkpoints.erase(
          std::remove_if(job.checkpoints.begin(), job.checkpoints.end() - 1,
                         [&](const CheckpointRecord& r) {
                           return pruned(r.name);
                         }),
          job.checkpoints.end() - 1);
      job.unusable_checkpoints.erase(
          std::remove_if(job.unusable_checkpoints.begin(),
                         job.unusable_checkpoints.end(),
                         [&](const std::string& name) {
                           return pruned(name) || name == action.checkpoint;
                         }),
          job.unusable_checkpoints.end());
      ++job.checkpoints_saved;
      job.checkpoint_failures_in_a_row = 0;
      *prune = action.prune;
      core.logger->Info("checkpoint_saved",
                        {{"job", job.id},
                         {"checkpoint", action.checkpoint},
                         {"step", job.checkpoints.back().step},
                         {"kept", static_cast<int64_t>(job.checkpoints.size())},
                         {"pruned", action.prune}});
    } else {
      ++job.checkpoints_failed;
      ++job.checkpoint_failures_in_a_row;
      job.last_checkpoint_error = status.ToString();
      const int max_failures = job.spec.checkpoint_max_failures;
      // Loud: a PS restart now loses every step since the newest kept
      // checkpoint, not one checkpoint interval.
      core.logger->Error(
          "checkpoint_failed",
          {{"job", job.id},
           {"checkpoint", action.checkpoint},
           {"error", job.last_checkpoint_error},
           {"failures_in_a_row", job.checkpoint_failures_in_a_row},
           {"failures", job.checkpoints_failed},
           {"max_failures", max_failures},
           {"newest_kept", NewestCheckpoint(job) != nullptr
                               ? NewestCheckpoint(job)->name
                               : std::string("(none)")}});
      if (max_failures > 0 &&
          job.checkpoint_failures_in_a_row >= max_failures) {
        job.save_completed.Clear();
        job.save_epochs.clear();
        FailJob(core,
                absl::StrCat("checkpoint failed ",
                             job.checkpoint_failures_in_a_row,
                             " times in a row (job.checkpoint.max_failures "
                             "is ",
                             max_failures, "); last error: ",
                             job.last_checkpoint_error));
        return true;
      }
    }
    job.save_completed.Clear();
    job.save_epochs.clear();
    core.MarkDirty();
  } else if (!status.ok()) {
    const CheckpointRecord* newest = NewestCheckpoint(job);
    const bool unusable = status.code() == absl::StatusCode::kDataLoss ||
                          status.code() == absl::StatusCode::kNotFound;
    if (unusable && newest != nullptr && newest->name == action.checkpoint) {
      // Corrupt or gone on some task: fall back to the next older one.
      job.checkpoints_skipped.push_back(
          absl::StrCat(action.checkpoint, ": ", status.ToString()));
      job.unusable_checkpoints.push_back(action.checkpoint);
      job.checkpoints.pop_back();
      job.next_restore_attempt = now;
      core.MarkDirty();
      newest = NewestCheckpoint(job);
      core.logger->Error(
          "checkpoint_skipped",
          {{"job", job.id},
           {"checkpoint", action.checkpoint},
           {"error", status.ToString()},
           {"falling_back_to",
            newest != nullptr ? newest->name : std::string("(none)")}});
      if (newest == nullptr) {
        FailJob(core,
                absl::StrCat("no checkpoint to restore the ps tasks from "
                             "verifies: ",
                             absl::StrJoin(job.checkpoints_skipped, "; ")));
      }
    } else {
      ++job.restore_failures_in_a_row;
      const absl::Duration retry = core.options.restore_retry;
      job.next_restore_attempt = now + retry;
      core.logger->Error(
          "restore_failed",
          {{"job", job.id},
           {"checkpoint", action.checkpoint},
           {"error", status.ToString()},
           {"failures_in_a_row", job.restore_failures_in_a_row},
           {"retry_in_ms", absl::ToInt64Milliseconds(retry)}});
      if (job.restore_failures_in_a_row >= core.options.restore_attempts) {
        FailJob(core, absl::StrCat("restoring the ps tasks from ",
                                   action.checkpoint, " failed ",
                                   job.restore_failures_in_a_row,
                                   " times in a row; last error: ",
                                   status.ToString()));
      }
    }
  } else if (action.ticket != job.restore_seq) {
    core.logger->Warning(
        "restore_superseded",
        {{"job", job.id}, {"reason", "another ps task restarted meanwhile"}});
  } else {
    RestoreBookkeeping(core);
  }
  UpdateJob(core);
  return true;
}

}  // namespace coordinator_internal
}  // namespace strata

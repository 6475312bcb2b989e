// The checkpoint planner: when the PS tasks save (every N steps / seconds,
// on request, at the end of the job) and restore (after a ps task
// restarted), and the job's bookkeeping of both (see
// coordinator_internal.h). The PS calls themselves are CoordinatorDriver's.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
  const std::vector<int64_t> redo =
      job.completed.Minus(job.checkpoint_completed);
  const int64_t lost = job.completed.size() - job.checkpoint_completed.size();
  job.lost_steps += lost;
  job.completed = job.checkpoint_completed;
  std::vector<EpochStats> epochs =
      job.checkpoint_epochs.empty()
          ? std::vector<EpochStats>(static_cast<size_t>(job.spec.epochs))
          : job.checkpoint_epochs;
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
  job.checkpoint_pending = false;
  job.checkpoint_attempted = job.last_checkpoint_step;
  core.MarkDirty();
  core.logger->Warning(
      "ps_restored",
      {{"job", job.id},
       {"checkpoint", job.last_checkpoint.empty() ? std::string("(none)")
                                                  : job.last_checkpoint},
       {"checkpoint_step", job.last_checkpoint_step},
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
  job.restore_pending = true;
  ++job.restore_seq;
  job.restore_floor_generation = core.generation;
  job.next_restore_attempt = absl::InfinitePast();
  core.MarkDirty();
  core.logger->Warning("ps_restart_detected",
                       {{"member", Name(task)},
                        {"job", job.id},
                        {"steps_completed", job.completed.size()},
                        {"last_checkpoint", job.last_checkpoint},
                        {"last_checkpoint_step", job.last_checkpoint_step},
                        {"inflight", job.inflight.size()}});
}

bool AdvanceRestore(CoordinatorCore& core) {
  Job& job = *core.job;
  if (job.restore_pending && job.last_checkpoint.empty() &&
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
    if (!job.last_checkpoint.empty() &&
        core.Now() >= job.next_restore_attempt) {
      action = PsAction{PsAction::Kind::kRestore, job.last_checkpoint, job.id,
                        job.restore_seq};
      core.logger->Info("restore_started", {{"job", job.id},
                                            {"checkpoint", job.last_checkpoint}});
    }
  } else if (job.checkpoint_pending) {
    job.save_completed = job.completed;
    job.save_epochs = job.epochs;
    action = PsAction{PsAction::Kind::kSave,
                      absl::StrCat("ckpt-", job.completed.size()), job.id,
                      job.restore_seq};
    core.logger->Info("checkpoint_started",
                      {{"job", job.id}, {"checkpoint", action->checkpoint}});
  }
  if (action) job.action_in_progress = true;
  return action;
}

bool ApplyPsActionResult(CoordinatorCore& core, const PsAction& action,
                         const absl::Status& status) {
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
      core.logger->Warning("checkpoint_discarded",
                           {{"job", job.id},
                            {"checkpoint", action.checkpoint},
                            {"reason", "a ps task restarted during the save"}});
    } else if (status.ok()) {
      job.last_checkpoint = action.checkpoint;
      job.last_checkpoint_step = job.save_completed.size();
      job.checkpoint_completed = job.save_completed;
      job.checkpoint_epochs = job.save_epochs;
      core.logger->Info("checkpoint_saved",
                        {{"job", job.id},
                         {"checkpoint", action.checkpoint},
                         {"step", job.last_checkpoint_step}});
    } else {
      core.logger->Warning("checkpoint_failed",
                           {{"job", job.id},
                            {"checkpoint", action.checkpoint},
                            {"error", status.ToString()}});
    }
    job.save_completed.Clear();
    job.save_epochs.clear();
    core.MarkDirty();
  } else if (!status.ok()) {
    const absl::Duration retry = core.options.restore_retry;
    job.next_restore_attempt = now + retry;
    core.logger->Error("restore_failed",
                       {{"job", job.id},
                        {"checkpoint", action.checkpoint},
                        {"error", status.ToString()},
                        {"retry_in_ms", absl::ToInt64Milliseconds(retry)}});
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

// The step queue: StepSet, the job's lifecycle, and its work items (TRAIN
// steps, EVALUATE epochs) handed out, reported and re-queued (see
// coordinator_internal.h).
#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/step_set.h"

namespace strata {

// ---------------------------------------------------------------------------
// StepSet.

bool StepSet::Contains(int64_t step) const {
  auto it = ranges_.upper_bound(step);
  if (it == ranges_.begin()) return false;
  --it;
  return step < it->second;
}

bool StepSet::Insert(int64_t step) {
  if (Contains(step)) return false;
  auto next = ranges_.upper_bound(step);
  const bool merge_next = next != ranges_.end() && next->first == step + 1;
  auto prev = next;
  bool merge_prev = false;
  if (next != ranges_.begin()) {
    prev = std::prev(next);
    merge_prev = prev->second == step;
  }
  if (merge_prev && merge_next) {
    prev->second = next->second;
    ranges_.erase(next);
  } else if (merge_prev) {
    prev->second = step + 1;
  } else if (merge_next) {
    const int64_t end = next->second;
    ranges_.erase(next);
    ranges_[step] = end;
  } else {
    ranges_[step] = step + 1;
  }
  ++size_;
  return true;
}

int64_t StepSet::NextAbsent(int64_t from) const {
  auto it = ranges_.upper_bound(from);
  if (it == ranges_.begin()) return from;
  --it;
  // Ranges are kept merged, so a range's end is never in the set.
  return from < it->second ? it->second : from;
}

std::vector<std::pair<int64_t, int64_t>> StepSet::Ranges() const {
  return {ranges_.begin(), ranges_.end()};
}

absl::Status StepSet::SetRanges(
    const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::map<int64_t, int64_t> out;
  int64_t size = 0;
  int64_t last_end = -1;
  for (const auto& [begin, end] : ranges) {
    if (begin < 0 || end <= begin) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad range [", begin, ", ", end, ")"));
    }
    if (begin < last_end) {
      return absl::InvalidArgumentError(
          absl::StrCat("range [", begin, ", ", end,
                       ") is unsorted or overlaps the one "
                       "before"));
    }
    if (begin == last_end) {
      std::prev(out.end())->second = end;
    } else {
      out[begin] = end;
    }
    size += end - begin;
    last_end = end;
  }
  ranges_ = std::move(out);
  size_ = size;
  return absl::OkStatus();
}

std::vector<int64_t> StepSet::Minus(const StepSet& other) const {
  std::vector<int64_t> out;
  for (const auto& [begin, end] : ranges_) {
    for (int64_t s = begin; s < end; ++s) {
      if (!other.Contains(s)) out.push_back(s);
    }
  }
  return out;
}


namespace coordinator_internal {
namespace {

std::string SecondsText(absl::Duration d) {
  return absl::StrCat(absl::ToDoubleSeconds(d));
}

bool EvalDue(const CoordinatorCore& core, int64_t epoch)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  const int64_t every = core.job->spec.evaluate_every_epochs;
  return every > 0 &&
         ((epoch + 1) % every == 0 || epoch + 1 == core.job->spec.epochs);
}

bool EpochDone(const CoordinatorCore& core, int64_t epoch)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  const EpochStats& e = core.job->epochs[static_cast<size_t>(epoch)];
  return e.steps == core.job->steps_per_epoch &&
         (e.evaluated || !EvalDue(core, epoch));
}

int64_t OpenEpoch(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  int64_t e = 0;
  while (e < core.job->spec.epochs && EpochDone(core, e)) ++e;
  return e;
}

// The lowest pending step, or -1.
int64_t LowestPending(CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  Job& job = *core.job;
  for (;;) {
    job.cursor = job.completed.NextAbsent(job.cursor);
    if (job.cursor < job.total_steps &&
        job.inflight.count({v1::WorkItem::TRAIN, job.cursor}) > 0) {
      ++job.cursor;
      continue;
    }
    break;
  }
  int64_t best = job.cursor < job.total_steps ? job.cursor : -1;
  if (!job.requeued.empty() && (best < 0 || *job.requeued.begin() < best)) {
    best = *job.requeued.begin();
  }
  return best;
}

v1::EpochResult EpochResult(const CoordinatorCore& core, int64_t epoch)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  const EpochStats& e = core.job->epochs[static_cast<size_t>(epoch)];
  v1::EpochResult r;
  r.set_epoch(static_cast<int32_t>(epoch));
  r.set_steps(e.steps);
  r.set_examples(e.examples);
  if (e.reported > 0) {
    // The mean over the steps reported (not over steps resumed past, which
    // brought no figures).
    r.set_loss(e.loss_sum / static_cast<double>(e.reported));
    r.set_accuracy(e.accuracy_sum / static_cast<double>(e.reported));
  }
  r.set_evaluated(e.evaluated);
  r.set_evaluation_missing(e.evaluation_missing);
  if (e.evaluated && !e.evaluation_missing) {
    r.set_test_loss(e.test_loss);
    r.set_test_accuracy(e.test_accuracy);
    r.set_has_test_auc(e.has_test_auc);
    r.set_test_auc(e.test_auc);
  }
  if (e.start != absl::InfinitePast()) {
    const absl::Time end = e.end != absl::InfinitePast() ? e.end : core.Now();
    const double elapsed = std::max(0.0, absl::ToDoubleSeconds(end - e.start));
    r.set_elapsed_seconds(elapsed);
    if (elapsed > 0) {
      // Steps resumed past ran as many examples as the reported ones did
      // on average.
      const double examples =
          e.reported > 0 ? static_cast<double>(e.examples) *
                               static_cast<double>(e.steps) /
                               static_cast<double>(e.reported)
                         : static_cast<double>(e.examples);
      r.set_examples_per_second(examples / elapsed);
    }
  }
  return r;
}

void LogEpochEnd(const CoordinatorCore& core, int64_t epoch)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  v1::EpochResult r = EpochResult(core, epoch);
  core.logger->Info("epoch_end",
                    {{"job", core.job->id},
                     {"epoch", epoch},
                     {"epochs", core.job->spec.epochs},
                     {"steps", r.steps()},
                     {"loss", r.loss()},
                     {"accuracy", r.accuracy()},
                     {"evaluated", r.evaluated()},
                     {"test_loss", r.test_loss()},
                     {"test_accuracy", r.test_accuracy()},
                     {"elapsed_seconds", r.elapsed_seconds()},
                     {"examples_per_second", r.examples_per_second()}});
}

}  // namespace

// ---------------------------------------------------------------------------
// The job.

bool UsesPs(const CoordinatorCore& core) {
  return core.job->spec.policy != nullptr && core.job->spec.policy->needs_ps();
}

absl::StatusOr<JobPlan> PlanJob(const std::string& job_json,
                                int64_t train_examples) {
  if (train_examples <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train_examples: must be > 0, got ", train_examples));
  }
  JobPlan plan;
  STRATA_ASSIGN_OR_RETURN(plan.spec, ParseCoordinatorJobSpec(job_json));
  const CoordinatorJobSpec& spec = plan.spec;
  plan.steps_per_epoch = train_examples / spec.batch_size +
                         (train_examples % spec.batch_size != 0 ? 1 : 0);
  if (spec.epochs > kMaxSteps / plan.steps_per_epoch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job.epochs: ", spec.epochs, " epochs of ", plan.steps_per_epoch,
        " steps exceed the limit of ", kMaxSteps, " steps"));
  }
  return plan;
}

absl::StatusOr<std::string> StartJob(CoordinatorCore& core,
                                     const std::string& job_json,
                                     int64_t train_examples,
                                     const JobPlan& plan,
                                     std::string* static_error) {
  if (core.job && core.job->state == v1::JobStatus::RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", core.job->id, " is still running (",
                     core.job->completed.size(), " of ", core.job->total_steps,
                     " steps done); submit again when it has finished"));
  }
  const CoordinatorJobSpec& spec = plan.spec;
  const absl::Time now = core.Now();
  Job job;
  job.id = absl::StrCat(
      "job-", absl::FormatTime("%Y%m%d-%H%M%S", now, absl::UTCTimeZone()),
      "-", ++core.job_seq);
  job.json = job_json;
  job.train_examples = train_examples;
  job.spec = spec;
  job.steps_per_epoch = plan.steps_per_epoch;
  job.total_steps = spec.epochs * plan.steps_per_epoch;
  job.submitted = now;
  job.checkpoint_attempt_time = now;
  job.epochs.resize(static_cast<size_t>(spec.epochs));
  core.job = std::move(job);
  const std::string id = core.job->id;
  core.MarkDirty();
  core.logger->Info("job_submitted",
                    {{"job", id},
                     {"strategy", spec.strategy},
                     {"epochs", spec.epochs},
                     {"batch_size", spec.batch_size},
                     {"train_examples", train_examples},
                     {"steps_per_epoch", plan.steps_per_epoch},
                     {"steps", core.job->total_steps}});
  if (core.options.static_cluster) {
    // A static cluster will not grow: fail now rather than at timeout.
    const std::string missing = MissingRole(core);
    if (!missing.empty()) {
      std::vector<std::string> jobs;
      for (const auto& [name, tasks] : core.options.static_cluster->jobs) {
        if (!tasks.empty()) jobs.push_back(name);
      }
      *static_error = absl::StrCat(
          "strategy ", spec.strategy, " needs at least one ", missing,
          " task; the static cluster (TF_CONFIG) has none (jobs: ",
          jobs.empty() ? "none" : absl::StrJoin(jobs, ", "), ")");
      FailJob(core, *static_error);
    }
  }
  UpdateJob(core);
  return id;
}

void FailJob(CoordinatorCore& core, const std::string& error) {
  Job& job = *core.job;
  job.state = v1::JobStatus::FAILED;
  job.error = error;
  job.finished = core.Now();
  job.inflight.clear();
  job.checkpoint_pending = false;
  job.restore_pending = false;
  core.MarkDirty();
  core.logger->Error("job_failed", {{"job", job.id}, {"error", error}});
}

void UpdateJob(CoordinatorCore& core) {
  if (!core.job || core.job->state != v1::JobStatus::RUNNING) return;
  Job& job = *core.job;
  const absl::Time now = core.Now();
  if (job.started == absl::InfinitePast()) {
    const std::string missing = MissingRole(core);
    if (missing.empty()) {
      job.started = now;
      job.checkpoint_attempt_time = now;
      core.MarkDirty();
      core.logger->Info("job_started", {{"job", job.id},
                                        {"strategy", job.spec.strategy},
                                        {"members", AliveList(core)}});
    } else if (now - job.submitted >= core.options.topology_timeout) {
      FailJob(core, absl::StrCat("strategy ", job.spec.strategy,
                                 " needs at least one ", missing,
                                 " task; none registered after ",
                                 SecondsText(core.options.topology_timeout),
                                 " s; registered: ", AliveList(core)));
      return;
    } else {
      return;
    }
  }
  if (SyncGroupJob(core)) UpdateGroup(core);
  if (AdvanceRestore(core)) return;

  const int64_t completed = job.completed.size();
  const bool all_done = OpenEpoch(core) == job.spec.epochs;
  MarkCheckpointDue(core, all_done);
  if (all_done && !job.checkpoint_pending) {
    job.state = v1::JobStatus::SUCCEEDED;
    job.finished = now;
    core.MarkDirty();
    int64_t examples = 0;
    for (const EpochStats& e : job.epochs) examples += e.examples;
    core.logger->Info(
        "job_succeeded",
        {{"job", job.id},
         {"steps", completed},
         {"lost_steps", job.lost_steps},
         {"examples", examples},
         {"wall_seconds", absl::ToDoubleSeconds(job.finished - job.started)}});
  }
}

v1::JobStatus JobStatusOf(const CoordinatorCore& core) {
  v1::JobStatus status;
  if (!core.job) {
    status.set_state(v1::JobStatus::NONE);
    return status;
  }
  const Job& job = *core.job;
  status.set_job_id(job.id);
  status.set_job_json(job.json);
  status.set_state(job.state);
  status.set_error(job.error);
  status.set_steps_scheduled(job.total_steps);
  status.set_steps_completed(job.completed.size());
  status.set_lost_steps(job.lost_steps);
  if (const CheckpointRecord* newest = NewestCheckpoint(job)) {
    status.set_last_checkpoint_step(newest->step);
    status.set_last_checkpoint(newest->name);
  }
  status.set_checkpoints_saved(job.checkpoints_saved);
  status.set_checkpoints_failed(job.checkpoints_failed);
  status.set_checkpoint_failures_in_a_row(job.checkpoint_failures_in_a_row);
  status.set_last_checkpoint_error(job.last_checkpoint_error);
  for (const std::string& s : job.checkpoints_skipped) {
    status.add_checkpoints_skipped(s);
  }
  int64_t examples = 0;
  for (int64_t e = 0; e < job.spec.epochs; ++e) {
    const EpochStats& stats = job.epochs[static_cast<size_t>(e)];
    examples += stats.examples;
    if (stats.start != absl::InfinitePast() || stats.steps > 0) {
      *status.add_epochs() = EpochResult(core, e);
    }
  }
  status.set_examples(examples);
  if (job.started != absl::InfinitePast()) {
    const absl::Time end =
        job.finished != absl::InfinitePast() ? job.finished : core.Now();
    status.set_wall_seconds(
        std::max(0.0, absl::ToDoubleSeconds(end - job.started)));
  }
  return status;
}

// ---------------------------------------------------------------------------
// Work items.

absl::StatusOr<v1::WorkItem> NextWorkItem(CoordinatorCore& core,
                                          const TaskKey& task,
                                          const std::string& incarnation) {
  STRATA_ASSIGN_OR_RETURN(MemberRecord * member,
                          LiveMember(core, task, incarnation));
  const absl::Time now = core.Now();
  member->last_heartbeat = now;  // asking for work proves liveness
  UpdateJob(core);
  v1::WorkItem item;
  item.set_kind(v1::WorkItem::WAIT);
  item.set_retry_after_ms(absl::ToInt64Milliseconds(core.options.retry_after));
  item.set_generation(core.generation);
  if (!core.job) return item;
  Job& job = *core.job;
  item.set_job_id(job.id);
  if (job.state != v1::JobStatus::RUNNING) {
    item.set_kind(v1::WorkItem::DONE);
    item.set_retry_after_ms(0);
    return item;
  }
  if (job.started == absl::InfinitePast() || job.restore_pending ||
      job.checkpoint_pending || job.action_in_progress ||
      (UsesPs(core) && !PsDown(core).empty())) {
    return item;
  }
  const int64_t epoch = OpenEpoch(core);
  if (epoch >= job.spec.epochs) return item;
  EpochStats& stats = job.epochs[static_cast<size_t>(epoch)];
  const Holder holder{task, incarnation};
  if (stats.steps == job.steps_per_epoch) {
    // Training of the epoch is done; its evaluation is due.
    const ItemKey key{v1::WorkItem::EVALUATE, epoch};
    if (job.inflight.count(key) == 0) {
      job.inflight.emplace(key, holder);
      item.set_kind(v1::WorkItem::EVALUATE);
      item.set_epoch(static_cast<int32_t>(epoch));
      item.set_retry_after_ms(0);
    }
  } else if (task.role != "evaluator") {
    const int64_t step = LowestPending(core);
    if (step >= 0 && step / job.steps_per_epoch == epoch) {
      if (job.requeued.erase(step) == 0) job.cursor = step + 1;
      job.inflight.emplace(ItemKey{v1::WorkItem::TRAIN, step}, holder);
      if (stats.start == absl::InfinitePast()) {
        stats.start = now;
        core.MarkDirty();
      }
      item.set_kind(v1::WorkItem::TRAIN);
      item.set_step(step);
      item.set_epoch(static_cast<int32_t>(epoch));
      item.set_batch(step % job.steps_per_epoch);
      item.set_retry_after_ms(0);
    }
  }
  return item;
}

absl::Status ValidateReport(const v1::ReportWorkRequest& report) {
  const v1::WorkItem& item = report.item();
  if (item.kind() != v1::WorkItem::TRAIN &&
      item.kind() != v1::WorkItem::EVALUATE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "item.kind: only TRAIN and EVALUATE items are reported, got ",
        v1::WorkItem::Kind_Name(item.kind())));
  }
  if (report.examples() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("examples: must be >= 0, got ", report.examples()));
  }
  return absl::OkStatus();
}

absl::Status ApplyValidReport(CoordinatorCore& core, const TaskKey& task,
                              const v1::ReportWorkRequest& report) {
  const v1::WorkItem& item = report.item();
  if (core.members.count(task) == 0) {
    return absl::NotFoundError(
        absl::StrCat("task ", Name(task), " is not registered; re-register"));
  }
  if (!core.job || (!item.job_id().empty() && item.job_id() != core.job->id)) {
    core.logger->Debug("report_ignored", {{"member", Name(task)},
                                          {"job", item.job_id()},
                                          {"reason", "not the current job"}});
    return absl::OkStatus();
  }
  Job& job = *core.job;
  const bool train = item.kind() == v1::WorkItem::TRAIN;
  const int64_t number = train ? item.step() : item.epoch();
  const int64_t limit = train ? job.total_steps : job.spec.epochs;
  if (number < 0 || number >= limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(train ? "item.step: " : "item.epoch: ", number,
                     " is outside the job's [0, ", limit, ")"));
  }
  if (job.state != v1::JobStatus::RUNNING) return absl::OkStatus();

  const ItemKey key{item.kind(), number};
  auto it = job.inflight.find(key);
  const bool held = it != job.inflight.end() && it->second.task == task &&
                    it->second.incarnation == report.incarnation();
  if (held) job.inflight.erase(it);
  const bool stale = item.generation() < job.restore_floor_generation;
  if (stale) {
    core.logger->Info("report_stale",
                      {{"member", Name(task)},
                       {"kind", v1::WorkItem::Kind_Name(item.kind())},
                       {"number", number},
                       {"generation", item.generation()},
                       {"restore_floor_generation",
                        job.restore_floor_generation}});
  }
  if (stale || !report.error().empty()) {
    if (held) Requeue(core, key);
    if (!report.error().empty()) {
      core.logger->Warning("work_failed",
                           {{"member", Name(task)},
                            {"kind", v1::WorkItem::Kind_Name(item.kind())},
                            {"number", number},
                            {"error", report.error()}});
    }
    UpdateJob(core);
    return absl::OkStatus();
  }
  const absl::Time now = core.Now();
  if (train) {
    if (!job.completed.Insert(number)) {  // a duplicate: counted once
      UpdateJob(core);
      return absl::OkStatus();
    }
    job.requeued.erase(number);
    const int64_t epoch = number / job.steps_per_epoch;
    EpochStats& stats = job.epochs[static_cast<size_t>(epoch)];
    ++stats.steps;
    ++stats.reported;
    stats.loss_sum += report.loss();
    stats.accuracy_sum += report.accuracy();
    stats.examples += report.examples();
    if (stats.start == absl::InfinitePast()) stats.start = now;
    if (stats.steps == job.steps_per_epoch) {
      stats.end = now;
      if (!EvalDue(core, epoch)) LogEpochEnd(core, epoch);
    }
  } else {
    EpochStats& stats = job.epochs[static_cast<size_t>(number)];
    // Figures replace a "missing"; nothing replaces figures.
    const bool replaces_missing =
        stats.evaluation_missing && !report.evaluation_missing();
    if ((stats.evaluated && !replaces_missing) ||
        stats.steps < job.steps_per_epoch) {
      UpdateJob(core);
      return absl::OkStatus();
    }
    const bool first = !stats.evaluated;
    stats.evaluated = true;
    stats.evaluation_missing = report.evaluation_missing();
    stats.test_loss = stats.evaluation_missing ? 0 : report.test_loss();
    stats.test_accuracy = stats.evaluation_missing ? 0 : report.test_accuracy();
    stats.has_test_auc = !stats.evaluation_missing && report.has_test_auc();
    stats.test_auc = stats.has_test_auc ? report.test_auc() : 0;
    if (stats.evaluation_missing) {
      core.logger->Warning("evaluation_missing",
                           {{"job", job.id},
                            {"epoch", number},
                            {"member", Name(task)}});
    }
    if (first) LogEpochEnd(core, number);
  }
  core.MarkDirty();
  UpdateJob(core);
  return absl::OkStatus();
}

void Requeue(CoordinatorCore& core, const ItemKey& item) {
  Job& job = *core.job;
  if (item.kind != v1::WorkItem::TRAIN) return;  // EVALUATE: implicit
  if (job.completed.Contains(item.number)) return;
  if (item.number < job.cursor) job.requeued.insert(item.number);
}

void RequeueItemsOf(CoordinatorCore& core, const TaskKey& task,
                    const std::string* incarnation, const char* reason) {
  if (!core.job) return;
  std::vector<int64_t> steps;
  std::vector<int64_t> evaluations;
  for (auto it = core.job->inflight.begin(); it != core.job->inflight.end();) {
    const Holder& h = it->second;
    if (h.task == task &&
        (incarnation == nullptr || h.incarnation == *incarnation)) {
      const ItemKey item = it->first;
      it = core.job->inflight.erase(it);
      Requeue(core, item);
      (item.kind == v1::WorkItem::TRAIN ? steps : evaluations)
          .push_back(item.number);
    } else {
      ++it;
    }
  }
  if (!steps.empty() || !evaluations.empty()) {
    core.logger->Warning("work_requeued", {{"member", Name(task)},
                                           {"reason", reason},
                                           {"steps", steps},
                                           {"evaluations", evaluations}});
  }
}

int ReleaseUnheldItems(CoordinatorCore& core, const TaskKey& task,
                       const std::string& incarnation,
                       const std::set<int64_t>& held,
                       const std::set<int64_t>& held_evaluations) {
  if (!core.job) return 0;
  std::vector<int64_t> steps;
  std::vector<int64_t> evaluations;
  for (auto it = core.job->inflight.begin(); it != core.job->inflight.end();) {
    const ItemKey item = it->first;
    const bool train = item.kind == v1::WorkItem::TRAIN;
    const bool held_item = train ? held.count(item.number) > 0
                                 : held_evaluations.count(item.number) > 0;
    if (it->second.task == task && it->second.incarnation == incarnation &&
        !held_item) {
      it = core.job->inflight.erase(it);
      Requeue(core, item);
      (train ? steps : evaluations).push_back(item.number);
    } else {
      ++it;
    }
  }
  if (!steps.empty() || !evaluations.empty()) {
    core.logger->Warning("work_requeued",
                         {{"member", Name(task)},
                          {"reason", "lease lost in transit"},
                          {"steps", steps},
                          {"evaluations", evaluations}});
    core.MarkDirty();
  }
  return static_cast<int>(steps.size() + evaluations.size());
}

}  // namespace coordinator_internal
}  // namespace strata

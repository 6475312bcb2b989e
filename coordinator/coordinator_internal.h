// The coordinator's state behind the CoordinatorState facade, and the
// pieces that operate on it:
//   membership  (coordinator_membership.cc): registration, leases, views;
//   step queue  (coordinator_step_queue.cc): the job, its steps and items;
//   checkpoints (coordinator_checkpoint_planner.cc): PS saves and restores;
//   groups      (coordinator_groups.cc): synchronous-strategy groups;
//   barriers    (coordinator_barriers.cc);
//   codec       (coordinator_state_codec.cc): state.json.
// Internal to the coordinator library.
//
// Thread-safety: CoordinatorCore's fields are guarded by its `mu`, which the
// facade holds around every call of a function annotated with
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu); those functions never call out
// (barrier callbacks are returned in `Callbacks` for the facade to run
// after unlocking). Functions without the annotation touch no guarded field.
#ifndef STRATA_COORDINATOR_COORDINATOR_INTERNAL_H_
#define STRATA_COORDINATOR_COORDINATOR_INTERNAL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/tf_config.h"
#include "coordinator/coordinator_job.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/step_set.h"
#include "strata/v1/coordinator.pb.h"

namespace strata {
namespace coordinator_internal {

// Bound on epochs * steps_per_epoch.
constexpr int64_t kMaxSteps = int64_t{1} << 40;

struct TaskKey {
  std::string role;
  int index = 0;
  bool operator<(const TaskKey& o) const {
    return role != o.role ? role < o.role : index < o.index;
  }
  bool operator==(const TaskKey& o) const {
    return role == o.role && index == o.index;
  }
};

struct MemberRecord {
  std::string address;
  std::string incarnation;
  v1::Member::State state = v1::Member::ALIVE;
  absl::Time last_heartbeat;
  // A replicated ps task's primary: the backups it dropped (by the
  // incarnation they would register with), which may not take it over.
  std::vector<std::string> fenced;
};

// An in-flight item: TRAIN of a step or EVALUATE of an epoch.
struct ItemKey {
  v1::WorkItem::Kind kind;
  int64_t number;
  bool operator<(const ItemKey& o) const {
    return kind != o.kind ? kind < o.kind : number < o.number;
  }
};

struct Holder {
  TaskKey task;
  std::string incarnation;
};

struct EpochStats {
  int64_t steps = 0;  // completed
  // Steps whose report arrived: the sums below are theirs. Steps a group
  // resumed past (in the survivors' state, their reports lost with a
  // coordinator restart or a failed member) count in `steps` only.
  int64_t reported = 0;
  double loss_sum = 0;
  double accuracy_sum = 0;
  int64_t examples = 0;
  bool evaluated = false;
  bool evaluation_missing = false;  // evaluated without figures
  double test_loss = 0;
  double test_accuracy = 0;
  bool has_test_auc = false;
  double test_auc = 0;
  absl::Time start = absl::InfinitePast();  // first step handed out
  absl::Time end = absl::InfinitePast();    // last step completed
};

// A checkpoint every PS task saved, and the bookkeeping a restore from it
// reverts to.
struct CheckpointRecord {
  std::string name;
  int64_t step = 0;  // completed steps it holds (completed.size())
  StepSet completed;
  std::vector<EpochStats> epochs;
};

struct GroupArrival {
  std::string incarnation;
  int64_t next_step = -1;
  std::string address;
  int64_t after_group = 0;  // the group the member left
  // When the arrival's state finished each of its newest epochs (by the
  // coordinator's clock: the call's time less JoinGroupRequest's ago_ms).
  std::map<int64_t, absl::Time> epoch_ends;
};

struct Group {
  int64_t id = 0;                // 0: none formed
  std::vector<TaskKey> members;  // by rank
  std::vector<std::string> incarnations;
  std::vector<std::string> addresses;
  int64_t start_step = 0;
  int source_rank = -1;
  int64_t generation = 0;  // the coordinator's, when it formed
  bool forming = false;
  int64_t pending_id = 0;
  std::map<TaskKey, GroupArrival> arrivals;
};

struct Job {
  std::string id;
  std::string json;
  int64_t train_examples = 0;
  CoordinatorJobSpec spec;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  v1::JobStatus::State state = v1::JobStatus::RUNNING;
  std::string error;
  absl::Time submitted;
  absl::Time started = absl::InfinitePast();  // topology satisfied
  absl::Time finished = absl::InfinitePast();
  StepSet completed;
  // Pending = steps >= cursor not completed or in flight, plus requeued
  // (all below cursor, neither completed nor in flight).
  int64_t cursor = 0;
  std::set<int64_t> requeued;
  std::map<ItemKey, Holder> inflight;
  std::vector<EpochStats> epochs;
  int64_t lost_steps = 0;
  // Checkpoints: those kept, oldest first (at most spec.checkpoint_keep);
  // a restore starts from the newest and falls back to older ones.
  std::vector<CheckpointRecord> checkpoints;
  // Checkpoints a restore skipped, to delete with the next pruning.
  std::vector<std::string> unusable_checkpoints;
  int64_t checkpoints_saved = 0;
  int64_t checkpoints_failed = 0;
  int64_t checkpoint_failures_in_a_row = 0;
  std::string last_checkpoint_error;
  std::vector<std::string> checkpoints_skipped;  // "ckpt-N: error"
  int64_t checkpoint_attempted = 0;  // completed count at the last try
  absl::Time checkpoint_attempt_time;
  bool checkpoint_pending = false;
  // PS restore.
  bool restore_pending = false;
  int64_t restore_seq = 0;  // bumped by each ps restart
  int64_t restore_floor_generation = 0;
  // The first group formed after the newest restore of the ps tasks: a
  // member of an older group saw versions of a store since replaced (see
  // UpdateGroup).
  int64_t first_group_after_restore = 0;
  absl::Time next_restore_attempt = absl::InfinitePast();
  // Restore attempts in a row that failed for another reason than the
  // checkpoint (an unreachable task, an I/O error).
  int restore_failures_in_a_row = 0;
  // The outstanding PsAction, and what a save covers.
  bool action_in_progress = false;
  // Synchronous strategies.
  Group group;
  StepSet save_completed;
  std::vector<EpochStats> save_epochs;
};

// The newest kept checkpoint, or null.
inline const CheckpointRecord* NewestCheckpoint(const Job& job) {
  return job.checkpoints.empty() ? nullptr : &job.checkpoints.back();
}

struct BarrierWaiter {
  int64_t ticket;
  CoordinatorState::BarrierDone done;
};

struct Barrier {
  int count = 0;
  std::map<TaskKey, BarrierWaiter> waiters;
};

// Barrier callbacks to run once the lock is released.
using Callbacks =
    std::vector<std::pair<CoordinatorState::BarrierDone, absl::Status>>;

// Everything CoordinatorState knows. Owned by the facade; the options and
// the logger are immutable, the rest is guarded by `mu`.
struct CoordinatorCore {
  CoordinatorCore(CoordinatorOptions options, Logger* logger)
      : options(std::move(options)), logger(logger) {}

  absl::Time Now() const { return options.clock(); }
  // Every change to what state.json holds calls this.
  void MarkDirty() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { ++change_seq; }

  const CoordinatorOptions options;
  Logger* const logger;

  mutable absl::Mutex mu;
  int64_t generation ABSL_GUARDED_BY(mu) = 0;
  int64_t change_seq ABSL_GUARDED_BY(mu) = 0;
  int64_t job_seq ABSL_GUARDED_BY(mu) = 0;
  // Group ids grow across jobs and coordinator restarts (persisted).
  int64_t group_seq ABSL_GUARDED_BY(mu) = 0;
  std::map<TaskKey, MemberRecord> members ABSL_GUARDED_BY(mu);
  std::optional<Job> job ABSL_GUARDED_BY(mu);
  std::map<std::string, Barrier> barriers ABSL_GUARDED_BY(mu);
};

// ---- Membership (coordinator_membership.cc) -------------------------------

// "role:index".
std::string Name(const TaskKey& task);
// INVALID_ARGUMENT for an unknown role or a negative index.
absl::StatusOr<TaskKey> ValidateTask(const v1::TaskId& task);
// ValidateTask, plus INVALID_ARGUMENT for an empty incarnation or a task
// outside the static cluster.
absl::StatusOr<TaskKey> ValidateRegistration(const CoordinatorCore& core,
                                             const v1::TaskId& task,
                                             const std::string& incarnation);
// NOT_FOUND ("re-register") unless `task` is ALIVE with `incarnation`.
absl::StatusOr<MemberRecord*> LiveMember(CoordinatorCore& core,
                                         const TaskKey& task,
                                         const std::string& incarnation)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
void BumpGeneration(CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// The locked part of CoordinatorState::Register; returns the generation.
// `state_intact`: a ps replica taking over from the primary it backed up
// (no restore).
int64_t RegisterMember(CoordinatorCore& core, const TaskKey& task,
                       const std::string& address,
                       const std::string& incarnation, Callbacks* callbacks,
                       bool state_intact = false)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// An exclusive registration (RegisterRequest.exclusive) of `incarnation`
// replacing `replaces`: whether it takes over the task's state (true) or
// is a plain registration (false). Errors: ALREADY_EXISTS while another
// live incarnation holds the task and the claim may not replace it.
// `only_if_failed`: replacing `replaces` only once its lease expired.
absl::StatusOr<bool> CheckExclusiveClaim(const CoordinatorCore& core,
                                         const TaskKey& task,
                                         const std::string& incarnation,
                                         const std::string& replaces,
                                         bool only_if_failed = false)
    ABSL_SHARED_LOCKS_REQUIRED(core.mu);
// The locked part of Deregister; false when the member had already left.
absl::StatusOr<bool> DeregisterMember(CoordinatorCore& core,
                                      const TaskKey& task,
                                      const std::string& incarnation,
                                      Callbacks* callbacks)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Declares the members whose lease expired FAILED, then advances the job.
void ExpireLeases(CoordinatorCore& core, Callbacks* callbacks)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
v1::ClusterState ClusterStateOf(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// The ALIVE members with an address, by role, in index order.
ClusterSpec AliveCluster(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Index -> address of the ALIVE ps members with an address.
// index -> (address, incarnation) of the ALIVE ps tasks.
std::map<int, std::pair<std::string, std::string>> AlivePsMembers(
    const CoordinatorCore& core) ABSL_SHARED_LOCKS_REQUIRED(core.mu);
std::map<int, std::string> AlivePsAddresses(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// What the job's strategy still lacks ("ps" or "worker"), or "".
std::string MissingRole(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// The ALIVE members' names, or "none".
std::string AliveList(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Names of registered ps tasks not ALIVE (the job pauses for them).
std::vector<std::string> PsDown(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);

// ---- Step queue (coordinator_step_queue.cc) -------------------------------

// A job file accepted by SubmitJob, before it is started.
struct JobPlan {
  CoordinatorJobSpec spec;
  int64_t steps_per_epoch = 0;
};
// Errors: INVALID_ARGUMENT as CoordinatorState::SubmitJob.
absl::StatusOr<JobPlan> PlanJob(const std::string& job_json,
                                int64_t train_examples);
// Replaces a finished job with a new RUNNING one; returns its id. Sets
// *static_error (and fails the job) when the static cluster cannot run it.
// Errors: FAILED_PRECONDITION while a job is RUNNING (nothing changed).
absl::StatusOr<std::string> StartJob(CoordinatorCore& core,
                                     const std::string& job_json,
                                     int64_t train_examples,
                                     const JobPlan& plan,
                                     std::string* static_error)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Advances the job: topology check and timeout, groups, checkpoint
// triggers, restore without a checkpoint, completion.
void UpdateJob(CoordinatorCore& core) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
void FailJob(CoordinatorCore& core, const std::string& error)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
bool UsesPs(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// The locked part of GetWork (`task` is not a ps task).
absl::StatusOr<v1::WorkItem> NextWorkItem(CoordinatorCore& core,
                                          const TaskKey& task,
                                          const std::string& incarnation)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// The checks of ApplyReport that need no state.
absl::Status ValidateReport(const v1::ReportWorkRequest& report);
// The locked part of ApplyReport.
absl::Status ApplyValidReport(CoordinatorCore& core, const TaskKey& task,
                              const v1::ReportWorkRequest& report)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Puts an in-flight item (already removed from inflight) back in the queue.
void Requeue(CoordinatorCore& core, const ItemKey& item)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Re-queues the items held by `task` (any incarnation when `incarnation`
// is null), logging `reason`.
void RequeueItemsOf(CoordinatorCore& core, const TaskKey& task,
                    const std::string* incarnation, const char* reason)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Re-queues the items task+incarnation holds outside `held` (TRAIN steps)
// and `held_evaluations` (EVALUATE epochs); returns how many.
int ReleaseUnheldItems(CoordinatorCore& core, const TaskKey& task,
                       const std::string& incarnation,
                       const std::set<int64_t>& held,
                       const std::set<int64_t>& held_evaluations)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
v1::JobStatus JobStatusOf(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);

// ---- Checkpoint planner (coordinator_checkpoint_planner.cc) ---------------

// A ps task restarted: a running, started job must restore the PS tasks.
void NotePsRestart(CoordinatorCore& core, const TaskKey& task)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Restores without a checkpoint when one is due and none exists (the
// workers re-create the variables). True while a restore is pending or a
// PsAction runs: the job neither triggers checkpoints nor completes.
bool AdvanceRestore(CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Marks a checkpoint due (every N steps / seconds, or `all_done`).
void MarkCheckpointDue(CoordinatorCore& core, bool all_done)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// As CoordinatorState::RequestCheckpoint.
int64_t RequestCheckpoint(CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// The PsAction due now, if any (the job is already updated).
std::optional<PsAction> TakePsAction(CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// The locked part of FinishPsAction; false when the action's job ended or
// was replaced (nothing changed). *prune: the checkpoints no longer kept
// (a recorded save's action.prune), for the caller to delete.
bool ApplyPsActionResult(CoordinatorCore& core, const PsAction& action,
                         const absl::Status& status,
                         std::vector<std::string>* prune)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);

// ---- Groups (coordinator_groups.cc) ---------------------------------------

// The job trains in groups (TrainingLoop::kSyncGroup).
bool SyncGroupJob(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Starts forming a new group (members learn of it from heartbeats and
// reports) for `reason`, e.g. the PS tasks were restored and the formed
// group's start step no longer holds. No-op before the first group.
void StartRegroup(CoordinatorCore& core, const std::string& reason)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// StartRegroup, also when no group has formed in this coordinator's
// lifetime (a restarted coordinator's members still train in the group
// they had): a PsHomeGroupJob's checkpoint barrier.
void StartBarrier(CoordinatorCore& core, const std::string& reason)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// A group job whose variables are on ps tasks (central_storage): its
// checkpoints are taken at a group barrier.
bool PsHomeGroupJob(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// A group is forming and every live trainer has joined it: nobody trains,
// so the ps tasks hold a consistent cut (every step they applied was whole).
bool GroupAtBarrier(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Starts forming a group when the live trainers differ from the formed
// group; completes the forming group when every candidate has joined,
// except while a PsHomeGroupJob's save or restore is pending (the group
// waits at the barrier for it).
void UpdateGroup(CoordinatorCore& core) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// The locked part of JoinGroup (`task` is a chief or worker). Sets
// *changed when state.json should be written.
absl::StatusOr<v1::GroupAssignment> JoinGroupLocked(
    CoordinatorCore& core, const TaskKey& task,
    const v1::JoinGroupRequest& request, bool* changed)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// As CoordinatorState::NewestGroup.
int64_t NewestGroupLocked(CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);

// ---- Barriers (coordinator_barriers.cc) -----------------------------------

// INVALID_ARGUMENT for an empty name or a count < 1.
absl::Status ValidateBarrier(const std::string& name, int count);
// The locked part of ArriveAtBarrier.
absl::Status Arrive(CoordinatorCore& core, const std::string& name,
                    const TaskKey& task, int count, int64_t ticket,
                    CoordinatorState::BarrierDone done, Callbacks* callbacks)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
bool CancelWait(CoordinatorCore& core, int64_t ticket)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Ends every wait with `status`.
void CancelAll(CoordinatorCore& core, const absl::Status& status,
               Callbacks* callbacks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Aborts the barriers `task` waits in (it `reason`, e.g. "left").
void AbortBarriersOf(CoordinatorCore& core, const TaskKey& task,
                     const char* reason, Callbacks* callbacks)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);

// ---- State codec (coordinator_state_codec.cc) -----------------------------

// state.json: membership, the job and its checkpoint bookkeeping.
std::string SerializeState(const CoordinatorCore& core)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Loads what SerializeState wrote into a fresh core: members get a full
// lease, a job waiting for its topology a fresh timeout. Errors:
// INVALID_ARGUMENT saying what is wrong.
absl::Status LoadState(CoordinatorCore& core, const std::string& text)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);

}  // namespace coordinator_internal
}  // namespace strata

#endif  // STRATA_COORDINATOR_COORDINATOR_INTERNAL_H_

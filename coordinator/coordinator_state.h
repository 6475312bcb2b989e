// The coordinator's pure logic: membership with heartbeat leases, the job
// and its step queue (TF's ClusterCoordinator.schedule), checkpoint and PS
// restore orchestration, barriers, and the on-disk state that lets a
// restarted coordinator resume. No gRPC here: CoordinatorServiceImpl adapts
// it, and a background thread there drives the time-based parts
// (CheckLeases) and the PS calls (NextPsAction / FinishPsAction).
#ifndef STRATA_COORDINATOR_COORDINATOR_STATE_H_
#define STRATA_COORDINATOR_COORDINATOR_STATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/tf_config.h"
#include "coordinator/ps_checkpointer.h"
#include "nlohmann/json.hpp"
#include "strategies/placement_policy.h"
#include "strata/v1/coordinator.pb.h"

namespace strata {

struct CoordinatorOptions {
  // A member whose last heartbeat is older than this is declared FAILED.
  absl::Duration lease = absl::Seconds(5);
  // Told to members at registration: how often to heartbeat.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // How long a submitted job may wait for the tasks its strategy needs.
  absl::Duration topology_timeout = absl::Seconds(10);
  // retry_after_ms of WAIT items.
  absl::Duration retry_after = absl::Milliseconds(50);
  // Pause between attempts when restoring the PS tasks fails.
  absl::Duration restore_retry = absl::Seconds(1);
  // Where state.json lives; empty: nothing is persisted.
  std::string state_dir;
  // Static membership (TF_CONFIG's cluster). When set, GetClusterSpec
  // answers with it, and the topology check counts the tasks it lists.
  std::optional<ClusterSpec> static_cluster;
  // Time source; absl::Now when empty. Tests step a fake one.
  std::function<absl::Time()> clock;
};

// What the coordinator needs from a job file (the rest is the workers').
struct CoordinatorJobSpec {
  int64_t epochs = 1;
  int64_t batch_size = 32;
  std::string strategy = "parameter_server";
  int64_t checkpoint_every_steps = 0;   // 0: off
  double checkpoint_every_seconds = 0;  // 0: off
  int64_t evaluate_every_epochs = 1;    // 0: never
  // The strategy's placement policy (never null after parsing).
  std::shared_ptr<const PlacementPolicy> policy;
};

// Parses epochs, batch_size, strategy.type (or strategy as a string),
// checkpoint.every_steps/every_seconds and evaluation.every_epochs, with
// the defaults above. Errors: INVALID_ARGUMENT naming the field, e.g.
// "job.batch_size: expected a positive integer, got 0".
absl::StatusOr<CoordinatorJobSpec> ParseCoordinatorJobSpec(
    absl::string_view job_json);

// A set of step numbers stored as sorted, disjoint half-open ranges.
class StepSet {
 public:
  bool Contains(int64_t step) const;
  // Adds `step`; false when it was already there.
  bool Insert(int64_t step);
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The smallest step >= `from` that is not in the set.
  int64_t NextAbsent(int64_t from) const;
  // [begin, end) ranges in increasing order.
  std::vector<std::pair<int64_t, int64_t>> Ranges() const;
  // Replaces the contents; INVALID_ARGUMENT for unsorted, overlapping,
  // empty or negative ranges.
  absl::Status SetRanges(const std::vector<std::pair<int64_t, int64_t>>& r);
  // Every step in *this that is not in `other`.
  std::vector<int64_t> Minus(const StepSet& other) const;
  void Clear() {
    ranges_.clear();
    size_ = 0;
  }
  bool operator==(const StepSet& o) const { return ranges_ == o.ranges_; }

 private:
  std::map<int64_t, int64_t> ranges_;  // begin -> end
  int64_t size_ = 0;
};

// A call the coordinator wants made on the PS tasks (see NextPsAction).
struct PsAction {
  enum class Kind { kSave, kRestore };
  Kind kind = Kind::kSave;
  std::string checkpoint;  // "ckpt-<completed steps>"
  // Pass back to FinishPsAction unchanged.
  std::string job_id;
  int64_t ticket = 0;
};

// Thread-safe. All methods may be called from any thread; none calls out
// (watchers, barrier callbacks) while holding the state lock. The logger
// must outlive the object.
class CoordinatorState {
 public:
  using Clock = std::function<absl::Time()>;
  using Watcher = std::function<void(int64_t generation)>;
  using BarrierDone = std::function<void(absl::Status)>;

  // Builds the state, loading `options.state_dir`/state.json when it
  // exists: the job resumes RUNNING, its in-flight items are pending again,
  // and known members keep their state with a fresh lease. Errors:
  // INVALID_ARGUMENT for bad options; DATA_LOSS naming the file and the
  // problem when state.json is corrupt; FAILED_PRECONDITION when the state
  // directory cannot be created.
  static absl::StatusOr<std::unique_ptr<CoordinatorState>> Create(
      CoordinatorOptions options, Logger* logger);
  ~CoordinatorState();

  CoordinatorState(const CoordinatorState&) = delete;
  CoordinatorState& operator=(const CoordinatorState&) = delete;

  const CoordinatorOptions& options() const { return options_; }
  bool persistent() const { return !options_.state_dir.empty(); }

  // ---- Membership -------------------------------------------------------

  // Registers `task` (role chief|worker|ps|evaluator, index >= 0) serving
  // on `address` ("" for a pure client), process instance `incarnation`.
  // A new member, a new incarnation of a known one, a member coming back
  // from FAILED/LEFT, or a changed address bumps the generation; the same
  // registration again only refreshes the lease. A new incarnation's
  // predecessor's in-flight work goes back to the queue; a ps task's new
  // incarnation while a job runs starts the PS restore (see NextPsAction).
  // Returns the generation. Errors: INVALID_ARGUMENT (role, index, empty
  // incarnation, a task outside the static cluster); UNAVAILABLE when the
  // state cannot be written (the registration holds in memory; retry).
  absl::StatusOr<int64_t> Register(const v1::TaskId& task,
                                   const std::string& address,
                                   const std::string& incarnation);

  // Refreshes the lease. Returns the generation. Errors: NOT_FOUND (the
  // message says "re-register") for an unknown task, a stale incarnation,
  // or a member already declared FAILED or LEFT.
  absl::StatusOr<int64_t> Heartbeat(const v1::TaskId& task,
                                    const std::string& incarnation);

  // Marks the member LEFT (generation++) and re-queues its work. Leaving
  // twice is OK. Errors: NOT_FOUND for an unknown task or stale
  // incarnation; UNAVAILABLE as for Register.
  absl::Status Deregister(const v1::TaskId& task,
                          const std::string& incarnation);

  // Declares every ALIVE member whose lease expired FAILED (generation++
  // each), re-queues their in-flight work and aborts barriers they wait
  // in; also advances the job's timers (topology timeout, checkpoint every
  // N seconds). Called periodically.
  void CheckLeases();

  int64_t generation() const;
  // Members sorted by (role, index), with the generation.
  v1::ClusterState GetClusterState() const;
  // TF_CONFIG form: {"cluster": {...}}: the static cluster when given,
  // else the ALIVE members with an address, by role, in index order.
  std::string GetClusterSpec() const;
  // The PS tasks checkpoints go to: the static cluster's ps list, with the
  // address of an ALIVE registered ps task taking precedence, else the
  // ALIVE ps members; by index.
  std::vector<PsTarget> PsTargets() const;

  // Calls `watcher` (without the state lock, never concurrently with
  // RemoveWatcher's return) after each generation change. Returns an id.
  int64_t AddWatcher(Watcher watcher);
  // Once this returns the watcher is not running and will not run again.
  // Do not call it from a watcher.
  void RemoveWatcher(int64_t id);
  // Blocks until the generation is above `after_generation` or `deadline`
  // (real time) passes; returns the generation then.
  int64_t WaitForChange(int64_t after_generation, absl::Time deadline) const;

  // ---- Job --------------------------------------------------------------

  // Starts a job: steps_per_epoch = ceil(train_examples / batch_size).
  // Returns its id. A finished job is replaced. Errors: INVALID_ARGUMENT
  // naming the bad field (train_examples must be > 0); FAILED_PRECONDITION
  // while a job is RUNNING, and when a static cluster cannot run the
  // strategy (the job is then recorded FAILED with that message).
  absl::StatusOr<std::string> SubmitJob(const std::string& job_json,
                                        int64_t train_examples);

  // The job (state NONE when none was submitted).
  v1::JobStatus GetJob() const;
  // Only the job's state (cheap: no copy of the job file or epochs).
  v1::JobStatus::State JobState() const;

  // The next item for `task`: TRAIN the lowest pending step of the open
  // epoch, EVALUATE an epoch whose steps are all done, WAIT (no job yet,
  // waiting for the topology, a checkpoint or restore in progress, a ps
  // task down, or nothing free now), or DONE (the job ended). TRAIN and
  // EVALUATE items are in flight for task+incarnation until reported.
  // Errors: NOT_FOUND ("re-register") as for Heartbeat;
  // FAILED_PRECONDITION for a ps task.
  absl::StatusOr<v1::WorkItem> GetWork(const v1::TaskId& task,
                                       const std::string& incarnation);

  // ApplyReport, then Flush: the result is on disk when this returns OK.
  absl::Status ReportWork(const v1::ReportWorkRequest& report);

  // Applies a report in memory (Flush makes it durable). A TRAIN report
  // completes its step once (later reports of it are ignored, OK); one with
  // `error` set re-queues the item; an EVALUATE report records the epoch's
  // test metrics. Reports of another job, of an ended job, or of items
  // handed out before the latest PS restore are ignored (OK); the last
  // re-queue the item. A report is accepted from any incarnation of a
  // registered task (the work was done). Errors: NOT_FOUND for an unknown
  // task; INVALID_ARGUMENT for a WAIT/DONE item, a step or epoch out of
  // range, or negative examples.
  absl::Status ApplyReport(const v1::ReportWorkRequest& report);

  // Asks for a checkpoint of the running job now (before the coordinator
  // stops on SIGTERM), when the job takes checkpoints and steps completed
  // since the last attempt, and no PS task is down: hand-out pauses,
  // in-flight steps drain, every PS task saves. Returns the completed steps
  // it will cover at least, or -1 when none is due.
  int64_t RequestCheckpoint();
  // Completed steps the newest finished checkpoint attempt covered, and the
  // newest checkpoint's name ("" when none).
  int64_t CheckpointAttempted() const;
  std::string LastCheckpoint() const;

  // A worker's account of the TRAIN steps and the EVALUATE epochs it holds
  // (leased, not reported): every other item in flight for
  // task+incarnation goes back to the queue (its lease was lost with an
  // answer the worker never received). Returns how many were re-queued.
  // Errors: as ValidateTask.
  absl::StatusOr<int> ReleaseUnheld(
      const v1::TaskId& task, const std::string& incarnation,
      const std::vector<int64_t>& holding,
      const std::vector<int64_t>& holding_evaluations = {});

  // Writes state.json if anything changed since the last write (one write
  // covers every change made before it started). No-op when not
  // persistent. Errors: UNAVAILABLE naming the file (the change is kept in
  // memory and written by the next Flush).
  absl::Status Flush();

  // ---- Groups (synchronous strategies) ----------------------------------

  // `task` joins the group after `request.after_group()` (see
  // GroupAssignment in coordinator.proto). The group forms once every live
  // trainer task (chief, workers; only the first for a single-process
  // policy) has joined with its current incarnation: ranks in (role,
  // index) order; start_step and source_rank as the proto says. Until then
  // WAIT. DONE when the job ended. Errors: NOT_FOUND ("re-register") as for
  // Heartbeat; FAILED_PRECONDITION for a job whose strategy does not train
  // in groups, or a task that is not a trainer.
  absl::StatusOr<v1::GroupAssignment> JoinGroup(
      const v1::JoinGroupRequest& request);
  // The newest group: the one being formed, else the formed one (0: none).
  // Starts forming a new group when the live trainers differ from the
  // formed group's members.
  int64_t NewestGroup();

  // ---- Checkpoint and restore orchestration -----------------------------

  // The PS call due now, if any: kSave once a checkpoint is due (every
  // N steps / seconds, and at the end of the job) and the in-flight items
  // have drained; kRestore after a ps task restarted, once drained and
  // every ps task is ALIVE, when a checkpoint exists. While one is due or
  // running, GetWork answers WAIT. At most one action is outstanding:
  // the caller must FinishPsAction before the next.
  std::optional<PsAction> NextPsAction();

  // Records the outcome of an action. Save OK: last_checkpoint(_step) are
  // set; Save failed: logged, training resumes (next checkpoint at the next
  // multiple). Restore OK: lost_steps += completed - last_checkpoint_step,
  // the steps completed since are pending again, epoch results revert to
  // the checkpoint's, training resumes. Restore failed: retried after
  // options.restore_retry.
  void FinishPsAction(const PsAction& action, const absl::Status& status);

  // ---- Barriers ---------------------------------------------------------

  // `task` arrives at barrier `name` of `count` tasks. When the count-th
  // distinct task arrives, every waiter's `done` runs with OK (possibly
  // before this returns, on this thread) and the barrier resets. A task
  // arriving again replaces its earlier wait (which gets ABORTED). If a
  // waiting task fails or leaves, the barrier's waiters get ABORTED.
  // `ticket` (unique per call) identifies the wait for CancelBarrierWait.
  // On error `done` is not called. Errors: INVALID_ARGUMENT for an empty
  // name, count < 1, or a count different from the waiters'.
  absl::Status ArriveAtBarrier(const std::string& name, const v1::TaskId& task,
                               int count, int64_t ticket, BarrierDone done);
  // Removes a wait; true when removed (its `done` will not run), false when
  // unknown or already released (its `done` ran or is running).
  bool CancelBarrierWait(int64_t ticket);
  // Runs every waiting `done` with `status` (shutdown).
  void CancelAllBarriers(const absl::Status& status);

 private:
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
    double loss_sum = 0;
    double accuracy_sum = 0;
    int64_t examples = 0;
    bool evaluated = false;
    double test_loss = 0;
    double test_accuracy = 0;
    absl::Time start = absl::InfinitePast();  // first step handed out
    absl::Time end = absl::InfinitePast();    // last step completed
  };
  struct GroupArrival {
    std::string incarnation;
    int64_t next_step = -1;
    std::string address;
  };
  struct Group {
    int64_t id = 0;  // 0: none formed
    std::vector<TaskKey> members;  // by rank
    std::vector<std::string> incarnations;
    std::vector<std::string> addresses;
    int64_t start_step = 0;
    int source_rank = -1;
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
    // Checkpoints.
    std::string last_checkpoint;
    int64_t last_checkpoint_step = 0;
    StepSet checkpoint_completed;
    std::vector<EpochStats> checkpoint_epochs;
    int64_t checkpoint_attempted = 0;  // completed count at the last try
    absl::Time checkpoint_attempt_time;
    bool checkpoint_pending = false;
    // PS restore.
    bool restore_pending = false;
    int64_t restore_seq = 0;  // bumped by each ps restart
    int64_t restore_floor_generation = 0;
    absl::Time next_restore_attempt = absl::InfinitePast();
    // The outstanding PsAction, and what a save covers.
    bool action_in_progress = false;
    // Synchronous strategies.
    Group group;
    StepSet save_completed;
    std::vector<EpochStats> save_epochs;
  };
  struct BarrierWaiter {
    int64_t ticket;
    BarrierDone done;
  };
  struct Barrier {
    int count = 0;
    std::map<TaskKey, BarrierWaiter> waiters;
  };
  using Callbacks = std::vector<std::pair<BarrierDone, absl::Status>>;

  CoordinatorState(CoordinatorOptions options, Logger* logger);

  absl::Time Now() const { return options_.clock(); }
  static std::string Name(const TaskKey& task);
  static absl::StatusOr<TaskKey> ValidateTask(const v1::TaskId& task);

  // NOT_FOUND ("re-register") unless `task` is ALIVE with `incarnation`.
  absl::StatusOr<MemberRecord*> LiveMemberLocked(const TaskKey& task,
                                                 const std::string& incarnation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BumpGenerationLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkDirtyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++change_seq_; }
  // Re-queues items held by `task` (any incarnation when `incarnation` is
  // null); aborts barriers it waits in when `abort_barriers`.
  void ReleaseTaskLocked(const TaskKey& task, const std::string* incarnation,
                         const char* reason, bool abort_barriers,
                         Callbacks* callbacks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RequeueLocked(const ItemKey& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Advances the job: topology check and timeout, checkpoint triggers,
  // restore without a checkpoint, completion.
  void UpdateJobLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the strategy still lacks ("ps" or "worker"), or "".
  std::string MissingRoleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string AliveListLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool UsesPs() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Names of registered ps tasks not ALIVE (the job pauses for them).
  std::vector<std::string> PsDownLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EvalDueLocked(int64_t epoch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SyncGroupJobLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Live trainer tasks that form the group, in rank order.
  std::vector<TaskKey> GroupCandidatesLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts forming a group when the candidates differ from the formed
  // group; completes the forming group when every candidate has joined.
  void UpdateGroupLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillAssignmentLocked(const TaskKey& task, v1::GroupAssignment* out)
      const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EpochDoneLocked(int64_t epoch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t OpenEpochLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The lowest pending step, or -1.
  int64_t LowestPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailJobLocked(const std::string& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RestoreBookkeepingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogEpochEndLocked(int64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::EpochResult EpochResultLocked(int64_t epoch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Persistence.
  std::string SerializeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadLocked(const std::string& text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string StatePath() const;
  static nlohmann::json EpochsToJson(const std::vector<EpochStats>& epochs);
  static absl::Status EpochsFromJson(const nlohmann::json& value, size_t count,
                                     std::vector<EpochStats>* epochs);

  // Runs barrier callbacks, then the watchers if the generation moved
  // since they last ran. Call without mu_.
  void AfterChange(Callbacks callbacks) ABSL_LOCKS_EXCLUDED(mu_);
  // Flush, logging failures; for changes whose caller has no error path.
  void FlushOrLog() ABSL_LOCKS_EXCLUDED(mu_);

  const CoordinatorOptions options_;
  Logger* const logger_;

  // Order: write_mu_, then watchers_mu_, then mu_.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(watchers_mu_);
  int64_t durable_seq_ ABSL_GUARDED_BY(write_mu_) = 0;

  mutable absl::Mutex watchers_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::map<int64_t, Watcher> watchers_ ABSL_GUARDED_BY(watchers_mu_);
  int64_t next_watcher_id_ ABSL_GUARDED_BY(watchers_mu_) = 1;
  int64_t notified_generation_ ABSL_GUARDED_BY(watchers_mu_) = 0;

  mutable absl::Mutex mu_;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t change_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t job_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Group ids grow across jobs and coordinator restarts (persisted).
  int64_t group_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<TaskKey, MemberRecord> members_ ABSL_GUARDED_BY(mu_);
  std::optional<Job> job_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Barrier> barriers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_COORDINATOR_COORDINATOR_STATE_H_

// The coordinator's pure logic: membership with heartbeat leases, the job
// and its step queue (TF's ClusterCoordinator.schedule), checkpoint and PS
// restore orchestration, barriers, and the on-disk state that lets a
// restarted coordinator resume. No gRPC and no threads here:
// CoordinatorServiceImpl adapts it, and CoordinatorDriver drives the
// time-based parts (CheckLeases) and the PS calls (NextPsAction /
// FinishPsAction). CoordinatorState is a locked facade; the pieces behind
// it are in coordinator_internal.h.
#ifndef STRATA_COORDINATOR_COORDINATOR_STATE_H_
#define STRATA_COORDINATOR_COORDINATOR_STATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "common/tf_config.h"
#include "coordinator/coordinator_job.h"
#include "coordinator/ps_checkpointer.h"
#include "coordinator/step_set.h"
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
  // Pause between attempts when restoring the PS tasks fails for another
  // reason than the checkpoint (which falls back to an older one at once),
  // and how many such attempts in a row fail the job.
  absl::Duration restore_retry = absl::Seconds(1);
  int restore_attempts = 30;
  // Where state.json lives; empty: nothing is persisted.
  std::string state_dir;
  // Reads and writes state.json (not owned; must outlive the state).
  // Tests inject an InMemoryFileSystem.
  FileSystem* file_system = LocalFileSystem();
  // Static membership (TF_CONFIG's cluster). When set, GetClusterSpec
  // answers with it, and the topology check counts the tasks it lists.
  std::optional<ClusterSpec> static_cluster;
  // Time source; absl::Now when empty. Tests step a fake one.
  std::function<absl::Time()> clock;
};

// A call the coordinator wants made on the PS tasks (see NextPsAction).
struct PsAction {
  enum class Kind { kSave, kRestore };
  Kind kind = Kind::kSave;
  std::string checkpoint;  // "ckpt-<completed steps>"
  // kSave: the checkpoints each task deletes once it saved (those beyond
  // the job's checkpoint.keep newest, and ones a restore skipped).
  std::vector<std::string> prune;
  // Pass back to FinishPsAction unchanged.
  std::string job_id;
  int64_t ticket = 0;
};

namespace coordinator_internal {
struct CoordinatorCore;
}  // namespace coordinator_internal

// Thread-safe. All methods may be called from any thread; none calls out
// (watchers, barrier callbacks) while holding the state lock. The logger
// (and options.file_system) must outlive the object.
class CoordinatorState {
 public:
  using Clock = std::function<absl::Time()>;
  using Watcher = std::function<void(int64_t generation)>;
  using BarrierDone = std::function<void(absl::Status)>;

  // Builds the state, loading `options.state_dir`/state.json when it
  // exists: the job resumes RUNNING, its in-flight items are pending again,
  // and known members keep their state with a fresh lease. Errors:
  // INVALID_ARGUMENT for bad options; DATA_LOSS naming the file and the
  // problem when state.json is corrupt or unreadable; UNAVAILABLE when the
  // file system cannot be reached now (its read said UNAVAILABLE: etcd);
  // FAILED_PRECONDITION when the state directory cannot be created.
  static absl::StatusOr<std::unique_ptr<CoordinatorState>> Create(
      CoordinatorOptions options, Logger* logger);
  ~CoordinatorState();

  CoordinatorState(const CoordinatorState&) = delete;
  CoordinatorState& operator=(const CoordinatorState&) = delete;

  const CoordinatorOptions& options() const;
  bool persistent() const { return !options().state_dir.empty(); }

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
  // `exclusive` / `replaces`: a replicated ps task's claim
  // (RegisterRequest.exclusive); ALREADY_EXISTS when it may not take the
  // task (CheckExclusiveClaim).
  absl::StatusOr<int64_t> Register(const v1::TaskId& task,
                                   const std::string& address,
                                   const std::string& incarnation,
                                   bool exclusive = false,
                                   const std::string& replaces = "",
                                   bool only_if_failed = false);

  // Refreshes the lease. Returns the generation. Errors: NOT_FOUND (the
  // message says "re-register") for an unknown task, a stale incarnation,
  // or a member already declared FAILED or LEFT.
  // `fence`: a replicated ps primary's dropped backup, which may no longer
  // take the task over (HeartbeatRequest.fence_incarnation).
  absl::StatusOr<int64_t> Heartbeat(const v1::TaskId& task,
                                    const std::string& incarnation,
                                    const std::string& fence = "");

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

  // Records the outcome of an action. Save OK: the checkpoint is the
  // newest kept, those in action.prune are no longer kept (the caller
  // deletes them); Save failed: counted and logged as an error, training
  // resumes (next checkpoint at the next multiple), and the job fails once
  // job.checkpoint.max_failures attempts in a row failed. Restore OK:
  // lost_steps += completed - the checkpoint's step, the steps completed
  // since are pending again, epoch results revert to the checkpoint's,
  // training resumes. Restore failed with DATA_LOSS or NOT_FOUND (the
  // checkpoint does not verify on some task): skipped, the next older kept
  // one is restored, and the job fails when none is left; failed
  // otherwise: retried after options.restore_retry, the job failing after
  // options.restore_attempts in a row.
  // Returns the checkpoints the caller should now delete: action.prune
  // when the save was recorded and state.json (if persistent) holds it;
  // else none.
  std::vector<std::string> FinishPsAction(const PsAction& action,
                                          const absl::Status& status);
  // The caller could not delete `names` (a ps task was down): the next
  // save's pruning lists them again.
  void PruneLater(const std::vector<std::string>& names);

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
  using Callbacks = std::vector<std::pair<BarrierDone, absl::Status>>;

  explicit CoordinatorState(
      std::unique_ptr<coordinator_internal::CoordinatorCore> core);

  std::string StatePath() const;
  // Runs barrier callbacks, then the watchers if the generation moved
  // since they last ran. Call without the state lock.
  void AfterChange(Callbacks callbacks) ABSL_LOCKS_EXCLUDED(watchers_mu_);
  // Flush, logging failures; for changes whose caller has no error path.
  void FlushOrLog() ABSL_LOCKS_EXCLUDED(write_mu_);

  // Everything the coordinator knows, guarded by core_->mu.
  const std::unique_ptr<coordinator_internal::CoordinatorCore> core_;

  // Order: write_mu_, then watchers_mu_, then core_->mu.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(watchers_mu_);
  int64_t durable_seq_ ABSL_GUARDED_BY(write_mu_) = 0;

  mutable absl::Mutex watchers_mu_;
  std::map<int64_t, Watcher> watchers_ ABSL_GUARDED_BY(watchers_mu_);
  int64_t next_watcher_id_ ABSL_GUARDED_BY(watchers_mu_) = 1;
  int64_t notified_generation_ ABSL_GUARDED_BY(watchers_mu_) = 0;
};

}  // namespace strata

#endif  // STRATA_COORDINATOR_COORDINATOR_STATE_H_

// One variable shard of a parameter server: value, optimizer slots, update
// mode (async, sync, bounded staleness), exactly-once state, waiting pulls.
#ifndef STRATA_SERVER_VARIABLE_H_
#define STRATA_SERVER_VARIABLE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "checkpoint/checkpoint.h"
#include "common/buffer_pool.h"
#include "common/exactly_once.h"
#include "common/tensor.h"
#include "kernels/delay_compensation.h"
#include "kernels/initializers.h"
#include "kernels/optimizers.h"
#include "nlohmann/json.hpp"
#include "server/device_state.h"
#include "server/pull_waiters.h"
#include "server/replication_sink.h"
#include "server/shared_regions.h"
#include "server/sync_accumulator.h"
#include "server/variable_mirrors.h"
#include "server/variable_spec.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

// The result of a push.
struct PushOutcome {
  int64_t version = 0;     // the variable's version after the push
  bool duplicate = false;  // the same (job, worker, step) was taken before
  bool applied = false;    // an optimizer step ran as a result of this push
  // Updates applied since the push's base version, for a dense push applied
  // at once that named one; -1 otherwise.
  int64_t staleness = -1;
  // A non-duplicate push given a StagedDense: its copy published, or dropped
  // (variable changed first, or copy incomplete) and the push applied anew.
  enum class Staged { kNone, kPublished, kDiscarded };
  Staged staged = Staged::kNone;
};

class Variable;

// What a backup applies for a delay-compensated dense push: the primary's
// corrected gradient, or (null) the push's own. A backup never corrects.
struct ReplicatedCorrection {
  const char* compensated = nullptr;
};

// Which stagings of one variable may begin (see Variable::StageDense).
// Shared by the variable and its live stagings. Thread-safe.
struct StageGate {
  std::atomic<bool> live{false};
  std::atomic<int> skip{0};
  std::atomic<int> backoff{0};
};

// A dense push stepped on a private copy of the value and slots while its
// gradient arrives; invisible until Variable::PushDense publishes it whole
// (a failed push drops it; a variable changed meanwhile gets the gradient
// applied unstaged). Thread-compatible; made by Variable::StageDense.
class StagedDense {
 public:
  // Elements [0, available) of `grad` (the whole gradient) arrived, checked:
  // steps those not yet stepped, in whole 64-byte runs until all are in
  // (bit-identical to an unstaged step). An optimizer error bars publishing.
  void Apply(const char* grad, int64_t available);

  // Elements stepped so far.
  int64_t done() const { return done_; }

  // Lets the variable stage its next push.
  ~StagedDense();
  StagedDense(const StagedDense&) = delete;
  StagedDense& operator=(const StagedDense&) = delete;

 private:
  friend class Variable;
  StagedDense() = default;

  std::shared_ptr<StageGate> gate_;
  // Used by Apply only: a staging may outlive its variable.
  const Variable* variable_ = nullptr;
  // The state the copy started from.
  std::shared_ptr<Buffer> base_value_;
  std::vector<std::shared_ptr<Buffer>> base_slots_;
  std::shared_ptr<Buffer> value_;
  std::vector<std::shared_ptr<Buffer>> slots_;
  std::vector<void*> slot_data_;
  int64_t iterations_ = 0;
  int64_t version_ = 0;
  double lr_scale_ = 1.0;
  int64_t done_ = 0;
  absl::Status status_;
};

// A consistent view of a variable's value. The buffer is never written while
// a snapshot refers to it (updates copy first), so it may be sent as is.
struct VariableSnapshot {
  DType dtype = DType::kInvalid;
  Shape shape;
  std::shared_ptr<const Buffer> value;
  int64_t version = 0;
};

// Thread-safe: updates are serialized by a mutex; readers take snapshots and
// never see a half-applied update; pull waiters run after the mutex is
// released. On a CUDA `device`, value and slots are stepped in device
// memory; a host copy of the value serves snapshots, rows and checkpoints.
class Variable {
 public:
  // Builds and initializes a variable from `spec` (see ValidateVariableSpec)
  // on `device`. Errors: INVALID_ARGUMENT naming the field; RESOURCE_EXHAUSTED
  // beyond `max_bytes` or device memory; FAILED_PRECONDITION for a CUDA device
  // this build or machine cannot use; UNIMPLEMENTED for DC on a CUDA device.
  static absl::StatusOr<std::shared_ptr<Variable>> Create(
      const v1::VariableSpec& spec, uint64_t max_bytes,
      const PsDevice& device = PsDevice());

  // Rebuilds a variable on `device` with the state and spec (initializer not
  // checked nor run) saved in `entry`. Errors: DATA_LOSS for an entry not
  // matching its spec or with malformed metadata; those of Create.
  static absl::StatusOr<std::shared_ptr<Variable>> FromCheckpoint(
      const CheckpointVariable& entry, uint64_t max_bytes,
      const PsDevice& device = PsDevice());

  // Retires the mirrors (see RetireMirrors).
  ~Variable();

  const std::string& name() const { return spec_.name(); }
  const v1::VariableSpec& spec() const { return spec_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t byte_size() const { return byte_size_; }
  int64_t row_width() const { return row_width_; }

  // Checks a push's identity against the update mode, applying nothing: the
  // step is in range; in SYNC and STALENESS the push is tagged and its worker
  // one of the replicas (of its group, for a SYNC push naming a group size).
  // Errors: INVALID_ARGUMENT naming the variable and the field.
  absl::Status CheckPushMeta(const PushMeta& meta) const;

  // Dense gradient push of byte_size() bytes of dtype(). Exactly-once: a
  // tagged push whose (job, worker, step) was taken is acknowledged as
  // `duplicate`, not applied; taken pushes are remembered for kDedupWindow
  // steps of their (job, worker); untagged ones (ASYNC only) always apply.
  // ASYNC and STALENESS apply at once; SYNC sums each step and applies its
  // average once complete, in step order. Delay compensation (DC) corrects a
  // push from the value at its base version (or the oldest kept after it).
  // A complete `staged` copy is published as the step if the variable is
  // unchanged since staging began. Errors: INVALID_ARGUMENT (size, NaN/Inf,
  // CheckPushMeta's); ABORTED (SYNC step already applied or from a group
  // older than the one running it; step below the exactly-once window);
  // FAILED_PRECONDITION (SYNC step kMaxStepsAhead or more ahead); device's.
  absl::StatusOr<PushOutcome> PushDense(const PushMeta& meta,
                                        const char* grad, size_t size,
                                        StagedDense* staged = nullptr);

  // PushDense of a gradient checked by the core's PushSession or a backup's
  // primary (byte_size() finite bytes, CheckPushMeta passed). `replicated`
  // (on a backup): the primary's DC. Errors: PushDense's but INVALID_ARGUMENT.
  absl::StatusOr<PushOutcome> PushCheckedDense(
      const PushMeta& meta, const char* grad, StagedDense* staged = nullptr,
      const ReplicatedCorrection* replicated = nullptr);

  // Begins a staged dense push of `meta` (base_version included), buffers
  // from `pool`. Null for a SYNC variable, a CUDA device, no elements, delay
  // compensation, a push the exactly-once window took or refuses, a copy
  // (value and slots) over `max_bytes`, or while the StageGate refuses
  // (another staging live, or recent ones lost to other updates).
  std::unique_ptr<StagedDense> StageDense(
      const PushMeta& meta, BufferPool* pool,
      uint64_t max_bytes = std::numeric_limits<uint64_t>::max());

  // Row gradient push on a 2-D variable: `values` holds ids.size() rows.
  // Duplicate ids are summed. Errors as PushDense, plus INVALID_ARGUMENT for
  // a row id out of range or a variable that is not 2-D.
  absl::StatusOr<PushOutcome> PushRows(const PushMeta& meta,
                                       absl::Span<const int64_t> ids,
                                       const char* values, size_t size);

  // Replaces the value (not the slots) with byte_size() bytes of `data`;
  // returns the new version (one more; unchanged for SYNC, which counts
  // steps). Errors: INVALID_ARGUMENT (size, NaN/Inf); the device's errors.
  absl::StatusOr<int64_t> Assign(const char* data, size_t size);

  // The current value and version (no copy).
  VariableSnapshot Snapshot() const;

  // Copies rows `ids` (in order) into a new buffer, with the version read.
  // Errors: INVALID_ARGUMENT for a variable not 2-D or a row id out of range.
  absl::StatusOr<VariableSnapshot> ReadRows(
      absl::Span<const int64_t> ids) const;

  // Whether a pull may proceed: version >= min_version and, in STALENESS
  // with `clock` > 0, the slowest worker's clock >= clock - staleness.
  bool PullReady(int64_t min_version, int64_t clock) const;
  // Runs `done` (OK) at once and returns 0 when PullReady holds; otherwise
  // returns a waiter id (>= 1), and `done` runs once, outside the lock: OK
  // once PullReady holds, or the status of ExpireWaiter(id)/CancelWaiters.
  int64_t WaitForPull(int64_t min_version, int64_t clock,
                      std::function<void(absl::Status)> done);
  // Fires waiter `id`, if still waiting, with `status` (DEADLINE_EXCEEDED).
  void ExpireWaiter(int64_t id, absl::Status status);
  // Fires every waiter with `status` (shutdown, restore).
  void CancelWaiters(absl::Status status);
  // Why a pull is not ready, for error messages.
  std::string WaitDescription(int64_t min_version, int64_t clock) const;

  // Checkpoint entry: value, slots (uncopied; read back from a CUDA device),
  // spec, version, iterations, clocks, exactly-once window less pushes in
  // unapplied SYNC steps (re-pushed after a restore). Errors: the CUDA read's.
  absl::StatusOr<CheckpointVariable> CheckpointEntry() const;
  // CheckpointEntry without errors: unreadable device slots give an entry
  // without slots (which FromCheckpoint refuses with DATA_LOSS).
  CheckpointVariable ToCheckpoint() const;

  const PsDevice& device() const { return device_; }

  // Replicates every change to `sink` (null: none), appended under the lock;
  // a push or Assign returns once the backup has it or was dropped, and
  // fails UNAVAILABLE if this primary lost its task. Set before sharing.
  void set_replication(ReplicationSink* sink) { sink_ = sink; }
  // Appends the whole state (an INSTALL entry, unapplied SYNC steps
  // included) to `sink` under the lock. Errors: those of reading CUDA slots.
  absl::Status AppendState(ReplicationSink* sink, const std::string& owner)
      const;
  // Rebuilds a variable from an INSTALL entry. Errors: DATA_LOSS for a
  // malformed entry; those of FromCheckpoint.
  static absl::StatusOr<std::shared_ptr<Variable>> FromReplica(
      const v1::ReplicationEntry& entry, uint64_t max_bytes,
      const PsDevice& device = PsDevice());

  // Mirrors the value at `offset` of `region` (common/shared_layout.h) now and
  // after each change, marked kMirrorGone at destruction; replaces a mirror at
  // the same place; a dropped region (held weakly) stops being written.
  // Errors: INVALID_ARGUMENT for an offset not a multiple of 8 or no room
  // for header and value after the nonce; RESOURCE_EXHAUSTED past
  // kMaxMirrorsPerVariable live mirrors.
  absl::Status AddMirror(const std::shared_ptr<MappedRegion>& region,
                         uint64_t offset);
  // AddMirror's checks without adding.
  absl::Status CheckMirror(const MappedRegion& region, uint64_t offset) const;
  // Marks every mirror gone and forgets them (as the destructor does).
  void RetireMirrors();

  // Updates and assignments applied; for SYNC, the next step to apply.
  int64_t version() const;
  // Optimizer steps applied.
  int64_t iterations() const;

 private:
  using Ready = std::vector<std::function<void(absl::Status)>>;

  Variable(const v1::VariableSpec& spec, DType dtype, Shape shape,
           std::unique_ptr<Optimizer> optimizer, const PsDevice& device);

  // Create without the upload; `zero_value`: zero, initializer not run.
  static absl::StatusOr<std::shared_ptr<Variable>> CreateOnHost(
      const v1::VariableSpec& spec, uint64_t max_bytes,
      const PsDevice& device, bool zero_value);
  // Uploads value and slots to device_. Errors: NewVariableDevice's, Init's.
  absl::Status AttachDeviceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // INVALID_ARGUMENT for row `what` ("push", "pull") on a non-2-D variable.
  absl::Status CheckRowShape(const char* what) const;
  // INVALID_ARGUMENT for a row id outside [0, shape[0]).
  absl::Status CheckRowIds(absl::Span<const int64_t> ids) const;
  // Takes a checked dense or distinct-row push. Errors: ABORTED (dedup_);
  // those of pending_.Add, the optimizer or device.
  absl::StatusOr<PushOutcome> TakePush(
      const PushMeta& meta, const char* dense, absl::Span<const int64_t> ids,
      const char* rows, StagedDense* staged = nullptr,
      const ReplicatedCorrection* replicated = nullptr);
  // variable_dc.cc: `grad`, or its correction in dc_scratch_ (*corrected).
  absl::StatusOr<const char*> CompensateLocked(
      const PushMeta& meta, const char* grad,
      const ReplicatedCorrection* replicated, bool* corrected)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps `value` as the value at `version` (the newest dc_versions_).
  void RememberVersionLocked(int64_t version,
                             std::shared_ptr<Buffer> value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool delay_compensated() const { return dc_.lambda > 0; }
  // Learning-rate scale and staleness of an ASYNC/STALENESS dense push.
  double LrScaleLocked(const PushMeta& meta, int64_t* staleness) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Publishes `staged` if complete and the variable unchanged; whether it did.
  bool PublishStagedLocked(StagedDense* staged, double lr_scale)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Feeds the StageGate's backoff with how `staged` (if any) ended.
  void NoteStagedLocked(StagedDense* staged, bool published)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies complete SYNC steps in order; whether any was. Errors: those of
  // the optimizer or device (the failing step stays pending).
  absl::StatusOr<bool> ApplyCompleteStepsLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One optimizer step (host or device), learning rate times `lr_scale`.
  absl::Status ApplyDenseLocked(const char* grad, double lr_scale)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ApplyRowsLocked(absl::Span<const int64_t> ids,
                               const char* values)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copy-on-write of value and slots before a step.
  std::vector<void*> UnsharedSlotsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnshareLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // STALENESS: raises meta.worker's clock to meta.step + 1.
  void AdvanceClockLocked(const PushMeta& meta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PullState PullStateLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // After a change: writes the mirrors, moves ready waiters into `ready`.
  void PublishLocked(Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checkpoint metadata; `with_held` keeps held SYNC pushes in the window.
  nlohmann::json MetaLocked(bool with_held = false) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Appends a taken push (`compensated`: its DC gradient) to sink_; the
  // ticket to wait for, or 0 when nothing is replicated now.
  uint64_t ReplicatePushLocked(const PushMeta& meta, const char* dense,
                               absl::Span<const int64_t> ids,
                               const char* rows,
                               const char* compensated = nullptr)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // ReplicationSink::Wait(ticket); OK for 0.
  absl::Status WaitReplicated(uint64_t ticket) const;
  CheckpointVariable EntryWithoutSlotsLocked() const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Installs `entry`'s saved state. Errors: DATA_LOSS.
  absl::Status RestoreLocked(const CheckpointVariable& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const v1::VariableSpec spec_;
  const DType dtype_;
  const Shape shape_;
  const int64_t num_elements_;
  const size_t byte_size_;
  const int64_t row_width_;
  friend class StagedDense;
  const std::shared_ptr<StageGate> stage_gate_ = std::make_shared<StageGate>();
  const std::unique_ptr<Optimizer> optimizer_;
  const v1::UpdateMode::Kind mode_;
  const int num_replicas_;
  const int staleness_;
  // ASYNC: UpdateMode.scale_by_staleness and staleness_tolerance.
  const bool scale_by_staleness_;
  const int64_t staleness_tolerance_;
  // ASYNC: delay compensation (lambda 0: off) and the versions it keeps.
  const DelayCompensationConfig dc_;
  const int dc_versions_;
  const PsDevice device_;
  ReplicationSink* sink_ = nullptr;

  mutable absl::Mutex mu_;
  // On a CUDA device: the host copy.
  std::shared_ptr<Buffer> value_ ABSL_GUARDED_BY(mu_);
  // Host slots; empty on a CUDA device.
  std::vector<std::shared_ptr<Buffer>> slots_ ABSL_GUARDED_BY(mu_);
  // Device value and slots; null on the host device.
  std::unique_ptr<VariableDevice> on_device_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t iterations_ ABSL_GUARDED_BY(mu_) = 0;
  ExactlyOnceWindow dedup_ ABSL_GUARDED_BY(mu_);
  // SYNC: the steps at or above version_ not yet applied.
  SyncAccumulator pending_ ABSL_GUARDED_BY(mu_);
  // STALENESS: per worker, the step after the last it pushed.
  std::vector<int64_t> clocks_ ABSL_GUARDED_BY(mu_);
  PullWaiters waiters_ ABSL_GUARDED_BY(mu_);
  VariableMirrors mirrors_ ABSL_GUARDED_BY(mu_);
  // Value changes (updates and assignments), for the mirrors.
  int64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  // Delay compensation: last values (oldest first), mean square, output.
  std::deque<std::pair<int64_t, std::shared_ptr<const Buffer>>> dc_history_
      ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Buffer> dc_mean_square_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Buffer> dc_scratch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_SERVER_VARIABLE_H_

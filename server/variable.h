// One variable shard held by a parameter server: its value, optimizer slots,
// update mode (async, sync, bounded staleness), exactly-once bookkeeping and
// the pulls waiting on it.
#ifndef STRATA_SERVER_VARIABLE_H_
#define STRATA_SERVER_VARIABLE_H_

#include <atomic>
#include <deque>
#include <cstdint>
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
#include "common/buffer_pool.h"
#include "common/tensor.h"
#include "kernels/delay_compensation.h"
#include "kernels/initializers.h"
#include "kernels/optimizers.h"
#include "nlohmann/json.hpp"
#include "checkpoint/checkpoint.h"
#include "server/device_state.h"
#include "common/exactly_once.h"
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
  // A dense push applied at once that named its base version: the updates
  // applied to the variable since that version; -1 otherwise.
  int64_t staleness = -1;
  // A push given a StagedDense that was not a duplicate: whether its
  // staged copy was published (kPublished), or dropped and the push
  // applied again on the newer state (kDiscarded: another update reached
  // the variable first, or the copy was incomplete).
  enum class Staged { kNone, kPublished, kDiscarded };
  Staged staged = Staged::kNone;
};

class Variable;

// How a backup applies a replicated dense push of a variable with delay
// compensation: as its primary corrected it (`compensated`: the gradient
// the primary applied), or uncorrected (null: the primary had nothing to
// correct); the backup never corrects on its own, so its value stays equal
// to the primary's to the bit.
struct ReplicatedCorrection {
  const char* compensated = nullptr;
};

// Which stagings of one variable may begin (see Variable::StageDense):
// one at a time, and after a staged copy lost to another update, the next
// few pushes are not staged (1, 3, 7, ... up to 63 of them) so that a
// variable many workers push at once does not keep copying for nothing.
// Shared by the variable and its live stagings. Thread-safe.
struct StageGate {
  std::atomic<bool> live{false};
  std::atomic<int> skip{0};
  std::atomic<int> backoff{0};
};

// A dense push whose optimizer step runs while its gradient is still
// arriving (the Lane's chunked frames): Apply takes each range of elements
// as it lands and checks out, and steps a private copy of the value and
// slots from the state the variable had when the staging began. Nothing is
// visible until Variable::PushDense publishes the copy whole, once every
// element is in and the whole push passed its checks; a push that fails
// anywhere drops the copy and changes nothing. If another update reached
// the variable meanwhile, PushDense drops the copy and applies the
// gradient to the newer state, as an unstaged push. Thread-compatible; made
// by Variable::StageDense.
class StagedDense {
 public:
  // Elements [0, available) of `grad` (the whole gradient, as PushDense
  // receives it) have arrived and passed their checks: steps those of them
  // not stepped yet in whole 64-byte runs (the vector lanes of the step on
  // the whole gradient, so that the result is the same to the bit), and
  // all of them once `available` is every element. An error of the
  // optimizer is kept, and the copy is then never published.
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
  // Used by Apply only, never by the destructor: a staging may outlive
  // its variable (a Lane frame drops its variables first).
  const Variable* variable_ = nullptr;
  // The state the copy started from, held so that it is not written in
  // place (a variable copies a buffer others hold before writing it): the
  // variable is unchanged since exactly when these are still its buffers.
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

// Thread-safe. Updates to one variable are serialized by its mutex; readers
// take reference-counted snapshots and never see a half-applied update.
// Callbacks (pull waiters) run after the mutex is released.
//
// On a CUDA device (`device`), the value and the optimizer slots live in
// device memory and the optimizer steps run there (server/device_state.h);
// the host keeps a copy of the value, refreshed by every update under the
// lock, from which snapshots, row reads and checkpoints are served exactly
// as on the host device.
class Variable {
 public:
  // Builds and initializes a variable from `spec` (validated: name, dtype,
  // shape, full shape and row offset, initializer, optimizer, update mode;
  // see ValidateVariableSpec) on `device`. Errors: INVALID_ARGUMENT naming
  // the field; RESOURCE_EXHAUSTED when the value would exceed `max_bytes`
  // (or device memory runs out); FAILED_PRECONDITION when `device` is a
  // CUDA device this build or machine cannot use (naming the device).
  static absl::StatusOr<std::shared_ptr<Variable>> Create(
      const v1::VariableSpec& spec, uint64_t max_bytes,
      const PsDevice& device = PsDevice());

  // Rebuilds a variable from a checkpoint entry (its spec, initializer
  // included, as spec(); value, slots, version, iterations, exactly-once
  // window and clocks from the entry), on `device`. The saved initializer
  // is neither checked nor run. Errors: DATA_LOSS for an entry that does
  // not match its spec or has malformed metadata; those of Create.
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

  // Checks a push's identity against the update mode, without applying
  // anything: the step is in range, and in SYNC and STALENESS modes the push
  // is tagged and its worker is one of the replicas (of its group, for a
  // SYNC push naming a group size). Errors: INVALID_ARGUMENT naming the
  // variable and the field.
  absl::Status CheckPushMeta(const PushMeta& meta) const;

  // Dense gradient push: `grad` holds byte_size() bytes of dtype().
  // A tagged push whose (job, worker, step) this variable already took is
  // acknowledged (`duplicate`) and not applied; an untagged one is always
  // applied (ASYNC only). ASYNC and STALENESS apply it at once; SYNC adds
  // it to its step's sum and applies the average of every complete step
  // in order. A taken tagged push is remembered for kDedupWindow steps of
  // its (job, worker).
  // Errors: INVALID_ARGUMENT (size, NaN/Inf, the errors of CheckPushMeta),
  // ABORTED (sync step already applied, a sync step from a group older
  // than the one running it, or a step older than the exactly-once
  // window), FAILED_PRECONDITION (sync step kMaxStepsAhead or more ahead),
  // and the device's errors on a CUDA device.
  // `staged`: the push's StagedDense (see there), published in place of
  // the optimizer step when it is complete and the variable unchanged
  // since it began.
  // With delay compensation (UpdateMode.delay_compensation), a push whose
  // base version is older than the variable's is corrected before the
  // optimizer applies it (kernels/delay_compensation.h), from the value
  // at its base version (or the oldest of the kept versions after it).
  absl::StatusOr<PushOutcome> PushDense(const PushMeta& meta,
                                        const char* grad, size_t size,
                                        StagedDense* staged = nullptr);

  // PushDense of a gradient its caller already checked: `grad` holds
  // byte_size() bytes, all finite, and CheckPushMeta(meta) passed (the
  // core's PushSession checks them as the bytes arrive; a backup, the
  // entry its primary took). `replicated` (a backup's apply) gives the
  // primary's delay correction. Errors: those of PushDense but
  // INVALID_ARGUMENT.
  absl::StatusOr<PushOutcome> PushCheckedDense(
      const PushMeta& meta, const char* grad, StagedDense* staged = nullptr,
      const ReplicatedCorrection* replicated = nullptr);

  // Begins a staged dense push of `meta` (base_version included): buffers
  // for the copy of the value and slots come from `pool`. Null where
  // staging does not apply: a SYNC variable (its pushes are summed, not
  // stepped), a CUDA device, a variable of no elements, a push the
  // exactly-once window already took or refuses, a variable with delay
  // compensation (its correction needs the value at the push's apply);
  // and while the gate says
  // no (StageGate: another staging of this variable is live, or recent
  // ones lost to other updates).
  // The copy is at most `max_bytes` (value and slots together), or there
  // is none.
  std::unique_ptr<StagedDense> StageDense(
      const PushMeta& meta, BufferPool* pool,
      uint64_t max_bytes = std::numeric_limits<uint64_t>::max());

  // Row gradient push on a 2-D variable: `values` holds ids.size() rows.
  // Duplicate ids are summed. Errors as PushDense, plus INVALID_ARGUMENT for
  // a row id out of range or a variable that is not 2-D.
  absl::StatusOr<PushOutcome> PushRows(const PushMeta& meta,
                                       absl::Span<const int64_t> ids,
                                       const char* values, size_t size);

  // Replaces the value (slots are kept) with the byte_size() bytes of
  // `data`. Returns the version after it: one more, but for a SYNC
  // variable, whose version counts steps and does not move. Errors:
  // INVALID_ARGUMENT (size, NaN/Inf); the device's errors on a CUDA device.
  absl::StatusOr<int64_t> Assign(const char* data, size_t size);

  // The current value and version (no copy).
  VariableSnapshot Snapshot() const;

  // Copies rows `ids` (in order) into a new buffer, with the version they
  // were read at. Errors: INVALID_ARGUMENT for a variable that is not 2-D
  // or a row id out of range.
  absl::StatusOr<VariableSnapshot> ReadRows(
      absl::Span<const int64_t> ids) const;

  // Whether a pull with these conditions may proceed now. The condition is
  // version >= min_version, and in STALENESS mode with `clock` > 0 the
  // slowest worker's clock >= clock - staleness.
  bool PullReady(int64_t min_version, int64_t clock) const;
  // Runs `done` (with OK) at once and returns 0 when PullReady holds;
  // otherwise registers it and returns its waiter id (>= 1): `done` then
  // runs once, outside the lock, with OK when an update makes PullReady
  // hold, or with the status given to ExpireWaiter(id) or CancelWaiters.
  int64_t WaitForPull(int64_t min_version, int64_t clock,
                      std::function<void(absl::Status)> done);
  // Fires waiter `id` with `status` (the Pull's DEADLINE_EXCEEDED) if it
  // is still waiting; nothing otherwise.
  void ExpireWaiter(int64_t id, absl::Status status);
  // Fires every waiter with `status` (shutdown, restore).
  void CancelWaiters(absl::Status status);
  // Text describing why a pull is not ready (for error messages).
  std::string WaitDescription(int64_t min_version, int64_t clock) const;

  // Entry for a checkpoint: snapshots (no copy) of the value and, on the
  // host device, of the slots; on a CUDA device the slots are read back from
  // device memory. The metadata holds the spec, version, iterations,
  // clocks and exactly-once window, less the pushes held in unapplied
  // SYNC steps (not in the saved value: they are re-pushed after a
  // restore). Errors: the CUDA failures of that read.
  absl::StatusOr<CheckpointVariable> CheckpointEntry() const;
  // As CheckpointEntry, for callers that cannot handle an error: a variable
  // whose device slots cannot be read gives an entry without slots (which
  // FromCheckpoint refuses with DATA_LOSS).
  CheckpointVariable ToCheckpoint() const;

  // Where the value and slots live.
  const PsDevice& device() const { return device_; }

  // PS replication (server/replication.h): every change is appended to
  // `sink` under this variable's lock, and a push or assignment returns
  // only once the sink's backup has it (or the backup was dropped). Set
  // before the variable is shared; null: not replicated.
  void set_replication(ReplicationSink* sink) { sink_ = sink; }
  // Appends this variable's whole state (an INSTALL entry: value, slots,
  // version, exactly-once window, clocks, the SYNC steps not yet applied)
  // to `sink`, under the lock, for a state transfer. Errors: the CUDA
  // failures of reading the slots.
  absl::Status AppendState(ReplicationSink* sink, const std::string& owner)
      const;
  // Rebuilds a variable from an INSTALL entry. Errors: DATA_LOSS for a
  // malformed entry; those of FromCheckpoint.
  static absl::StatusOr<std::shared_ptr<Variable>> FromReplica(
      const v1::ReplicationEntry& entry, uint64_t max_bytes,
      const PsDevice& device = PsDevice());

  // Keeps a copy of the value at `offset` of `region` (layout in
  // common/shared_layout.h), written now and after every change, and
  // marked kMirrorGone when this variable is destroyed; replaces a mirror at
  // the same place. The variable holds the region weakly: a region the
  // server drops stops being written. Errors: INVALID_ARGUMENT when the
  // offset is not a multiple of 8 or the header and value do not fit in
  // the region after its nonce; RESOURCE_EXHAUSTED beyond
  // kMaxMirrorsPerVariable live mirrors.
  absl::Status AddMirror(const std::shared_ptr<MappedRegion>& region,
                         uint64_t offset);
  // The checks of AddMirror without adding (so that a request naming
  // several variables adds none when one would fail).
  absl::Status CheckMirror(const MappedRegion& region, uint64_t offset) const;
  // Marks every mirror gone and forgets them (the variable is being
  // replaced; the destructor does the same).
  void RetireMirrors();

  // The version: the updates applied and, but for a SYNC variable (whose
  // version counts the steps applied), the assignments.
  int64_t version() const;
  // Optimizer steps applied.
  int64_t iterations() const;

 private:
  using Ready = std::vector<std::function<void(absl::Status)>>;

  Variable(const v1::VariableSpec& spec, DType dtype, Shape shape,
           std::unique_ptr<Optimizer> optimizer, const PsDevice& device);

  // Create, with the value and slots in host memory (not yet on `device`).
  // With `zero_value` the initializer of `spec` is neither checked nor run
  // and the value is zero (FromCheckpoint overwrites it); spec() is `spec`
  // either way.
  static absl::StatusOr<std::shared_ptr<Variable>> CreateOnHost(
      const v1::VariableSpec& spec, uint64_t max_bytes,
      const PsDevice& device, bool zero_value);
  // Moves the value and slots to device_ (a CUDA device): uploads them and
  // keeps the host copy of the value. Errors: those of NewVariableDevice
  // and VariableDevice::Init, prefixed with the variable and device.
  absl::Status AttachDeviceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Errors: INVALID_ARGUMENT, naming the row `what` ("push", "pull"), for
  // a variable that is not 2-D.
  absl::Status CheckRowShape(const char* what) const;
  // Errors: INVALID_ARGUMENT for a row id outside [0, shape[0]).
  absl::Status CheckRowIds(absl::Span<const int64_t> ids) const;
  // Takes a checked push of a dense gradient (`dense` not null) or of
  // distinct rows `ids` of `rows`: acknowledges a duplicate, or applies it
  // (SYNC: accumulates it) and remembers it in dedup_; then writes the
  // mirrors and fires the waiters now ready. Errors: ABORTED from dedup_,
  // those of pending_.Add and of the optimizer or device.
  // `staged`: see PushDense.
  absl::StatusOr<PushOutcome> TakePush(
      const PushMeta& meta, const char* dense, absl::Span<const int64_t> ids,
      const char* rows, StagedDense* staged = nullptr,
      const ReplicatedCorrection* replicated = nullptr);
  // Delay compensation (server/variable_dc.cc). The gradient to apply for
  // the dense push `meta` of `grad` at the current version: `grad` itself,
  // or the corrected gradient in dc_scratch_ (then *corrected is set).
  // The adaptive variant's mean square moves with `grad` either way.
  // `replicated`: as PushDense.
  absl::StatusOr<const char*> CompensateLocked(
      const PushMeta& meta, const char* grad,
      const ReplicatedCorrection* replicated, bool* corrected)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps `value`, the value at `version`, for later corrections (the
  // newest dc_.versions of them).
  void RememberVersionLocked(int64_t version,
                             std::shared_ptr<Buffer> value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool delay_compensated() const { return dc_.lambda > 0; }
  // The learning-rate scale and staleness of an ASYNC or STALENESS dense
  // push of `meta` at the current version.
  double LrScaleLocked(const PushMeta& meta, int64_t* staleness) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Publishes `staged` as the step of a push, if it is complete and the
  // variable is as it was when the staging began; returns whether it did.
  bool PublishStagedLocked(StagedDense* staged, double lr_scale)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Feeds the StageGate's backoff with how `staged` (if any) ended.
  void NoteStagedLocked(StagedDense* staged, bool published)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies every complete SYNC step from version_ on, in order, advancing
  // version_; returns whether any was applied. Errors: those of the
  // optimizer or device (the failing step stays pending).
  absl::StatusOr<bool> ApplyCompleteStepsLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies a dense gradient (already averaged) through the optimizer, or
  // on the device, with the learning rate times `lr_scale` (in (0, 1]).
  absl::Status ApplyDenseLocked(const char* grad, double lr_scale)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the gradient rows `values` of distinct rows `ids` likewise.
  absl::Status ApplyRowsLocked(absl::Span<const int64_t> ids,
                               const char* values)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The host slots' data, made exclusively owned with the value
  // (copy-on-write) for an optimizer step.
  std::vector<void*> UnsharedSlotsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes value_ and slots_ exclusively owned (copy-on-write).
  void UnshareLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // STALENESS: raises the clock of meta.worker to meta.step + 1.
  void AdvanceClockLocked(const PushMeta& meta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What pull conditions are judged on.
  PullState PullStateLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // After a change: writes the mirrors and moves the callbacks of the
  // waiters now ready into `ready`.
  void PublishLocked(Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The checkpoint metadata (see CheckpointEntry); with `with_held`, the
  // window also lists the pushes held in unapplied SYNC steps (a state
  // transfer sends those steps along).
  nlohmann::json MetaLocked(bool with_held = false) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The replication entry of a taken push (`dense`, or rows `ids`), or 0
  // when nothing is replicated now; the ticket to wait for.
  // `compensated`: the corrected gradient applied in place of `dense`,
  // if any (delay compensation).
  uint64_t ReplicatePushLocked(const PushMeta& meta, const char* dense,
                               absl::Span<const int64_t> ids,
                               const char* rows,
                               const char* compensated = nullptr)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Waits for `ticket` (see ReplicationSink::Wait); OK for 0.
  absl::Status WaitReplicated(uint64_t ticket) const;
  // The entry of CheckpointEntry but for the slots.
  CheckpointVariable EntryWithoutSlotsLocked() const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Installs the saved state of `entry` into a variable built from its
  // spec. Errors: DATA_LOSS.
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
  // ASYNC: UpdateMode.delay_compensation (lambda 0: off), and the number
  // of versions kept for it.
  const DelayCompensationConfig dc_;
  const int dc_versions_;
  const PsDevice device_;
  ReplicationSink* sink_ = nullptr;

  mutable absl::Mutex mu_;
  // The value (on a CUDA device: the host copy of the device's value).
  std::shared_ptr<Buffer> value_ ABSL_GUARDED_BY(mu_);
  // The optimizer slots on the host device; empty on a CUDA device.
  std::vector<std::shared_ptr<Buffer>> slots_ ABSL_GUARDED_BY(mu_);
  // Value and slots in device memory; null on the host device.
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
  // Changes of the value (updates and assignments; a SYNC variable's
  // assignment does not move its version).
  int64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  // Delay compensation: the values at the last dc_versions_ versions
  // (oldest first), the adaptive variant's mean square of the gradients,
  // and the buffer the corrected gradient is written to.
  std::deque<std::pair<int64_t, std::shared_ptr<const Buffer>>> dc_history_
      ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Buffer> dc_mean_square_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Buffer> dc_scratch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_SERVER_VARIABLE_H_

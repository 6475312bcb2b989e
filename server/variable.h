// One variable shard held by a parameter server: its value, optimizer slots,
// update mode (async, sync, bounded staleness), exactly-once bookkeeping and
// the pulls waiting on it.
#ifndef STRATA_SERVER_VARIABLE_H_
#define STRATA_SERVER_VARIABLE_H_

#include <cstdint>
#include <functional>
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
#include "common/tensor.h"
#include "kernels/initializers.h"
#include "kernels/optimizers.h"
#include "nlohmann/json.hpp"
#include "server/checkpoint.h"
#include "server/device_state.h"
#include "server/shared_regions.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

// Identity of a push for exactly-once application.
struct PushMeta {
  std::string job;
  int64_t worker = 0;
  int64_t step = 0;
  int64_t attempt = 0;
  int64_t group = 0;     // SYNC groups (see PushTag)
  int32_t group_size = 0;
  // False for a push that carried no PushTag: it is applied every time it
  // arrives (no exactly-once detection, nothing remembered), and is refused
  // by SYNC and STALENESS variables, which need the worker and step.
  bool tagged = true;
};

// The PushMeta of a push whose header carries `tag` when `has_tag`.
PushMeta PushMetaFromTag(bool has_tag, const v1::PushTag& tag);

struct PushOutcome {
  int64_t version = 0;
  bool duplicate = false;  // the same (job, worker, step) was taken before
  bool applied = false;    // an optimizer step ran as a result of this push
};

// A consistent view of a variable's value. The buffer is never written while
// a snapshot refers to it (updates copy first), so it may be sent as is.
struct VariableSnapshot {
  DType dtype = DType::kInvalid;
  Shape shape;
  std::shared_ptr<const Buffer> value;
  int64_t version = 0;
};

// Live mirrors (MirrorVariables; layout in common/shared_layout.h) one
// variable keeps at most.
inline constexpr int kMaxMirrorsPerVariable = 64;

// Pushes per (job, worker) remembered for exactly-once detection.
inline constexpr int64_t kDedupWindow = 4096;

// Thread-safe. Updates to one variable are serialized by its mutex; readers
// take reference-counted snapshots and never see a half-applied update.
//
// On a CUDA device (`device`), the value and the optimizer slots live in
// device memory and the optimizer steps run there (server/device_state.h);
// the host keeps a copy of the value, refreshed by every update under the
// lock, from which snapshots, row reads and checkpoints are served exactly
// as on the host device.
class Variable {
 public:
  // Builds and initializes a variable from `spec` (validated: name, dtype,
  // shape, full shape and row offset, initializer, optimizer, update mode)
  // on `device`. Errors: INVALID_ARGUMENT naming the field;
  // RESOURCE_EXHAUSTED when the value would exceed `max_bytes` (or device
  // memory runs out); FAILED_PRECONDITION when `device` is a CUDA device
  // this build or machine cannot use (naming the device).
  static absl::StatusOr<std::shared_ptr<Variable>> Create(
      const v1::VariableSpec& spec, uint64_t max_bytes,
      const PsDevice& device = PsDevice());

  // Rebuilds a variable from a checkpoint entry, on `device`. Errors:
  // DATA_LOSS for an entry that does not match its spec; those of Create.
  static absl::StatusOr<std::shared_ptr<Variable>> FromCheckpoint(
      const CheckpointVariable& entry, uint64_t max_bytes,
      const PsDevice& device = PsDevice());

  ~Variable();

  const std::string& name() const { return spec_.name(); }
  const v1::VariableSpec& spec() const { return spec_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t byte_size() const { return byte_size_; }
  int64_t row_width() const { return row_width_; }

  // Checks a push's identity against the update mode, without applying
  // anything: the step is in range, and in SYNC and STALENESS modes the push
  // is tagged and its worker is one of the replicas. Errors:
  // INVALID_ARGUMENT naming the variable and the field.
  absl::Status CheckPushMeta(const PushMeta& meta) const;

  // Dense gradient push: `grad` holds byte_size() bytes of dtype().
  // A tagged push whose (job, worker, step) this variable already took is
  // acknowledged (`duplicate`) and not applied; an untagged one is always
  // applied (ASYNC only).
  // Errors: INVALID_ARGUMENT (size, NaN/Inf, the errors of CheckPushMeta),
  // ABORTED (sync step already applied, or a step
  // older than the exactly-once window), FAILED_PRECONDITION (sync step too
  // far ahead).
  // `checked`: the caller already ran CheckFinite on `grad`.
  absl::StatusOr<PushOutcome> PushDense(const PushMeta& meta,
                                        const char* grad, size_t size,
                                        bool checked = false);

  // Row gradient push on a 2-D variable: `values` holds ids.size() rows.
  // Duplicate ids are summed. Errors as PushDense, plus INVALID_ARGUMENT for
  // a row id out of range or a variable that is not 2-D.
  absl::StatusOr<PushOutcome> PushRows(const PushMeta& meta,
                                       absl::Span<const int64_t> ids,
                                       const char* values, size_t size);

  // Replaces the value (slots are kept). Returns the new version.
  absl::StatusOr<int64_t> Assign(const char* data, size_t size);

  VariableSnapshot Snapshot() const;

  // Copies rows `ids` (in order) into a new buffer.
  absl::StatusOr<VariableSnapshot> ReadRows(
      absl::Span<const int64_t> ids) const;

  // Whether a pull with these conditions may proceed now. The condition is
  // version >= min_version, and in STALENESS mode the slowest worker's clock
  // >= clock - staleness.
  bool PullReady(int64_t min_version, int64_t clock) const;
  // Registers `done` to run (outside the lock) once PullReady holds, or with
  // `status_if_expired` when ExpireWaiter(id) is called first. Runs `done`
  // at once (returning 0) when already ready.
  int64_t WaitForPull(int64_t min_version, int64_t clock,
                      std::function<void(absl::Status)> done);
  // Fires waiter `id` with `status` (the Pull's DEADLINE_EXCEEDED) if it
  // is still waiting.
  void ExpireWaiter(int64_t id, absl::Status status);
  // Fires every waiter with `status` (shutdown, restore).
  void CancelWaiters(absl::Status status);
  // Text describing why a pull is not ready (for error messages).
  std::string WaitDescription(int64_t min_version, int64_t clock) const;

  // Entry for a checkpoint: snapshots (no copy) of the value and, on the
  // host device, of the slots; on a CUDA device the slots are read back from
  // device memory. Errors: the CUDA failures of that read.
  absl::StatusOr<CheckpointVariable> CheckpointEntry() const;
  // As CheckpointEntry, for callers that cannot handle an error: a variable
  // whose device slots cannot be read gives an entry without slots (which
  // FromCheckpoint refuses with DATA_LOSS).
  CheckpointVariable ToCheckpoint() const;

  // Where the value and slots live.
  const PsDevice& device() const { return device_; }

  // Keeps a copy of the value at `offset` of `region` (layout in
  // common/shared_layout.h), written now and after every change, and
  // marked kMirrorGone when this variable is destroyed; replaces a mirror at
  // the same place. The variable holds the region weakly: a region the
  // server drops stops being written. Errors: INVALID_ARGUMENT when the
  // header and value do not fit in the region after its nonce;
  // RESOURCE_EXHAUSTED beyond kMaxMirrorsPerVariable live mirrors.
  absl::Status AddMirror(const std::shared_ptr<MappedRegion>& region,
                         uint64_t offset);
  // The checks of AddMirror without adding (so that a request naming
  // several variables adds none when one would fail).
  absl::Status CheckMirror(const MappedRegion& region, uint64_t offset) const;
  // Marks every mirror gone and forgets them (the variable is being
  // replaced; the destructor does the same).
  void RetireMirrors();

  int64_t version() const;
  int64_t iterations() const;

 private:
  struct Accumulator {
    std::shared_ptr<Buffer> sum;  // dense sum of gradients (full size)
    std::set<int64_t> rows;       // rows touched by row pushes
    bool dense = false;           // any dense push in this step
    std::set<std::pair<std::string, int64_t>> contributors;  // (job, worker)
    int64_t group = 0;       // the group whose gradients these are
    int32_t group_size = 0;  // 0: the variable's num_replicas
  };
  struct DedupWindow {
    std::set<int64_t> steps;
    int64_t floor = 0;  // steps below this are forgotten
  };
  struct Waiter {
    int64_t min_version;
    int64_t clock;
    std::function<void(absl::Status)> done;
  };

  Variable(const v1::VariableSpec& spec, DType dtype, Shape shape,
           std::unique_ptr<Optimizer> optimizer, const PsDevice& device);

  // Create, with the value and slots in host memory (not yet on `device`).
  static absl::StatusOr<std::shared_ptr<Variable>> CreateOnHost(
      const v1::VariableSpec& spec, uint64_t max_bytes,
      const PsDevice& device);
  // Moves the value and slots to device_ (a CUDA device): uploads them and
  // keeps the host copy of the value. Errors: those of NewVariableDevice
  // and VariableDevice::Init, prefixed with the variable and device.
  absl::Status AttachDeviceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Exactly-once check: whether this variable already took the tagged push
  // `meta` (false for an untagged push). Records nothing (RecordPushLocked
  // does, once the push is taken). Errors: ABORTED for a step older than
  // the window of kDedupWindow steps remembered per (job, worker).
  absl::StatusOr<bool> SeenBefore(const PushMeta& meta) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Remembers a taken tagged push for SeenBefore (nothing for an untagged
  // one), forgetting the oldest steps beyond kDedupWindow.
  void RecordPushLocked(const PushMeta& meta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies a dense gradient (already averaged) through the optimizer.
  absl::Status ApplyDenseLocked(const char* grad)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ApplyRowsLocked(absl::Span<const int64_t> ids,
                               const char* values)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes value_ and slots_ exclusively owned (copy-on-write).
  void UnshareLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<PushOutcome> SyncAccumulateLocked(
      const PushMeta& meta, const char* dense, absl::Span<const int64_t> ids,
      const char* rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdvanceClockLocked(const PushMeta& meta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PullReadyLocked(int64_t min_version, int64_t clock) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Moves waiters whose condition holds into `ready`.
  void CollectReadyLocked(std::vector<std::function<void(absl::Status)>>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  nlohmann::json MetaLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Writes the value into every live mirror whose copy is older.
  void WriteMirrorsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetireMirrorsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Mirrors of live regions, but for one at (region, offset).
  int LiveMirrorsLocked(const MappedRegion* region, uint64_t offset) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  struct Mirror {
    std::weak_ptr<MappedRegion> region;
    uint64_t offset = 0;
    int64_t changes = -1;  // changes_ when last written
  };

  const v1::VariableSpec spec_;
  const DType dtype_;
  const Shape shape_;
  const int64_t num_elements_;
  const size_t byte_size_;
  const int64_t row_width_;
  const std::unique_ptr<Optimizer> optimizer_;
  const v1::UpdateMode::Kind mode_;
  const int num_replicas_;
  const int staleness_;
  const PsDevice device_;

  mutable absl::Mutex mu_;
  // The value (on a CUDA device: the host copy of the device's value).
  std::shared_ptr<Buffer> value_ ABSL_GUARDED_BY(mu_);
  // The optimizer slots on the host device; empty on a CUDA device.
  std::vector<std::shared_ptr<Buffer>> slots_ ABSL_GUARDED_BY(mu_);
  // Value and slots in device memory; null on the host device.
  std::unique_ptr<VariableDevice> on_device_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t iterations_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::pair<std::string, int64_t>, DedupWindow> dedup_
      ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Accumulator> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> clocks_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  std::vector<Mirror> mirrors_ ABSL_GUARDED_BY(mu_);
  // Changes of the value (updates and assignments; a SYNC variable's
  // assignment does not move its version).
  int64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
};

// Converts between the wire and internal forms of specs.
absl::StatusOr<DType> DTypeFromProto(v1::DType dtype);
v1::DType DTypeToProto(DType dtype);
absl::StatusOr<InitializerSpec> InitializerFromProto(
    const v1::Initializer& init);
absl::StatusOr<OptimizerConfig> OptimizerFromProto(const v1::OptimizerSpec& o);

}  // namespace strata

#endif  // STRATA_SERVER_VARIABLE_H_

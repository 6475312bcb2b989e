// A dynamic embedding table: rows of `dim` floats keyed by any int64 id, with
// no declared vocabulary (issue 15, sparse models). The pure-logic core of a
// parameter server's sparse variable; the service adapter validates, calls
// and maps the status.
//
//  * Rows are created on first touch with values that are a pure function of
//    (seed, table name, id), so every shard layout holds the same values.
//  * Admission: with min_count > 1, an id becomes a row only after it has
//    been looked up min_count times for training (counted in a bounded
//    count-min sketch); until then it reads as the initializer's value (or
//    zeros) and its gradients are dropped and counted.
//  * Eviction: a capacity in rows with an LRU or LFU policy, and a
//    time-to-live in steps and/or in clock time since a row's last update,
//    applied lazily on access and by EvictExpired().
//
// Time comes from the injected clock and the caller's step counter, never
// from the wall clock. Thread-safe: every method may be called concurrently;
// one mutex guards the table, and no callback runs while it is held.
#ifndef STRATA_TABLES_DYNAMIC_TABLE_H_
#define STRATA_TABLES_DYNAMIC_TABLE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kernels/row_optimizers.h"
#include "tables/count_min_sketch.h"

namespace strata {

enum class DynamicInitializer {
  kZeros,
  kRandomUniform,  // uniform in [-init_scale, init_scale)
};

enum class EvictionPolicy {
  kLru,  // the least recently used row (looked up or updated)
  kLfu,  // the row used the fewest times since it was created; ties: LRU
};
// With either policy, the rows a Lookup or ApplyGradients call touches are
// not evicted by that same call unless it touches more than max_rows rows
// (so a batch's new rows do not evict each other between pull and push).

struct DynamicTableOptions {
  // Name of the (unsharded) table; part of the initializer's key. Required.
  std::string name;
  // Floats per row; > 0.
  int64_t dim = 0;
  uint64_t seed = 0;
  DynamicInitializer initializer = DynamicInitializer::kRandomUniform;
  double init_scale = 0.05;  // Keras Embedding's default uniform(-0.05, 0.05)

  // Admission. 1 admits every id at its first touch (no sketch is kept).
  int64_t min_count = 1;
  // Ids not admitted yet read as zeros instead of the initializer's value.
  bool zeros_until_admitted = false;
  // Count-min sketch (min_count > 1 only): counters per row and rows; its
  // memory is 4 * width * depth bytes. Width in [1, 2^28], depth in [1, 16].
  int64_t sketch_width = 1 << 16;
  int sketch_depth = 4;

  // Capacity in rows; 0 = unbounded. Inserting a row into a full table
  // evicts one chosen by `eviction` first.
  int64_t max_rows = 0;
  EvictionPolicy eviction = EvictionPolicy::kLru;
  // Time-to-live since a row's last update (its creation counts as one):
  // a row expires once `ttl_steps` steps (0 = never) or `ttl` of clock time
  // (zero = never) have passed since.
  int64_t ttl_steps = 0;
  absl::Duration ttl = absl::ZeroDuration();
  // The time source; required when ttl > 0, otherwise unused.
  std::function<absl::Time()> clock;
};

struct DynamicTableStats {
  int64_t rows = 0;
  int64_t bytes = 0;              // approximate: rows, slots, index, sketch
  int64_t lookups = 0;            // ids looked up (each occurrence)
  int64_t admissions = 0;         // rows created from the initializer
  int64_t evictions = 0;          // rows removed, by capacity or TTL
  int64_t expirations = 0;        // of those, removed by TTL
  int64_t updates = 0;            // row updates applied
  int64_t gradients_dropped = 0;  // row gradients of ids not admitted
};

class DynamicTable {
 public:
  using ExportFn =
      std::function<void(int64_t id, absl::Span<const float> row,
                         absl::Span<const float> slots, int64_t row_step)>;

  // Errors: INVALID_ARGUMENT naming the option out of range (empty name,
  // dim <= 0, init_scale not finite or < 0, min_count < 1, sketch size out
  // of range, max_rows < 0, ttl_steps < 0, ttl < 0, ttl > 0 without clock).
  static absl::StatusOr<std::unique_ptr<DynamicTable>> Create(
      DynamicTableOptions options);

  DynamicTable(const DynamicTable&) = delete;
  DynamicTable& operator=(const DynamicTable&) = delete;

  const DynamicTableOptions& options() const { return options_; }

  // Writes the rows of `ids` to `out` (ids.size() * dim floats, row i at
  // out[i * dim]). With `count_for_admission` (pulls of training batches),
  // each occurrence of an absent id counts toward its admission, admitted
  // absent ids become rows, and the rows count as used for eviction. Without
  // it (evaluation), nothing is counted or created: absent ids read as a new
  // row would. Ids not admitted read as the initializer's value (zeros with
  // zeros_until_admitted). Expired rows are evicted first.
  // Errors: INVALID_ARGUMENT when out.size() != ids.size() * dim (nothing
  // written or counted).
  absl::Status Lookup(absl::Span<const int64_t> ids, absl::Span<float> out,
                      bool count_for_admission);

  // Applies row i of `grads` (ids.size() * dim floats) to the row of ids[i]
  // with `optimizer`, at training step `step` (the rows' last update for
  // TTL). An admitted id without a row (never pulled, evicted or expired)
  // gets a new row from the initializer first; the gradient of an id not
  // admitted is dropped and counted in gradients_dropped. A row's slots are
  // created by its first update; use one optimizer per table. If the call
  // creates more rows than max_rows allows, rows it updated earlier may be
  // evicted by later ones.
  // Errors (nothing changed): INVALID_ARGUMENT for a size mismatch, step
  // < 0, a repeated id (the caller sums duplicates), or a NaN or infinite
  // gradient element; FAILED_PRECONDITION when a row's slots do not have
  // the size `optimizer` needs (an optimizer other than the table's).
  absl::Status ApplyGradients(absl::Span<const int64_t> ids,
                              absl::Span<const float> grads,
                              const RowOptimizer& optimizer, int64_t step);

  // Evicts every row expired at `step` (the latest step seen when larger)
  // and at the clock's time; returns how many. 0 when no TTL is set.
  int64_t EvictExpired(int64_t step);

  DynamicTableStats Stats() const;

  // Calls `fn` for every live (not expired) row in increasing id order,
  // without holding the table's lock: rows are copied in chunks, so each
  // row is a consistent snapshot but rows updated during the export may be
  // seen before or after the update (quiesce updates for a point-in-time
  // checkpoint). `slots` is empty for a row never updated.
  void Export(const ExportFn& fn) const;

  // Restores a row (replacing any row of `id`), as exported: `row` holds dim
  // floats, `slots` a multiple of dim (those of the table's optimizer, or
  // none), `row_step` the row's update count. The row's TTL starts now; it
  // may evict another row when the table is full.
  // Errors (nothing changed): INVALID_ARGUMENT for a size mismatch, a
  // non-finite value, or row_step < 0.
  absl::Status Import(int64_t id, absl::Span<const float> row,
                      absl::Span<const float> slots, int64_t row_step);

  // The value of a new row of `id` (dim floats into `out`, which must hold
  // them): a pure function of (seed, name, id, element index).
  void InitialRow(int64_t id, absl::Span<float> out) const;

  // The shard of `id` among `num_shards` (>= 1; 0 otherwise): a stable hash,
  // the same on every platform and run, to place rows on PS tasks and to
  // re-place them on restore into a different number of tasks.
  static int ShardOf(int64_t id, int num_shards);

 private:
  struct Row {
    std::vector<float> values;  // dim
    std::vector<float> slots;   // empty until the first update
    int64_t row_step = 0;       // updates applied
    int64_t last_update_step = 0;
    absl::Time last_update_time;
    int64_t frequency = 0;    // LFU: uses since creation
    uint64_t last_use = 0;    // LFU tie-break: use_clock_ at the last use
    std::list<int64_t>::iterator lru_pos;  // LRU: position in lru_
  };
  using LfuKey = std::tuple<int64_t, uint64_t, int64_t>;  // freq, use, id

  explicit DynamicTable(DynamicTableOptions options);

  absl::Time Now() const;
  bool Expired(const Row& row, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Admitted(int64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The row of `id`, evicting it first (and returning null) when expired.
  Row* FindLive(int64_t id, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts a row of `id` with `values`, evicting a victim when full.
  Row* Insert(int64_t id, std::vector<float> values, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Erase(int64_t id, bool expired) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(int64_t id, Row& row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LFU: makes the rows the current call touched evictable again.
  void ReleasePinned() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnreadValue(int64_t id, absl::Span<float> out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DynamicTableOptions options_;
  const uint64_t init_key_;  // from (seed, name)
  const bool bounded_;       // max_rows > 0: keep the eviction index

  mutable absl::Mutex mu_;
  absl::node_hash_map<int64_t, Row> rows_ ABSL_GUARDED_BY(mu_);
  std::list<int64_t> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  std::set<LfuKey> lfu_ ABSL_GUARDED_BY(mu_);    // least used first
  // LFU: rows touched by the call in progress, out of lfu_ until it ends.
  std::set<LfuKey> pinned_ ABSL_GUARDED_BY(mu_);
  std::optional<CountMinSketch> sketch_ ABSL_GUARDED_BY(mu_);
  uint64_t use_clock_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t current_step_ ABSL_GUARDED_BY(mu_) = 0;  // latest step seen
  int64_t slot_floats_ ABSL_GUARDED_BY(mu_) = 0;   // over all rows
  DynamicTableStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_TABLES_DYNAMIC_TABLE_H_

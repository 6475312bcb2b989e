// The dynamic embedding tables of a parameter server task (issue 15): each a
// shard of a table (the ids whose DynamicTable::ShardOf among the spec's
// num_shards is its shard), with its row optimizer and its exactly-once
// window. The pure-logic core the service's CreateTable, LookupRows,
// PushTableRows, TableStats and RestoreTables adapt, and that Save and
// Restore of VariableStore write into and read from checkpoints.
//
// Thread-safe: the name map has its own lock, held only to find, add or
// replace tables; each table serializes its pushes (the window and the
// update are one step) while lookups run concurrently under the table's
// own lock.
#ifndef STRATA_TABLES_TABLE_STORE_H_
#define STRATA_TABLES_TABLE_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "checkpoint/checkpoint.h"
#include "common/exactly_once.h"
#include "kernels/row_optimizers.h"
#include "strata/v1/parameter_server.pb.h"
#include "tables/dynamic_table.h"

namespace strata {

struct TableStoreOptions {
  // Largest lookup or push, in row bytes (ids x dim x 4).
  uint64_t max_request_bytes = uint64_t{1} << 30;
  // The time source of the tables' time-to-live (absl::Now when null).
  std::function<absl::Time()> clock;
};

struct TablePushOutcome {
  bool duplicate = false;    // the same (job, worker, step) was taken before
  int64_t rows_applied = 0;  // distinct rows updated
  int64_t rows_dropped = 0;  // distinct ids not admitted yet
};

class TableStore {
 public:
  explicit TableStore(TableStoreOptions options = {});

  // Validates `spec` and fills its defaults (what Create stores and
  // TableStats reports). Errors: INVALID_ARGUMENT naming the field
  // ("TableSpec.dim: ...").
  static absl::StatusOr<v1::TableSpec> Normalize(const v1::TableSpec& spec);

  // Creates a table shard; true when created, false when an identical one
  // (after Normalize) exists. Errors: INVALID_ARGUMENT (Normalize),
  // ALREADY_EXISTS for a different spec under the name.
  absl::StatusOr<bool> Create(const v1::TableSpec& spec);

  // The rows of `ids` (ids.size() x dim float32 into *out), as
  // DynamicTable::Lookup with `train` as count_for_admission. Errors:
  // NOT_FOUND (table), INVALID_ARGUMENT (an id of another shard, naming
  // it), RESOURCE_EXHAUSTED (beyond max_request_bytes).
  absl::Status Lookup(const std::string& table, absl::Span<const int64_t> ids,
                      bool train, std::vector<float>* out);

  // Applies gradient rows (ids.size() x dim float32; duplicate ids summed)
  // with the table's optimizer, at meta.step. A tagged push whose (job,
  // worker, step) the table took before is acknowledged (duplicate) and not
  // applied. Errors (nothing changed): NOT_FOUND, INVALID_ARGUMENT (sizes,
  // an id of another shard, NaN/Inf), ABORTED (older than the exactly-once
  // window), RESOURCE_EXHAUSTED.
  absl::StatusOr<TablePushOutcome> Push(const std::string& table,
                                        const PushMeta& meta,
                                        absl::Span<const int64_t> ids,
                                        absl::Span<const float> gradients);
  // Push's checks alone (table, sizes, step, shard, NaN/Inf), so a call
  // naming several tables applies none when one would fail.
  absl::Status CheckPush(const std::string& table, const PushMeta& meta,
                         absl::Span<const int64_t> ids,
                         absl::Span<const float> gradients) const;

  // Every table's normalized spec and counters (only `name` when not
  // empty). Errors: NOT_FOUND for an unknown `name`.
  absl::StatusOr<std::vector<v1::TableInfo>> Stats(
      const std::string& name) const;
  int64_t num_tables() const;

  // Checkpoint entries of every table: "table/NAME/ids" (int64 [n]),
  // "table/NAME/rows" (float32 [n, dim], with the optimizer's slots as
  // slots of the same shape) and "table/NAME/steps" (int64 [n]: each row's
  // update count); the first's meta holds the spec and the exactly-once
  // window. Rows never updated have zero slots (as new ones).
  std::vector<CheckpointVariable> CheckpointEntries() const;

  // Whether a checkpoint entry belongs to a table (is not a variable).
  static bool IsTableEntry(const CheckpointVariable& entry);

  // Replaces every table with the tables of `checkpoint` (a checkpoint of
  // this task: same shard layout). Errors: DATA_LOSS naming the entry;
  // nothing changes then. PrepareRestore and CommitRestore are its two
  // halves, for a caller that checks something between them.
  absl::Status Restore(const Checkpoint& checkpoint);

  // (Declared here for Prepared; defined in table_store.cc.)
 private:
  struct Shard;

 public:
  // The tables of a checkpoint, built aside (nothing changes here).
  class Prepared {
   public:
    // The tables' names.
    std::vector<std::string> names() const;

   private:
    friend class TableStore;
    std::map<std::string, std::shared_ptr<Shard>> tables_;
  };
  // Errors: as Restore's.
  absl::StatusOr<Prepared> PrepareRestore(const Checkpoint& checkpoint) const;
  // Replaces every table with the prepared ones.
  void CommitRestore(Prepared prepared);

  // Loads, into each table this task holds, the rows of that table's name
  // in `checkpoints` (written by any number of tasks) whose ids fall in its
  // shard, after dropping its rows; the exactly-once windows are merged
  // (a step any old shard took counts as taken). Returns the rows loaded.
  // Errors: DATA_LOSS (a malformed entry, a dim or optimizer that differs
  // from the table's); nothing changes then.
  absl::StatusOr<int64_t> Reshard(const std::vector<Checkpoint>& checkpoints);

 private:
  absl::StatusOr<std::shared_ptr<Shard>> Get(const std::string& name) const;
  // A new shard for a normalized spec. Errors: INVALID_ARGUMENT.
  absl::StatusOr<std::shared_ptr<Shard>> NewShard(
      const v1::TableSpec& spec) const;
  // INVALID_ARGUMENT naming the first id outside `shard`'s ids.
  static absl::Status CheckIds(const Shard& shard,
                               absl::Span<const int64_t> ids);

  const TableStoreOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Shard>> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_TABLES_TABLE_STORE_H_

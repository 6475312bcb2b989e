// TensorFlow's variable partitioners (tf.distribute.experimental.partitioners)
// for axis 0: how many shards a variable gets, which rows each holds, and
// which parameter server holds each shard.
#ifndef STRATA_STRATEGIES_PARTITIONER_H_
#define STRATA_STRATEGIES_PARTITIONER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace strata {

// Rows [row_offset, row_offset + num_rows) of axis 0.
struct ShardSlice {
  int64_t row_offset;
  int64_t num_rows;
};

// The rows of every partitioner below are split as tf.distribute's
// ShardedVariable does: as evenly as possible, the first shape[0] % n shards
// holding one extra row (10 rows in 4 shards: 3, 3, 2, 2). A variable with
// zero rows gets a single empty shard. Shapes must have rank >= 1 and no
// negative dimension; errors are INVALID_ARGUMENT naming the problem.

// FixedShardsPartitioner: min(num_shards, shape[0]) shards.
// Errors: also num_shards < 1.
absl::StatusOr<std::vector<ShardSlice>> FixedShardsPartition(const Shape& shape,
                                                             int num_shards);

// MinSizePartitioner: as many shards as keep about `min_shard_bytes` each,
// at most `max_shards`: max(1, min(max_shards, shape[0],
// ceil(total_bytes / min_shard_bytes))). The ceil is TF's: a shard may end up
// below min_shard_bytes (300 KiB with the default 256 KiB gives 2 shards).
// Errors: also an invalid dtype, min_shard_bytes < 1, max_shards < 1.
absl::StatusOr<std::vector<ShardSlice>> MinSizePartition(
    const Shape& shape, DType dtype, int64_t min_shard_bytes = 256 << 10,
    int max_shards = 1);

// MaxSizePartitioner: the fewest shards of whole rows that keep each shard
// <= max_shard_bytes: ceil(shape[0] / max(1, floor(max_shard_bytes /
// row_bytes))), then capped at `max_shards` when > 0 (0 = unlimited). A row
// larger than max_shard_bytes gets a shard of its own, still over the limit.
// Errors: also an invalid dtype, max_shard_bytes < 1, max_shards < 0.
absl::StatusOr<std::vector<ShardSlice>> MaxSizePartition(
    const Shape& shape, DType dtype, int64_t max_shard_bytes,
    int max_shards = 0);

// The parameter server (0-based) holding shard `shard_index`: round-robin,
// shard_index mod num_ps. Returns 0 when num_ps < 1 (callers validate the
// cluster first).
int PlaceShard(int shard_index, int num_ps);

}  // namespace strata

#endif  // STRATA_STRATEGIES_PARTITIONER_H_

#include "strategies/partitioner.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// Checks `shape` and returns the bytes of one row of axis 0 (0 when the
// variable has no rows or its rows are empty).
absl::StatusOr<int64_t> RowBytes(const Shape& shape, DType dtype) {
  if (shape.empty()) {
    return absl::InvalidArgumentError(
        "cannot partition a scalar (rank 0) variable on axis 0");
  }
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  if (elem == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot partition a variable of dtype ", DTypeName(dtype)));
  }
  int64_t bytes = elem;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape ", ShapeString(shape), " has a negative dimension ", i));
    }
    if (d != 0 && bytes > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " of ", DTypeName(dtype),
                       " exceeds 2^63 bytes"));
    }
    bytes *= d;
  }
  // `bytes` is the total; a row is total / rows.
  return shape[0] == 0 ? 0 : bytes / shape[0];
}

// Splits `rows` into `n` >= 1 contiguous slices, the first rows % n one row
// longer.
std::vector<ShardSlice> SplitRows(int64_t rows, int64_t n) {
  std::vector<ShardSlice> slices;
  slices.reserve(static_cast<size_t>(n));
  const int64_t base = rows / n;
  const int64_t extra = rows % n;
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = base + (i < extra ? 1 : 0);
    slices.push_back(ShardSlice{offset, len});
    offset += len;
  }
  return slices;
}

// The shard count clamped to [1, rows] (a variable without rows still needs
// one shard to live in).
std::vector<ShardSlice> Split(int64_t rows, int64_t num_shards) {
  return SplitRows(rows, std::max<int64_t>(1, std::min(num_shards, rows)));
}

}  // namespace

absl::StatusOr<std::vector<ShardSlice>> FixedShardsPartition(const Shape& shape,
                                                             int num_shards) {
  if (num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_shards must be >= 1, got ", num_shards));
  }
  // Any valid dtype will do: only the shape is checked.
  STRATA_RETURN_IF_ERROR(RowBytes(shape, DType::kFloat32).status());
  return Split(shape[0], num_shards);
}

absl::StatusOr<std::vector<ShardSlice>> MinSizePartition(
    const Shape& shape, DType dtype, int64_t min_shard_bytes, int max_shards) {
  if (min_shard_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_shard_bytes must be >= 1, got ", min_shard_bytes));
  }
  if (max_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_shards must be >= 1, got ", max_shards));
  }
  STRATA_ASSIGN_OR_RETURN(const int64_t row_bytes, RowBytes(shape, dtype));
  const int64_t total = row_bytes * shape[0];  // checked not to overflow
  // ceil(total / min_shard_bytes) without overflow.
  const int64_t wanted =
      total / min_shard_bytes + (total % min_shard_bytes != 0 ? 1 : 0);
  return Split(shape[0], std::min<int64_t>(max_shards, wanted));
}

absl::StatusOr<std::vector<ShardSlice>> MaxSizePartition(
    const Shape& shape, DType dtype, int64_t max_shard_bytes, int max_shards) {
  if (max_shard_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_shard_bytes must be >= 1, got ", max_shard_bytes));
  }
  if (max_shards < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_shards must be >= 0 (0 = unlimited), got ", max_shards));
  }
  STRATA_ASSIGN_OR_RETURN(const int64_t row_bytes, RowBytes(shape, dtype));
  const int64_t rows = shape[0];
  if (row_bytes == 0) return Split(rows, 1);  // empty rows all fit in one
  const int64_t rows_per_shard =
      std::max<int64_t>(1, max_shard_bytes / row_bytes);
  int64_t num_shards = rows / rows_per_shard + (rows % rows_per_shard ? 1 : 0);
  if (max_shards > 0) num_shards = std::min<int64_t>(num_shards, max_shards);
  return Split(rows, num_shards);
}

int PlaceShard(int shard_index, int num_ps) {
  if (num_ps < 1) return 0;
  const int r = shard_index % num_ps;
  return r < 0 ? r + num_ps : r;
}

}  // namespace strata

#include "strategies/partitioner.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

// (row_offset, num_rows) pairs, for readable expectations.
using Slices = std::vector<std::pair<int64_t, int64_t>>;

Slices Pairs(const absl::StatusOr<std::vector<ShardSlice>>& result) {
  EXPECT_TRUE(result.ok()) << result.status();
  Slices out;
  if (!result.ok()) return out;
  for (const ShardSlice& s : *result)
    out.emplace_back(s.row_offset, s.num_rows);
  return out;
}

TEST(FixedShardsPartitionTest, SplitsRowsEvenlyFirstShardsLonger) {
  // 10 rows in 4 shards: 3, 3, 2, 2 (tf.distribute's ShardedVariable).
  EXPECT_EQ(Pairs(FixedShardsPartition({10, 4}, 4)),
            (Slices{{0, 3}, {3, 3}, {6, 2}, {8, 2}}));
  EXPECT_EQ(Pairs(FixedShardsPartition({9, 2}, 3)),
            (Slices{{0, 3}, {3, 3}, {6, 3}}));
  EXPECT_EQ(Pairs(FixedShardsPartition({7}, 1)), (Slices{{0, 7}}));
}

TEST(FixedShardsPartitionTest, NeverMoreShardsThanRows) {
  EXPECT_EQ(Pairs(FixedShardsPartition({3, 5}, 5)),
            (Slices{{0, 1}, {1, 1}, {2, 1}}));
}

TEST(FixedShardsPartitionTest, ZeroRowsGetOneEmptyShard) {
  EXPECT_EQ(Pairs(FixedShardsPartition({0, 5}, 3)), (Slices{{0, 0}}));
}

TEST(FixedShardsPartitionTest, RejectsBadArguments) {
  absl::StatusOr<std::vector<ShardSlice>> r = FixedShardsPartition({10}, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("num_shards"));
  r = FixedShardsPartition({}, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("rank 0"));
  r = FixedShardsPartition({4, -1}, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("negative"));
}

TEST(MinSizePartitionTest, TensorFlowDocExamples) {
  // MinSizePartitioner(min_shard_bytes=4, max_shards=2)([6, 1], float32): 2.
  EXPECT_EQ(Pairs(MinSizePartition({6, 1}, DType::kFloat32, 4, 2)),
            (Slices{{0, 3}, {3, 3}}));
  // max_shards=10: 24 bytes / 4 = 6 shards.
  EXPECT_EQ(Pairs(MinSizePartition({6, 1}, DType::kFloat32, 4, 10)).size(), 6u);
  // min_max_variable_partitioner docstring: 4 MiB with 256 KiB slices is 16.
  EXPECT_EQ(
      Pairs(MinSizePartition({1024, 1024}, DType::kFloat32, 256 << 10, 100))
          .size(),
      16u);
}

TEST(MinSizePartitionTest, DefaultsGiveOneShard) {
  EXPECT_EQ(Pairs(MinSizePartition({1024, 1024}, DType::kFloat32)),
            (Slices{{0, 1024}}));
}

TEST(MinSizePartitionTest, RoundsShardCountUpAsTensorFlow) {
  // 10 x 1024 float32 = 40960 bytes; / 16384 = 2.5 -> ceil 3 shards.
  EXPECT_EQ(Pairs(MinSizePartition({10, 1024}, DType::kFloat32, 16384, 10)),
            (Slices{{0, 4}, {4, 3}, {7, 3}}));
  // Smaller than one min shard: still one shard.
  EXPECT_EQ(Pairs(MinSizePartition({10, 2}, DType::kFloat64, 1 << 20, 10)),
            (Slices{{0, 10}}));
}

TEST(MinSizePartitionTest, CappedByRows) {
  EXPECT_EQ(Pairs(MinSizePartition({2, 1000}, DType::kFloat64, 1, 100)),
            (Slices{{0, 1}, {1, 1}}));
  EXPECT_EQ(Pairs(MinSizePartition({0, 1000}, DType::kFloat64, 1, 100)),
            (Slices{{0, 0}}));
}

TEST(MinSizePartitionTest, RejectsBadArguments) {
  absl::StatusOr<std::vector<ShardSlice>> r =
      MinSizePartition({10}, DType::kFloat32, 0, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("min_shard_bytes"));
  r = MinSizePartition({10}, DType::kFloat32, 4, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("max_shards"));
  r = MinSizePartition({10}, DType::kInvalid, 4, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("dtype"));
  r = MinSizePartition({}, DType::kFloat32, 4, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MaxSizePartitionTest, TensorFlowDocExamples) {
  // MaxSizePartitioner(max_shard_bytes=4)([6, 1], float32): 6 shards.
  EXPECT_EQ(Pairs(MaxSizePartition({6, 1}, DType::kFloat32, 4)).size(), 6u);
  // max_shards=2 caps it.
  EXPECT_EQ(Pairs(MaxSizePartition({6, 1}, DType::kFloat32, 4, 2)),
            (Slices{{0, 3}, {3, 3}}));
  // max_shard_bytes=1024: everything fits in one.
  EXPECT_EQ(Pairs(MaxSizePartition({6, 1}, DType::kFloat32, 1024)),
            (Slices{{0, 6}}));
}

TEST(MaxSizePartitionTest, ShardsHoldWholeRowsUnderTheLimit) {
  // Rows of 3 float32 = 12 bytes; 30 bytes hold 2 rows -> 5 shards of 2.
  EXPECT_EQ(Pairs(MaxSizePartition({10, 3}, DType::kFloat32, 30)),
            (Slices{{0, 2}, {2, 2}, {4, 2}, {6, 2}, {8, 2}}));
  // 40 bytes hold 3 rows -> ceil(10 / 3) = 4 shards: 3, 3, 2, 2.
  EXPECT_EQ(Pairs(MaxSizePartition({10, 3}, DType::kFloat32, 40)),
            (Slices{{0, 3}, {3, 3}, {6, 2}, {8, 2}}));
}

TEST(MaxSizePartitionTest, RowLargerThanLimitGetsItsOwnShard) {
  // A row is 400 bytes > 10: one row per shard.
  EXPECT_EQ(Pairs(MaxSizePartition({4, 100}, DType::kFloat32, 10)),
            (Slices{{0, 1}, {1, 1}, {2, 1}, {3, 1}}));
}

TEST(MaxSizePartitionTest, EmptyVariablesGetOneShard) {
  EXPECT_EQ(Pairs(MaxSizePartition({5, 0}, DType::kInt64, 8)),
            (Slices{{0, 5}}));
  EXPECT_EQ(Pairs(MaxSizePartition({0, 7}, DType::kInt64, 8)),
            (Slices{{0, 0}}));
}

TEST(MaxSizePartitionTest, RejectsBadArguments) {
  absl::StatusOr<std::vector<ShardSlice>> r =
      MaxSizePartition({10}, DType::kFloat32, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("max_shard_bytes"));
  r = MaxSizePartition({10}, DType::kFloat32, 4, -1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("max_shards"));
  r = MaxSizePartition({}, DType::kFloat32, 4);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = MaxSizePartition({int64_t{1} << 40, int64_t{1} << 40}, DType::kFloat64,
                       4);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("2^63"));
}

TEST(PlaceShardTest, RoundRobin) {
  std::vector<int> placed;
  for (int i = 0; i < 7; ++i) placed.push_back(PlaceShard(i, 3));
  EXPECT_THAT(placed, ::testing::ElementsAre(0, 1, 2, 0, 1, 2, 0));
  EXPECT_EQ(PlaceShard(5, 1), 0);
  EXPECT_EQ(PlaceShard(5, 0), 0);
  EXPECT_EQ(PlaceShard(-1, 3), 2);
}

}  // namespace
}  // namespace strata

#include "tables/dynamic_table.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/row_optimizers.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::Each;
using ::testing::Not;

constexpr int64_t kDim = 4;

DynamicTableOptions BaseOptions() {
  DynamicTableOptions options;
  options.name = "user_embedding";
  options.dim = kDim;
  options.seed = 42;
  return options;
}

std::unique_ptr<DynamicTable> MakeTable(DynamicTableOptions options) {
  auto table = DynamicTable::Create(std::move(options));
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? std::move(table).value() : nullptr;
}

std::unique_ptr<RowOptimizer> MakeOptimizer(RowOptimizerType type,
                                            double learning_rate) {
  RowOptimizerConfig config;
  config.type = type;
  config.learning_rate = learning_rate;
  return RowOptimizer::Create(config).value();
}

std::vector<float> LookupOne(DynamicTable& table, int64_t id,
                             bool count_for_admission = true) {
  std::vector<float> out(table.options().dim);
  EXPECT_TRUE(table.Lookup({id}, absl::MakeSpan(out), count_for_admission)
                  .ok());
  return out;
}

std::vector<float> Initial(const DynamicTable& table, int64_t id) {
  std::vector<float> out(table.options().dim);
  table.InitialRow(id, absl::MakeSpan(out));
  return out;
}

struct Exported {
  std::vector<float> row;
  std::vector<float> slots;
  int64_t row_step = 0;
  bool operator==(const Exported& o) const {
    return row == o.row && slots == o.slots && row_step == o.row_step;
  }
};

std::map<int64_t, Exported> ExportAll(const DynamicTable& table) {
  std::map<int64_t, Exported> rows;
  table.Export([&rows](int64_t id, absl::Span<const float> row,
                       absl::Span<const float> slots, int64_t row_step) {
    EXPECT_EQ(rows.count(id), 0u) << "id exported twice: " << id;
    rows[id] = Exported{{row.begin(), row.end()},
                        {slots.begin(), slots.end()},
                        row_step};
  });
  return rows;
}

std::vector<int64_t> Ids(const DynamicTable& table) {
  std::vector<int64_t> ids;
  for (const auto& [id, row] : ExportAll(table)) ids.push_back(id);
  return ids;
}

TEST(DynamicTableTest,
     RowsAreCreatedOnFirstTouchWithTheSameValuesInEveryShardLayout) {
  const std::vector<int64_t> ids = {-5, 0, 3, 7, 123456789012LL,
                                    std::numeric_limits<int64_t>::min()};
  auto whole = MakeTable(BaseOptions());
  std::vector<float> expected(ids.size() * kDim);
  STRATA_ASSERT_OK(whole->Lookup(ids, absl::MakeSpan(expected), true));
  EXPECT_EQ(whole->Stats().rows, static_cast<int64_t>(ids.size()));
  EXPECT_EQ(whole->Stats().admissions, static_cast<int64_t>(ids.size()));
  for (float v : expected) {
    EXPECT_GE(v, -0.05f);
    EXPECT_LE(v, 0.05f);
  }
  EXPECT_THAT(expected, Not(Each(0.0f)));

  for (int num_shards : {2, 3, 7}) {
    std::vector<std::unique_ptr<DynamicTable>> shards;
    for (int s = 0; s < num_shards; ++s) {
      shards.push_back(MakeTable(BaseOptions()));
    }
    // Touch in reverse order, so creation order differs too.
    for (size_t i = ids.size(); i-- > 0;) {
      const int shard = DynamicTable::ShardOf(ids[i], num_shards);
      ASSERT_GE(shard, 0);
      ASSERT_LT(shard, num_shards);
      const std::vector<float> row = LookupOne(*shards[shard], ids[i]);
      EXPECT_EQ(row, std::vector<float>(expected.begin() + i * kDim,
                                        expected.begin() + (i + 1) * kDim))
          << "id " << ids[i] << " with " << num_shards << " shards";
    }
  }

  // The values depend on the seed and the table's name.
  DynamicTableOptions other_seed = BaseOptions();
  other_seed.seed = 43;
  DynamicTableOptions other_name = BaseOptions();
  other_name.name = "item_embedding";
  EXPECT_NE(Initial(*MakeTable(other_seed), 7), Initial(*whole, 7));
  EXPECT_NE(Initial(*MakeTable(other_name), 7), Initial(*whole, 7));
  EXPECT_NE(Initial(*whole, 8), Initial(*whole, 7));

  DynamicTableOptions zeros = BaseOptions();
  zeros.initializer = DynamicInitializer::kZeros;
  EXPECT_THAT(LookupOne(*MakeTable(zeros), 7), Each(0.0f));
}

TEST(DynamicTableTest, ShardOfIsStableAndSpreadsIds) {
  int counts[3] = {0, 0, 0};
  for (int64_t id = 0; id < 3000; ++id) {
    const int shard = DynamicTable::ShardOf(id, 3);
    ASSERT_EQ(shard, DynamicTable::ShardOf(id, 3));
    ++counts[shard];
  }
  for (int c : counts) EXPECT_GT(c, 850);
  // Pinned: checkpoints are restored by these values, so they must not
  // change between versions or platforms.
  EXPECT_EQ(DynamicTable::ShardOf(0, 3), 2);
  EXPECT_EQ(DynamicTable::ShardOf(1, 3), 1);
  EXPECT_EQ(DynamicTable::ShardOf(123456789, 10), 5);
  EXPECT_EQ(DynamicTable::ShardOf(-1, 7), 5);
  EXPECT_EQ(DynamicTable::ShardOf(12345, 1), 0);
  EXPECT_EQ(DynamicTable::ShardOf(12345, 0), 0);
}

TEST(DynamicTableTest, IdsAreAdmittedAfterMinCountTrainingLookups) {
  DynamicTableOptions options = BaseOptions();
  options.min_count = 3;
  options.sketch_width = 1024;
  auto table = MakeTable(options);
  auto sgd = MakeOptimizer(RowOptimizerType::kSgd, 0.1);
  const std::vector<float> grad(kDim, 1.0f);
  const std::vector<float> initial = Initial(*table, 9);

  // Lookups that do not count (evaluation) neither admit nor create.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(LookupOne(*table, 9, false), initial);
  for (int seen = 1; seen <= 2; ++seen) {
    EXPECT_EQ(LookupOne(*table, 9), initial) << seen;
    STRATA_ASSERT_OK(table->ApplyGradients({9}, grad, *sgd, 1));
    EXPECT_EQ(table->Stats().rows, 0);
    EXPECT_EQ(table->Stats().gradients_dropped, seen);
  }
  EXPECT_EQ(LookupOne(*table, 9), initial);  // the third: admitted
  DynamicTableStats stats = table->Stats();
  EXPECT_EQ(stats.rows, 1);
  EXPECT_EQ(stats.admissions, 1);
  EXPECT_EQ(stats.lookups, 8);

  STRATA_ASSERT_OK(table->ApplyGradients({9}, grad, *sgd, 2));
  const std::vector<float> updated = LookupOne(*table, 9);
  for (int64_t j = 0; j < kDim; ++j) {
    EXPECT_FLOAT_EQ(updated[j], initial[j] - 0.1f);
  }
  stats = table->Stats();
  EXPECT_EQ(stats.gradients_dropped, 2);
  EXPECT_EQ(stats.updates, 1);
  EXPECT_GT(stats.bytes, 4 * 1024 * 4);  // the sketch at least
}

TEST(DynamicTableTest, ZerosUntilAdmittedWhenAsked) {
  DynamicTableOptions options = BaseOptions();
  options.min_count = 2;
  options.zeros_until_admitted = true;
  auto table = MakeTable(options);
  EXPECT_THAT(LookupOne(*table, 5), Each(0.0f));
  EXPECT_EQ(LookupOne(*table, 5), Initial(*table, 5));
  EXPECT_EQ(table->Stats().rows, 1);
}

TEST(DynamicTableTest, LruEvictsTheLeastRecentlyUsedRow) {
  DynamicTableOptions options = BaseOptions();
  options.max_rows = 2;
  options.eviction = EvictionPolicy::kLru;
  auto table = MakeTable(options);
  auto sgd = MakeOptimizer(RowOptimizerType::kSgd, 0.1);
  LookupOne(*table, 1);
  LookupOne(*table, 2);
  STRATA_ASSERT_OK(
      table->ApplyGradients({1}, std::vector<float>(kDim, 1.0f), *sgd, 1));
  LookupOne(*table, 3);  // evicts 2: 1 was used after it
  EXPECT_THAT(Ids(*table), ElementsAre(1, 3));
  LookupOne(*table, 3);
  LookupOne(*table, 4);  // evicts 1
  EXPECT_THAT(Ids(*table), ElementsAre(3, 4));
  // An evicted row comes back fresh: its update is gone.
  EXPECT_EQ(LookupOne(*table, 1), Initial(*table, 1));
  const DynamicTableStats stats = table->Stats();
  EXPECT_EQ(stats.rows, 2);
  EXPECT_EQ(stats.evictions, 3);
  EXPECT_EQ(stats.expirations, 0);
}

TEST(DynamicTableTest, LfuEvictsTheLeastFrequentlyUsedRow) {
  DynamicTableOptions options = BaseOptions();
  options.max_rows = 3;
  options.eviction = EvictionPolicy::kLfu;
  auto table = MakeTable(options);
  for (int i = 0; i < 3; ++i) LookupOne(*table, 1);
  LookupOne(*table, 2);
  LookupOne(*table, 3);
  LookupOne(*table, 3);
  LookupOne(*table, 4);  // evicts 2 (used once)
  EXPECT_THAT(Ids(*table), ElementsAre(1, 3, 4));
  LookupOne(*table, 4);
  LookupOne(*table, 4);
  LookupOne(*table, 4);
  LookupOne(*table, 5);  // evicts 3 (used twice)
  EXPECT_THAT(Ids(*table), ElementsAre(1, 4, 5));
  // Evaluation lookups do not count as uses.
  for (int i = 0; i < 10; ++i) LookupOne(*table, 5, false);
  LookupOne(*table, 6);  // evicts 5 (used once)
  EXPECT_THAT(Ids(*table), ElementsAre(1, 4, 6));
  EXPECT_EQ(table->Stats().evictions, 3);

  // A batch's new rows do not evict each other between pull and push,
  // although each is used less than the rows it evicts: 10 evicts 6 (used
  // once), 11 evicts 1 (used 3 times, 4 four times).
  auto sgd = MakeOptimizer(RowOptimizerType::kSgd, 0.1);
  std::vector<float> out(2 * kDim);
  STRATA_ASSERT_OK(table->Lookup({10, 11}, absl::MakeSpan(out), true));
  EXPECT_THAT(Ids(*table), ElementsAre(4, 10, 11));
  STRATA_ASSERT_OK(table->ApplyGradients(
      {10, 11}, std::vector<float>(2 * kDim, 1.0f), *sgd, 1));
  EXPECT_THAT(Ids(*table), ElementsAre(4, 10, 11));
  const DynamicTableStats stats = table->Stats();
  EXPECT_EQ(stats.admissions, 8);
  EXPECT_EQ(stats.evictions, 5);
  EXPECT_EQ(stats.updates, 2);
}

TEST(DynamicTableTest, TtlInStepsExpiresRowsNotUpdatedRecently) {
  DynamicTableOptions options = BaseOptions();
  options.ttl_steps = 10;
  auto table = MakeTable(options);
  auto sgd = MakeOptimizer(RowOptimizerType::kSgd, 0.1);
  const std::vector<float> grad(kDim, 1.0f);
  LookupOne(*table, 1);  // created at step 0
  LookupOne(*table, 2);
  STRATA_ASSERT_OK(table->ApplyGradients({1}, grad, *sgd, 5));
  EXPECT_EQ(table->EvictExpired(9), 0);
  EXPECT_EQ(table->EvictExpired(10), 1);  // 2: last updated at step 0
  EXPECT_THAT(Ids(*table), ElementsAre(1));

  // Lazily: step 15 is 10 steps after row 1's update.
  STRATA_ASSERT_OK(table->ApplyGradients({3}, grad, *sgd, 15));
  EXPECT_EQ(LookupOne(*table, 1), Initial(*table, 1));
  const DynamicTableStats stats = table->Stats();
  EXPECT_EQ(stats.expirations, 2);
  EXPECT_EQ(stats.evictions, 2);
  EXPECT_THAT(Ids(*table), ElementsAre(1, 3));
}

TEST(DynamicTableTest, TtlInSecondsUsesTheInjectedClock) {
  absl::Time now = absl::FromUnixSeconds(1000);
  DynamicTableOptions options = BaseOptions();
  options.ttl = absl::Seconds(60);
  options.clock = [&now] { return now; };
  auto table = MakeTable(options);
  auto sgd = MakeOptimizer(RowOptimizerType::kSgd, 0.1);
  const std::vector<float> grad(kDim, 1.0f);

  LookupOne(*table, 1);  // t = 1000
  now += absl::Seconds(30);
  STRATA_ASSERT_OK(table->ApplyGradients({2}, grad, *sgd, 1));  // t = 1030
  now += absl::Seconds(29);
  EXPECT_EQ(table->EvictExpired(1), 0);
  now += absl::Seconds(1);  // t = 1060: row 1 is 60 s old
  EXPECT_EQ(table->EvictExpired(1), 1);
  EXPECT_THAT(Ids(*table), ElementsAre(2));
  now += absl::Seconds(30);  // t = 1090: row 2 expires on access
  EXPECT_EQ(LookupOne(*table, 2, false), Initial(*table, 2));
  const DynamicTableStats stats = table->Stats();
  EXPECT_EQ(stats.rows, 0);
  EXPECT_EQ(stats.expirations, 2);

  DynamicTableOptions no_clock = BaseOptions();
  no_clock.ttl = absl::Seconds(1);
  EXPECT_THAT(DynamicTable::Create(no_clock),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "clock"));
}

TEST(DynamicTableTest, BadInputIsRejectedAndChangesNothing) {
  auto table = MakeTable(BaseOptions());
  auto sgd = MakeOptimizer(RowOptimizerType::kSgd, 0.1);
  std::vector<float> out(2 * kDim);
  STRATA_ASSERT_OK(table->Lookup({1, 2}, absl::MakeSpan(out), true));
  const auto before = ExportAll(*table);
  const DynamicTableStats stats_before = table->Stats();

  std::vector<float> short_out(kDim);
  EXPECT_THAT(table->Lookup({1, 2}, absl::MakeSpan(short_out), true),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(table->ApplyGradients({1, 2}, std::vector<float>(kDim), *sgd, 1),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "gradients of 2 ids"));
  EXPECT_THAT(
      table->ApplyGradients({1, 2, 1}, std::vector<float>(3 * kDim), *sgd, 1),
      StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                          "more than once"));
  EXPECT_THAT(table->ApplyGradients({1}, std::vector<float>(kDim), *sgd, -1),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "step"));
  std::vector<float> grads(3 * kDim, 1.0f);
  grads[2 * kDim + 1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(table->ApplyGradients({1, 2, 3}, grads, *sgd, 1),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "id 3"));
  grads[2 * kDim + 1] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(table->ApplyGradients({1, 2, 3}, grads, *sgd, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(table->Import(1, std::vector<float>(kDim + 1), {}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(table->Import(1, std::vector<float>(kDim), std::vector<float>(3),
                            0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(table->Import(1, std::vector<float>(kDim), {}, -1),
              StatusIs(absl::StatusCode::kInvalidArgument));

  EXPECT_EQ(ExportAll(*table), before);
  const DynamicTableStats stats_after = table->Stats();
  EXPECT_EQ(stats_after.rows, stats_before.rows);
  EXPECT_EQ(stats_after.updates, 0);
  EXPECT_EQ(stats_after.admissions, stats_before.admissions);

  // Rows hold the slots of one optimizer.
  auto adagrad = MakeOptimizer(RowOptimizerType::kAdagrad, 0.1);
  auto adam = MakeOptimizer(RowOptimizerType::kLazyAdam, 0.1);
  STRATA_ASSERT_OK(
      table->ApplyGradients({1}, std::vector<float>(kDim, 1.0f), *adagrad, 1));
  EXPECT_THAT(
      table->ApplyGradients({1}, std::vector<float>(kDim, 1.0f), *adam, 2),
      StatusIs(absl::StatusCode::kFailedPrecondition));

  struct BadOption {
    void (*set)(DynamicTableOptions*);
    const char* field;
  };
  const BadOption bad_options[] = {
      {[](DynamicTableOptions* o) { o->dim = 0; }, "dim"},
      {[](DynamicTableOptions* o) { o->name = ""; }, "name"},
      {[](DynamicTableOptions* o) { o->min_count = 0; }, "min_count"},
      {[](DynamicTableOptions* o) {
         o->min_count = 2;
         o->sketch_depth = 0;
       },
       "sketch_depth"},
      {[](DynamicTableOptions* o) { o->max_rows = -1; }, "max_rows"},
      {[](DynamicTableOptions* o) { o->ttl_steps = -1; }, "ttl_steps"},
  };
  for (const BadOption& b : bad_options) {
    DynamicTableOptions options = BaseOptions();
    b.set(&options);
    EXPECT_THAT(DynamicTable::Create(options),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    b.field));
  }
}

TEST(DynamicTableTest, ExportImportRoundTripReshardsIntoThreeShardsAndBack) {
  auto adam = MakeOptimizer(RowOptimizerType::kLazyAdam, 0.01);
  auto original = MakeTable(BaseOptions());
  std::vector<int64_t> ids;
  for (int64_t id = -20; id < 40; ++id) ids.push_back(id * 7919);
  std::vector<float> out(ids.size() * kDim);
  std::vector<float> grads(ids.size() * kDim);
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  }
  STRATA_ASSERT_OK(original->Lookup(ids, absl::MakeSpan(out), true));
  STRATA_ASSERT_OK(original->ApplyGradients(ids, grads, *adam, 1));
  // Some rows updated twice, so row steps differ.
  const std::vector<int64_t> some(ids.begin(), ids.begin() + 10);
  STRATA_ASSERT_OK(original->ApplyGradients(
      some, absl::MakeSpan(grads).subspan(0, some.size() * kDim), *adam, 2));
  const auto saved = ExportAll(*original);
  ASSERT_EQ(saved.size(), ids.size());
  EXPECT_EQ(saved.at(ids[0]).row_step, 2);
  EXPECT_EQ(saved.at(ids[10]).row_step, 1);
  EXPECT_EQ(saved.at(ids[0]).slots.size(), 2u * kDim);

  std::vector<std::unique_ptr<DynamicTable>> shards;
  for (int s = 0; s < 3; ++s) shards.push_back(MakeTable(BaseOptions()));
  for (const auto& [id, e] : saved) {
    STRATA_ASSERT_OK(shards[DynamicTable::ShardOf(id, 3)]->Import(
        id, e.row, e.slots, e.row_step));
  }
  size_t total = 0;
  for (int s = 0; s < 3; ++s) {
    for (const auto& [id, e] : ExportAll(*shards[s])) {
      EXPECT_EQ(DynamicTable::ShardOf(id, 3), s);
      EXPECT_EQ(e, saved.at(id));
      ++total;
    }
    EXPECT_EQ(shards[s]->Stats().admissions, 0);
  }
  EXPECT_EQ(total, saved.size());

  // Training continues identically on the restored shards.
  STRATA_ASSERT_OK(original->ApplyGradients(ids, grads, *adam, 3));
  for (size_t i = 0; i < ids.size(); ++i) {
    DynamicTable& shard = *shards[DynamicTable::ShardOf(ids[i], 3)];
    STRATA_ASSERT_OK(shard.ApplyGradients(
        {ids[i]}, absl::MakeSpan(grads).subspan(i * kDim, kDim), *adam, 3));
    EXPECT_EQ(LookupOne(shard, ids[i]), LookupOne(*original, ids[i]));
  }

  // And back into one table.
  auto merged = MakeTable(BaseOptions());
  for (const auto& shard : shards) {
    shard->Export([&](int64_t id, absl::Span<const float> row,
                      absl::Span<const float> slots, int64_t row_step) {
      EXPECT_TRUE(merged->Import(id, row, slots, row_step).ok());
    });
  }
  EXPECT_EQ(ExportAll(*merged), ExportAll(*original));
}

TEST(DynamicTableTest, MemoryStaysBoundedUnderAStreamOfDistinctIds) {
  for (EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kLfu}) {
    DynamicTableOptions options = BaseOptions();
    options.max_rows = 1000;
    options.eviction = policy;
    auto table = MakeTable(options);
    auto adagrad = MakeOptimizer(RowOptimizerType::kAdagrad, 0.1);
    constexpr int64_t kIds = 200000;
    constexpr int64_t kBatch = 100;
    std::vector<int64_t> batch(kBatch);
    std::vector<float> out(kBatch * kDim);
    const std::vector<float> grads(kBatch * kDim, 0.5f);
    int64_t max_bytes = 0;
    for (int64_t start = 0; start < kIds; start += kBatch) {
      for (int64_t i = 0; i < kBatch; ++i) {
        batch[i] = (start + i) * 2654435761LL;
      }
      ASSERT_TRUE(table->Lookup(batch, absl::MakeSpan(out), true).ok());
      ASSERT_TRUE(
          table->ApplyGradients(batch, grads, *adagrad, start / kBatch).ok());
      const DynamicTableStats stats = table->Stats();
      ASSERT_LE(stats.rows, 1000);
      max_bytes = std::max(max_bytes, stats.bytes);
    }
    const DynamicTableStats stats = table->Stats();
    EXPECT_EQ(stats.rows, 1000);
    EXPECT_EQ(stats.admissions, kIds);
    EXPECT_EQ(stats.evictions, kIds - 1000);
    EXPECT_EQ(stats.updates, kIds);
    EXPECT_EQ(stats.lookups, kIds);
    EXPECT_LT(max_bytes, 1000 * 1024);  // about 1 KiB a row at most
  }
}

TEST(DynamicTableTest, ConcurrentLookupsAndUpdatesKeepCountsConsistent) {
  DynamicTableOptions options = BaseOptions();
  options.max_rows = 64;
  auto table = MakeTable(options);
  auto sgd = MakeOptimizer(RowOptimizerType::kSgd, 0.01);
  constexpr int kThreads = 4;
  constexpr int kRounds = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> out(2 * kDim);
      const std::vector<float> grads(2 * kDim, 1.0f);
      for (int r = 0; r < kRounds; ++r) {
        const std::vector<int64_t> ids = {t * 1000 + r % 50, -1 - r % 40};
        EXPECT_TRUE(table->Lookup(ids, absl::MakeSpan(out), true).ok());
        EXPECT_TRUE(table->ApplyGradients(ids, grads, *sgd, r).ok());
        if (r % 100 == 0) ExportAll(*table);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const DynamicTableStats stats = table->Stats();
  EXPECT_LE(stats.rows, 64);
  EXPECT_EQ(stats.lookups, 2 * kThreads * kRounds);
  EXPECT_EQ(stats.updates, 2 * kThreads * kRounds);
  EXPECT_EQ(stats.admissions - stats.evictions, stats.rows);
}

}  // namespace
}  // namespace strata

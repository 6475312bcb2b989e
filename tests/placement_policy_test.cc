// Placement policies: what each strategy answers, shard placement, the
// batch split between replicas, and bad configurations.
#include "strategies/placement_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

PolicyConfig Config(const std::string& type, const std::string& update) {
  PolicyConfig c;
  c.type = type;
  c.update = update;
  return c;
}

TEST(PlacementPolicyTest, EachStrategyAnswersWhereAndHow) {
  auto ps = MakePlacementPolicy(Config("parameter_server", "async"));
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ((*ps)->loop(), TrainingLoop::kStepQueue);
  EXPECT_EQ((*ps)->variable_home(), VariableHome::kPsTasks);
  EXPECT_EQ((*ps)->gradient_meeting(), GradientMeeting::kPsApplies);
  EXPECT_TRUE((*ps)->needs_ps());
  EXPECT_TRUE((*ps)->supports_checkpoints());
  EXPECT_FALSE((*ps)->elastic());

  auto cs = MakePlacementPolicy(Config("central_storage", "sync"));
  ASSERT_TRUE(cs.ok()) << cs.status();
  EXPECT_EQ((*cs)->loop(), TrainingLoop::kSyncGroup);
  EXPECT_EQ((*cs)->variable_home(), VariableHome::kPsTasks);
  EXPECT_EQ((*cs)->gradient_meeting(), GradientMeeting::kPsAveragesGroup);
  EXPECT_TRUE((*cs)->needs_ps());
  EXPECT_TRUE((*cs)->elastic());
  EXPECT_TRUE((*cs)->supports_checkpoints());

  PolicyConfig ring = Config("multi_worker_mirrored", "sync");
  auto mwm = MakePlacementPolicy(ring);
  ASSERT_TRUE(mwm.ok()) << mwm.status();
  EXPECT_EQ((*mwm)->variable_home(), VariableHome::kReplicas);
  EXPECT_EQ((*mwm)->gradient_meeting(), GradientMeeting::kAllReduce);
  EXPECT_EQ((*mwm)->backend(), CollectiveBackend::kRing);
  EXPECT_FALSE((*mwm)->needs_ps());
  EXPECT_TRUE((*mwm)->multi_worker());
  EXPECT_FALSE((*mwm)->supports_checkpoints());

  PolicyConfig via_ps = ring;
  via_ps.collective = "ps";
  auto mwm_ps = MakePlacementPolicy(via_ps);
  ASSERT_TRUE(mwm_ps.ok());
  EXPECT_EQ((*mwm_ps)->backend(), CollectiveBackend::kPs);
  EXPECT_TRUE((*mwm_ps)->needs_ps());

  PolicyConfig mirrored = Config("mirrored", "sync");
  mirrored.replicas = 3;
  auto m = MakePlacementPolicy(mirrored);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->backend(), CollectiveBackend::kInProcess);
  EXPECT_EQ((*m)->local_replicas(), 3);
  EXPECT_FALSE((*m)->multi_worker());
  EXPECT_FALSE((*m)->needs_ps());

  auto one = MakePlacementPolicy(Config("one_device", "sync"));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)->local_replicas(), 1);
}

TEST(PlacementPolicyTest, ParameterServerShardsRoundRobinCentralStorageOnTaskZero) {
  PolicyConfig c = Config("parameter_server", "async");
  c.num_shards = 3;
  auto ps = MakePlacementPolicy(c);
  ASSERT_TRUE(ps.ok());
  auto shards = (*ps)->Place({10, 4}, DType::kFloat32, 2);
  ASSERT_TRUE(shards.ok()) << shards.status();
  ASSERT_EQ(shards->size(), 3u);
  EXPECT_EQ((*shards)[0].slice.num_rows, 4);
  EXPECT_EQ((*shards)[0].ps, 0);
  EXPECT_EQ((*shards)[1].ps, 1);
  EXPECT_EQ((*shards)[2].ps, 0);
  EXPECT_EQ((*shards)[2].slice.row_offset, 7);

  auto cs = MakePlacementPolicy(Config("central_storage", "sync"));
  auto whole = (*cs)->Place({10, 4}, DType::kFloat32, 3);
  ASSERT_TRUE(whole.ok());
  ASSERT_EQ(whole->size(), 1u);
  EXPECT_EQ((*whole)[0].ps, 0);
  EXPECT_EQ((*whole)[0].slice.num_rows, 10);

  auto mwm = MakePlacementPolicy(Config("multi_worker_mirrored", "sync"));
  auto none = (*mwm)->Place({10, 4}, DType::kFloat32, 2);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("each replica"));

  auto no_ps = (*ps)->Place({10, 4}, DType::kFloat32, 0);
  EXPECT_EQ(no_ps.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(PlacementPolicyTest, BadConfigurationsNameTheField) {
  auto async_cs = MakePlacementPolicy(Config("central_storage", "async"));
  EXPECT_EQ(async_cs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(async_cs.status().message()),
              HasSubstr("job.strategy.update"));
  PolicyConfig c = Config("multi_worker_mirrored", "sync");
  c.collective = "tree";
  auto bad = MakePlacementPolicy(c);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("job.strategy.collective: 'tree' is not one of ring, ps"));
  auto unknown = MakePlacementPolicy(Config("tpu", "sync"));
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("job.strategy.type: 'tpu'"));
  c = Config("mirrored", "sync");
  c.replicas = 0;
  EXPECT_THAT(std::string(MakePlacementPolicy(c).status().message()),
              HasSubstr("job.strategy.replicas"));
}

TEST(PlacementPolicyTest, ReplicaRowsCoverTheBatchOnce) {
  for (int64_t batch : {0, 1, 7, 128, 129}) {
    for (int size = 1; size <= 8; ++size) {
      int64_t next = 0;
      for (int rank = 0; rank < size; ++rank) {
        auto [begin, end] = ReplicaRows(batch, rank, size);
        EXPECT_EQ(begin, next) << batch << " " << size << " " << rank;
        EXPECT_GE(end, begin);
        EXPECT_LE(end - begin, batch / size + 1);
        next = end;
      }
      EXPECT_EQ(next, batch);
    }
  }
  EXPECT_EQ(ReplicaRows(10, 3, 3), std::make_pair(int64_t{0}, int64_t{0}));
}

}  // namespace
}  // namespace strata

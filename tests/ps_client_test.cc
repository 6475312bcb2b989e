// PsCluster: variables split over two in-process PS tasks.
#include <memory>
#include <vector>

#include "client/ps_cluster.h"
#include "gtest/gtest.h"
#include "kernels/initializers.h"
#include "server/ps_server.h"
#include "tests/test_util.h"

namespace strata {
namespace {

class PsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> addresses;
    for (int i = 0; i < 2; ++i) {
      auto s = PsServer::Start(PsServerOptions{}, &logger_);
      ASSERT_TRUE(s.ok()) << s.status();
      addresses.push_back((*s)->address());
      servers_.push_back(*std::move(s));
    }
    cluster_ = PsCluster::Connect(addresses);
  }

  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::unique_ptr<PsCluster> cluster_;
};

TEST_F(PsClusterTest, ShardedVariableHoldsTheUnsplitValuesAndUpdates) {
  v1::VariableSpec spec;
  spec.set_name("dense/kernel");
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(10);
  spec.add_shape(4);
  spec.mutable_initializer()->set_type("glorot_uniform");
  spec.mutable_initializer()->set_seed(99);
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(1.0);
  auto slices = FixedShardsPartition({10, 4}, 3);
  ASSERT_TRUE(slices.ok());
  auto placement = cluster_->CreateVariable(spec, *slices);
  ASSERT_TRUE(placement.ok()) << placement.status();
  ASSERT_EQ(placement->shards.size(), 3u);
  EXPECT_EQ(placement->shards[0].ps, 0);
  EXPECT_EQ(placement->shards[1].ps, 1);
  EXPECT_EQ(placement->shards[2].ps, 0);
  EXPECT_EQ(placement->shards[1].name, "dense/kernel/part_1");

  std::vector<float> expected(40);
  InitializerSpec init;
  init.type = InitializerType::kGlorotUniform;
  init.seed = 99;
  STRATA_ASSERT_OK(FillInitializer(init, "dense/kernel", DType::kFloat32,
                                   {10, 4}, 0, expected.data(), 40));
  std::vector<float> got(40);
  STRATA_ASSERT_OK(cluster_->PullMany({"dense/kernel"}, {got.data()}));
  EXPECT_EQ(got, expected);

  std::vector<float> grad(40);
  for (int i = 0; i < 40; ++i) grad[i] = 0.01f * i;
  auto version = cluster_->PushMany({"dense/kernel"}, {grad.data()},
                                    PushTag{"job", 0, 0});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 1);
  STRATA_ASSERT_OK(cluster_->PullMany({"dense/kernel"}, {got.data()}));
  for (int i = 0; i < 40; ++i) EXPECT_FLOAT_EQ(got[i], expected[i] - grad[i]);
  // The same step again is a duplicate on every shard: nothing changes.
  ASSERT_TRUE(cluster_->PushMany({"dense/kernel"}, {grad.data()},
                                 PushTag{"job", 0, 0})
                  .ok());
  std::vector<float> again(40);
  STRATA_ASSERT_OK(cluster_->PullMany({"dense/kernel"}, {again.data()}));
  EXPECT_EQ(again, got);
}

TEST_F(PsClusterTest, UnknownVariableIsNotFound) {
  std::vector<float> buf(4);
  EXPECT_THAT(cluster_->PullMany({"nope"}, {buf.data()}),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace strata

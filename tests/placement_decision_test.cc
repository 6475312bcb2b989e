// The placement policy's decision is the one that takes effect: PsCluster
// creates each shard on the task the policy chose, and the worker asks the
// policy with the cluster's real number of PS tasks.
#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "client/ps_cluster.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/ps_server.h"
#include "strategies/placement_policy.h"
#include "tests/test_util.h"
#include "job/job.h"
#include "worker/ps_worker.h"

namespace strata {
namespace {

// Size-balanced placement (not round-robin): each variable's shards go,
// largest first, to the task holding the fewest bytes so far.
class SizeBalancedPolicy final : public PlacementPolicy {
 public:
  explicit SizeBalancedPolicy(int num_shards)
      : PlacementPolicy(PolicyConfig{}), num_shards_(num_shards) {}
  TrainingLoop loop() const override { return TrainingLoop::kStepQueue; }
  VariableHome variable_home() const override { return VariableHome::kPsTasks; }
  GradientMeeting gradient_meeting() const override {
    return GradientMeeting::kPsApplies;
  }
  bool needs_ps() const override { return true; }
  absl::StatusOr<std::vector<Shard>> Place(const Shape& shape, DType dtype,
                                           int num_ps) const override {
    const int n = std::min<int>(num_shards_, static_cast<int>(shape[0]));
    STRATA_ASSIGN_OR_RETURN(std::vector<ShardSlice> slices,
                            FixedShardsPartition(shape, n));
    if (load_.size() != static_cast<size_t>(num_ps)) load_.assign(num_ps, 0);
    const int64_t row_bytes =
        DTypeSize(dtype) * NumElements(shape) / std::max<int64_t>(1, shape[0]);
    std::vector<size_t> order(slices.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return slices[a].num_rows > slices[b].num_rows;
    });
    std::vector<Shard> out(slices.size());
    for (size_t i : order) {
      const int task = static_cast<int>(
          std::min_element(load_.begin(), load_.end()) - load_.begin());
      out[i] = {slices[i], task};
      load_[task] += slices[i].num_rows * row_bytes;
    }
    return out;
  }

 private:
  const int num_shards_;
  mutable std::vector<int64_t> load_;
};

v1::VariableSpec Spec(const std::string& name, int64_t rows, int64_t cols) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(rows);
  spec.add_shape(cols);
  spec.mutable_initializer()->set_type("ones");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(1.0);
  return spec;
}

class PlacementDecisionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> addresses;
    for (int i = 0; i < 3; ++i) {
      auto s = PsServer::Start(PsServerOptions{}, &logger_);
      ASSERT_TRUE(s.ok()) << s.status();
      addresses.push_back((*s)->address());
      servers_.push_back(*std::move(s));
    }
    cluster_ = PsCluster::Connect(addresses);
  }

  // The variable names each PS task holds.
  std::vector<std::vector<std::string>> Holdings() {
    std::vector<std::vector<std::string>> held(cluster_->num_ps());
    for (int i = 0; i < cluster_->num_ps(); ++i) {
      auto list = cluster_->ps(i)->ListVariables();
      EXPECT_TRUE(list.ok()) << list.status();
      if (!list.ok()) continue;
      for (const auto& v : list->variables()) held[i].push_back(v.spec().name());
      std::sort(held[i].begin(), held[i].end());
    }
    return held;
  }

  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::unique_ptr<PsCluster> cluster_;
};

TEST_F(PlacementDecisionTest, SizeBalancedDecisionsTakeEffectOnThePsTasks) {
  SizeBalancedPolicy policy(2);
  // "big" (2 shards of 50 rows) fills tasks 0 and 1; both shards of "small"
  // (4 and 3 rows) then go to the emptiest, task 2, where round-robin would
  // put them on tasks 0 and 1.
  for (const auto& [name, rows] :
       std::vector<std::pair<std::string, int64_t>>{{"big", 100},
                                                    {"small", 7}}) {
    auto shards = policy.Place({rows, 8}, DType::kFloat32, 3);
    ASSERT_TRUE(shards.ok()) << shards.status();
    auto placement = cluster_->CreateVariableOn(Spec(name, rows, 8), *shards);
    ASSERT_TRUE(placement.ok()) << placement.status();
    ASSERT_EQ(placement->shards.size(), shards->size());
    for (size_t i = 0; i < shards->size(); ++i) {
      EXPECT_EQ(placement->shards[i].ps, (*shards)[i].ps) << name << " " << i;
    }
  }
  std::vector<std::vector<std::string>> held = Holdings();
  EXPECT_EQ(held[0], std::vector<std::string>({"big/part_0"}));
  EXPECT_EQ(held[1], std::vector<std::string>({"big/part_1"}));
  EXPECT_EQ(held[2],
            std::vector<std::string>({"small/part_0", "small/part_1"}));

  // Pulls and pushes follow the placement: the whole variable comes back.
  std::vector<float> got(7 * 8);
  STRATA_ASSERT_OK(cluster_->PullMany({"small"}, {got.data()}));
  EXPECT_EQ(got, std::vector<float>(7 * 8, 1.0f));
  std::vector<float> grad(7 * 8, 0.25f);
  auto version =
      cluster_->PushMany({"small"}, {grad.data()}, PushTag{"job", 0, 0});
  ASSERT_TRUE(version.ok()) << version.status();
  STRATA_ASSERT_OK(cluster_->PullMany({"small"}, {got.data()}));
  EXPECT_EQ(got, std::vector<float>(7 * 8, 0.75f));
}

TEST_F(PlacementDecisionTest, AShardOnATaskTheClusterDoesNotHaveIsRefused) {
  std::vector<PlacementPolicy::Shard> shards = {{ShardSlice{0, 2}, 0},
                                                {ShardSlice{2, 2}, 3}};
  auto placement = cluster_->CreateVariableOn(Spec("w", 4, 2), shards);
  ASSERT_FALSE(placement.ok());
  EXPECT_EQ(placement.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(placement.status().message().find("placed on ps 3"),
            std::string::npos)
      << placement.status();
  // Nothing was created anywhere.
  for (const auto& names : Holdings()) EXPECT_TRUE(names.empty());
}

TEST(PlaceForTest, TheJobsPolicyIsAskedWithTheClustersTaskCount) {
  auto job = ParseJob(nlohmann::json::parse(R"({
    "model": {"input_shape": [4],
              "layers": [{"type": "dense", "units": 3,
                          "activation": "softmax"}]},
    "loss": "sparse_categorical_crossentropy",
    "optimizer": "sgd",
    "data": {"format": "csv", "train": {"path": "train.csv"}},
    "strategy": {"type": "parameter_server",
                 "partitioner": {"type": "fixed", "num_shards": 3}}
  })"));
  ASSERT_TRUE(job.ok()) << job.status();
  auto shards = PlaceFor(*job, {9, 4}, 3);
  ASSERT_TRUE(shards.ok()) << shards.status();
  ASSERT_EQ(shards->size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*shards)[i].ps, i);
  auto none = PlaceFor(*job, {9, 4}, 0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace strata

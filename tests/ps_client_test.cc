// PsCluster: variables split over two in-process PS tasks; replica-set
// targets that name their replicas.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_cluster.h"
#include "gtest/gtest.h"
#include "kernels/initializers.h"
#include "rpc/tls.h"
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

// A replicated task's address may name its replicas (a ClusterIP Service
// per replica on Kubernetes): the names become IP literals when the
// channel is made, and the channel reaches the replica that listens.
TEST(ReplicaSetTargetTest, NamesResolveToLiteralsAndReachTheListeningOne) {
  EXPECT_EQ(ChannelTarget("127.0.0.1:5,127.0.0.1:6"),
            "ipv4:127.0.0.1:5,127.0.0.1:6");
  EXPECT_EQ(ChannelTarget("localhost:5,127.0.0.1:6"),
            "ipv4:127.0.0.1:5,127.0.0.1:6");
  EXPECT_EQ(ChannelTarget("[::1]:5,[::1]:6"), "ipv6:[::1]:5,[::1]:6");
  // Both families in one list cannot be one gRPC address list.
  EXPECT_EQ(ChannelTarget("127.0.0.1:5,[::1]:6"), "127.0.0.1:5,[::1]:6");
  EXPECT_EQ(ChannelTarget("localhost:5"), "localhost:5");  // one address
  EXPECT_EQ(ChannelTarget("ipv4:127.0.0.1:5,127.0.0.1:6"),
            "ipv4:127.0.0.1:5,127.0.0.1:6");

  std::ostringstream log;
  Logger logger("ps:test", &log);
  auto server = PsServer::Start(PsServerOptions{}, &logger);
  ASSERT_TRUE(server.ok()) << server.status();
  // A port bound but not listening: the backup's, refusing connections.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string target =
      absl::StrCat("localhost:", ntohs(addr.sin_port), ",localhost:",
                   (*server)->port());
  PsClientOptions options;
  options.deadline = absl::Seconds(20);
  auto client = PsClient::Connect(target, options);
  v1::VariableSpec spec;
  spec.set_name("w");
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(2);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(1.0);
  STRATA_ASSERT_OK(client->CreateVariable(spec));
  const float grad[2] = {1, 2};
  STRATA_ASSERT_OK(client->PushVariables({"w"}, DType::kFloat32, {{2}},
                                         {grad}, PushTag{"job", 0, 0}));
  float value[2] = {};
  STRATA_ASSERT_OK(client->Pull("w", value, sizeof value).status());
  EXPECT_EQ(value[0], -1.0f);
  EXPECT_EQ(value[1], -2.0f);
  ::close(fd);
}

}  // namespace
}  // namespace strata

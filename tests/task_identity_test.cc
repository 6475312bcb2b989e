// ResolveTaskIdentity: defaults, TF_CONFIG, the flags that override it, and
// each error.
#include "common/task_identity.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace strata {
namespace {

constexpr char kCluster[] =
    R"("cluster": {"chief": ["chief0:2222"], "worker": ["w0:2223", "w1:2224"],
                   "ps": ["ps0:2225", "[::1]:2226"]})";

std::string TfConfigFor(const std::string& type, int index) {
  return std::string("{") + kCluster + R"(, "task": {"type": ")" + type +
         R"(", "index": )" + std::to_string(index) + "}}";
}

TEST(TaskIdentityTest, NoTfConfigGivesTheDefaults) {
  for (const std::optional<std::string>& tf_config :
       {std::optional<std::string>(), std::optional<std::string>("")}) {
    auto ps = ResolveTaskIdentity(DaemonKind::kPs, {}, tf_config);
    ASSERT_TRUE(ps.ok()) << ps.status();
    EXPECT_EQ(ps->role, "ps");
    EXPECT_EQ(ps->task_index, 0);
    EXPECT_EQ(ps->host, "127.0.0.1");
    EXPECT_EQ(ps->port, 0);
    EXPECT_EQ(ps->tf_config_address, "");
    EXPECT_EQ(ps->coordinator, "");

    auto coordinator =
        ResolveTaskIdentity(DaemonKind::kCoordinator, {}, tf_config);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    EXPECT_EQ(coordinator->role, "coordinator");
    EXPECT_EQ(coordinator->host, "127.0.0.1");
    EXPECT_EQ(coordinator->port, 0);
    EXPECT_FALSE(coordinator->static_cluster.has_value());
  }
}

TEST(TaskIdentityTest, WorkerWithoutTfConfigNeedsCoordinator) {
  auto none = ResolveTaskIdentity(DaemonKind::kWorker, {}, std::nullopt);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(none.status().message(),
            "--coordinator HOST:PORT is required (or a chief task in "
            "TF_CONFIG)");

  TaskIdentityFlags flags;
  flags.coordinator = "c:1";
  auto worker = ResolveTaskIdentity(DaemonKind::kWorker, flags, std::nullopt);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(worker->role, "worker");
  EXPECT_EQ(worker->coordinator, "c:1");
  EXPECT_EQ(worker->host, "127.0.0.1");
  EXPECT_EQ(worker->port, -1);  // no health server
  EXPECT_EQ(worker->tf_config_host, "");
}

TEST(TaskIdentityTest, PsTakesItsTaskFromTfConfig) {
  auto ps =
      ResolveTaskIdentity(DaemonKind::kPs, {}, TfConfigFor("ps", 1));
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->task_index, 1);
  EXPECT_EQ(ps->host, "0.0.0.0");
  EXPECT_EQ(ps->port, 2226);
  EXPECT_EQ(ps->tf_config_address, "[::1]:2226");
  EXPECT_EQ(ps->tf_config_host, "::1");
  EXPECT_EQ(ps->coordinator, "chief0:2222");
}

TEST(TaskIdentityTest, FlagsOverrideTfConfig) {
  TaskIdentityFlags flags;
  flags.host = "127.0.0.1";
  flags.port = 7000;
  flags.coordinator = "elsewhere:1";
  flags.task_index_from_name = "strata-ps-5";
  auto ps = ResolveTaskIdentity(DaemonKind::kPs, flags, TfConfigFor("ps", 1));
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->host, "127.0.0.1");
  EXPECT_EQ(ps->port, 7000);
  EXPECT_EQ(ps->task_index, 5);
  EXPECT_EQ(ps->coordinator, "elsewhere:1");
  // Still where others reach it.
  EXPECT_EQ(ps->tf_config_address, "[::1]:2226");

  // --task-index wins over --task-index-from-name.
  flags.task_index = 3;
  ps = ResolveTaskIdentity(DaemonKind::kPs, flags, TfConfigFor("ps", 1));
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->task_index, 3);
}

TEST(TaskIdentityTest, AnotherTasksTfConfigGivesOnlyTheCoordinator) {
  auto ps = ResolveTaskIdentity(DaemonKind::kPs, {}, TfConfigFor("worker", 1));
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->task_index, 0);
  EXPECT_EQ(ps->host, "127.0.0.1");
  EXPECT_EQ(ps->port, 0);
  EXPECT_EQ(ps->tf_config_address, "");
  EXPECT_EQ(ps->coordinator, "chief0:2222");
}

TEST(TaskIdentityTest, WorkerAndChiefFromTfConfig) {
  auto worker =
      ResolveTaskIdentity(DaemonKind::kWorker, {}, TfConfigFor("worker", 1));
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(worker->role, "worker");
  EXPECT_EQ(worker->task_index, 1);
  EXPECT_EQ(worker->host, "0.0.0.0");
  EXPECT_EQ(worker->port, 2224);
  EXPECT_EQ(worker->tf_config_host, "w1");
  EXPECT_EQ(worker->coordinator, "chief0:2222");

  auto chief =
      ResolveTaskIdentity(DaemonKind::kWorker, {}, TfConfigFor("chief", 0));
  ASSERT_TRUE(chief.ok()) << chief.status();
  EXPECT_EQ(chief->role, "chief");
  EXPECT_EQ(chief->port, 2222);
}

TEST(TaskIdentityTest, CoordinatorFromTfConfig) {
  auto coordinator = ResolveTaskIdentity(DaemonKind::kCoordinator, {},
                                         TfConfigFor("chief", 0));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  EXPECT_EQ(coordinator->host, "0.0.0.0");
  EXPECT_EQ(coordinator->port, 2222);
  ASSERT_TRUE(coordinator->static_cluster.has_value());
  EXPECT_EQ(coordinator->static_cluster->jobs.at("ps").size(), 2u);
  EXPECT_EQ(coordinator->coordinator, "");

  // Another task's TF_CONFIG: the static cluster only.
  TaskIdentityFlags flags;
  flags.port = 9;
  coordinator = ResolveTaskIdentity(DaemonKind::kCoordinator, flags,
                                    TfConfigFor("ps", 0));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  EXPECT_EQ(coordinator->host, "127.0.0.1");
  EXPECT_EQ(coordinator->port, 9);
  EXPECT_TRUE(coordinator->static_cluster.has_value());
}

TEST(TaskIdentityTest, BadTfConfigIsInvalidArgument) {
  for (DaemonKind kind :
       {DaemonKind::kPs, DaemonKind::kWorker, DaemonKind::kCoordinator}) {
    auto id = ResolveTaskIdentity(kind, {}, std::string("{not json"));
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(id.status().message().rfind("bad TF_CONFIG: TF_CONFIG: ", 0),
              0u)
        << id.status();
  }
}

TEST(TaskIdentityTest, BadAddressIsInvalidArgument) {
  // ParseTfConfig refuses such a cluster; a TfConfig made by hand may not.
  TfConfig config;
  config.cluster.jobs["ps"] = {"no-port"};
  config.task_type = "ps";
  auto id = ResolveTaskIdentity(DaemonKind::kPs, {}, &config);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(id.status().message(),
            "TF_CONFIG address: invalid address \"no-port\": missing ':port'");
}

TEST(TaskIdentityTest, BadTaskIndexFromNameIsInvalidArgument) {
  TaskIdentityFlags flags;
  flags.task_index_from_name = "no-ordinal";
  flags.task_index = 2;  // the name is checked even so
  auto id = ResolveTaskIdentity(DaemonKind::kPs, flags, std::nullopt);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(id.status().message().rfind("--task-index-from-name: name ", 0),
            0u)
      << id.status();
}

}  // namespace
}  // namespace strata

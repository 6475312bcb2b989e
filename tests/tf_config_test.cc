#include "common/tf_config.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

// As Kubeflow's training operator writes it for a TFJob with a chief, two
// workers and a PS; the evaluator is left out of the cluster.
std::string KubeflowConfig(const std::string& type, int index) {
  return R"({"cluster":{"chief":["mnist-chief-0.kubeflow.svc:2222"],)"
         R"("ps":["mnist-ps-0.kubeflow.svc:2222"],)"
         R"("worker":["mnist-worker-0.kubeflow.svc:2222",)"
         R"("mnist-worker-1.kubeflow.svc:2222"]},)"
         R"("task":{"type":")" +
         type + R"(","index":)" + std::to_string(index) +
         R"(},"environment":"cloud"})";
}

void ExpectInvalid(const std::string& json, const std::string& message) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(json);
  ASSERT_FALSE(config.ok()) << json;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(message))
      << json;
}

TEST(TfConfigTest, ParsesKubeflowWorker) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(KubeflowConfig("worker", 1));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task_type, "worker");
  EXPECT_EQ(config->task_index, 1);
  EXPECT_EQ(config->environment, "cloud");
  ASSERT_EQ(config->cluster.jobs.size(), 3u);
  EXPECT_EQ(config->cluster.jobs.at("worker"),
            (std::vector<std::string>{"mnist-worker-0.kubeflow.svc:2222",
                                      "mnist-worker-1.kubeflow.svc:2222"}));
  EXPECT_EQ(TaskAddress(*config), "mnist-worker-1.kubeflow.svc:2222");
}

TEST(TfConfigTest, ParsesKubeflowChief) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(KubeflowConfig("chief", 0));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task_type, "chief");
  EXPECT_EQ(TaskAddress(*config), "mnist-chief-0.kubeflow.svc:2222");
}

TEST(TfConfigTest, ParsesKubeflowPs) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(KubeflowConfig("ps", 0));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task_type, "ps");
  EXPECT_EQ(TaskAddress(*config), "mnist-ps-0.kubeflow.svc:2222");
}

TEST(TfConfigTest, EvaluatorOutsideClusterHasNoAddress) {
  absl::StatusOr<TfConfig> config =
      ParseTfConfig(KubeflowConfig("evaluator", 0));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task_type, "evaluator");
  EXPECT_EQ(config->task_index, 0);
  EXPECT_EQ(TaskAddress(*config), "");
}

TEST(TfConfigTest, EvaluatorInsideCluster) {
  absl::StatusOr<TfConfig> config =
      ParseTfConfig(R"({"cluster":{"worker":["w:1"],"evaluator":["e:2"]},)"
                    R"("task":{"type":"evaluator","index":0}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(TaskAddress(*config), "e:2");
}

TEST(TfConfigTest, MasterAndIpv6Addresses) {
  absl::StatusOr<TfConfig> config = ParseTfConfig(
      R"({"cluster":{"master":["[::1]:2222"],"worker":["worker-0.example:2222"]},)"
      R"("task":{"type":"master","index":0}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(TaskAddress(*config), "[::1]:2222");
  EXPECT_EQ(config->environment, "");
}

TEST(TfConfigTest, JoinHostPortBracketsIpv6) {
  EXPECT_EQ(JoinHostPort("127.0.0.1", 80), "127.0.0.1:80");
  EXPECT_EQ(JoinHostPort("::1", 5000), "[::1]:5000");
  EXPECT_EQ(JoinHostPort("[::1]", 5000), "[::1]:5000");
  auto split = SplitHostPort(JoinHostPort("::1", 7));
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->first, "::1");
  EXPECT_EQ(split->second, 7);
}

TEST(TfConfigTest, MissingPiecesDefault) {
  absl::StatusOr<TfConfig> config = ParseTfConfig("{}");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->cluster.jobs.empty());
  EXPECT_EQ(config->task_type, "");
  EXPECT_EQ(TaskAddress(*config), "");

  config = ParseTfConfig(R"({"cluster":{"worker":["w:1"]},)"
                         R"("task":{"type":"worker"},"rpc_layer":"grpc"})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task_index, 0);
  EXPECT_EQ(TaskAddress(*config), "w:1");
}

TEST(TfConfigTest, RoundTripsThroughJson) {
  for (const char* type : {"chief", "worker", "ps", "evaluator"}) {
    absl::StatusOr<TfConfig> config = ParseTfConfig(KubeflowConfig(type, 0));
    ASSERT_TRUE(config.ok()) << config.status();
    std::string json = TfConfigToJson(*config);
    absl::StatusOr<TfConfig> again = ParseTfConfig(json);
    ASSERT_TRUE(again.ok()) << again.status() << " " << json;
    EXPECT_EQ(*again, *config) << json;
  }
  TfConfig config;
  config.cluster.jobs["worker"] = {"a:1", "b:2"};
  config.task_type = "worker";
  config.task_index = 1;
  EXPECT_EQ(TfConfigToJson(config), R"({"cluster":{"worker":["a:1","b:2"]},)"
                                    R"("task":{"type":"worker","index":1}})");
  EXPECT_EQ(TfConfigToJson(TfConfig{}), R"({"cluster":{}})");
}

TEST(TfConfigTest, RejectsMalformedJson) {
  ExpectInvalid("", "TF_CONFIG: empty; expected a JSON object");
  ExpectInvalid("   ", "TF_CONFIG: empty");
  ExpectInvalid("{\"cluster\": ", "TF_CONFIG: invalid JSON: ");
  ExpectInvalid("[1, 2]", "TF_CONFIG: expected a JSON object, got [1,2]");
}

TEST(TfConfigTest, RejectsBadTaskIndex) {
  const std::string cluster = R"({"cluster":{"worker":["w:1","w:2"]},)";
  ExpectInvalid(cluster + R"("task":{"type":"worker","index":-1}})",
                "TF_CONFIG.task.index: expected a non-negative integer, "
                "got -1");
  ExpectInvalid(cluster + R"("task":{"type":"worker","index":"1"}})",
                "TF_CONFIG.task.index: expected a non-negative integer, "
                "got \"1\"");
  ExpectInvalid(cluster + R"("task":{"type":"worker","index":1.5}})",
                "TF_CONFIG.task.index: expected a non-negative integer, "
                "got 1.5");
  ExpectInvalid(cluster + R"("task":{"type":"worker","index":4294967296}})",
                "TF_CONFIG.task.index: expected a non-negative integer, "
                "got 4294967296");
  ExpectInvalid(cluster + R"("task":{"type":"worker","index":2}})",
                "TF_CONFIG.task.index: 2 is out of range: job \"worker\" "
                "has 2 tasks");
}

TEST(TfConfigTest, RejectsBadTaskType) {
  const std::string cluster = R"({"cluster":{"worker":["w:1"],"ps":["p:1"]},)";
  ExpectInvalid(cluster + R"("task":{"type":"trainer","index":0}})",
                "TF_CONFIG.task.type: unknown task type \"trainer\"; "
                "allowed: chief, worker, ps, evaluator, master");
  ExpectInvalid(cluster + R"("task":{"type":"chief","index":0}})",
                "TF_CONFIG.task.type: job \"chief\" is not in "
                "TF_CONFIG.cluster (jobs: ps, worker)");
  ExpectInvalid(cluster + R"("task":{"index":0}})",
                "TF_CONFIG.task.type: missing");
  ExpectInvalid(cluster + R"("task":{"type":3}})",
                "TF_CONFIG.task.type: expected a string, got 3");
  ExpectInvalid(cluster + R"("task":"worker"})",
                "TF_CONFIG.task: expected an object, got \"worker\"");
  ExpectInvalid(R"({"task":{"type":"worker"}})",
                "job \"worker\" is not in TF_CONFIG.cluster (which has no "
                "jobs)");
}

TEST(TfConfigTest, RejectsBadCluster) {
  ExpectInvalid(R"({"cluster":["w:1"]})",
                "TF_CONFIG.cluster: expected an object, got [\"w:1\"]");
  ExpectInvalid(R"({"cluster":{"workers":["w:1"]}})",
                "TF_CONFIG.cluster.workers: unknown job name \"workers\"; "
                "allowed: chief, worker, ps, evaluator, master");
  ExpectInvalid(R"({"cluster":{"worker":"w:1"}})",
                "TF_CONFIG.cluster.worker: expected an array of "
                "\"host:port\" strings, got \"w:1\"");
  ExpectInvalid(R"({"cluster":{"worker":["w:1",7]}})",
                "TF_CONFIG.cluster.worker[1]: expected a \"host:port\" "
                "string, got 7");
  ExpectInvalid(R"({"cluster":{"worker":["w:1","w2"]}})",
                "TF_CONFIG.cluster.worker[1]: invalid address \"w2\": "
                "missing ':port'");
  ExpectInvalid(R"({"cluster":{"ps":["h:1"],"worker":["h:1"]}})",
                "TF_CONFIG.cluster.worker[0]: address \"h:1\" is also "
                "TF_CONFIG.cluster.ps[0]");
  ExpectInvalid(R"({"cluster":{"chief":["c:1","c:2"]}})",
                "TF_CONFIG.cluster: at most one chief task (chief or master) "
                "is allowed, got 2");
  ExpectInvalid(R"({"cluster":{"chief":["c:1"],"master":["m:1"]}})",
                "at most one chief task");
  ExpectInvalid(R"({"cluster":{"evaluator":["e:1","e:2"]}})",
                "TF_CONFIG.cluster: at most one evaluator task is allowed, "
                "got 2");
  ExpectInvalid(R"({"environment":1})",
                "TF_CONFIG.environment: expected a string, got 1");
}

TEST(SplitHostPortTest, Accepts) {
  auto hp = SplitHostPort("localhost:2222");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->first, "localhost");
  EXPECT_EQ(hp->second, 2222);

  hp = SplitHostPort("[::1]:80");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->first, "::1");
  EXPECT_EQ(hp->second, 80);

  hp = SplitHostPort("127.0.0.1:0");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->second, 0);

  hp = SplitHostPort("[fe80::1%eth0]:65535");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->first, "fe80::1%eth0");
  EXPECT_EQ(hp->second, 65535);
}

TEST(SplitHostPortTest, Rejects) {
  struct Case {
    const char* address;
    const char* message;
  };
  const Case cases[] = {
      {"", "invalid address \"\": empty"},
      {"host", "invalid address \"host\": missing ':port'"},
      {":80", "invalid address \":80\": empty host"},
      {"host:", "invalid address \"host:\": empty port"},
      {"host:http", "port \"http\" is not a number"},
      {"host:-1", "port \"-1\" is not a number"},
      {"host:65536", "port 65536 is out of range [0, 65535]"},
      {"host:99999999999", "port 99999999999 is out of range"},
      {"::1:80", "an IPv6 host must be in brackets, as \"[::1]:2222\""},
      {"[::1:80", "missing ']' after the IPv6 host"},
      {"[::1]", "invalid address \"[::1]\": missing ':port'"},
      {"[::1]80", "expected ':port' after ']'"},
      {"[]:80", "empty host"},
      {"host :80", "contains whitespace"},
  };
  for (const Case& c : cases) {
    auto hp = SplitHostPort(c.address);
    ASSERT_FALSE(hp.ok()) << c.address;
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(hp.status().message()), HasSubstr(c.message))
        << c.address;
  }
}

TEST(TaskAddressTest, OutOfRangeIsEmpty) {
  TfConfig config;
  config.cluster.jobs["worker"] = {"a:1"};
  config.task_type = "worker";
  config.task_index = 1;
  EXPECT_EQ(TaskAddress(config), "");
  config.task_index = -1;
  EXPECT_EQ(TaskAddress(config), "");
  config.task_index = 0;
  EXPECT_EQ(TaskAddress(config), "a:1");
}

TEST(OrdinalFromNameTest, StatefulSetPodNames) {
  EXPECT_EQ(OrdinalFromName("strata-ps-0").value(), 0);
  EXPECT_EQ(OrdinalFromName("strata-worker-12").value(), 12);
  EXPECT_EQ(OrdinalFromName("a-b-c-7").value(), 7);
  for (const char* bad : {"", "strata-ps", "strata-ps-", "strata-ps-x",
                          "strata-ps-1a", "7",
                          "strata-ps-1234567890"}) {
    absl::StatusOr<int> ordinal = OrdinalFromName(bad);
    ASSERT_FALSE(ordinal.ok()) << bad;
    EXPECT_EQ(ordinal.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(ordinal.status().message()),
                HasSubstr(std::string("'") + bad + "'"));
  }
}

}  // namespace
}  // namespace strata

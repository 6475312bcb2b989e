// `strata tfconfig` resolves TF_CONFIG strings of exactly Kubeflow's form.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

struct Result {
  int exit_code = -1;
  std::string out;
};

// Runs `strata tfconfig` with TF_CONFIG set to `tf_config` (not set when
// empty) and the extra flags; reads stdout until the child closes it.
Result RunTfConfig(const std::string& tf_config,
                   std::vector<std::string> flags = {}) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> args = {STRATA_CLI, "tfconfig"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
  if (!tf_config.empty()) env.push_back("TF_CONFIG=" + tf_config);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid;
  EXPECT_EQ(posix_spawn(&pid, STRATA_CLI, &actions, nullptr, argv.data(),
                        envp.data()),
            0);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  Result r;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) r.out.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The cluster Kubeflow's TFJob operator injects for job "mnist" in
// namespace "team-a": <job>-<type>-<i>.<ns>.svc:2222.
std::string Kubeflow(const std::string& type, int index) {
  nlohmann::json j = {
      {"cluster",
       {{"chief", {"mnist-chief-0.team-a.svc:2222"}},
        {"worker",
         {"mnist-worker-0.team-a.svc:2222", "mnist-worker-1.team-a.svc:2222"}},
        {"ps", {"mnist-ps-0.team-a.svc:2222", "mnist-ps-1.team-a.svc:2222"}},
        {"evaluator", {"mnist-evaluator-0.team-a.svc:2222"}}}},
      {"task", {{"type", type}, {"index", index}}},
      {"environment", "cloud"}};
  return j.dump();
}

TEST(TfConfigCliTest, ResolvesEveryKubeflowRole) {
  struct Case {
    std::string type;
    int index;
    std::string address;
  } cases[] = {{"chief", 0, "mnist-chief-0.team-a.svc:2222"},
               {"worker", 1, "mnist-worker-1.team-a.svc:2222"},
               {"ps", 0, "mnist-ps-0.team-a.svc:2222"},
               {"ps", 1, "mnist-ps-1.team-a.svc:2222"},
               {"evaluator", 0, "mnist-evaluator-0.team-a.svc:2222"}};
  for (const Case& c : cases) {
    Result r = RunTfConfig(Kubeflow(c.type, c.index));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["task"]["type"], c.type);
    EXPECT_EQ(j["task"]["index"], c.index);
    EXPECT_EQ(j["address"], c.address);
    EXPECT_EQ(j["cluster"]["ps"].size(), 2u);
    EXPECT_EQ(j["cluster"]["worker"][0], "mnist-worker-0.team-a.svc:2222");
  }
}

TEST(TfConfigCliTest, FlagsOverrideTheTask) {
  Result r = RunTfConfig(Kubeflow("worker", 0),
                         {"--task-type=ps", "--task-index=1"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["task"]["type"], "ps");
  EXPECT_EQ(j["address"], "mnist-ps-1.team-a.svc:2222");
}

TEST(TfConfigCliTest, BadTfConfigNamesTheField) {
  Result r = RunTfConfig(R"({"cluster": {"ps": ["a:1"]},
                             "task": {"type": "ps", "index": 5}})");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("index"), std::string::npos) << r.out;
  Result bad_json = RunTfConfig("{not json");
  EXPECT_EQ(bad_json.exit_code, 2);
}

// The TFJob in deploy/kubeflow (strata-mnist: 1 chief, 2 ps, 2 workers),
// deployed in namespace team-a: each task's TF_CONFIG byte for byte as the
// training operator writes it (Go's json.Marshal: struct fields in order,
// map keys sorted). Every task resolves its own address and the chief as
// the coordinator it registers with, with no wrapper in between.
TEST(TfConfigCliTest, ResolvesTheDeployedTfJobTasks) {
  const std::string cluster =
      R"({"chief":["strata-mnist-chief-0.team-a.svc:2222"],)"
      R"("ps":["strata-mnist-ps-0.team-a.svc:2222",)"
      R"("strata-mnist-ps-1.team-a.svc:2222"],)"
      R"("worker":["strata-mnist-worker-0.team-a.svc:2222",)"
      R"("strata-mnist-worker-1.team-a.svc:2222"]})";
  struct Case {
    std::string type;
    int index;
  } cases[] = {{"chief", 0}, {"ps", 0}, {"ps", 1}, {"worker", 0}, {"worker", 1}};
  for (const Case& c : cases) {
    const std::string tf_config =
        R"({"cluster":)" + cluster + R"(,"task":{"type":")" + c.type +
        R"(","index":)" + std::to_string(c.index) +
        R"(},"environment":"cloud"})";
    Result r = RunTfConfig(tf_config);
    ASSERT_EQ(r.exit_code, 0) << tf_config << "\n" << r.out;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["task"]["type"], c.type);
    EXPECT_EQ(j["task"]["index"], c.index);
    EXPECT_EQ(j["address"], "strata-mnist-" + c.type + "-" +
                                std::to_string(c.index) + ".team-a.svc:2222");
    EXPECT_EQ(j["coordinator"], "strata-mnist-chief-0.team-a.svc:2222");
    EXPECT_EQ(j["cluster"], nlohmann::json::parse(cluster));
    EXPECT_EQ(j["environment"], "cloud");
  }
}

}  // namespace
}  // namespace strata

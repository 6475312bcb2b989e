// A multi-host run without a cluster: the coordinator, two PS tasks and two
// workers each in a network namespace of their own, joined by veth pairs to
// a bridge that lives in one more namespace. The test creates all of it and
// removes all of it; the 10.231.0.0/24 addresses exist only inside these
// namespaces, and nothing is added to the host's namespace.
//
// Every task is started the way the Kubeflow TFJob in deploy/kubeflow starts
// it: a TF_CONFIG of exactly the operator's form (DNS names
// nstest-<type>-<i>.strata.svc:2222, resolved through /etc/netns/<ns>/hosts,
// which `ip netns exec` mounts over /etc/hosts), no wrapper; the chief's
// namespace runs strata-coordinator and `strata submit --wait`. The run must
// succeed with every step applied once, and the PS tasks' bridge ports must
// have carried the training traffic.
//
// Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2; skips otherwise.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/process.h"

extern char** environ;

namespace strata {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kBinDir[] = STRATA_BIN_DIR;
constexpr char kJob[] = STRATA_SOURCE_DIR "/tests/data/small_job.json";
constexpr char kPrefix[] = "snt-";  // namespaces: snt-<pid>-<node>
constexpr auto kTrainLimit = std::chrono::minutes(6);

// Waits up to 100 ms for a child to change state (SIGCHLD, blocked in this
// process); callers recheck their condition and stop at their deadline.
void AwaitChildEvent() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  timespec ts{0, 100 * 1000 * 1000};
  sigtimedwait(&set, nullptr, &ts);
}

class BlockSigchld : public ::testing::Environment {
 public:
  void SetUp() override {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
};
const auto* const kBlockSigchld =
    ::testing::AddGlobalTestEnvironment(new BlockSigchld);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Exit {
  int code = -1;  // exit code; -1 when killed or timed out
  std::string output;
};

// Runs argv (argv[0] a path) with stdout and stderr to `log`, waiting at
// most `limit`; a child still running then is killed.
pid_t Start(const std::vector<std::string>& args, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), environ) != 0) {
    pid = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return pid;
}

int WaitFor(pid_t pid, Clock::duration limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0) return -1;
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    AwaitChildEvent();
  }
}

Exit RunCommand(const std::vector<std::string>& args, const std::string& log,
         Clock::duration limit = std::chrono::seconds(20)) {
  Exit e;
  pid_t pid = Start(args, log);
  if (pid > 0) e.code = WaitFor(pid, limit);
  e.output = ReadFile(log);
  return e;
}

std::string FindIp() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

// The Kubeflow TF_CONFIG of task (type, index) in job "nstest", namespace
// "strata": exactly what the training operator injects (Go's json.Marshal:
// compact, keys sorted).
std::string KubeflowTfConfig(const std::string& type, int index) {
  nlohmann::json j = {
      {"cluster",
       {{"chief", {"nstest-chief-0.strata.svc:2222"}},
        {"ps", {"nstest-ps-0.strata.svc:2222", "nstest-ps-1.strata.svc:2222"}},
        {"worker",
         {"nstest-worker-0.strata.svc:2222",
          "nstest-worker-1.strata.svc:2222"}}}},
      {"task", {{"type", type}, {"index", index}}},
      {"environment", "cloud"}};
  return j.dump();
}

struct Node {
  std::string task;  // "chief", "ps-0", ...
  std::string ns;    // snt-<pid>-<task>
  std::string address;
  std::string port;  // the switch-side veth, v<i>
};

// The namespaces, links and files of one test run; the destructor removes
// them whatever happened.
class Network {
 public:
  Network(std::string ip, std::string dir) : ip_(std::move(ip)), dir_(dir) {
    tag_ = absl::StrCat(kPrefix, getpid());
    switch_ = tag_ + "-sw";
  }
  ~Network() { TearDown(); }

  // Creates the switch and one namespace per task. Returns "" or what
  // failed (the test then skips: namespaces are not available here).
  std::string SetUp(const std::vector<std::string>& tasks) {
    RemoveStale();
    if (std::string e = Ip({"netns", "add", switch_}); !e.empty()) return e;
    created_.push_back(switch_);
    for (const auto& e :
         {Ip({"-n", switch_, "link", "set", "lo", "up"}),
          Ip({"-n", switch_, "link", "add", "br0", "type", "bridge"}),
          Ip({"-n", switch_, "link", "set", "br0", "up"})}) {
      if (!e.empty()) return e;
    }
    for (size_t i = 0; i < tasks.size(); ++i) {
      Node n{tasks[i], tag_ + "-" + tasks[i],
             absl::StrCat("10.231.0.", i + 1), absl::StrCat("v", i)};
      if (std::string e = Ip({"netns", "add", n.ns}); !e.empty()) return e;
      created_.push_back(n.ns);
      for (const auto& e :
           {Ip({"-n", switch_, "link", "add", n.port, "type", "veth", "peer",
                "name", "eth0", "netns", n.ns}),
            Ip({"-n", switch_, "link", "set", n.port, "master", "br0"}),
            Ip({"-n", switch_, "link", "set", n.port, "up"}),
            Ip({"-n", n.ns, "addr", "add", n.address + "/24", "dev", "eth0"}),
            Ip({"-n", n.ns, "link", "set", "eth0", "up"}),
            Ip({"-n", n.ns, "link", "set", "lo", "up"})}) {
        if (!e.empty()) return e;
      }
      nodes_.push_back(n);
    }
    // Each namespace resolves the cluster's DNS names through its own
    // /etc/hosts (ip netns exec bind-mounts /etc/netns/<ns>/hosts).
    std::string hosts = "127.0.0.1 localhost\n";
    for (const Node& n : nodes_) {
      hosts += absl::StrCat(n.address, " nstest-", n.task, ".strata.svc\n");
    }
    remove_etc_netns_ = !fs::exists("/etc/netns");
    for (const Node& n : nodes_) {
      fs::create_directories("/etc/netns/" + n.ns);
      std::ofstream("/etc/netns/" + n.ns + "/hosts") << hosts;
    }
    return "";
  }

  // argv run inside the task's namespace.
  std::vector<std::string> Exec(const std::string& task,
                                std::vector<std::string> argv) const {
    std::vector<std::string> out = {ip_, "netns", "exec", Find(task).ns};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

  const Node& Find(const std::string& task) const {
    for (const Node& n : nodes_) {
      if (n.task == task) return n;
    }
    return nodes_.front();
  }

  // Bytes the switch port of `task` carried (both directions).
  int64_t PortBytes(const std::string& task) {
    Exit e = RunCommand({ip_, "-n", switch_, "-j", "-s", "link", "show", Find(task).port},
                 dir_ + "/ip-stats.json");
    auto j = nlohmann::json::parse(e.output, nullptr, false);
    if (!j.is_array() || j.empty() || !j[0].contains("stats64")) return -1;
    return j[0]["stats64"]["rx"]["bytes"].get<int64_t>() +
           j[0]["stats64"]["tx"]["bytes"].get<int64_t>();
  }

  void TearDown() {
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
      Ip({"netns", "del", *it});
      std::error_code ec;
      fs::remove_all("/etc/netns/" + *it, ec);
    }
    created_.clear();
    if (remove_etc_netns_) {
      std::error_code ec;
      fs::remove("/etc/netns", ec);  // only when empty
      remove_etc_netns_ = false;
    }
  }

 private:
  std::string Ip(std::vector<std::string> args) {
    args.insert(args.begin(), ip_);
    Exit e = RunCommand(args, dir_ + "/ip.log");
    if (e.code == 0) return "";
    return absl::StrCat("`", absl::StrJoin(args, " "), "` failed: ", e.output);
  }

  // Namespaces left by an earlier run that was killed (snt-<pid>-* whose
  // process is gone).
  void RemoveStale() {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/run/netns", ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(kPrefix, 0) != 0) continue;
      const pid_t pid = std::atoi(name.c_str() + sizeof(kPrefix) - 1);
      if (pid <= 0 || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) {
        continue;
      }
      Ip({"netns", "del", name});
      fs::remove_all("/etc/netns/" + name, ec);
    }
  }

  std::string ip_;
  std::string dir_;
  std::string tag_;
  std::string switch_;
  std::vector<std::string> created_;
  std::vector<Node> nodes_;
  bool remove_etc_netns_ = false;  // this run created /etc/netns
};

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "netns-" + std::to_string(getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    for (ChildProcess& c : children_) Stop(&c, absl::Seconds(10));
    network_.reset();
    if (!HasFailure()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    } else {
      std::cerr << "netns test: logs kept in " << dir_ << "\n";
    }
  }

  // Starts a daemon in `task`'s namespace with `tf_config` (none when empty)
  // and waits for its "listening on" line.
  ChildProcess* Daemon(const std::string& name, const std::string& task,
                       const std::string& tf_config,
                       std::vector<std::string> argv) {
    std::vector<std::string> cmd = {"/usr/bin/env"};
    if (!tf_config.empty()) cmd.push_back("TF_CONFIG=" + tf_config);
    cmd.insert(cmd.end(), argv.begin(), argv.end());
    children_.emplace_back();
    ChildProcess* c = &children_.back();
    c->name = name;
    c->argv = network_->Exec(task, cmd);
    c->log_path = dir_ + "/" + name + ".log";
    absl::Status s = Spawn(c, true, absl::Seconds(60));
    EXPECT_TRUE(s.ok()) << s << "\n" << ReadFile(c->log_path);
    return c;
  }

  std::string dir_;
  std::unique_ptr<Network> network_;
  std::deque<ChildProcess> children_;
};

TEST_F(NetnsTest, KubeflowClusterTrainsAcrossNamespaces) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root to create network namespaces (ip netns); "
                    "run the test as root";
  }
  const std::string ip = FindIp();
  if (ip.empty()) GTEST_SKIP() << "iproute2's ip not found";
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  network_ = std::make_unique<Network>(ip, dir_);
  if (std::string e = network_->SetUp(
          {"chief-0", "ps-0", "ps-1", "worker-0", "worker-1"});
      !e.empty()) {
    network_.reset();
    GTEST_SKIP() << "cannot create network namespaces here: " << e;
  }

  const std::string job_path = kJob;  // 3 epochs of 12000 examples
  const std::string bin = kBinDir;

  // The chief: the coordinator as the TFJob's sidecar runs it.
  ChildProcess* coordinator = Daemon(
      "coordinator", "chief-0", "",
      {bin + "/strata-coordinator", "--host=0.0.0.0", "--port=2222",
       "--state-dir=" + dir_ + "/coordinator", "--topology-timeout-ms=120000"});
  ASSERT_EQ(coordinator->address, "0.0.0.0:2222");
  // PS tasks and workers: TF_CONFIG only (address, index, coordinator).
  for (int i = 0; i < 2; ++i) {
    ChildProcess* ps = Daemon(
        absl::StrCat("ps-", i), absl::StrCat("ps-", i),
        KubeflowTfConfig("ps", i),
        {bin + "/strata-ps", "--checkpoint-dir=" + dir_ + "/ps-" +
                                 std::to_string(i)});
    ASSERT_EQ(ps->address, "0.0.0.0:2222") << ReadFile(ps->log_path);
  }
  for (int i = 0; i < 2; ++i) {
    ChildProcess* w = Daemon(absl::StrCat("worker-", i),
                             absl::StrCat("worker-", i),
                             KubeflowTfConfig("worker", i),
                             {bin + "/strata-worker"});
    ASSERT_EQ(w->address, "0.0.0.0:2222") << ReadFile(w->log_path);
  }
  ASSERT_FALSE(HasFailure());

  // The TFJob's chief container: waits for the 2 PS and 2 workers TF_CONFIG
  // lists, submits, follows the job to its end.
  const std::string summary_path = dir_ + "/summary.json";
  const auto started = Clock::now();
  Exit submit = RunCommand(network_->Exec("chief-0",
                                   {"/usr/bin/env",
                                    "TF_CONFIG=" + KubeflowTfConfig("chief", 0),
                                    bin + "/strata", "submit",
                                    "--coordinator=localhost:2222",
                                    "--job=" + job_path, "--wait",
                                    "--wait-timeout-seconds=120",
                                    "--summary=" + summary_path}),
                    dir_ + "/submit.log", kTrainLimit);
  std::cout << submit.output;
  std::cout << "trained across namespaces in "
            << std::chrono::duration_cast<std::chrono::seconds>(
                   Clock::now() - started).count()
            << " s\n";
  ASSERT_EQ(submit.code, 0) << submit.output << "\ncoordinator log:\n"
                            << ReadFile(coordinator->log_path);

  nlohmann::json s = nlohmann::json::parse(ReadFile(summary_path), nullptr, false);
  ASSERT_FALSE(s.is_discarded()) << ReadFile(summary_path);
  EXPECT_EQ(s["steps_scheduled"], 3 * 188);
  EXPECT_EQ(s["steps_applied"], s["steps_scheduled"]);
  EXPECT_EQ(s["steps_applied_ps"], s["steps_scheduled"]);
  EXPECT_EQ(s["lost_steps"], 0);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.7);
  // The cluster the coordinator reports: the tasks registered under their
  // Kubeflow names (non-loopback, resolved to the namespaces' addresses).
  EXPECT_EQ(s["cluster"]["ps"],
            nlohmann::json({"nstest-ps-0.strata.svc:2222",
                            "nstest-ps-1.strata.svc:2222"}));
  EXPECT_EQ(s["registered_at_submit"]["worker"], 2);
  EXPECT_NE(submit.output.find("Epoch 3/3"), std::string::npos);

  // The training traffic went through the bridge: each PS port carried
  // the pulls and pushes of every step (MiBs), each worker port too.
  for (const char* task : {"ps-0", "ps-1", "worker-0", "worker-1"}) {
    const int64_t bytes = network_->PortBytes(task);
    std::cout << task << " (" << network_->Find(task).address
              << "): " << bytes << " bytes through the bridge\n";
    EXPECT_GT(bytes, int64_t{1} << 20) << task;
  }

  // Workers exit 0 once the job is over; the servers stop on SIGTERM.
  for (ChildProcess& c : children_) {
    if (c.name.rfind("worker-", 0) != 0) continue;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!Reap(&c) && Clock::now() < deadline) AwaitChildEvent();
    ASSERT_TRUE(c.exited) << c.name << " still running after the job ended";
    EXPECT_TRUE(WIFEXITED(c.wait_status) && WEXITSTATUS(c.wait_status) == 0)
        << c.name << ": " << DescribeExit(c.wait_status) << "\n"
        << ReadFile(c.log_path);
  }
  for (ChildProcess& c : children_) {
    Stop(&c, absl::Seconds(15));
    EXPECT_TRUE(WIFEXITED(c.wait_status) && WEXITSTATUS(c.wait_status) == 0)
        << c.name << ": " << DescribeExit(c.wait_status);
  }
}

}  // namespace
}  // namespace strata

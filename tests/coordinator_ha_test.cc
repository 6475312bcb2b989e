// Coordinator high availability through etcd (issue 17): the leader
// election on an etcd lease, the state written to etcd under the leader's
// epoch (a deposed leader's writes refused by etcd), the PS tasks refusing
// a deposed coordinator's checkpoint calls, and the coordinator client
// following the leader and discarding a deposed one's answers. A real etcd
// (Debian's etcd-server) runs as a child process on 127.0.0.1.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/coordinator_client.h"
#include "client/ps_client.h"
#include "common/logging.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/etcd_client.h"
#include "coordinator/etcd_state_file_system.h"
#include "coordinator/leader_election.h"
#include "gtest/gtest.h"
#include "server/ps_server.h"

extern char** environ;

namespace strata {
namespace {

namespace fs = std::filesystem;

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// One etcd member on 127.0.0.1, killed at the end.
class EtcdProcess {
 public:
  static std::unique_ptr<EtcdProcess> Start(const std::string& name) {
    auto e = std::unique_ptr<EtcdProcess>(new EtcdProcess());
    e->dir_ = (fs::path(::testing::TempDir()) /
               absl::StrCat("etcd_", name, "_", getpid()))
                  .string();
    fs::remove_all(e->dir_);
    fs::create_directories(e->dir_);
    const int client_port = FreePort();
    const int peer_port = FreePort();
    e->endpoint_ = absl::StrCat("127.0.0.1:", client_port);
    const std::string client_url = "http://" + e->endpoint_;
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port);
    std::vector<std::string> args = {
        "/usr/bin/etcd",
        "--name=test",
        "--data-dir=" + e->dir_ + "/data",
        "--listen-client-urls=" + client_url,
        "--advertise-client-urls=" + client_url,
        "--listen-peer-urls=" + peer_url,
        "--initial-advertise-peer-urls=" + peer_url,
        "--initial-cluster=test=" + peer_url};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = e->dir_ + "/etcd.log";
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawn(&e->pid_, argv[0], &actions, nullptr,
                               argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return nullptr;
    // Up once it answers (bounded).
    auto client = EtcdClient::Connect(e->endpoint_, absl::Seconds(1));
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      if (client->Get("/ping").ok()) return e;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return nullptr;
  }
  ~EtcdProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  EtcdProcess() = default;
  pid_t pid_ = -1;
  std::string dir_;
  std::string endpoint_;
};

class CoordinatorHaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(access("/usr/bin/etcd", X_OK), 0)
        << "etcd is missing: `make deps` installs Debian's etcd-server";
    etcd_ = EtcdProcess::Start("ha").release();
    ASSERT_NE(etcd_, nullptr) << "etcd did not start";
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(etcd_, nullptr);
    client_ = EtcdClient::Connect(etcd_->endpoint());
    // Each test its own keys.
    prefix_ = absl::StrCat(
        "/test/", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  LeaderElectionOptions Options(const std::string& candidate) {
    LeaderElectionOptions o;
    o.key = prefix_ + "/leader";
    o.candidate = candidate;
    o.ttl = absl::Seconds(2);
    o.poll = absl::Milliseconds(50);
    return o;
  }

  static EtcdProcess* etcd_;
  std::unique_ptr<EtcdClient> client_;
  std::string prefix_;
  std::ostringstream log_;
  Logger logger_{"coordinator:test", &log_};
};

EtcdProcess* CoordinatorHaTest::etcd_ = nullptr;

TEST_F(CoordinatorHaTest, ClientReadsWritesAndTransactsOnARealEtcd) {
  auto missing = client_->Get(prefix_ + "/k");
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_FALSE(missing->has_value());
  auto rev = client_->Put(prefix_ + "/k", "v1");
  ASSERT_TRUE(rev.ok()) << rev.status();
  auto got = client_->Get(prefix_ + "/k");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->value, "v1");
  EXPECT_EQ((*got)->create_revision, *rev);
  // A transaction guarded by the create revision.
  etcdserverpb::TxnRequest txn;
  *txn.add_compare() = CreateRevisionIs(prefix_ + "/k", *rev + 1000);
  *txn.add_success() = PutOp(prefix_ + "/k", "never");
  auto refused = client_->Txn(txn);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE(refused->succeeded());
  EXPECT_EQ((*client_->Get(prefix_ + "/k"))->value, "v1");
  // A lease: its key goes with it.
  auto lease = client_->GrantLease(absl::Seconds(5));
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_GE(lease->ttl_seconds, 5);
  ASSERT_TRUE(client_->Put(prefix_ + "/leased", "x", lease->id).ok());
  auto ttl = client_->KeepAliveOnce(lease->id);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_GT(*ttl, 0);
  ASSERT_TRUE(client_->RevokeLease(lease->id).ok());
  EXPECT_FALSE(client_->Get(prefix_ + "/leased")->has_value());
  auto expired = client_->KeepAliveOnce(lease->id);
  ASSERT_TRUE(expired.ok()) << expired.status();
  EXPECT_EQ(*expired, 0);
  EXPECT_EQ(*client_->Delete(prefix_ + "/k"), 1);
}

TEST_F(CoordinatorHaTest, UnreachableEtcdIsUnavailableNamingTheEndpoints) {
  auto dead = EtcdClient::Connect(absl::StrCat("127.0.0.1:", FreePort()),
                                  absl::Milliseconds(300));
  auto got = dead->Get("/x");
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().code() == absl::StatusCode::kUnavailable ||
              got.status().code() == absl::StatusCode::kDeadlineExceeded)
      << got.status();
  EXPECT_NE(got.status().message().find("etcd Range (127.0.0.1:"),
            std::string::npos)
      << got.status();
}

TEST_F(CoordinatorHaTest, OneLeadsTheOtherWaitsAndTakesOverWhenItResigns) {
  LeaderElection a(client_.get(), Options("a:1"), &logger_);
  LeaderElection b(client_.get(), Options("b:2"), &logger_);
  absl::Notification stop_a;
  auto epoch_a = a.Campaign(&stop_a);
  ASSERT_TRUE(epoch_a.ok()) << epoch_a.status();
  a.KeepLeading({});
  EXPECT_TRUE(a.Leading());
  absl::Notification stop_b;
  auto b_won = std::async(std::launch::async, [&] { return b.Campaign(&stop_b); });
  // b keeps waiting while a renews: still a's key after more than a TTL.
  EXPECT_EQ(b_won.wait_for(std::chrono::seconds(3)),
            std::future_status::timeout);
  auto leader = a.CurrentLeader();
  ASSERT_TRUE(leader.ok());
  EXPECT_EQ(leader->first, "a:1");
  EXPECT_EQ(leader->second, *epoch_a);
  EXPECT_FALSE(b.Leading());
  a.Resign();
  EXPECT_FALSE(a.Leading());
  ASSERT_EQ(b_won.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto epoch_b = b_won.get();
  ASSERT_TRUE(epoch_b.ok()) << epoch_b.status();
  EXPECT_GT(*epoch_b, *epoch_a);
  EXPECT_TRUE(b.Leading());
  EXPECT_EQ(b.CurrentLeader()->first, "b:2");
}

TEST_F(CoordinatorHaTest, CampaignStopsWhenAsked) {
  LeaderElection a(client_.get(), Options("a:1"), &logger_);
  absl::Notification stop_a;
  ASSERT_TRUE(a.Campaign(&stop_a).ok());
  a.KeepLeading({});
  LeaderElection b(client_.get(), Options("b:2"), &logger_);
  absl::Notification stop_b;
  auto b_won = std::async(std::launch::async, [&] { return b.Campaign(&stop_b); });
  stop_b.Notify();
  ASSERT_EQ(b_won.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(b_won.get().status().code(), absl::StatusCode::kCancelled);
}

TEST_F(CoordinatorHaTest, ALeaderThatCannotRenewStopsLeadingByItsOwnClock) {
  // The clock of the local lease check is injected: a leader paused past
  // its TTL (SIGSTOP) knows it no longer leads before it asks etcd.
  std::atomic<int64_t> now_ms{absl::ToUnixMillis(absl::Now())};
  LeaderElectionOptions options = Options("a:1");
  options.now = [&now_ms] { return absl::FromUnixMillis(now_ms.load()); };
  LeaderElection a(client_.get(), options, &logger_);
  absl::Notification stop;
  ASSERT_TRUE(a.Campaign(&stop).ok());
  EXPECT_TRUE(a.Leading());
  now_ms += 1900;
  EXPECT_TRUE(a.Leading());
  now_ms += 200;  // past the 2 s lease granted at the start
  EXPECT_FALSE(a.Leading());
}

TEST_F(CoordinatorHaTest, AnExpiredLeaderIsReplacedAndItsStateWritesAreFenced) {
  // a wins and then stops renewing (as if paused): its lease expires in
  // etcd, b takes over, and a's state writes are refused by etcd itself.
  LeaderElection a(client_.get(), Options("a:1"), &logger_);
  absl::Notification stop_a;
  auto epoch_a = a.Campaign(&stop_a);
  ASSERT_TRUE(epoch_a.ok());
  std::atomic<int> fenced_calls{0};
  std::string fenced_reason;
  EtcdStateFileSystem fs_a(client_.get(), prefix_, prefix_ + "/leader",
                           *epoch_a, [&](const std::string& why) {
                             fenced_reason = why;
                             ++fenced_calls;
                           });
  ASSERT_TRUE(fs_a.WriteFileAtomically("/state/state.json", "from a").ok());
  EXPECT_EQ(*fs_a.ReadFile("/state/state.json"), "from a");
  EXPECT_TRUE(fs_a.FileExists("/state/state.json"));
  EXPECT_EQ(fs_a.ReadFile("/state/other").status().code(),
            absl::StatusCode::kNotFound);

  LeaderElection b(client_.get(), Options("b:2"), &logger_);
  absl::Notification stop_b;
  const absl::Time start = absl::Now();
  auto b_won = std::async(std::launch::async, [&] { return b.Campaign(&stop_b); });
  ASSERT_EQ(b_won.wait_for(std::chrono::seconds(15)), std::future_status::ready);
  auto epoch_b = b_won.get();
  ASSERT_TRUE(epoch_b.ok()) << epoch_b.status();
  const absl::Duration takeover = absl::Now() - start;
  RecordProperty("takeover_ms", static_cast<int>(absl::ToInt64Milliseconds(takeover)));
  EXPECT_GT(*epoch_b, *epoch_a);
  EXPECT_FALSE(a.Leading());

  // b reads what a wrote, and writes.
  EtcdStateFileSystem fs_b(client_.get(), prefix_, prefix_ + "/leader",
                           *epoch_b);
  EXPECT_EQ(*fs_b.ReadFile("/state/state.json"), "from a");
  ASSERT_TRUE(fs_b.WriteFileAtomically("/state/state.json", "from b").ok());
  // a's write is refused, naming both epochs; the stored state is b's.
  absl::Status refused = fs_a.WriteFileAtomically("/state/state.json", "stale");
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find(absl::StrCat("fenced: coordinator epoch ",
                                                *epoch_a, " no longer leads")),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find(absl::StrCat("as epoch ", *epoch_b)),
            std::string::npos)
      << refused;
  EXPECT_EQ(fenced_calls.load(), 1);
  EXPECT_EQ(fenced_reason, std::string(refused.message()));
  EXPECT_EQ(*fs_b.ReadFile("/state/state.json"), "from b");
}

TEST_F(CoordinatorHaTest, KeepLeadingReportsTheLossOnce) {
  LeaderElection a(client_.get(), Options("a:1"), &logger_);
  absl::Notification stop;
  ASSERT_TRUE(a.Campaign(&stop).ok());
  absl::Notification lost;
  std::string reason;
  a.KeepLeading([&](const std::string& why) {
    reason = why;
    lost.Notify();
  });
  // Someone deletes the key (an operator, or etcd's lease expiry).
  ASSERT_TRUE(client_->Delete(prefix_ + "/leader").ok());
  ASSERT_TRUE(lost.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_NE(reason.find("leader key is gone"), std::string::npos) << reason;
  EXPECT_FALSE(a.Leading());
}

// The PS tasks keep the highest coordinator epoch their Save, Restore and
// DeleteCheckpoints calls carried, and refuse lower ones.
TEST(CoordinatorFencingTest, PsRefusesADeposedCoordinatorsCheckpointCalls) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  PsServerOptions options;
  options.checkpoint_dir =
      (fs::path(::testing::TempDir()) / absl::StrCat("fence_ps_", getpid()))
          .string();
  fs::remove_all(options.checkpoint_dir);
  auto server = PsServer::Start(options, &logger);
  ASSERT_TRUE(server.ok()) << server.status();
  PsClientOptions copts;
  copts.max_attempts = 1;
  auto client = PsClient::Connect((*server)->address(), copts);
  ASSERT_TRUE(client->Save("ckpt-1", 7).ok());
  ASSERT_TRUE(client->Save("ckpt-2", 9).ok());
  auto stale = client->Save("ckpt-3", 7);
  ASSERT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition)
      << stale.status();
  EXPECT_NE(stale.status().message().find(
                "Save refused: it comes from coordinator epoch 7, and the "
                "coordinator of epoch 9 has led since"),
            std::string::npos)
      << stale.status();
  EXPECT_FALSE(fs::exists(fs::path(options.checkpoint_dir) / "ckpt-3"));
  EXPECT_EQ(client->Restore("ckpt-1", 8).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client->DeleteCheckpoints({"ckpt-1"}, 3).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(fs::path(options.checkpoint_dir) / "ckpt-1"));
  // The current epoch, a newer one, and callers that are not elected
  // coordinators (epoch 0) go through.
  EXPECT_TRUE(client->Restore("ckpt-1", 9).ok());
  EXPECT_TRUE(client->Save("ckpt-4", 0).ok());
  auto deleted = client->DeleteCheckpoints({"ckpt-1"}, 10);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 1);
  EXPECT_EQ(client->Save("ckpt-5", 9).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(log.str().find("coordinator_fenced"), std::string::npos);
}

// Two in-process coordinators that both believe they lead, with epochs 5
// and 7: the client follows whichever answers, and once it has seen epoch 7
// it discards epoch 5's answers.
TEST(CoordinatorClientHaTest, FollowsTheLeaderAndDiscardsADeposedOnesAnswers) {
  std::ostringstream log;
  Logger logger("coordinator:test", &log);
  std::atomic<bool> new_leads{false};
  auto start = [&](int64_t epoch, std::function<bool()> leading) {
    CoordinatorServerOptions options;
    options.service.leader_epoch = epoch;
    options.service.leading = std::move(leading);
    auto s = CoordinatorServer::Start(options, &logger);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  };
  auto old_leader = start(5, [] { return true; });
  auto new_leader = start(7, [&] { return new_leads.load(); });
  ASSERT_NE(old_leader, nullptr);
  ASSERT_NE(new_leader, nullptr);
  const std::string dead = absl::StrCat("127.0.0.1:", FreePort());
  auto client = CoordinatorClient::Connect(
      absl::StrCat(dead, ",", new_leader->address(), ",",
                   old_leader->address()),
      absl::Seconds(2), {}, absl::Seconds(1));
  // The dead one fails; epoch 7, not leading yet, refuses but sends its
  // epoch; so epoch 5's answer is discarded: nobody answers.
  auto first = client->GetJob();
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client->epoch(), 7);
  // Epoch 7 leads: the client reaches it.
  new_leads = true;
  auto second = client->GetJob();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(client->epoch(), 7);
  // A deposed answer is named as such.
  auto only_old = CoordinatorClient::Connect(
      absl::StrCat(new_leader->address(), ",", old_leader->address()),
      absl::Milliseconds(200), {}, absl::Seconds(1));
  ASSERT_TRUE(only_old->GetJob().ok());  // epoch 7
  new_leads = false;
  auto discarded = only_old->GetJob();
  ASSERT_FALSE(discarded.ok());
  EXPECT_NE(discarded.status().message().find("answered as epoch 5, deposed "
                                              "by epoch 7"),
            std::string::npos)
      << discarded.status();
  // A fresh client that only knows the old leader takes its answers until
  // it learns better.
  auto naive = CoordinatorClient::Connect(old_leader->address(),
                                          absl::Seconds(1));
  EXPECT_TRUE(naive->GetJob().ok());
  EXPECT_EQ(naive->epoch(), 5);
}

}  // namespace
}  // namespace strata

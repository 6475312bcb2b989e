// Lanes (PsClient::Exchange over the Lane stream): a step's push and pull
// in one frame; exactly-once when the connection drops mid-frame (a TCP
// proxy that cuts it), reconnection, the fallback to PushVariables and
// PullVariables against a server without lanes, and bad frames answered
// with the unary calls' statuses.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/ps_client.h"
#include "client/ps_client_streams.h"
#include "client/ps_cluster.h"
#include "common/gradient_encoding.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/chunk_codec.h"
#include "rpc/grpc_status.h"
#include "server/ps_server.h"
#include "tests/test_util.h"

namespace strata {
namespace {

// A TCP proxy on 127.0.0.1 in front of `upstream_port`. Armed with a byte
// count, it resets every connection once that many bytes went through in
// the chosen direction (once; later connections pass untouched).
class FaultProxy {
 public:
  explicit FaultProxy(int upstream_port) : upstream_port_(upstream_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    const int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) ==
            0 &&
        listen(listen_fd_, 16) == 0 &&
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) ==
            0) {
      port_ = ntohs(addr.sin_port);
    }
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~FaultProxy() {
    stop_.store(true);
    accept_thread_.join();
    std::vector<std::thread> pumps;
    {
      absl::MutexLock lock(&mu_);
      pumps.swap(pumps_);
    }
    for (auto& t : pumps) t.join();
    close(listen_fd_);
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  // Resets the connections after `bytes` more client-to-server bytes
  // (upstream) or server-to-client bytes (downstream).
  void CutAfter(bool upstream, int64_t bytes) {
    absl::MutexLock lock(&mu_);
    cut_upstream_ = upstream;
    cut_at_ = (upstream ? up_ : down_) + bytes;
    armed_ = true;
  }
  int cuts() const { return cuts_.load(); }
  int connections() const { return connections_.load(); }

 private:
  void AcceptLoop() {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) continue;
      const int server = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(upstream_port_));
      if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
          0) {
        close(client);
        close(server);
        continue;
      }
      const int one = 1;
      setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      connections_.fetch_add(1);
      absl::MutexLock lock(&mu_);
      pumps_.emplace_back([this, client, server] { Pump(client, server); });
    }
  }

  // Both directions of one connection, until either side closes, the cut,
  // or the proxy stops.
  void Pump(int client, int server) {
    std::vector<char> buf(64 << 10);
    bool cut = false;
    while (!stop_.load() && !cut) {
      pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (poll(p, 2, 50) <= 0) continue;
      bool closed = false;
      for (int side = 0; side < 2 && !closed && !cut; ++side) {
        if ((p[side].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const bool upstream = side == 0;
        const int from = upstream ? client : server;
        const int to = upstream ? server : client;
        size_t want = buf.size();
        {
          absl::MutexLock lock(&mu_);
          if (armed_ && cut_upstream_ == upstream) {
            const int64_t done = upstream ? up_ : down_;
            want = static_cast<size_t>(
                std::max<int64_t>(0, std::min<int64_t>(want, cut_at_ - done)));
            if (want == 0) {
              armed_ = false;
              cut = true;
              break;
            }
          }
        }
        const ssize_t n = read(from, buf.data(), want);
        if (n <= 0) {
          closed = true;
          break;
        }
        for (ssize_t off = 0; off < n;) {
          const ssize_t w = write(to, buf.data() + off, n - off);
          if (w <= 0) {
            closed = true;
            break;
          }
          off += w;
        }
        absl::MutexLock lock(&mu_);
        (upstream ? up_ : down_) += n;
      }
      if (closed) break;
    }
    if (cut) {
      // A reset, as a dropped connection looks.
      linger hard{1, 0};
      setsockopt(client, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
      setsockopt(server, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
      cuts_.fetch_add(1);
    }
    close(client);
    close(server);
  }

  const int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> cuts_{0};
  std::atomic<int> connections_{0};
  std::thread accept_thread_;
  absl::Mutex mu_;
  std::vector<std::thread> pumps_ ABSL_GUARDED_BY(mu_);
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  bool cut_upstream_ ABSL_GUARDED_BY(mu_) = true;
  int64_t cut_at_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t up_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t down_ ABSL_GUARDED_BY(mu_) = 0;
};

v1::VariableSpec SgdSpec(const std::string& name, int64_t n) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(n);
  spec.mutable_initializer()->set_type("ones");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(1.0);
  return spec;
}

PsClientOptions FastRetries(bool lanes) {
  PsClientOptions options;
  options.lanes = lanes;
  options.shared_memory = false;
  options.initial_backoff = absl::Milliseconds(1);
  options.max_backoff = absl::Milliseconds(5);
  options.deadline = absl::Seconds(20);
  return options;
}

double Frames(PsServer* server, const std::string& method,
              const std::string& code) {
  return server->metrics()
      ->GetCounter("strata_ps_rpcs_total", "RPCs handled",
                   {{"method", method}, {"code", code}})
      ->value();
}

class LaneTest : public ::testing::Test {
 protected:
  void Start(bool serve_lanes = true) {
    PsServerOptions options;
    options.service.serve_lanes = serve_lanes;
    auto s = PsServer::Start(options, &logger_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }

  std::ostringstream log_;
  Logger logger_{"ps:test", &log_};
  std::unique_ptr<PsServer> server_;
};

TEST_F(LaneTest, PushAndPullInOneFrameOnOneStream) {
  Start();
  auto client = PsClient::Connect(server_->address(), FastRetries(true));
  STRATA_ASSERT_OK(client->CreateVariable(SgdSpec("a", 3)));
  STRATA_ASSERT_OK(client->CreateVariable(SgdSpec("b", 2)));
  std::vector<float> ga = {0.5f, 1.0f, 1.5f}, gb = {2.0f, -1.0f};
  std::vector<float> a(3), b(2);
  for (int step = 0; step < 3; ++step) {
    auto versions = client->Exchange(
        0, {"a", "b"}, {{3}, {2}}, {ga.data(), gb.data()},
        PushTag{"job", 0, step}, {"a", "b"}, {a.data(), b.data()},
        {sizeof(float) * 3, sizeof(float) * 2});
    ASSERT_TRUE(versions.ok()) << versions.status();
    EXPECT_EQ(versions->pulled, (std::vector<int64_t>{step + 1, step + 1}));
    ASSERT_EQ(versions->pushed.size(), 2u);
    EXPECT_TRUE(versions->pushed[1].applied);
    EXPECT_EQ(versions->pushed[1].version, step + 1);
  }
  EXPECT_EQ(a, (std::vector<float>{-0.5f, -2.0f, -3.5f}));
  EXPECT_EQ(b, (std::vector<float>{-5.0f, 4.0f}));
  // A pull alone, and a push alone.
  auto pulled = client->Exchange(0, {}, {}, {}, {}, {"b"}, {b.data()},
                                 {sizeof(float) * 2});
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->pulled, (std::vector<int64_t>{3}));
  EXPECT_TRUE(pulled->pushed.empty());
  STRATA_ASSERT_OK(client->Exchange(0, {"b"}, {{2}}, {gb.data()},
                                    PushTag{"job", 0, 9}, {}, {}, {}));
  EXPECT_TRUE(client->UsesLanes());
  EXPECT_EQ(Frames(server_.get(), "Lane", "OK"), 5);
  EXPECT_EQ(Frames(server_.get(), "PushVariables", "OK"), 0);
  EXPECT_EQ(Frames(server_.get(), "PullVariables", "OK"), 0);
  // Two lanes are two streams, used at once from two threads.
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(2);
  for (int lane = 0; lane < 2; ++lane) {
    threads.emplace_back([&, lane] {
      std::vector<float> g = {0.0f, 0.0f}, v(2);
      for (int i = 0; i < 20 && results[lane].ok(); ++i) {
        results[lane] = client
                            ->Exchange(lane, {"b"}, {{2}}, {g.data()},
                                       PushTag{"job", lane + 1, i}, {"b"},
                                       {v.data()}, {sizeof(float) * 2})
                            .status();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) STRATA_ASSERT_OK(r);
  EXPECT_EQ(Frames(server_.get(), "LaneStream", "OK"), 0);  // still open
}

// The connection drops while the push's chunks are on their way: nothing
// was applied, the retry on a new stream applies it once.
TEST_F(LaneTest, DropMidPushReconnectsAndAppliesOnce) {
  Start();
  FaultProxy proxy(server_->port());
  PsClientOptions options = FastRetries(true);
  options.chunk_bytes = 256 << 10;
  auto client = PsClient::Connect(proxy.address(), options);
  const int64_t n = 1 << 20;  // 4 MB
  STRATA_ASSERT_OK(client->CreateVariable(SgdSpec("big", n)));
  std::vector<float> grad(n, 0.25f), value(n);
  // A first frame opens the stream; then cut 1 MB into the next push.
  STRATA_ASSERT_OK(client->Exchange(0, {}, {}, {}, {}, {"big"}, {value.data()},
                                    {n * sizeof(float)}));
  proxy.CutAfter(/*upstream=*/true, 1 << 20);
  auto versions = client->Exchange(0, {"big"}, {{n}}, {grad.data()},
                                   PushTag{"job", 0, 1}, {"big"},
                                   {value.data()}, {n * sizeof(float)});
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_EQ(proxy.cuts(), 1);
  EXPECT_GE(proxy.connections(), 2);
  EXPECT_EQ(versions->pulled, (std::vector<int64_t>{1}));
  ASSERT_EQ(versions->pushed.size(), 1u);
  EXPECT_TRUE(versions->pushed[0].applied);
  EXPECT_GE(versions->pushed[0].attempts, 2);
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(value[i], 0.75f) << i;
  EXPECT_EQ(Frames(server_.get(), "Lane", "OK"), 2);
  // The cut attempt's staged step was dropped with its frame; the retry's
  // was published unless it came before the server ended the cut stream
  // (then that frame was still in progress): applied once either way.
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_LE(stats->pushes_staged(), 1);
  EXPECT_EQ(stats->staged_discarded(), 0);
  EXPECT_EQ(stats->pushes_applied(), 1);
}

// A push that arrives in several chunks is stepped chunk by chunk on a
// staged copy (--chunked_apply, on by default) and ends exactly where the
// step on the whole push ends; a push of one chunk, or a server with it
// off, steps once the push is whole. Pulls in between see whole steps.
TEST_F(LaneTest, MultiChunkPushesAreSteppedAsTheyArrive) {
  const int64_t n = (1 << 18) + 3;  // 1 MB and a ragged tail
  std::vector<std::vector<float>> ends;
  for (bool chunked : {true, false}) {
    SCOPED_TRACE(chunked);
    PsServerOptions server_options;
    server_options.service.chunked_apply = chunked;
    auto server = PsServer::Start(server_options, &logger_);
    ASSERT_TRUE(server.ok()) << server.status();
    PsClientOptions options = FastRetries(true);
    options.chunk_bytes = 100000;
    auto client = PsClient::Connect((*server)->address(), options);
    v1::VariableSpec spec = SgdSpec("w", n);
    spec.mutable_optimizer()->set_type("adam");
    STRATA_ASSERT_OK(client->CreateVariable(spec));
    STRATA_ASSERT_OK(client->CreateVariable(SgdSpec("small", 4)));
    std::vector<float> grad(n), value(n), small(4, 1.0f), small_value(4);
    for (int step = 0; step < 3; ++step) {
      for (int64_t i = 0; i < n; ++i) grad[i] = ((i * 7 + step) % 13) - 6.0f;
      auto versions = client->Exchange(
          0, {"w", "small"}, {{n}, {4}}, {grad.data(), small.data()},
          PushTag{"job", 0, step}, {"w"}, {value.data()},
          {n * sizeof(float)});
      ASSERT_TRUE(versions.ok()) << versions.status();
      EXPECT_EQ(versions->pulled, (std::vector<int64_t>{step + 1}));
    }
    // A push of one chunk.
    STRATA_ASSERT_OK(client->Exchange(0, {"small"}, {{4}}, {small.data()},
                                      PushTag{"job", 0, 3}, {"small"},
                                      {small_value.data()},
                                      {4 * sizeof(float)}));
    EXPECT_EQ(small_value, std::vector<float>(4, -3.0f));
    auto stats = client->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    // Each two-variable frame: both variables staged ("small" rides in
    // the frame's last chunk, after w's first).
    EXPECT_EQ(stats->pushes_staged(), chunked ? 6 : 0);
    EXPECT_EQ(stats->staged_discarded(), 0);
    EXPECT_EQ(stats->pushes_applied(), 7);
    ends.push_back(value);
  }
  EXPECT_EQ(ends[0], ends[1]);
}

// While another Lane frame is in progress on the server (here one whose
// pull waits for a version), a multi-chunk push is stepped once whole, not
// staged: the cores have the other frame's work.
TEST_F(LaneTest, APushIsNotStagedWhileAnotherFrameIsInProgress) {
  Start();
  PsClientOptions options = FastRetries(true);
  options.chunk_bytes = 100000;
  auto a = PsClient::Connect(server_->address(), options);
  auto b = PsClient::Connect(server_->address(), options);
  const int64_t n = 1 << 18;
  STRATA_ASSERT_OK(a->CreateVariable(SgdSpec("w", n)));
  STRATA_ASSERT_OK(a->CreateVariable(SgdSpec("gate", 1)));
  std::vector<float> grad(n, 0.25f), zeros(n, 0.0f);
  float gate = 0;
  PullOptions wait;
  wait.min_version = 1;
  absl::StatusOr<ExchangeResult> waited;
  std::thread waiter([&] {
    waited = a->Exchange(0, {"w"}, {{n}}, {grad.data()}, PushTag{"job", 0, 0},
                         {"gate"}, {&gate}, {sizeof(float)}, wait);
  });
  // A's push is in (staged: the only frame), its pull waits.
  absl::StatusOr<v1::StatsResponse> stats;
  for (int i = 0; i < 20000; ++i) {
    stats = b->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    if (stats->pushes_applied() == 1) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(stats->pushes_applied(), 1);
  EXPECT_EQ(stats->pushes_staged(), 1);
  STRATA_ASSERT_OK(b->Exchange(0, {"w"}, {{n}}, {grad.data()},
                               PushTag{"job", 1, 0}, {}, {}, {}));
  stats = b->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pushes_applied(), 2);
  EXPECT_EQ(stats->pushes_staged(), 1);
  // Release A's pull; then B's next push is the only frame again.
  const float one = -1.0f;
  STRATA_ASSERT_OK(b->Exchange(0, {"gate"}, {{1}}, {&one},
                               PushTag{"job", 1, 1}, {}, {}, {}));
  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(gate, 2.0f);
  // A's frame ends on the server after its reply went out: B's pushes are
  // staged again from then on (a bounded number of tries).
  int64_t step = 2;
  for (; step < 1000; ++step) {
    STRATA_ASSERT_OK(b->Exchange(0, {"w"}, {{n}}, {zeros.data()},
                                 PushTag{"job", 1, step}, {}, {}, {}));
    stats = b->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    if (stats->pushes_staged() == 2) break;
  }
  EXPECT_EQ(stats->pushes_staged(), 2);
  EXPECT_EQ(stats->pushes_applied(), step + 2);
  std::vector<float> w(n);
  STRATA_ASSERT_OK(b->Exchange(0, {}, {}, {}, {}, {"w"}, {w.data()},
                               {n * sizeof(float)}));
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(w[i], 0.5f) << i;
}

// The connection drops after the server applied the push, while its reply
// (the pulled values) is on its way back: the retry is a duplicate and
// changes nothing.
TEST_F(LaneTest, DropMidReplyRetriesAsADuplicate) {
  Start();
  FaultProxy proxy(server_->port());
  PsClientOptions options = FastRetries(true);
  auto client = PsClient::Connect(proxy.address(), options);
  const int64_t n = 1 << 20;
  STRATA_ASSERT_OK(client->CreateVariable(SgdSpec("big", n)));
  std::vector<float> grad(n, 0.25f), value(n);
  STRATA_ASSERT_OK(client->Exchange(0, {}, {}, {}, {}, {"big"}, {value.data()},
                                    {n * sizeof(float)}));
  proxy.CutAfter(/*upstream=*/false, 2 << 20);
  auto versions = client->Exchange(0, {"big"}, {{n}}, {grad.data()},
                                   PushTag{"job", 0, 1}, {"big"},
                                   {value.data()}, {n * sizeof(float)});
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_EQ(proxy.cuts(), 1);
  EXPECT_EQ(versions->pulled, (std::vector<int64_t>{1}));
  ASSERT_EQ(versions->pushed.size(), 1u);
  EXPECT_TRUE(versions->pushed[0].duplicate);
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(value[i], 0.75f) << i;
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pushes_duplicate(), 1);
}

TEST_F(LaneTest, FallsBackToUnaryCallsAgainstAServerWithoutLanes) {
  Start(/*serve_lanes=*/false);
  auto client = PsClient::Connect(server_->address(), FastRetries(true));
  STRATA_ASSERT_OK(client->CreateVariable(SgdSpec("a", 2)));
  std::vector<float> g = {1.0f, 2.0f}, v(2);
  for (int step = 0; step < 2; ++step) {
    auto versions =
        client->Exchange(0, {"a"}, {{2}}, {g.data()}, PushTag{"job", 0, step},
                         {"a"}, {v.data()}, {sizeof(float) * 2});
    ASSERT_TRUE(versions.ok()) << versions.status();
    EXPECT_EQ(versions->pulled, (std::vector<int64_t>{step + 1}));
  }
  EXPECT_EQ(v, (std::vector<float>{-1.0f, -3.0f}));
  EXPECT_FALSE(client->UsesLanes());
  EXPECT_EQ(Frames(server_.get(), "LaneStream", "UNIMPLEMENTED"), 1);
  EXPECT_EQ(Frames(server_.get(), "PushVariables", "OK"), 2);
  EXPECT_EQ(Frames(server_.get(), "PullVariables", "OK"), 2);

  // PsCluster over such a server (no shared memory) trains the same way.
  PsClientOptions cluster_options = FastRetries(true);
  auto cluster = PsCluster::Connect({server_->address()}, cluster_options);
  STRATA_ASSERT_OK(cluster->CreateVariable(SgdSpec("c", 2), {ShardSlice{0, 2}}));
  std::vector<float> got(2);
  STRATA_ASSERT_OK(cluster->PushPullMany(0, {"c"}, {g.data()},
                                         PushTag{"job", 0, 5}, {got.data()}));
  EXPECT_EQ(got, (std::vector<float>{0.0f, -1.0f}));
  STRATA_ASSERT_OK(cluster->PushMany({"c"}, {g.data()}, PushTag{"job", 0, 6}));
  STRATA_ASSERT_OK(cluster->PullMany({"c"}, {got.data()}));
  EXPECT_EQ(got, (std::vector<float>{-1.0f, -3.0f}));
}

// Each bad frame gets the status the unary calls give, changes nothing,
// and the lane goes on.
TEST_F(LaneTest, BadFramesGetTheStatusesOfTheUnaryCalls) {
  Start();
  auto lanes = PsClient::Connect(server_->address(), FastRetries(true));
  auto unary = PsClient::Connect(server_->address(), FastRetries(false));
  STRATA_ASSERT_OK(lanes->CreateVariable(SgdSpec("a", 2)));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> good = {1.0f, 1.0f}, bad = {nan, 1.0f}, v(2), v3(3);
  struct Case {
    const char* what;
    std::vector<std::string> push;
    std::vector<Shape> shapes;
    std::vector<const void*> grads;
    std::vector<std::string> pull;
    std::vector<void*> dsts;
    std::vector<size_t> sizes;
  };
  const std::vector<Case> cases = {
      {"unknown pushed variable", {"nope"}, {{2}}, {good.data()}, {}, {}, {}},
      {"wrong shape", {"a"}, {{3}}, {v3.data()}, {}, {}, {}},
      {"NaN gradient", {"a"}, {{2}}, {bad.data()}, {}, {}, {}},
      {"unknown pulled variable", {}, {}, {}, {"nope"}, {v.data()}, {8}},
      {"pull into the wrong size", {}, {}, {}, {"a"}, {v3.data()}, {12}},
  };
  int step = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    absl::Status via_lane =
        lanes
            ->Exchange(0, c.push, c.shapes, c.grads, PushTag{"job", 0, step++},
                       c.pull, c.dsts, c.sizes)
            .status();
    absl::Status via_unary =
        unary
            ->Exchange(0, c.push, c.shapes, c.grads, PushTag{"job", 0, step++},
                       c.pull, c.dsts, c.sizes)
            .status();
    EXPECT_FALSE(via_lane.ok());
    EXPECT_EQ(via_lane.code(), via_unary.code()) << via_lane << " / "
                                                 << via_unary;
    EXPECT_EQ(via_lane.message(), via_unary.message());
  }
  // Nothing was applied; the lane still serves.
  auto versions =
      lanes->Exchange(0, {"a"}, {{2}}, {good.data()}, PushTag{"job", 0, 99},
                      {"a"}, {v.data()}, {8});
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_EQ(versions->pulled, (std::vector<int64_t>{1}));
  EXPECT_EQ(v, (std::vector<float>{0.0f, 0.0f}));
}

// The server checks each chunk of a frame as it arrives: a non-finite
// value in any chunk (the first, one in the middle, the last element; a
// 16-bit encoding whose elements straddle chunks) fails the frame with the
// unary call's status, element named, nothing applied; the lane goes on.
TEST_F(LaneTest, NonFiniteValueInAnyChunkFailsTheFrameAsTheUnaryCall) {
  Start();
  for (bool compressed : {false, true}) {
    SCOPED_TRACE(compressed ? "bf16" : "float32");
    PsClientOptions lane_options = FastRetries(true);
    PsClientOptions unary_options = FastRetries(false);
    // Odd-sized chunks: 2-byte elements straddle them.
    lane_options.chunk_bytes = 1001;
    if (compressed) {
      lane_options.gradient_encoding = GradientEncoding::kBfloat16;
      unary_options.gradient_encoding = GradientEncoding::kBfloat16;
    }
    auto lanes = PsClient::Connect(server_->address(), lane_options);
    auto unary = PsClient::Connect(server_->address(), unary_options);
    const std::string big = compressed ? "big16" : "big32";
    const std::string small = compressed ? "small16" : "small32";
    const int64_t n = 5000;
    STRATA_ASSERT_OK(lanes->CreateVariable(SgdSpec(big, n)));
    STRATA_ASSERT_OK(lanes->CreateVariable(SgdSpec(small, 3)));
    std::vector<float> g(n, 0.5f), gs = {0.5f, 0.5f, 0.5f};
    int step = 0;
    for (int64_t bad : {int64_t{0}, int64_t{1777}, n - 1, n + 2}) {
      SCOPED_TRACE(bad);
      std::vector<float> gb = g, gsb = gs;
      const float inf = std::numeric_limits<float>::infinity();
      if (bad < n) {
        gb[bad] = inf;
      } else {
        gsb[bad - n] = -inf;
      }
      absl::Status via_lane =
          lanes
              ->Exchange(0, {big, small}, {{n}, {3}}, {gb.data(), gsb.data()},
                         PushTag{"job", 0, step++}, {}, {}, {})
              .status();
      absl::Status via_unary =
          unary
              ->Exchange(0, {big, small}, {{n}, {3}}, {gb.data(), gsb.data()},
                         PushTag{"job", 0, step++}, {}, {}, {})
              .status();
      EXPECT_EQ(via_lane.code(), absl::StatusCode::kInvalidArgument)
          << via_lane;
      EXPECT_EQ(via_lane.message(), via_unary.message());
      const std::string element =
          absl::StrCat("at element ", bad < n ? bad : bad - n);
      EXPECT_NE(via_lane.message().find(element), std::string::npos)
          << via_lane;
    }
    // Nothing was applied; the lane still serves, over many chunks.
    std::vector<float> value(n), small_value(3);
    auto versions = lanes->Exchange(
        0, {big, small}, {{n}, {3}}, {g.data(), gs.data()},
        PushTag{"job", 0, step++}, {big, small},
        {value.data(), small_value.data()}, {n * sizeof(float), 12});
    ASSERT_TRUE(versions.ok()) << versions.status();
    EXPECT_EQ(versions->pulled, (std::vector<int64_t>{1, 1}));
    EXPECT_EQ(value, std::vector<float>(n, 0.5f));
    EXPECT_EQ(small_value, std::vector<float>(3, 0.5f));
  }
  EXPECT_GE(Frames(server_.get(), "Lane", "INVALID_ARGUMENT"), 8);
}

// A lane waiting for its next frame does not hold the server's drain: the
// shutdown ends it, and the client's next frame fails as UNAVAILABLE.
TEST_F(LaneTest, ShutdownEndsIdleLanesWithoutWaitingForTheDrain) {
  Start();
  PsClientOptions options = FastRetries(true);
  options.max_attempts = 1;
  auto client = PsClient::Connect(server_->address(), options);
  STRATA_ASSERT_OK(client->CreateVariable(SgdSpec("a", 2)));
  std::vector<float> v(2);
  STRATA_ASSERT_OK(
      client->Exchange(0, {}, {}, {}, {}, {"a"}, {v.data()}, {8}));
  const absl::Time start = absl::Now();
  server_->Shutdown(absl::Seconds(60));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(Frames(server_.get(), "LaneStream", "UNAVAILABLE"), 1);
  auto after = client->Exchange(0, {}, {}, {}, {}, {"a"}, {v.data()}, {8});
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable)
      << after.status();
}

// A malformed stream (not a frame) ends the call with INVALID_ARGUMENT
// naming the problem; the server goes on serving.
TEST_F(LaneTest, MalformedStreamEndsWithInvalidArgument) {
  Start();
  auto channel = grpc::CreateChannel(server_->address(),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  auto send = [&](std::vector<grpc::ByteBuffer> messages) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    grpc::CompletionQueue cq;
    auto rw = stub.PrepareCall(&ctx, "/strata.v1.ParameterService/Lane", &cq);
    void* tag = nullptr;
    bool ok = false;
    rw->StartCall(reinterpret_cast<void*>(1));
    cq.Next(&tag, &ok);
    for (auto& m : messages) {
      rw->Write(m, reinterpret_cast<void*>(1));
      cq.Next(&tag, &ok);
      if (!ok) break;
    }
    grpc::Status status;
    rw->Finish(&status, reinterpret_cast<void*>(2));
    while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(2)) {
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return FromGrpcStatus(status);
  };
  const char data[8] = {};
  std::vector<grpc::ByteBuffer> no_header;
  no_header.push_back(EncodeChunk("", 0, data, 8, nullptr));
  EXPECT_THAT(send(std::move(no_header)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "first chunk carries no header"));
  v1::LaneRequest request;
  request.mutable_push()->set_payload_bytes(8);
  std::vector<grpc::ByteBuffer> bad_offset;
  bad_offset.push_back(
      EncodeChunk(request.SerializeAsString(), 4, data, 4, nullptr));
  EXPECT_THAT(send(std::move(bad_offset)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "chunk at offset 4, expected 0"));
  std::vector<grpc::ByteBuffer> garbage;
  garbage.push_back(EncodeChunk("\xff\xff\xff", 0, nullptr, 0, nullptr));
  EXPECT_THAT(send(std::move(garbage)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "not a LaneRequest"));
  auto client = PsClient::Connect(server_->address(), FastRetries(true));
  STRATA_ASSERT_OK(client->CreateVariable(SgdSpec("a", 2)));
}

// Gradient compression (PsClientOptions::gradient_encoding): a bf16 push is
// decoded on the server (values exactly representable land exactly), moves
// half the bytes, and the rounding error goes into the next push.
TEST_F(LaneTest, CompressedPushesMoveHalfTheBytesOnEveryPath) {
  Start();
  for (bool lanes : {true, false}) {
    SCOPED_TRACE(lanes ? "lanes" : "unary calls");
    PsClientOptions options = FastRetries(lanes);
    options.gradient_encoding = GradientEncoding::kBfloat16;
    auto client = PsClient::Connect(server_->address(), options);
    const std::string name = lanes ? "c_lanes" : "c_unary";
    const int64_t n = 1000;
    STRATA_ASSERT_OK(client->CreateVariable(SgdSpec(name, n)));
    const int64_t bytes_before = client->Stats()->bytes_pushed();
    // 0.5 is exact in bfloat16; 2^-9 is below its resolution next to 1.
    std::vector<float> grad(n, 0.5f), value(n);
    grad[1] = 1.0f + std::ldexp(1.0f, -9);
    auto versions = client->Exchange(0, {name}, {{n}}, {grad.data()},
                                     PushTag{"job", 0, 0}, {name},
                                     {value.data()}, {n * sizeof(float)});
    ASSERT_TRUE(versions.ok()) << versions.status();
    EXPECT_EQ(value[0], 0.5f);
    EXPECT_EQ(value[1], 0.0f);  // 1 + 2^-9 went out as 1
    EXPECT_EQ(client->Stats()->bytes_pushed() - bytes_before, n * 2);
    // The second push of the same gradient carries the first one's 2^-9:
    // 1 + 2^-8 is halfway and rounds to even (1); the residual is 2^-8.
    // The third sends 1 + 2^-9 + 2^-8 -> 1 + 2^-7, leaving -2^-9 owed.
    STRATA_ASSERT_OK(client->PushVariables({name}, DType::kFloat32, {{n}},
                                           {grad.data()}, PushTag{"job", 0, 1}));
    STRATA_ASSERT_OK(client->Exchange(0, {name}, {{n}}, {grad.data()},
                                      PushTag{"job", 0, 2}, {name},
                                      {value.data()}, {n * sizeof(float)}));
    EXPECT_EQ(value[0], 1.0f - 3 * 0.5f);
    EXPECT_EQ(value[1], 1.0f - 1.0f - 1.0f - (1.0f + std::ldexp(1.0f, -7)));
    EXPECT_EQ(client->Stats()->bytes_pushed() - bytes_before, 3 * n * 2);
  }
  EXPECT_GE(Frames(server_.get(), "Lane", "OK"), 2);
  EXPECT_GE(Frames(server_.get(), "PushVariables", "OK"), 3);
}

// A compressed push whose connection drops mid-frame is retried with the
// same encoded bytes: applied once, and the residual advanced once.
TEST_F(LaneTest, CompressedPushDroppedMidFrameIsAppliedOnce) {
  Start();
  FaultProxy proxy(server_->port());
  PsClientOptions options = FastRetries(true);
  options.chunk_bytes = 256 << 10;
  options.gradient_encoding = GradientEncoding::kFloat16;
  auto client = PsClient::Connect(proxy.address(), options);
  const int64_t n = 1 << 20;  // 2 MB on the wire
  STRATA_ASSERT_OK(client->CreateVariable(SgdSpec("big", n)));
  std::vector<float> grad(n, 0.25f), value(n);
  grad[7] = 0.1f;  // 0.0999755859375 in float16
  STRATA_ASSERT_OK(client->Exchange(0, {}, {}, {}, {}, {"big"}, {value.data()},
                                    {n * sizeof(float)}));
  proxy.CutAfter(/*upstream=*/true, 1 << 20);
  auto versions = client->Exchange(0, {"big"}, {{n}}, {grad.data()},
                                   PushTag{"job", 0, 1}, {"big"},
                                   {value.data()}, {n * sizeof(float)});
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_EQ(proxy.cuts(), 1);
  ASSERT_EQ(versions->pushed.size(), 1u);
  EXPECT_TRUE(versions->pushed[0].applied);
  EXPECT_GE(versions->pushed[0].attempts, 2);
  EXPECT_EQ(value[0], 0.75f);
  EXPECT_EQ(value[7], 1.0f - 0.0999755859375f);
  for (int64_t i = 8; i < n; i += 4099) ASSERT_EQ(value[i], 0.75f) << i;
}

// Against a server without lanes the fallback sends the bytes encoded once.
TEST_F(LaneTest, CompressedFallbackToUnaryCallsEncodesOnce) {
  Start(/*serve_lanes=*/false);
  PsClientOptions options = FastRetries(true);
  options.gradient_encoding = GradientEncoding::kBfloat16;
  auto client = PsClient::Connect(server_->address(), options);
  STRATA_ASSERT_OK(client->CreateVariable(SgdSpec("a", 2)));
  std::vector<float> g = {1.0f + std::ldexp(1.0f, -9), 2.0f}, v(2);
  auto versions = client->Exchange(0, {"a"}, {{2}}, {g.data()},
                                   PushTag{"job", 0, 0}, {"a"}, {v.data()},
                                   {sizeof(float) * 2});
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_FALSE(client->UsesLanes());
  EXPECT_EQ(v, (std::vector<float>{0.0f, -1.0f}));
  EXPECT_EQ(client->Stats()->bytes_pushed(), 4);
  // Had the refused lane attempt advanced the residual too, this push
  // would carry 2^-8 + 2^-9 (and round up to 1 + 2^-7).
  STRATA_ASSERT_OK(client->Exchange(0, {"a"}, {{2}}, {g.data()},
                                    PushTag{"job", 0, 1}, {"a"}, {v.data()},
                                    {sizeof(float) * 2}));
  EXPECT_EQ(v, (std::vector<float>{-1.0f, -3.0f}));
}

// Encoded gradients the server cannot take get INVALID_ARGUMENT naming
// the problem; nothing changes.
TEST_F(LaneTest, BadEncodedPushesAreRefusedAndChangeNothing) {
  Start();
  auto client = PsClient::Connect(server_->address(), FastRetries(true));
  STRATA_ASSERT_OK(client->CreateVariable(SgdSpec("f", 4)));
  v1::VariableSpec ints = SgdSpec("i", 4);
  ints.set_dtype(v1::DT_INT32);
  ints.mutable_initializer()->set_type("zeros");
  ints.mutable_optimizer()->set_type("assign_add");
  STRATA_ASSERT_OK(client->CreateVariable(ints));
  auto channel = grpc::CreateChannel(server_->address(),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  auto push = [&](const std::string& name, v1::DType dtype,
                  v1::GradientEncoding encoding, int64_t bytes,
                  const std::string& payload) {
    v1::PushVariablesHeader header;
    v1::VariableSlot* slot = header.add_variables();
    slot->set_name(name);
    slot->set_dtype(dtype);
    slot->add_shape(4);
    slot->set_bytes(bytes);
    slot->set_encoding(encoding);
    header.set_payload_bytes(bytes);
    const absl::string_view parts[] = {payload};
    return UploadChunks(stub, "/strata.v1.ParameterService/PushVariables",
                        absl::Seconds(10), header.SerializeAsString(), parts,
                        1 << 20)
        .status();
  };
  std::string half(8, '\0');
  // Wrong size: 4 float32 elements are 8 bytes as bf16, not 16.
  EXPECT_THAT(push("f", v1::DT_FLOAT32, v1::GRADIENT_ENCODING_BF16, 16,
                   std::string(16, '\0')),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "(8 bytes as bf16)"));
  EXPECT_THAT(push("i", v1::DT_INT32, v1::GRADIENT_ENCODING_FP16, 8, half),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "only float32 gradients are encoded"));
  EXPECT_THAT(push("f", v1::DT_FLOAT32, static_cast<v1::GradientEncoding>(7),
                   8, half),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "unknown gradient encoding 7"));
  // A bf16 NaN (0x7FC0) in element 2.
  std::string nan = half;
  nan[4] = static_cast<char>(0xC0);
  nan[5] = 0x7F;
  EXPECT_THAT(push("f", v1::DT_FLOAT32, v1::GRADIENT_ENCODING_BF16, 8, nan),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "gradient for variable 'f'"));
  std::vector<float> f(4);
  auto pulled = client->Pull("f", f.data(), sizeof(float) * 4);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->version, 0);
  EXPECT_EQ(f, (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(client->Stats()->pushes_applied(), 0);
}

}  // namespace
}  // namespace strata

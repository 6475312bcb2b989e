// ps_bench: push/pull throughput and small-message latency of a Strata PS,
// measured side by side with a raw socket transfer, a bare gRPC unary echo
// and a bare gRPC bidi-stream ping-pong in the same run.
//
//   ps_bench [--target HOST:PORT] [--quick] [--sizes 4K,1M] [--markdown FILE]
//   ps_bench --peer_netns NAME --peer_addr A --self_addr B [...]
//   ps_bench --serve_echo [--host H]
//
// Without --target it starts build/bin/strata-ps as a child process
// (a separate process, like the socket baseline's peer). All on 127.0.0.1
// by default. With --peer_netns, run from a network namespace joined to
// NAME by a link (bench/netns_bench.sh sets one up): the PS, the echo
// server (this binary with --serve_echo) and the raw-socket peers run in
// NAME, so that every byte crosses the link.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "bench/baselines.h"
#include "bench/peer_namespace.h"
#include "client/ps_client.h"
#include "common/cli.h"
#include "common/gradient_encoding.h"
#include "rpc/daemon.h"

ABSL_FLAG(std::string, target, "", "PS address; empty starts strata-ps");
ABSL_FLAG(std::string, ps_binary, "", "strata-ps path (default: beside this "
          "binary, strata-ps)");
ABSL_FLAG(std::string, ps_flags, "", "Space-separated flags for the strata-ps "
          "it starts (e.g. --chunked_apply=false)");
ABSL_FLAG(std::string, optimizer, "sgd", "The optimizer of the throughput "
          "runs' variables (sgd, adam, adagrad, rmsprop)");
ABSL_FLAG(bool, quick, false, "Fewer iterations (smoke run)");
ABSL_FLAG(std::string, sizes, "", "Comma-separated message sizes, each a "
          "multiple of 4 bytes with an optional K or M suffix (default "
          "4K,256K,1M,4M,64M)");
ABSL_FLAG(std::string, markdown, "", "Write the results table to this file");
ABSL_FLAG(std::string, peer_netns, "", "Run the PS, the echo server and the "
          "raw-socket peers in network namespace NAME (ip netns; needs root, "
          "--peer-addr and --self-addr)");
ABSL_FLAG(std::string, peer_addr, "", "With --peer-netns: the IPv4 address "
          "of the peer namespace's end of the link; the PS and the echo "
          "server bind it");
ABSL_FLAG(std::string, self_addr, "", "With --peer-netns: the IPv4 address "
          "of this namespace's end of the link; the raw-socket baselines "
          "listen on it");
ABSL_FLAG(std::string, latency_only, "", "unary or lane: only time that "
          "many 4 KB push round trips (--latency_iters) against --target and "
          "print p50/p99 (for perf stat)");
ABSL_FLAG(int, latency_iters, 10000, "With --latency-only: round trips");
ABSL_FLAG(std::string, gradient_compression, "none",
          "bf16 or fp16: also time lane pushes with the gradients encoded "
          "(rows 'push (lane, bf16)'; GB/s of float32 gradient moved)");
ABSL_FLAG(bool, serve_echo, false, "Only serve the gRPC echo baseline on "
          "--host, port 0: prints \"listening on HOST:PORT\" and serves "
          "until stdin closes or SIGTERM/SIGINT");
ABSL_FLAG(std::string, host, "127.0.0.1", "With --serve-echo: the address "
          "to bind");

extern char** environ;

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kStartTimeout = std::chrono::seconds(60);
constexpr auto kStopTimeout = std::chrono::seconds(20);
constexpr size_t kLatencyBytes = 4096;

// A server child process (strata-ps, or ps_bench --serve_echo, possibly
// behind `ip netns exec`) and the address it printed. The destructor stops
// it: closes its stdin, sends SIGTERM, and after kStopTimeout SIGKILL.
class ServerProcess {
 public:
  // Spawns args[0] (a path) with stdout to a pipe and stderr to /dev/null,
  // stdin a pipe that this object holds open where `pipe_stdin`, and waits
  // up to kStartTimeout for its "listening on HOST:PORT" line.
  // Errors: NOT_FOUND when it cannot be started; UNAVAILABLE when it exits
  // or stays silent instead.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Spawn(
      const std::vector<std::string>& args, bool pipe_stdin);

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess() { Stop(); }

  const std::string& address() const { return address_; }

  void Stop() {
    if (stdin_fd_ >= 0) {
      close(stdin_fd_);
      stdin_fd_ = -1;
    }
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    const Clock::time_point deadline = Clock::now() + kStopTimeout;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
  }

 private:
  ServerProcess() = default;

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  std::string address_;
};

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Spawn(
    const std::vector<std::string>& args, bool pipe_stdin) {
  const std::string command = absl::StrJoin(args, " ");
  int out[2];
  int in[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  if (pipe_stdin && pipe2(in, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError("pipe failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  if (pipe_stdin) posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv;
  for (const std::string& a : args) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  auto process = std::unique_ptr<ServerProcess>(new ServerProcess);
  const int rc = posix_spawn(&process->pid_, argv[0], &actions, nullptr,
                             argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (pipe_stdin) close(in[0]);
  process->stdin_fd_ = in[1];
  if (rc != 0) {
    process->pid_ = -1;
    close(out[0]);
    return absl::NotFoundError(absl::StrCat("cannot start ", command, ": ",
                                            std::strerror(rc)));
  }

  // Read stdout up to the "listening on" line, bounded in time.
  const std::string prefix = "listening on ";
  const Clock::time_point deadline = Clock::now() + kStartTimeout;
  std::string buffer;
  while (process->address_.empty()) {
    const size_t at = buffer.find(prefix);
    const size_t eol = at == std::string::npos ? at : buffer.find('\n', at);
    if (eol != std::string::npos) {
      process->address_ = std::string(absl::StripAsciiWhitespace(
          absl::string_view(buffer).substr(at + prefix.size(),
                                           eol - at - prefix.size())));
      if (process->address_.empty()) break;
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd pfd{out[0], POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    char chunk[512];
    const ssize_t n = read(out[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // it exited (or closed stdout)
    buffer.append(chunk, static_cast<size_t>(n));
  }
  close(out[0]);
  if (process->address_.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "`", command, "` did not print \"listening on HOST:PORT\" within ",
        std::chrono::duration_cast<std::chrono::seconds>(kStartTimeout)
            .count(),
        " s (run it by hand to see why)"));
  }
  return process;
}

// Where the peers run: this namespace (loopback) or another one.
struct Placement : bench::PeerNamespace {
  std::string Describe() const {
    if (netns.empty()) return "loopback (127.0.0.1), one network namespace";
    return absl::StrCat("between network namespaces: the PS, the echo "
                        "server and the raw-socket peers in `",
                        netns, "` at ", peer_addr, ", the clients at ",
                        self_addr);
  }
};

struct Row {
  std::string op;
  size_t bytes;
  int clients;
  double gbps;
  double baseline_gbps;
};

std::string HumanSize(size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) {
    return absl::StrCat(b >> 20, " MB");
  }
  if (b >= (1u << 10) && b % (1u << 10) == 0) {
    return absl::StrCat(b >> 10, " KB");
  }
  return absl::StrCat(b, " B");
}

int Iterations(size_t bytes, bool quick) {
  // About 512 MB per measurement (64 MB per measurement in quick mode),
  // at least 8 and at most 4000 calls.
  const double budget = quick ? 64e6 : 512e6;
  int n = static_cast<int>(budget / static_cast<double>(bytes));
  return std::clamp(n, 8, quick ? 400 : 4000);
}

// Runs `clients` threads, each with its own client (connection) and its own
// variable, doing `iters` pushes or pulls. Returns aggregate GB/s.
// One push or pull of `name` (n floats at `data`): a unary call, or a
// frame on lane 0 of the client's Lane stream.
absl::Status PushOrPull(PsClient& client, bool lane, bool push,
                        const std::string& name, int64_t n, float* data,
                        const PushTag& tag) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (lane) {
    if (push) {
      return client.Exchange(0, {name}, {{n}}, {data}, tag, {}, {}, {})
          .status();
    }
    return client.Exchange(0, {}, {}, {}, {}, {name}, {data}, {bytes})
        .status();
  }
  if (push) {
    return client.Push(name, DType::kFloat32, {n}, data, tag).status();
  }
  return client.Pull(name, data, bytes).status();
}

absl::StatusOr<double> Throughput(const std::string& target, bool lane,
                                  bool push, size_t bytes, int clients,
                                  int iters,
                                  GradientEncoding encoding =
                                      GradientEncoding::kNone) {
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  std::vector<std::unique_ptr<PsClient>> pool;
  PsClientOptions options;
  options.gradient_encoding = encoding;
  for (int c = 0; c < clients; ++c) {
    pool.push_back(PsClient::Connect(target, options));
    v1::VariableSpec spec;
    spec.set_name(absl::StrCat("bench/", bytes, "/", c,
                               GradientEncodingName(encoding)));
    spec.set_dtype(v1::DT_FLOAT32);
    spec.add_shape(n);
    spec.mutable_initializer()->set_type("zeros");
    spec.mutable_optimizer()->set_type(absl::GetFlag(FLAGS_optimizer));
    spec.mutable_optimizer()->set_learning_rate(1e-6);
    auto created = pool.back()->CreateVariable(spec);
    if (!created.ok()) return created.status();
  }
  std::vector<std::vector<float>> data(clients, std::vector<float>(n, 0.5f));
  std::vector<absl::Status> errors(clients);
  std::atomic<int64_t> step{0};
  auto work = [&](int c, int count) {
    for (int i = 0; i < count; ++i) {
      absl::Status s;
      const std::string name = absl::StrCat("bench/", bytes, "/", c,
                                            GradientEncodingName(encoding));
      s = PushOrPull(*pool[c], lane, push, name, n, data[c].data(),
                     PushTag{"bench", c, step.fetch_add(1)});
      if (!s.ok()) {
        errors[c] = s;
        return;
      }
    }
  };
  // Warm-up (connections, allocator).
  {
    std::vector<std::thread> t;
    for (int c = 0; c < clients; ++c) t.emplace_back(work, c, 2);
    for (auto& th : t) th.join();
  }
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) threads.emplace_back(work, c, iters);
  for (auto& th : threads) th.join();
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& e : errors) {
    if (!e.ok()) return e;
  }
  return static_cast<double>(bytes) * iters * clients / secs / 1e9;
}

absl::StatusOr<std::vector<double>> PullLatency(const std::string& target,
                                                bool lane, size_t bytes,
                                                int iters) {
  auto client = PsClient::Connect(target);
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  v1::VariableSpec spec;
  spec.set_name("bench/latency");
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(n);
  auto created = client->CreateVariable(spec);
  if (!created.ok()) return created.status();
  std::vector<float> buf(n);
  std::vector<double> micros;
  for (int i = 0; i < iters + 50; ++i) {
    auto start = Clock::now();
    absl::Status r = PushOrPull(*client, lane, false, "bench/latency", n,
                                buf.data(), {});
    if (!r.ok()) return r;
    if (i >= 50) {
      micros.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - start)
              .count());
    }
  }
  return micros;
}

absl::StatusOr<std::vector<double>> PushLatency(const std::string& target,
                                                bool lane, size_t bytes,
                                                int iters) {
  auto client = PsClient::Connect(target);
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  v1::VariableSpec spec;
  spec.set_name("bench/latency_push");
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(n);
  spec.mutable_optimizer()->set_type("sgd");
  auto created = client->CreateVariable(spec);
  if (!created.ok()) return created.status();
  std::vector<float> buf(n, 0.001f);
  std::vector<double> micros;
  for (int i = 0; i < iters + 50; ++i) {
    auto start = Clock::now();
    absl::Status r =
        PushOrPull(*client, lane, true, "bench/latency_push", n, buf.data(),
                   PushTag{lane ? "bench-latency-lane" : "bench-latency", 0, i});
    if (!r.ok()) return r;
    if (i >= 50) {
      micros.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - start)
              .count());
    }
  }
  return micros;
}

// Message sizes: "4K,256K,1M" (K = 1024, M = 1024 * 1024; a plain number
// is bytes), each a multiple of 4 and at most 1 GB. Empty: the defaults.
absl::StatusOr<std::vector<size_t>> ParseSizes(absl::string_view text) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return std::vector<size_t>{4 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20};
  }
  std::vector<size_t> sizes;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::string token = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(part));
    uint64_t unit = 1;
    absl::string_view number = token;
    absl::ConsumeSuffix(&number, "B");
    if (absl::ConsumeSuffix(&number, "K")) {
      unit = 1 << 10;
    } else if (absl::ConsumeSuffix(&number, "M")) {
      unit = 1 << 20;
    }
    uint64_t value = 0;
    if (!absl::SimpleAtoi(number, &value) || value == 0 ||
        value > (uint64_t{1} << 30) / unit || (value * unit) % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad --sizes entry \"", part,
          "\": want a multiple of 4 bytes up to 1G, e.g. 4K, 1M, 4096"));
    }
    sizes.push_back(static_cast<size_t>(value * unit));
  }
  return sizes;
}

// argv as a shell command line (arguments quoted where needed).
// --serve_echo: the echo baseline as a process of its own (for another
// network namespace), until stdin closes or SIGTERM/SIGINT.
int ServeEcho() {
  // Blocked before the server's threads start, so that they inherit it.
  const StopSignals stop = StopSignals::Block();
  const std::string host = absl::GetFlag(FLAGS_host);
  auto server = bench::EchoServer::Start(256 << 20, host);
  if (!server.ok()) {
    std::cerr << "ps_bench --serve_echo: " << server.status() << "\n";
    return 1;
  }
  std::cout << "listening on " << (*server)->target() << std::endl;
  while (stop.WaitFor(absl::Milliseconds(100)) == 0) {
    pollfd pfd{STDIN_FILENO, POLLIN, 0};
    if (poll(&pfd, 1, 0) <= 0) continue;
    if ((pfd.revents & (POLLIN | POLLHUP)) == 0) break;  // POLLNVAL, POLLERR
    char buf[256];
    const ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
  }
  return 0;
}

// "p50 / baseline p50", or "—" where the baseline is missing.
std::string Ratio(double p50, const std::optional<double>& base) {
  if (!base.has_value() || *base <= 0) return "—";
  return absl::StrFormat("%.2f", p50 / *base);
}

// --latency-only: 4 KB push round trips on one path, nothing else, so that
// a profiler attached to the run sees only them.
int LatencyOnly(const std::string& path) {
  const std::string target = absl::GetFlag(FLAGS_target);
  const int iters = absl::GetFlag(FLAGS_latency_iters);
  if ((path != "unary" && path != "lane") || target.empty() || iters < 1) {
    std::cerr << "ps_bench: --latency-only is unary or lane, with --target "
                 "and --latency-iters >= 1\n";
    return 2;
  }
  absl::StatusOr<std::vector<double>> micros =
      PushLatency(target, path == "lane", kLatencyBytes, iters);
  if (!micros.ok()) {
    std::cerr << "ps_bench: " << micros.status() << "\n";
    return 1;
  }
  std::cout << absl::StrFormat("4 KB push (%s): %d round trips, p50 %.0f us, "
                               "p99 %.0f us\n",
                               path, iters, bench::Percentile(*micros, 50),
                               bench::Percentile(*micros, 99));
  return 0;
}

int Run(int argc, char** argv) {
  if (absl::GetFlag(FLAGS_serve_echo)) return ServeEcho();
  if (!absl::GetFlag(FLAGS_latency_only).empty()) {
    return LatencyOnly(absl::GetFlag(FLAGS_latency_only));
  }
  const bool quick = absl::GetFlag(FLAGS_quick);
  absl::StatusOr<std::vector<size_t>> sizes =
      ParseSizes(absl::GetFlag(FLAGS_sizes));
  if (!sizes.ok()) {
    std::cerr << "ps_bench: " << sizes.status().message() << "\n";
    return 2;
  }

  Placement where;
  where.netns = absl::GetFlag(FLAGS_peer_netns);
  where.peer_addr = absl::GetFlag(FLAGS_peer_addr);
  where.self_addr = absl::GetFlag(FLAGS_self_addr);
  if (!where.netns.empty()) {
    if (where.peer_addr.empty() || where.self_addr.empty()) {
      std::cerr << "ps_bench: --peer-netns needs --peer-addr and "
                   "--self-addr\n";
      return 2;
    }
    where.ip = bench::FindIp();
    if (where.ip.empty()) {
      std::cerr << "ps_bench: --peer-netns needs iproute2's ip\n";
      return 1;
    }
  } else if (!where.peer_addr.empty() || !where.self_addr.empty()) {
    std::cerr << "ps_bench: --peer-addr and --self-addr need --peer-netns\n";
    return 2;
  }
  const bench::SocketLink link = where.Link();

  std::string target = absl::GetFlag(FLAGS_target);
  std::unique_ptr<ServerProcess> ps;
  if (target.empty()) {
    std::string binary = absl::GetFlag(FLAGS_ps_binary);
    if (binary.empty()) {
      std::string self = argv[0];
      binary = self.substr(0, self.find_last_of('/') + 1) + "strata-ps";
    }
    const std::string host =
        where.netns.empty() ? "127.0.0.1" : where.peer_addr;
    std::vector<std::string> ps_args = {binary, "--host=" + host, "--port=0"};
    for (absl::string_view flag :
         absl::StrSplit(absl::GetFlag(FLAGS_ps_flags), ' ', absl::SkipEmpty())) {
      ps_args.emplace_back(flag);
    }
    auto started = ServerProcess::Spawn(where.Exec(ps_args), false);
    if (!started.ok()) {
      std::cerr << "ps_bench: " << started.status() << "\n";
      return 1;
    }
    ps = std::move(*started);
    target = ps->address();
  }
  std::cout << "ps_bench: PS at " << target << (quick ? " (quick)" : "")
            << std::endl;
  if (!where.netns.empty()) {
    std::cout << "ps_bench: link " << where.Describe() << std::endl;
  }

  absl::StatusOr<GradientEncoding> encoding =
      ParseGradientEncoding(absl::GetFlag(FLAGS_gradient_compression));
  if (!encoding.ok()) {
    std::cerr << "ps_bench: --gradient_compression: " << encoding.status()
              << "\n";
    return 2;
  }
  std::vector<Row> rows;
  int rc = 0;
  for (size_t bytes : *sizes) {
    const int iters = Iterations(bytes, quick);
    auto sock = bench::RawSocketTransfer(bytes, iters, link);
    if (!sock.ok()) {
      std::cerr << "raw socket baseline failed: " << sock.status() << "\n";
      rc = 1;
      break;
    }
    for (int clients : {1, 4}) {
      for (bool lane : {false, true}) {
        for (bool push : {true, false}) {
          const std::string op = absl::StrCat(push ? "push" : "pull",
                                              lane ? " (lane)" : " (unary)");
          int per_client = std::max(4, iters / clients);
          auto gbps =
              Throughput(target, lane, push, bytes, clients, per_client);
          if (!gbps.ok()) {
            std::cerr << op << " " << HumanSize(bytes)
                      << " failed: " << gbps.status() << "\n";
            rc = 1;
            continue;
          }
          rows.push_back(Row{op, bytes, clients, *gbps, sock->gbytes_per_sec});
          std::cout << absl::StrFormat(
                           "%-12s %6s x%d clients: %6.2f GB/s   raw socket "
                           "%6.2f GB/s   ratio %.2f",
                           op, HumanSize(bytes), clients, *gbps,
                           sock->gbytes_per_sec, *gbps / sock->gbytes_per_sec)
                    << std::endl;
        }
        if (lane && *encoding != GradientEncoding::kNone) {
          // The same pushes with the gradients encoded: GB/s of the float32
          // gradients delivered (the wire carries half of it).
          const std::string op = absl::StrCat(
              "push (lane, ", GradientEncodingName(*encoding), ")");
          auto gbps = Throughput(target, true, true, bytes, clients,
                                 std::max(4, iters / clients), *encoding);
          if (!gbps.ok()) {
            std::cerr << op << " " << HumanSize(bytes)
                      << " failed: " << gbps.status() << "\n";
            rc = 1;
            continue;
          }
          rows.push_back(Row{op, bytes, clients, *gbps, sock->gbytes_per_sec});
          std::cout << absl::StrFormat("%-12s %6s x%d clients: %6.2f GB/s",
                                       op, HumanSize(bytes), clients, *gbps)
                    << std::endl;
        }
      }
    }
  }

  // Small-message latency, back to back under the same conditions.
  const int lat_iters = quick ? 300 : 3000;
  std::unique_ptr<bench::EchoServer> local_echo;
  std::unique_ptr<ServerProcess> remote_echo;
  absl::StatusOr<std::string> echo_target;
  if (where.netns.empty()) {
    auto echo = bench::EchoServer::Start();
    if (echo.ok()) {
      local_echo = std::move(*echo);
      echo_target = local_echo->target();
    } else {
      echo_target = echo.status();
    }
  } else {
    auto echo = ServerProcess::Spawn(
        where.Exec({bench::SelfPath(argv[0]), "--serve_echo", "--host",
                    where.peer_addr}),
        true);
    if (echo.ok()) {
      remote_echo = std::move(*echo);
      echo_target = remote_echo->address();
    } else {
      echo_target = echo.status();
    }
  }
  using Micros = absl::StatusOr<std::vector<double>>;
  const Micros echo_lat =
      echo_target.ok()
          ? bench::EchoLatencyMicros(*echo_target, kLatencyBytes, lat_iters)
          : Micros(echo_target.status());
  const Micros stream_lat =
      echo_target.ok() ? bench::EchoStreamPingPongMicros(
                             *echo_target, kLatencyBytes, lat_iters)
                       : Micros(echo_target.status());
  const Micros pull_lat = PullLatency(target, false, kLatencyBytes, lat_iters);
  const Micros push_lat = PushLatency(target, false, kLatencyBytes, lat_iters);
  const Micros lane_pull_lat =
      PullLatency(target, true, kLatencyBytes, lat_iters);
  const Micros lane_push_lat =
      PushLatency(target, true, kLatencyBytes, lat_iters);
  const Micros sock_lat =
      bench::RawSocketPingPongMicros(kLatencyBytes, lat_iters, link);
  local_echo.reset();
  remote_echo.reset();

  auto p50 = [](const Micros& v) -> std::optional<double> {
    if (!v.ok()) return std::nullopt;
    return bench::Percentile(*v, 50);
  };
  const std::optional<double> echo_p50 = p50(echo_lat);
  const std::optional<double> stream_p50 = p50(stream_lat);
  const std::optional<double> sock_p50 = p50(sock_lat);
  std::ostringstream lat;
  lat << "| 4 KB round trip | p50 µs | p99 µs | p50 / gRPC unary echo | "
         "p50 / gRPC stream ping-pong | p50 / raw socket ping-pong |\n"
      << "|---|---|---|---|---|---|\n";
  auto line = [&](const char* what, const Micros& v) {
    if (!v.ok()) {
      std::cerr << what << " failed: " << v.status() << "\n";
      rc = 1;
      lat << "| " << what << " | failed | | | | |\n";
      return;
    }
    const double p50 = bench::Percentile(*v, 50);
    const double p99 = bench::Percentile(*v, 99);
    lat << absl::StrFormat("| %s | %.0f | %.0f | %s | %s | %s |\n", what, p50,
                           p99, Ratio(p50, echo_p50), Ratio(p50, stream_p50),
                           Ratio(p50, sock_p50));
    std::cout << absl::StrFormat(
        "%-32s p50 %6.0f us  p99 %6.0f us  /echo %s  /stream %s  "
        "/socket %s\n",
        what, p50, p99, Ratio(p50, echo_p50), Ratio(p50, stream_p50),
        Ratio(p50, sock_p50));
  };
  line("bare gRPC unary echo", echo_lat);
  line("bare gRPC bidi-stream ping-pong", stream_lat);
  line("PS pull (dense, unary)", pull_lat);
  line("PS push (dense, SGD apply, unary)", push_lat);
  line("PS pull (dense, lane frame)", lane_pull_lat);
  line("PS push (dense, SGD apply, lane frame)", lane_push_lat);
  line("raw socket ping-pong", sock_lat);

  std::ostringstream md;
  md << "Link: " << where.Describe() << ".\n\n";
  md << "| op | size | clients | PS GB/s | raw socket GB/s (1 conn) | ratio |\n"
     << "|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    md << absl::StrFormat("| %s | %s | %d | %.2f | %.2f | %.2f |\n", r.op,
                          HumanSize(r.bytes), r.clients, r.gbps,
                          r.baseline_gbps, r.gbps / r.baseline_gbps);
  }
  md << "\n" << lat.str();
  std::cout << "\n" << md.str();
  const std::string path = absl::GetFlag(FLAGS_markdown);
  if (!path.empty()) {
    std::ofstream f(path);
    f << "Command: `" << bench::CommandLine(argc, argv) << "`\n\n" << md.str();
    if (!f) {
      std::cerr << "ps_bench: cannot write " << path << "\n";
      rc = 1;
    }
  }
  if (ps != nullptr) ps->Stop();
  return rc;
}

}  // namespace
}  // namespace strata

namespace {

// --help: what ps_bench is and its flags.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "ps_bench";
  cli.usage =
      "ps_bench [--target HOST:PORT] [--quick] [--sizes 4K,1M] "
      "[--markdown FILE] [--peer-netns NAME --peer-addr A --self-addr B]";
  cli.description =
      "Push/pull throughput and small-message latency of a Strata parameter "
      "server, measured beside a raw socket transfer, a bare gRPC echo and "
      "a bare gRPC stream ping-pong in the same run: on loopback, or across "
      "a link to another network namespace.";
  cli.groups = {
      {"Benchmark",
       {"target", "ps_binary", "ps_flags", "optimizer", "quick", "sizes",
        "markdown",
        "gradient_compression"}},
      {"Across network namespaces", {"peer_netns", "peer_addr", "self_addr"}},
      {"Echo server mode", {"serve_echo", "host"}},
      {"Profiling", {"latency_only", "latency_iters"}}};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());
  return strata::Run(argc, argv);
}

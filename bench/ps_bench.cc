// ps_bench: push/pull throughput and small-pull latency of a Strata PS,
// measured side by side with a raw loopback socket transfer and a bare gRPC
// unary echo in the same run.
//
//   ps_bench [--target HOST:PORT] [--quick] [--markdown FILE]
//
// Without --target it starts build/bin/strata-ps as a child process
// (a separate process, like the socket baseline's peer).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/baselines.h"
#include "client/ps_client.h"
#include "common/cli.h"

ABSL_FLAG(std::string, target, "", "PS address; empty starts strata-ps");
ABSL_FLAG(std::string, ps_binary, "", "strata-ps path (default: beside this "
          "binary, strata-ps)");
ABSL_FLAG(bool, quick, false, "Fewer iterations (smoke run)");
ABSL_FLAG(std::string, markdown, "", "Write the results table to this file");

extern char** environ;

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  pid_t pid = -1;
  std::string address;
};

absl::StatusOr<Child> StartPs(const std::string& binary) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args = {binary, "--host=127.0.0.1", "--port=0"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Child child;
  int rc = posix_spawn(&child.pid, binary.c_str(), &actions, nullptr,
                       argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::NotFoundError(absl::StrCat("cannot start ", binary));
  }
  FILE* out = fdopen(fds[0], "r");
  char line[512];
  while (fgets(line, sizeof(line), out) != nullptr) {
    std::string s(line);
    const std::string prefix = "listening on ";
    if (s.rfind(prefix, 0) == 0) {
      child.address = s.substr(prefix.size());
      while (!child.address.empty() &&
             (child.address.back() == '\n' || child.address.back() == '\r')) {
        child.address.pop_back();
      }
      break;
    }
  }
  fclose(out);
  if (child.address.empty()) {
    kill(child.pid, SIGKILL);
    waitpid(child.pid, nullptr, 0);
    return absl::InternalError("strata-ps did not print its address");
  }
  return child;
}

struct Row {
  std::string op;
  size_t bytes;
  int clients;
  double gbps;
  double baseline_gbps;
};

std::string HumanSize(size_t b) {
  if (b >= (1u << 20)) return absl::StrCat(b >> 20, " MB");
  return absl::StrCat(b >> 10, " KB");
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
absl::StatusOr<double> Throughput(const std::string& target, bool push,
                                  size_t bytes, int clients, int iters) {
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  std::vector<std::unique_ptr<PsClient>> pool;
  for (int c = 0; c < clients; ++c) {
    pool.push_back(PsClient::Connect(target));
    v1::VariableSpec spec;
    spec.set_name(absl::StrCat("bench/", bytes, "/", c));
    spec.set_dtype(v1::DT_FLOAT32);
    spec.add_shape(n);
    spec.mutable_initializer()->set_type("zeros");
    spec.mutable_optimizer()->set_type("sgd");
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
      const std::string name = absl::StrCat("bench/", bytes, "/", c);
      if (push) {
        s = pool[c]
                ->Push(name, DType::kFloat32, {n}, data[c].data(),
                       PushTag{"bench", c, step.fetch_add(1)})
                .status();
      } else {
        s = pool[c]->Pull(name, data[c].data(), bytes).status();
      }
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
                                                size_t bytes, int iters) {
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
    auto r = client->Pull("bench/latency", buf.data(), bytes);
    if (!r.ok()) return r.status();
    if (i >= 50) {
      micros.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - start)
              .count());
    }
  }
  return micros;
}

absl::StatusOr<std::vector<double>> PushLatency(const std::string& target,
                                                size_t bytes, int iters) {
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
    auto r = client->Push("bench/latency_push", DType::kFloat32, {n},
                          buf.data(), PushTag{"bench-latency", 0, i});
    if (!r.ok()) return r.status();
    if (i >= 50) {
      micros.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - start)
              .count());
    }
  }
  return micros;
}

int Run(int argc, char** argv) {
  const bool quick = absl::GetFlag(FLAGS_quick);
  std::string target = absl::GetFlag(FLAGS_target);
  Child child;
  if (target.empty()) {
    std::string binary = absl::GetFlag(FLAGS_ps_binary);
    if (binary.empty()) {
      std::string self = argv[0];
      binary = self.substr(0, self.find_last_of('/') + 1) + "strata-ps";
    }
    auto started = StartPs(binary);
    if (!started.ok()) {
      std::cerr << "ps_bench: " << started.status() << "\n";
      return 1;
    }
    child = *started;
    target = child.address;
  }
  std::cout << "ps_bench: PS at " << target << (quick ? " (quick)" : "")
            << std::endl;

  const std::vector<size_t> sizes = {4 << 10, 256 << 10, 4 << 20, 64 << 20};
  std::vector<Row> rows;
  int rc = 0;
  for (size_t bytes : sizes) {
    const int iters = Iterations(bytes, quick);
    auto sock = bench::RawSocketTransfer(bytes, iters);
    if (!sock.ok()) {
      std::cerr << "raw socket baseline failed: " << sock.status() << "\n";
      rc = 1;
      break;
    }
    for (int clients : {1, 4}) {
      for (bool push : {true, false}) {
        int per_client = std::max(4, iters / clients);
        auto gbps = Throughput(target, push, bytes, clients, per_client);
        if (!gbps.ok()) {
          std::cerr << (push ? "push" : "pull") << " " << HumanSize(bytes)
                    << " failed: " << gbps.status() << "\n";
          rc = 1;
          continue;
        }
        rows.push_back(Row{push ? "push" : "pull", bytes, clients, *gbps,
                           sock->gbytes_per_sec});
        std::cout << absl::StrFormat(
                         "%-4s %6s x%d clients: %6.2f GB/s   raw socket "
                         "%6.2f GB/s   ratio %.2f",
                         push ? "push" : "pull", HumanSize(bytes), clients,
                         *gbps, sock->gbytes_per_sec,
                         *gbps / sock->gbytes_per_sec)
                  << std::endl;
      }
    }
  }

  // Small-message latency, back to back under the same conditions.
  const int lat_iters = quick ? 300 : 3000;
  auto echo = bench::EchoServer::Start();
  absl::StatusOr<std::vector<double>> echo_lat =
      echo.ok() ? bench::EchoLatencyMicros((*echo)->target(), 4096, lat_iters)
                : absl::StatusOr<std::vector<double>>(echo.status());
  auto pull_lat = PullLatency(target, 4096, lat_iters);
  auto push_lat = PushLatency(target, 4096, lat_iters);
  auto sock_lat = bench::RawSocketPingPongMicros(4096, lat_iters);
  std::ostringstream lat;
  if (echo_lat.ok() && pull_lat.ok() && push_lat.ok() && sock_lat.ok()) {
    double echo_p50 = bench::Percentile(*echo_lat, 50);
    auto line = [&](const char* what, const std::vector<double>& v) {
      double p50 = bench::Percentile(v, 50), p99 = bench::Percentile(v, 99);
      std::string s = absl::StrFormat(
          "| %s | %.0f | %.0f | %.2f |\n", what, p50, p99, p50 / echo_p50);
      std::cout << absl::StrFormat("%-28s p50 %6.0f us  p99 %6.0f us  "
                                   "p50/echo %.2f\n",
                                   what, p50, p99, p50 / echo_p50);
      return s;
    };
    lat << "| 4 KB call | p50 µs | p99 µs | p50 / gRPC echo p50 |\n"
        << "|---|---|---|---|\n";
    lat << line("bare gRPC unary echo", *echo_lat);
    lat << line("PS pull (dense)", *pull_lat);
    lat << line("PS push (dense, SGD apply)", *push_lat);
    lat << line("raw socket ping-pong", *sock_lat);
  } else {
    std::cerr << "latency measurement failed\n";
    rc = 1;
  }

  std::ostringstream md;
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
    f << "Command: `build/bin/ps_bench" << (quick ? " --quick" : "")
      << "`\n\n"
      << md.str();
  }
  if (child.pid > 0) {
    kill(child.pid, SIGTERM);
    int status = 0;
    waitpid(child.pid, &status, 0);
  }
  return rc;
}

}  // namespace
}  // namespace strata

namespace {

// --help: what ps_bench is and its flags.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "ps_bench";
  cli.usage = "ps_bench [--target HOST:PORT] [--quick] [--markdown FILE]";
  cli.description =
      "Push/pull throughput and small-pull latency of a Strata parameter "
      "server, measured beside a raw loopback socket transfer and a bare "
      "gRPC echo in the same run.";
  cli.groups = {{"Benchmark", {"target", "ps_binary", "quick", "markdown"}}};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());
  return strata::Run(argc, argv);
}

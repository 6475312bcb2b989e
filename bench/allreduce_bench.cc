// allreduce_bench: ring all-reduce over gRPC WorkerServers in one process
// (ranks as threads, one server per rank, loopback), beside a raw loopback
// TCP socket transfer of the same bytes measured in the same run.
//
//   allreduce_bench [--ranks 2,4] [--sizes_kb ''] [--sizes_mb 4,64] [--pack_kb 1024]
//                   [--window 4] [--channels 1] [--in_process=false]
//                   [--markdown FILE]
//
// For each (ranks, size, pack) it reports the median time of one all-reduce
// of `size` bytes of float32 on every rank, the algorithm bandwidth
// (size / time) and the ring bus bandwidth (algbw * 2(n-1)/n, the bytes each
// link carries per second), and the process CPU time per all-reduce. The
// same all-reduce over the in-process transport (Mirrored's; no network)
// is measured beside it for scale.
#include <sys/resource.h>

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
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/baselines.h"
#include "collective/collective.h"
#include "collective/in_process.h"
#include "collective/worker_service.h"
#include "common/cli.h"

ABSL_FLAG(std::string, ranks, "2,4", "Comma-separated rank counts");
ABSL_FLAG(std::string, sizes_kb, "",
          "Comma-separated sizes (KiB), measured before --sizes_mb");
ABSL_FLAG(std::string, sizes_mb, "4,64", "Comma-separated sizes (MiB)");
ABSL_FLAG(std::string, pack_kb, "1024",
          "Comma-separated pack sizes (KiB) to try");
ABSL_FLAG(int, window, 4, "Deliver calls in flight per peer");
ABSL_FLAG(int, channels, 1, "TCP connections per peer");
ABSL_FLAG(int, iterations, 0,
          "Timed all-reduces per case (0: 20 up to 4 MiB, 5 above)");
ABSL_FLAG(bool, in_process, true,
          "Also measure the in-process transport (no network), for scale");
ABSL_FLAG(std::string, markdown, "", "Write the results table to this file");

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double CpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int64_t v;
    if (absl::SimpleAtoi(part, &v) && v > 0) out.push_back(v);
  }
  return out;
}

struct Row {
  std::string transport;
  int ranks = 0;
  int64_t bytes = 0;
  int64_t pack = 0;
  double seconds = 0;     // median per all-reduce
  double algbw = 0;       // GB/s
  double busbw = 0;       // GB/s
  double cpu_per_op = 0;  // process CPU seconds per all-reduce
  double raw = 0;         // raw socket GB/s, same bytes
};

// Times `iterations` all-reduces over `ts` (after one warm-up).
absl::StatusOr<Row> TimeAllReduce(
    const std::vector<std::unique_ptr<collective::Transport>>& ts,
    int64_t bytes, int64_t pack, int iterations) {
  const int n = static_cast<int>(ts.size());
  collective::CollectiveOptions options;
  options.pack_bytes = pack;
  options.timeout = absl::Seconds(120);
  const int64_t count = bytes / 4;
  std::vector<std::vector<float>> data(n, std::vector<float>(count, 1.0f));
  std::vector<double> times;
  double cpu = 0;
  for (int it = -1; it < iterations; ++it) {  // iteration -1: warm-up
    std::vector<absl::Status> status(n);
    const double cpu0 = CpuSeconds();
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        status[r] = collective::AllReduceSum(
            ts[r].get(), DType::kFloat32, data[r].data(), count,
            absl::StrCat("it", it), options);
      });
    }
    for (auto& t : threads) t.join();
    const double secs =
        std::chrono::duration<double>(Clock::now() - t0).count();
    for (const auto& s : status) {
      if (!s.ok()) return s;
    }
    if (it >= 0) {
      times.push_back(secs);
      cpu += CpuSeconds() - cpu0;
    }
    // Keep the values bounded (sums of ones grow by n per iteration).
    for (auto& d : data) std::fill(d.begin(), d.end(), 1.0f);
  }
  Row row;
  row.ranks = n;
  row.bytes = bytes;
  row.pack = pack;
  row.seconds = Median(times);
  row.algbw = bytes / row.seconds / 1e9;
  row.busbw = collective::RingBusBandwidth(row.algbw, n);
  row.cpu_per_op = cpu / iterations;
  return row;
}

absl::StatusOr<Row> RunGrpcCase(int n, int64_t bytes, int64_t pack,
                                int iterations, int64_t group) {
  collective::WorkerServerOptions so;
  so.max_sends_in_flight = absl::GetFlag(FLAGS_window);
  so.channels_per_peer = absl::GetFlag(FLAGS_channels);
  std::vector<std::unique_ptr<collective::WorkerServer>> servers;
  std::vector<std::string> peers;
  for (int r = 0; r < n; ++r) {
    auto s = collective::WorkerServer::Start(so, nullptr);
    if (!s.ok()) return s.status();
    peers.push_back((*s)->address());
    servers.push_back(*std::move(s));
  }
  collective::CollectiveOptions options;
  options.pack_bytes = pack;
  options.timeout = absl::Seconds(120);
  std::vector<std::unique_ptr<collective::Transport>> ts;
  for (int r = 0; r < n; ++r) {
    auto t = servers[r]->OpenGroup(group, r, peers, options);
    if (!t.ok()) return t.status();
    ts.push_back(*std::move(t));
  }
  auto row = TimeAllReduce(ts, bytes, pack, iterations);
  if (row.ok()) row->transport = "gRPC";
  ts.clear();
  for (auto& s : servers) s->Shutdown(absl::Seconds(1));
  return row;
}

absl::StatusOr<Row> RunInProcessCase(int n, int64_t bytes, int64_t pack,
                                     int iterations) {
  auto ts = collective::NewInProcessGroup(n);
  auto row = TimeAllReduce(ts, bytes, pack, iterations);
  if (row.ok()) row->transport = "in-process";
  return row;
}

std::string SizeName(int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) {
    return absl::StrCat(bytes >> 20, " MB");
  }
  return absl::StrCat(bytes >> 10, " KB");
}

int Main() {
  const std::vector<int64_t> ranks = ParseList(absl::GetFlag(FLAGS_ranks));
  std::vector<int64_t> sizes;  // bytes
  for (int64_t kb : ParseList(absl::GetFlag(FLAGS_sizes_kb))) {
    sizes.push_back(kb << 10);
  }
  for (int64_t mb : ParseList(absl::GetFlag(FLAGS_sizes_mb))) {
    sizes.push_back(mb << 20);
  }
  const std::vector<int64_t> packs = ParseList(absl::GetFlag(FLAGS_pack_kb));
  std::vector<Row> rows;
  int64_t group = 0;
  for (int64_t bytes : sizes) {
    int iterations = absl::GetFlag(FLAGS_iterations);
    if (iterations <= 0) iterations = bytes <= (4 << 20) ? 20 : 5;
    // The baseline first, in the same run: one connection, message + ack.
    auto raw = bench::RawSocketTransfer(static_cast<size_t>(bytes),
                                        std::max(3, iterations));
    if (!raw.ok()) {
      std::cerr << "raw socket: " << raw.status() << "\n";
      return 1;
    }
    for (int64_t n : ranks) {
      for (int64_t kb : packs) {
        std::vector<absl::StatusOr<Row>> results;
        results.push_back(RunGrpcCase(static_cast<int>(n), bytes, kb << 10,
                                      iterations, ++group));
        if (absl::GetFlag(FLAGS_in_process)) {
          results.push_back(RunInProcessCase(static_cast<int>(n), bytes,
                                             kb << 10, iterations));
        }
        for (auto& row : results) {
          if (!row.ok()) {
            std::cerr << "all-reduce " << n << " ranks " << SizeName(bytes)
                      << ": " << row.status() << "\n";
            return 1;
          }
          row->raw = raw->gbytes_per_sec;
          std::cout << absl::StrFormat(
                           "%-10s ranks %d  size %s  pack %s  time %.2f ms  "
                           "algbw %.2f GB/s  busbw %.2f GB/s  raw socket "
                           "%.2f GB/s  cpu %.1f ms/op",
                           row->transport, row->ranks, SizeName(row->bytes),
                           SizeName(row->pack), row->seconds * 1e3,
                           row->algbw, row->busbw, row->raw,
                           row->cpu_per_op * 1e3)
                    << std::endl;
          rows.push_back(*row);
        }
      }
    }
  }
  std::ostringstream md;
  md << "| transport | ranks | size | pack | time (median) | algbw GB/s | "
        "busbw GB/s | raw socket GB/s | busbw / raw | all links GB/s "
        "(ranks x busbw) | CPU ms per op | CPU s per GB moved |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    // Bytes over all links: every rank sends 2(n-1)/n of the tensor.
    const double moved_gb = 2.0 * (r.ranks - 1) * r.bytes / 1e9;
    md << absl::StrFormat(
        "| %s | %d | %s | %s | %.1f ms | %.2f | %.2f | %.2f | %.2f | %.2f | "
        "%.1f | %.2f |\n",
        r.transport, r.ranks, SizeName(r.bytes), SizeName(r.pack),
        r.seconds * 1e3, r.algbw, r.busbw, r.raw, r.busbw / r.raw,
        r.ranks * r.busbw, r.cpu_per_op * 1e3, r.cpu_per_op / moved_gb);
  }
  std::cout << "\n" << md.str();
  const std::string path = absl::GetFlag(FLAGS_markdown);
  if (!path.empty()) {
    std::ofstream f(path);
    f << md.str();
    if (!f) {
      std::cerr << "cannot write " << path << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace strata

namespace {

// --help: what allreduce_bench is and its flags.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "allreduce_bench";
  cli.usage =
      "allreduce_bench [--ranks 2,4] [--sizes-mb 4,64] [--pack-kb 1024] "
      "[--markdown FILE] [flags]";
  cli.description =
      "Ring all-reduce over gRPC WorkerServers in one process (ranks as "
      "threads, loopback), beside a raw loopback TCP transfer of the same "
      "bytes and the in-process transport.";
  cli.groups = {
      {"Cases", {"ranks", "sizes_kb", "sizes_mb", "pack_kb", "iterations",
                 "in_process"}},
      {"Transport", {"window", "channels"}},
      {"Report", {"markdown"}}};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());
  return strata::Main();
}

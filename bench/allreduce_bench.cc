// allreduce_bench: ring all-reduce over gRPC WorkerServers, beside a raw TCP
// socket transfer of the same bytes over the same link, measured in the
// same run.
//
//   allreduce_bench [--ranks 2,4] [--sizes_kb ''] [--sizes_mb 4,64] [--pack_kb 1024]
//                   [--window 4] [--channels 1] [--in_process=false]
//                   [--markdown FILE]
//   allreduce_bench --processes [--peer_netns NAME --peer_addr A --self_addr B]
//                   [--sizes_kb ''] [--sizes_mb 4,64] [--pack_kb 1024] [...]
//
// By default the ranks are threads of this process (one WorkerServer per
// rank, loopback). With --processes the 2 ranks are 2 processes: this one is
// rank 0 and starts this binary again as rank 1 (--serve_rank, behind
// `ip netns exec NAME` with --peer_netns, so that every byte crosses the
// link to NAME; bench/allreduce_netns.sh sets one up). Rank 1 prints
// "listening on HOST:PORT", both open group c + 1 for case c and run the
// same cases, rank 1 prints "cpu CASE SECONDS_PER_OP" after each (or
// "error ..." and exits 1), and it exits 0 once rank 0 closes its stdin
// (at once, with status 1, if that happens before the cases end: rank 0 is
// gone). Every wait for the other process is bounded. The raw-socket
// baselines run first, their peer where rank 1 will run, so that they cross
// the same link while the link is otherwise idle: one way with a 1-byte ack
// per message, and full duplex (both sides send the size at once, as each
// ring step does; its GB/s is per direction, the ceiling busbw compares to).
//
// For each (ranks, size, pack) it reports the median time of one all-reduce
// of `size` bytes of float32 on every rank, the algorithm bandwidth
// (size / time) and the ring bus bandwidth (algbw * 2(n-1)/n, the bytes each
// link carries per second), and the process CPU time per all-reduce (of
// both processes with --processes). The same all-reduce over the in-process
// transport (Mirrored's; no network) is measured beside it for scale
// (threads mode only). With --processes every result is checked (each
// element the sum of both ranks' known inputs), so a broken ring fails the
// run instead of reporting a bandwidth; there each timed all-reduce follows
// an untimed 1-element one, a barrier, so that both ranks start it
// together. The markdown file starts with the command that produced it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "bench/baselines.h"
#include "bench/peer_namespace.h"
#include "collective/collective.h"
#include "collective/in_process.h"
#include "collective/worker_service.h"
#include "common/cli.h"
#include "common/status_macros.h"

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
ABSL_FLAG(std::string, markdown, "",
          "Write the results table, with the command line, to this file");
ABSL_FLAG(bool, processes, false,
          "2 ranks as 2 processes: this one is rank 0 and starts this binary "
          "again as rank 1 (--ranks and --in-process are ignored)");
ABSL_FLAG(std::string, peer_netns, "",
          "With --processes: run rank 1 and the raw-socket peer in network "
          "namespace NAME (ip netns; needs root, --peer-addr and "
          "--self-addr)");
ABSL_FLAG(std::string, peer_addr, "",
          "With --peer-netns: the IPv4 address of the peer namespace's end "
          "of the link; rank 1's WorkerServer binds it");
ABSL_FLAG(std::string, self_addr, "",
          "With --peer-netns: the IPv4 address of this namespace's end of "
          "the link; rank 0's WorkerServer and the raw-socket baseline "
          "listen on it");
ABSL_FLAG(int, serve_rank, -1,
          "Started by --processes: serve rank 1 of the 2-process group whose "
          "rank 0 is at --rank0; prints \"listening on HOST:PORT\", runs "
          "the same cases, prints its CPU time per case and exits once its "
          "stdin closes");
ABSL_FLAG(std::string, rank0, "",
          "With --serve-rank: rank 0's WorkerServer address");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "With --serve-rank: the address rank 1's WorkerServer binds");

extern char** environ;

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
  double raw = 0;         // raw socket GB/s, same bytes, one way + ack
  // Raw socket GB/s per direction with both directions busy at once (as a
  // ring step sends to one neighbour while receiving from the other).
  double raw_duplex = 0;
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

// The sizes to measure, in bytes: --sizes_kb, then --sizes_mb.
std::vector<int64_t> Sizes() {
  std::vector<int64_t> sizes;
  for (int64_t kb : ParseList(absl::GetFlag(FLAGS_sizes_kb))) {
    sizes.push_back(kb << 10);
  }
  for (int64_t mb : ParseList(absl::GetFlag(FLAGS_sizes_mb))) {
    sizes.push_back(mb << 20);
  }
  return sizes;
}

// Timed all-reduces of a case of `bytes`: --iterations, or its default.
int IterationsFor(int64_t bytes) {
  const int iterations = absl::GetFlag(FLAGS_iterations);
  if (iterations > 0) return iterations;
  return bytes <= (4 << 20) ? 20 : 5;
}

// argv as a shell command line (arguments quoted where needed), for the
// first line of the markdown file.
// One result as a line of stdout.
std::string RowLine(const Row& row) {
  return absl::StrFormat(
      "%-10s ranks %d  size %s  pack %s  time %.2f ms  algbw %.2f GB/s  "
      "busbw %.2f GB/s  raw socket %.2f GB/s  full duplex %.2f GB/s  "
      "cpu %.1f ms/op",
      row.transport, row.ranks, SizeName(row.bytes), SizeName(row.pack),
      row.seconds * 1e3, row.algbw, row.busbw, row.raw, row.raw_duplex,
      row.cpu_per_op * 1e3);
}

// The results as a markdown table.
std::string MarkdownTable(const std::vector<Row>& rows) {
  std::ostringstream md;
  md << "| transport | ranks | size | pack | time (median) | algbw GB/s | "
        "busbw GB/s | raw socket GB/s | busbw / raw | full-duplex raw GB/s "
        "| busbw / full-duplex raw | all links GB/s "
        "(ranks x busbw) | CPU ms per op | CPU s per GB moved |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    // Bytes over all links: every rank sends 2(n-1)/n of the tensor.
    const double moved_gb = 2.0 * (r.ranks - 1) * r.bytes / 1e9;
    md << absl::StrFormat(
        "| %s | %d | %s | %s | %.1f ms | %.2f | %.2f | %.2f | %.2f | %.2f | "
        "%.2f | %.2f | %.1f | %.2f |\n",
        r.transport, r.ranks, SizeName(r.bytes), SizeName(r.pack),
        r.seconds * 1e3, r.algbw, r.busbw, r.raw, r.busbw / r.raw,
        r.raw_duplex, r.busbw / r.raw_duplex,
        r.ranks * r.busbw, r.cpu_per_op * 1e3, r.cpu_per_op / moved_gb);
  }
  return md.str();
}

// Writes `body` to --markdown (when set) below a line with the command that
// produced it. Returns false (having said why) when the file cannot be
// written.
bool WriteMarkdown(int argc, char** argv, const std::string& body) {
  const std::string path = absl::GetFlag(FLAGS_markdown);
  if (path.empty()) return true;
  std::ofstream f(path);
  f << "Command: `" << bench::CommandLine(argc, argv) << "`\n\n" << body;
  if (!f) {
    std::cerr << "cannot write " << path << "\n";
    return false;
  }
  return true;
}

// The default mode: ranks as threads of this process.
int RunThreads(int argc, char** argv) {
  const std::vector<int64_t> ranks = ParseList(absl::GetFlag(FLAGS_ranks));
  const std::vector<int64_t> sizes = Sizes();
  const std::vector<int64_t> packs = ParseList(absl::GetFlag(FLAGS_pack_kb));
  std::vector<Row> rows;
  int64_t group = 0;
  for (int64_t bytes : sizes) {
    const int iterations = IterationsFor(bytes);
    // The baselines first, in the same run: one connection, message + ack,
    // and the same bytes both ways at once.
    auto raw = bench::RawSocketTransfer(static_cast<size_t>(bytes),
                                        std::max(3, iterations));
    if (!raw.ok()) {
      std::cerr << "raw socket: " << raw.status() << "\n";
      return 1;
    }
    auto duplex = bench::RawSocketDuplexTransfer(static_cast<size_t>(bytes),
                                                 std::max(3, iterations));
    if (!duplex.ok()) {
      std::cerr << "raw socket, full duplex: " << duplex.status() << "\n";
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
          row->raw_duplex = duplex->gbytes_per_sec;
          std::cout << RowLine(*row) << std::endl;
          rows.push_back(*row);
        }
      }
    }
  }
  const std::string md = MarkdownTable(rows);
  std::cout << "\n" << md;
  return WriteMarkdown(argc, argv, md) ? 0 : 1;
}

// ---- --processes: rank 0 here, rank 1 a child process ----

constexpr int kProcessRanks = 2;
// Bounds on every wait for rank 1: its "listening on" line, its "cpu" line
// after a case (it ends a case within moments of rank 0), its exit once its
// stdin is closed (SIGKILL after that).
constexpr auto kListenTimeout = std::chrono::seconds(30);
constexpr auto kCpuLineTimeout = std::chrono::seconds(30);
constexpr auto kExitTimeout = std::chrono::seconds(10);
// Rank 1: how long it waits for its stdin to close after the last case.
constexpr absl::Duration kStdinCloseTimeout = absl::Seconds(60);
constexpr absl::Duration kCollectiveTimeout = absl::Seconds(120);

// One case of the 2-process mode. Both ranks derive the same list from the
// same flags (rank 0 passes its own to rank 1), and case c runs in group
// c + 1 on both.
struct ProcessCase {
  int64_t bytes = 0;
  int64_t pack = 0;
  int iterations = 0;
};

std::vector<ProcessCase> ProcessCases() {
  std::vector<ProcessCase> cases;
  const std::vector<int64_t> packs = ParseList(absl::GetFlag(FLAGS_pack_kb));
  for (int64_t bytes : Sizes()) {
    for (int64_t kb : packs) {
      cases.push_back({bytes, kb << 10, IterationsFor(bytes)});
    }
  }
  return cases;
}

std::string CaseName(size_t index, const ProcessCase& c) {
  return absl::StrCat("case ", index, " (", SizeName(c.bytes), ", pack ",
                      SizeName(c.pack), ")");
}

std::string IterationName(int it) {
  return it < 0 ? "the warm-up" : absl::StrCat("iteration ", it);
}

// Rank `rank`'s input element i at iteration `it` (-1: the warm-up). Small
// multiples of 0.5, so that the sum of both ranks' values is exact in
// float32 and each result can be compared exactly.
float InputValue(int rank, int64_t i, int it) {
  return static_cast<float>(i % 1024) + 0.5f * static_cast<float>(rank) +
         static_cast<float>(it + 1);
}

float ExpectedSum(int64_t i, int it) {
  float sum = 0;
  for (int r = 0; r < kProcessRanks; ++r) sum += InputValue(r, i, it);
  return sum;
}

struct RankCaseResult {
  std::vector<double> seconds;  // per timed all-reduce, on this rank
  double cpu_per_op = 0;        // this process's CPU seconds per all-reduce
};

// Runs case `index` as `rank` of the 2-process group (group index + 1 on the
// WorkerServer `server`, whose peers are `peers`): one warm-up and
// c.iterations timed all-reduces, each result checked element by element.
// Each all-reduce is preceded by an untimed 1-element one, a barrier, so
// that the timed one starts on both ranks together (not when the slower
// rank has refilled its input). Errors, naming the case and iteration:
// OpenGroup's; the all-reduce's; INTERNAL for a wrong result (the group is
// aborted then, so that the peer stops waiting too).
absl::StatusOr<RankCaseResult> RunRankCase(
    collective::WorkerServer* server, int rank,
    const std::vector<std::string>& peers, size_t index, const ProcessCase& c) {
  const std::string name = CaseName(index, c);
  collective::CollectiveOptions options;
  options.pack_bytes = c.pack;
  options.timeout = kCollectiveTimeout;
  auto t =
      server->OpenGroup(static_cast<int64_t>(index) + 1, rank, peers, options);
  if (!t.ok()) {
    return absl::Status(
        t.status().code(),
        absl::StrCat(name, ": OpenGroup: ", t.status().message()));
  }
  const int64_t count = c.bytes / 4;
  std::vector<float> data(count);
  RankCaseResult result;
  double cpu = 0;
  for (int it = -1; it < c.iterations; ++it) {  // iteration -1: warm-up
    for (int64_t i = 0; i < count; ++i) data[i] = InputValue(rank, i, it);
    float token = 1;
    absl::Status s =
        collective::AllReduceSum(t->get(), DType::kFloat32, &token, 1,
                                 absl::StrCat("barrier", it), options);
    const double cpu0 = CpuSeconds();
    const auto t0 = Clock::now();
    if (s.ok()) {
      s = collective::AllReduceSum(t->get(), DType::kFloat32, data.data(),
                                   count, absl::StrCat("it", it), options);
    }
    const double secs =
        std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu1 = CpuSeconds();
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(name, " ", IterationName(it),
                                                 ": ", s.message()));
    }
    for (int64_t i = 0; i < count; ++i) {
      const float want = ExpectedSum(i, it);
      if (data[i] != want) {
        const absl::Status wrong = absl::InternalError(absl::StrFormat(
            "%s %s: element %d is %g, want %g (the sum of both ranks' "
            "inputs)",
            name, IterationName(it), i, data[i], want));
        (*t)->Abort(wrong);
        return wrong;
      }
    }
    if (it >= 0) {
      result.seconds.push_back(secs);
      cpu += cpu1 - cpu0;
    }
  }
  result.cpu_per_op = cpu / c.iterations;
  return result;
}

// Where rank 1 runs: this namespace (loopback) or another one.
struct Placement : bench::PeerNamespace {
  std::string Describe() const {
    if (netns.empty()) {
      return "loopback (127.0.0.1): both ranks and the raw-socket peer in "
             "one network namespace";
    }
    return absl::StrCat(
        "over network namespace `", netns, "` (veth): rank 0 at ", self_addr,
        ", rank 1 and the raw-socket peer in `", netns, "` at ", peer_addr);
  }
};

std::string DescribeExit(int status) {
  if (WIFEXITED(status))
    return absl::StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("wait status ", status);
}

// Rank 1 as a child process (this binary with --serve_rank 1, behind
// `ip netns exec` for another namespace). Its stdin and stdout are pipes
// held here; its stderr is ours, so that what it cannot say on stdout
// (a bad flag, a namespace that cannot be joined) still reaches the user.
// Closing its stdin tells it to exit. Not thread-safe. The destructor
// finishes it (Finish).
class Rank1Process {
 public:
  // Spawns args (args[0] a path) and waits up to kListenTimeout for its
  // "listening on HOST:PORT" line. Errors: NOT_FOUND when it cannot be
  // started; otherwise as ReadLine.
  static absl::StatusOr<std::unique_ptr<Rank1Process>> Spawn(
      const std::vector<std::string>& args);

  Rank1Process(const Rank1Process&) = delete;
  Rank1Process& operator=(const Rank1Process&) = delete;
  ~Rank1Process() { (void)Finish(); }

  // Its WorkerServer, "HOST:PORT".
  const std::string& address() const { return address_; }

  // The rest of the next line on its stdout that starts with `prefix`
  // (other lines are skipped), waiting at most `timeout`. Errors:
  // DEADLINE_EXCEEDED; INTERNAL with its message where it prints an
  // "error ..." line first; UNAVAILABLE, naming how it ended, when its
  // stdout closes first (it is finished then); FAILED_PRECONDITION after
  // Finish.
  absl::StatusOr<std::string> ReadLine(absl::string_view prefix,
                                       Clock::duration timeout);

  // Closes its stdin, waits up to kExitTimeout for it to exit and kills it
  // (SIGKILL) after that. OK when it exited with status 0; otherwise
  // INTERNAL naming how it ended (and its "error" line, where it printed
  // one), DEADLINE_EXCEEDED where it had to be killed. Later calls return
  // the first one's result.
  absl::Status Finish();

 private:
  Rank1Process() = default;

  // Reads what it still writes to stdout until EOF (bounded: it has
  // exited) and returns its first "error" line, or "".
  std::string DrainErrors();

  std::string command_;  // for messages
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;  // read from stdout, not yet consumed as lines
  std::string address_;
  bool finished_ = false;
  absl::Status finish_status_;
};

absl::StatusOr<std::unique_ptr<Rank1Process>> Rank1Process::Spawn(
    const std::vector<std::string>& args) {
  int out[2];
  int in[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  if (pipe2(in, O_CLOEXEC) != 0) {
    const int error = errno;
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(error)));
  }
  // dup2 clears O_CLOEXEC on the child's 0 and 1; every other end closes
  // at exec.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::vector<char*> argv;
  for (const std::string& a : args) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  auto process = std::unique_ptr<Rank1Process>(new Rank1Process);
  process->command_ = absl::StrJoin(args, " ");
  const int rc = posix_spawn(&process->pid_, argv[0], &actions, nullptr,
                             argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  process->stdin_fd_ = in[1];
  process->stdout_fd_ = out[0];
  if (rc != 0) {
    process->pid_ = -1;
    return absl::NotFoundError(absl::StrCat("cannot start `", process->command_,
                                            "`: ", std::strerror(rc)));
  }
  auto address = process->ReadLine("listening on ", kListenTimeout);
  if (!address.ok()) {
    return absl::Status(
        address.status().code(),
        absl::StrCat("rank 1 (`", process->command_,
                     "`) did not start: ", address.status().message()));
  }
  process->address_ = *std::move(address);
  return process;
}

absl::StatusOr<std::string> Rank1Process::ReadLine(absl::string_view prefix,
                                                   Clock::duration timeout) {
  if (finished_) return absl::FailedPreconditionError("rank 1 has finished");
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    for (size_t eol = buffer_.find('\n'); eol != std::string::npos;
         eol = buffer_.find('\n')) {
      const std::string line = buffer_.substr(0, eol);
      buffer_.erase(0, eol + 1);
      absl::string_view rest = line;
      if (absl::ConsumePrefix(&rest, prefix)) {
        return std::string(absl::StripAsciiWhitespace(rest));
      }
      if (absl::ConsumePrefix(&rest, "error ")) {
        return absl::InternalError(absl::StrCat("rank 1: ", rest));
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank 1 printed no \"", prefix, "...\" line within ",
          std::chrono::duration_cast<std::chrono::seconds>(timeout).count(),
          " s"));
    }
    pollfd pfd{stdout_fd_, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (ready == 0) continue;  // the deadline is checked above
    char chunk[512];
    const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const absl::Status end = Finish();
      return absl::UnavailableError(absl::StrCat(
          "rank 1 closed its stdout before a \"", prefix, "...\" line: ",
          end.ok() ? "it exited with status 0" : end.message()));
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

std::string Rank1Process::DrainErrors() {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < deadline) {
    pollfd pfd{stdout_fd_, POLLIN, 0};
    const int ready = poll(&pfd, 1, 100);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    char chunk[512];
    const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buffer_.append(chunk, static_cast<size_t>(n));
  }
  for (absl::string_view line : absl::StrSplit(buffer_, '\n')) {
    if (absl::ConsumePrefix(&line, "error ")) return std::string(line);
  }
  return "";
}

absl::Status Rank1Process::Finish() {
  if (finished_) return finish_status_;
  finished_ = true;
  if (stdin_fd_ >= 0) {
    close(stdin_fd_);
    stdin_fd_ = -1;
  }
  if (pid_ > 0) {
    const Clock::time_point deadline = Clock::now() + kExitTimeout;
    int status = 0;
    bool killed = false;
    for (;;) {
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (r < 0 && errno != EINTR) {
        finish_status_ = absl::InternalError(
            absl::StrCat("waitpid rank 1: ", std::strerror(errno)));
        break;
      }
      if (Clock::now() >= deadline) {
        kill(pid_, SIGKILL);
        killed = true;
        while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    if (killed) {
      finish_status_ = absl::DeadlineExceededError(absl::StrCat(
          "rank 1 did not exit within ",
          std::chrono::duration_cast<std::chrono::seconds>(kExitTimeout)
              .count(),
          " s of its stdin closing (killed)"));
    } else if (finish_status_.ok() &&
               !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      const std::string error = DrainErrors();
      finish_status_ = absl::InternalError(
          absl::StrCat("rank 1 ended with ", DescribeExit(status),
                       error.empty() ? "" : ": ", error));
    }
  }
  if (stdout_fd_ >= 0) {
    close(stdout_fd_);
    stdout_fd_ = -1;
  }
  return finish_status_;
}

// --processes: rank 0.
int RunProcesses(int argc, char** argv) {
  Placement where;
  where.netns = absl::GetFlag(FLAGS_peer_netns);
  where.peer_addr = absl::GetFlag(FLAGS_peer_addr);
  where.self_addr = absl::GetFlag(FLAGS_self_addr);
  if (!where.netns.empty()) {
    if (where.peer_addr.empty() || where.self_addr.empty()) {
      std::cerr << "allreduce_bench: --peer-netns needs --peer-addr and "
                   "--self-addr\n";
      return 2;
    }
    where.ip = bench::FindIp();
    if (where.ip.empty()) {
      std::cerr << "allreduce_bench: --peer-netns needs iproute2's ip\n";
      return 1;
    }
  } else if (!where.peer_addr.empty() || !where.self_addr.empty()) {
    std::cerr << "allreduce_bench: --peer-addr and --self-addr need "
                 "--peer-netns\n";
    return 2;
  }
  const std::vector<ProcessCase> cases = ProcessCases();
  if (cases.empty()) {
    std::cerr << "allreduce_bench: no cases (--sizes-kb, --sizes-mb and "
                 "--pack-kb name none)\n";
    return 2;
  }
  const std::string link = where.Describe();
  std::cout << "link: " << link << std::endl;

  // The baselines first, while the link is idle and before any gRPC
  // thread exists (the socket baselines fork): one connection, message +
  // ack, and the same bytes both ways at once, their peer where rank 1 will
  // be.
  std::map<int64_t, double> raw;         // bytes -> GB/s
  std::map<int64_t, double> raw_duplex;  // bytes -> GB/s per direction
  for (const ProcessCase& c : cases) {
    if (raw.count(c.bytes) != 0) continue;
    auto r = bench::RawSocketTransfer(static_cast<size_t>(c.bytes),
                                      std::max(3, c.iterations), where.Link());
    if (!r.ok()) {
      std::cerr << "raw socket " << SizeName(c.bytes) << ": " << r.status()
                << "\n";
      return 1;
    }
    raw[c.bytes] = r->gbytes_per_sec;
    auto d = bench::RawSocketDuplexTransfer(
        static_cast<size_t>(c.bytes), std::max(3, c.iterations), where.Link());
    if (!d.ok()) {
      std::cerr << "raw socket, full duplex " << SizeName(c.bytes) << ": "
                << d.status() << "\n";
      return 1;
    }
    raw_duplex[c.bytes] = d->gbytes_per_sec;
  }

  collective::WorkerServerOptions so;
  so.host = where.SelfHost();
  so.max_sends_in_flight = absl::GetFlag(FLAGS_window);
  so.channels_per_peer = absl::GetFlag(FLAGS_channels);
  auto server = collective::WorkerServer::Start(so, nullptr);
  if (!server.ok()) {
    std::cerr << "allreduce_bench: rank 0: " << server.status() << "\n";
    return 1;
  }
  // Rank 1 gets this process's case flags, so that both run the same list.
  auto child = Rank1Process::Spawn(where.Exec(
      {bench::SelfPath(argv[0]), "--serve_rank=1",
       absl::StrCat("--rank0=", (*server)->address()),
       absl::StrCat("--host=", where.PeerHost()),
       absl::StrCat("--sizes_kb=", absl::GetFlag(FLAGS_sizes_kb)),
       absl::StrCat("--sizes_mb=", absl::GetFlag(FLAGS_sizes_mb)),
       absl::StrCat("--pack_kb=", absl::GetFlag(FLAGS_pack_kb)),
       absl::StrCat("--iterations=", absl::GetFlag(FLAGS_iterations)),
       absl::StrCat("--window=", absl::GetFlag(FLAGS_window)),
       absl::StrCat("--channels=", absl::GetFlag(FLAGS_channels))}));
  if (!child.ok()) {
    std::cerr << "allreduce_bench: " << child.status() << "\n";
    (*server)->Shutdown(absl::Seconds(1));
    return 1;
  }
  const std::vector<std::string> peers = {(*server)->address(),
                                          (*child)->address()};

  std::vector<Row> rows;
  absl::Status failed;
  for (size_t index = 0; index < cases.size(); ++index) {
    const ProcessCase& c = cases[index];
    auto mine = RunRankCase(server->get(), 0, peers, index, c);
    if (!mine.ok()) {
      failed = mine.status();
      break;
    }
    // "cpu CASE SECONDS_PER_OP", once rank 1 has ended the case.
    auto line = (*child)->ReadLine("cpu ", kCpuLineTimeout);
    if (!line.ok()) {
      failed = line.status();
      break;
    }
    std::vector<std::string> fields =
        absl::StrSplit(*line, ' ', absl::SkipEmpty());
    size_t reported = 0;
    double child_cpu = 0;
    if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &reported) ||
        reported != index || !absl::SimpleAtod(fields[1], &child_cpu)) {
      failed = absl::InternalError(absl::StrCat(
          CaseName(index, c), ": rank 1 reported \"cpu ", *line, "\""));
      break;
    }
    Row row;
    row.transport = "gRPC, 2 processes";
    row.ranks = kProcessRanks;
    row.bytes = c.bytes;
    row.pack = c.pack;
    row.seconds = Median(mine->seconds);
    row.algbw = c.bytes / row.seconds / 1e9;
    row.busbw = collective::RingBusBandwidth(row.algbw, kProcessRanks);
    row.cpu_per_op = mine->cpu_per_op + child_cpu;
    row.raw = raw[c.bytes];
    row.raw_duplex = raw_duplex[c.bytes];
    std::cout << RowLine(row) << std::endl;
    rows.push_back(row);
  }
  // Rank 1 is finished in every case: how it ended (with its "error" line,
  // where it printed one) is reported beside rank 0's own error.
  const absl::Status child_end = (*child)->Finish();
  (*server)->Shutdown(absl::Seconds(1));
  if (!failed.ok() || !child_end.ok()) {
    if (!failed.ok()) std::cerr << "allreduce_bench: " << failed << "\n";
    if (!child_end.ok()) std::cerr << "allreduce_bench: " << child_end << "\n";
    return 1;
  }
  const std::string md =
      absl::StrCat("Link: ", link, ".\n\n", MarkdownTable(rows));
  std::cout << "\n" << md;
  return WriteMarkdown(argc, argv, md) ? 0 : 1;
}

// --serve_rank 1: rank 1, started by RunProcesses. Prints "listening on
// HOST:PORT", runs the cases with a "cpu CASE SECONDS_PER_OP" line after
// each (or one "error ..." line and exit status 1), then waits for its
// stdin to close and exits 0. A stdin closed before the cases end means
// rank 0 is gone: it exits 1 at once.
int ServeRank() {
  if (absl::GetFlag(FLAGS_serve_rank) != 1 ||
      absl::GetFlag(FLAGS_rank0).empty()) {
    std::cerr << "allreduce_bench: --serve-rank 1 (the only one served) "
                 "needs --rank0\n";
    return 2;
  }
  const std::vector<ProcessCase> cases = ProcessCases();
  collective::WorkerServerOptions so;
  so.host = absl::GetFlag(FLAGS_host);
  so.max_sends_in_flight = absl::GetFlag(FLAGS_window);
  so.channels_per_peer = absl::GetFlag(FLAGS_channels);
  auto server = collective::WorkerServer::Start(so, nullptr);
  if (!server.ok()) {
    std::cout << "error " << server.status() << std::endl;
    return 1;
  }

  // The stdin watcher: a thread blocked in read() (shared state, as it may
  // outlive this function when the cases fail; it is left detached).
  struct StdinWatch {
    std::atomic<bool> cases_done{false};
    absl::Notification closed;
  };
  auto watch = std::make_shared<StdinWatch>();
  std::thread([watch] {
    char buf[256];
    for (;;) {
      const ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      break;
    }
    if (!watch->cases_done.load()) {
      std::cerr << "allreduce_bench rank 1: stdin closed before the cases "
                   "ended (rank 0 gone); exiting\n";
      std::_Exit(1);
    }
    watch->closed.Notify();
  }).detach();

  std::cout << "listening on " << (*server)->address() << std::endl;
  const std::vector<std::string> peers = {absl::GetFlag(FLAGS_rank0),
                                          (*server)->address()};
  for (size_t index = 0; index < cases.size(); ++index) {
    auto result = RunRankCase(server->get(), 1, peers, index, cases[index]);
    if (!result.ok()) {
      std::cout << "error " << result.status() << std::endl;
      (*server)->Shutdown(absl::Seconds(1));
      return 1;
    }
    // Before the last line: rank 0 may close stdin as soon as it reads it.
    if (index + 1 == cases.size()) watch->cases_done.store(true);
    std::cout << absl::StrFormat("cpu %d %.9g", index, result->cpu_per_op)
              << std::endl;
  }
  watch->cases_done.store(true);  // no cases at all
  const bool closed =
      watch->closed.WaitForNotificationWithTimeout(kStdinCloseTimeout);
  (*server)->Shutdown(absl::Seconds(1));
  if (!closed) {
    std::cerr << "allreduce_bench rank 1: stdin still open "
              << absl::ToInt64Seconds(kStdinCloseTimeout)
              << " s after the last case\n";
    return 1;
  }
  return 0;
}

int Main(int argc, char** argv) {
  if (absl::GetFlag(FLAGS_serve_rank) >= 0) return ServeRank();
  if (absl::GetFlag(FLAGS_processes)) return RunProcesses(argc, argv);
  return RunThreads(argc, argv);
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
      "[--markdown FILE] [--processes [--peer-netns NAME --peer-addr A "
      "--self-addr B]] [flags]";
  cli.description =
      "Ring all-reduce over gRPC WorkerServers, beside a raw TCP transfer of "
      "the same bytes over the same link: by default in one process (ranks "
      "as threads, loopback, with the in-process transport for scale); "
      "with --processes as 2 processes, on loopback or across a link to "
      "another network namespace, every result checked.";
  cli.groups = {
      {"Cases", {"ranks", "sizes_kb", "sizes_mb", "pack_kb", "iterations",
                 "in_process"}},
      {"Transport", {"window", "channels"}},
      {"Report", {"markdown"}},
      {"Processes", {"processes", "peer_netns", "peer_addr", "self_addr"}},
      {"Rank 1 (started by --processes)", {"serve_rank", "rank0", "host"}}};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());
  return strata::Main(argc, argv);
}

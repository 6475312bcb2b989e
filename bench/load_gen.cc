// load_gen: drives one parameter server with concurrent simulated workers
// for a bounded time and reports, per operation, p50/p99 latency,
// throughput and errors, and the resident memory sampled over the run (to
// show that it levels off).
//
//   load_gen [--target HOST:PORT [--ps_pid PID]] [--workers 64]
//            [--seconds 60 | --soak] [--sample_seconds S] [--markdown FILE]
//
// Without --target it starts a PS in this process on 127.0.0.1:0 (the
// memory samples are then this process's: the PS and the workers' client
// buffers). With --target the samples are this process's, or the PS
// process's when --ps_pid names it. --soak runs 30 minutes.
//
// Each simulated worker has its own client (its own TCP connection) and
// loops over one training step of a small model with an embedding table:
//   pull       PullVariables of the 4 dense variables (407 KB)
//   pull_rows  PullRows of --rows random rows of the embedding [100000, 16]
//   push       PushVariables of the 4 dense gradients, tagged (job, worker,
//              step) as a worker does
//   push_rows  PushRows of the same rows (duplicate ids are summed)
// Every variable is ASYNC with a server-side optimizer (Adam for the dense
// ones, Adagrad for the embedding). Exit status: 0 when every call
// succeeded and the server applied every push; 1 otherwise.
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "common/cli.h"
#include "common/logging.h"
#include "server/ps_server.h"

ABSL_FLAG(std::string, target, "",
          "PS address; empty starts a PS in this process on 127.0.0.1:0");
ABSL_FLAG(int, ps_pid, 0,
          "With --target: sample this process's resident memory (default: "
          "this process's)");
ABSL_FLAG(int, workers, 64, "Concurrent simulated workers");
ABSL_FLAG(double, seconds, 60, "Run time");
ABSL_FLAG(bool, soak, false, "Run for 30 minutes (overrides --seconds)");
ABSL_FLAG(double, sample_seconds, 0,
          "Resident memory sample interval (default: run time / 12, at "
          "least 1 s)");
ABSL_FLAG(int, rows, 256, "Embedding rows per pull_rows/push_rows");
ABSL_FLAG(std::string, markdown, "", "Also write the report to this file");

namespace strata {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr int64_t kEmbeddingRows = 100000;
constexpr int64_t kEmbeddingWidth = 16;
constexpr char kEmbedding[] = "load/embedding";

struct DenseVariable {
  const char* name;
  Shape shape;
};
const std::vector<DenseVariable>& DenseVariables() {
  static const auto* vars = new std::vector<DenseVariable>{
      {"load/dense/kernel", {784, 128}},
      {"load/dense/bias", {128}},
      {"load/out/kernel", {128, 10}},
      {"load/out/bias", {10}}};
  return *vars;
}

// Latency histogram with fixed memory: bucket i holds latencies in
// [1.02^i, 1.02^(i+1)) microseconds, so a percentile is within 1%.
class Histogram {
 public:
  void Record(double micros) {
    int i = micros <= 1 ? 0
                        : static_cast<int>(std::log(micros) / std::log(kBase));
    counts_[std::clamp(i, 0, kBuckets - 1)]++;
    ++total_;
  }
  void Merge(const Histogram& o) {
    for (int i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
    total_ += o.total_;
  }
  int64_t count() const { return total_; }
  // The p-quantile (0 < p < 1) in microseconds; 0 when empty.
  double Quantile(double p) const {
    if (total_ == 0) return 0;
    const int64_t rank = static_cast<int64_t>(std::ceil(p * total_));
    int64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::pow(kBase, i + 0.5);
    }
    return std::pow(kBase, kBuckets);
  }

 private:
  static constexpr double kBase = 1.02;
  static constexpr int kBuckets = 1300;  // up to ~1.5e11 us
  std::array<int64_t, kBuckets> counts_{};
  int64_t total_ = 0;
};

enum Op { kPull, kPullRows, kPush, kPushRows, kNumOps };
constexpr const char* kOpNames[kNumOps] = {"pull", "pull_rows", "push",
                                           "push_rows"};

struct OpStats {
  Histogram latency;
  int64_t errors = 0;
  int64_t bytes = 0;
  std::string first_error;
};

struct WorkerStats {
  std::array<OpStats, kNumOps> ops;
  int64_t steps = 0;
  int64_t dense_pushes_ok = 0;  // PushVariables calls that succeeded
  int64_t row_pushes_ok = 0;
};

struct RssSample {
  double seconds;
  int64_t kib;
};

// VmRSS of `pid` (0: this process) in KiB; -1 when unreadable.
int64_t ReadRssKib(int pid) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/status")
                            : absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      int64_t kib = -1;
      fields >> kib;
      return kib;
    }
  }
  return -1;
}

absl::Status CreateVariables(PsClient* client) {
  for (const DenseVariable& v : DenseVariables()) {
    v1::VariableSpec spec;
    spec.set_name(v.name);
    spec.set_dtype(v1::DT_FLOAT32);
    for (int64_t d : v.shape) spec.add_shape(d);
    spec.mutable_initializer()->set_type(v.shape.size() == 2 ? "glorot_uniform"
                                                             : "zeros");
    spec.mutable_initializer()->set_seed(1);
    spec.mutable_optimizer()->set_type("adam");
    spec.mutable_optimizer()->set_learning_rate(1e-4);
    absl::StatusOr<bool> created = client->CreateVariable(spec);
    if (!created.ok()) return created.status();
  }
  v1::VariableSpec emb;
  emb.set_name(kEmbedding);
  emb.set_dtype(v1::DT_FLOAT32);
  emb.add_shape(kEmbeddingRows);
  emb.add_shape(kEmbeddingWidth);
  emb.mutable_initializer()->set_type("random_uniform");
  emb.mutable_initializer()->set_seed(2);
  emb.mutable_optimizer()->set_type("adagrad");
  emb.mutable_optimizer()->set_learning_rate(1e-3);
  return client->CreateVariable(emb).status();
}

// One simulated worker: steps until `deadline`.
void RunWorker(const std::string& target, int index, int rows,
               SteadyClock::time_point deadline, WorkerStats* stats) {
  PsClientOptions options;
  options.deadline = absl::Seconds(30);
  std::unique_ptr<PsClient> client = PsClient::Connect(target, options);
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<std::vector<float>> values, grads;
  std::vector<void*> dsts;
  std::vector<size_t> sizes;
  std::vector<const void*> grad_ptrs;
  int64_t dense_bytes = 0;
  for (const DenseVariable& v : DenseVariables()) {
    names.push_back(v.name);
    shapes.push_back(v.shape);
    const int64_t n = NumElements(v.shape);
    values.emplace_back(n);
    grads.emplace_back(n, index % 2 == 0 ? 1e-3f : -1e-3f);
    dense_bytes += n * static_cast<int64_t>(sizeof(float));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    dsts.push_back(values[i].data());
    sizes.push_back(values[i].size() * sizeof(float));
    grad_ptrs.push_back(grads[i].data());
  }
  std::mt19937_64 rng(1000 + index);
  std::uniform_int_distribution<int64_t> row(0, kEmbeddingRows - 1);
  std::vector<int64_t> ids(rows);
  std::vector<float> row_values(rows * kEmbeddingWidth);
  std::vector<float> row_grads(rows * kEmbeddingWidth, 1e-3f);
  const int64_t row_bytes =
      rows * kEmbeddingWidth * static_cast<int64_t>(sizeof(float));

  auto timed = [&](Op op, int64_t bytes, auto&& call) {
    const auto start = SteadyClock::now();
    absl::Status status = call();
    const double micros =
        std::chrono::duration<double, std::micro>(SteadyClock::now() - start)
            .count();
    OpStats& s = stats->ops[op];
    s.latency.Record(micros);
    if (status.ok()) {
      s.bytes += bytes;
    } else {
      if (s.errors++ == 0) s.first_error = status.ToString();
    }
    return status.ok();
  };

  for (int64_t step = 0; SteadyClock::now() < deadline; ++step) {
    const PushTag tag{"load", index, step};
    timed(kPull, dense_bytes, [&] {
      return client->PullVariables(names, dsts, sizes).status();
    });
    for (int64_t& id : ids) id = row(rng);
    timed(kPullRows, row_bytes, [&] {
      return client
          ->PullRows(kEmbedding, ids, row_values.data(),
                     row_values.size() * sizeof(float))
          .status();
    });
    if (timed(kPush, dense_bytes, [&] {
          return client
              ->PushVariables(names, DType::kFloat32, shapes, grad_ptrs, tag)
              .status();
        })) {
      ++stats->dense_pushes_ok;
    }
    if (timed(kPushRows, row_bytes + rows * 8, [&] {
          return client
              ->PushRows(kEmbedding, DType::kFloat32, ids, kEmbeddingWidth,
                         row_grads.data(), tag)
              .status();
        })) {
      ++stats->row_pushes_ok;
    }
    stats->steps = step + 1;
  }
}

std::string MiB(int64_t kib) {
  return absl::StrFormat("%.1f", static_cast<double>(kib) / 1024.0);
}

int Run(int argc, char** argv) {
  const int num_workers = absl::GetFlag(FLAGS_workers);
  const double seconds =
      absl::GetFlag(FLAGS_soak) ? 1800.0 : absl::GetFlag(FLAGS_seconds);
  double sample_seconds = absl::GetFlag(FLAGS_sample_seconds);
  if (sample_seconds <= 0) sample_seconds = std::max(1.0, seconds / 12);
  const int rows = absl::GetFlag(FLAGS_rows);
  if (num_workers < 1 || seconds <= 0 || rows < 1) {
    std::cerr << "load_gen: --workers, --seconds and --rows must be positive\n";
    return 1;
  }

  std::string target = absl::GetFlag(FLAGS_target);
  int rss_pid = 0;
  Logger logger("ps:load", stderr);
  logger.set_min_level(LogLevel::kWarning);
  std::unique_ptr<PsServer> server;
  if (target.empty()) {
    PsServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    absl::StatusOr<std::unique_ptr<PsServer>> started =
        PsServer::Start(options, &logger);
    if (!started.ok()) {
      std::cerr << "load_gen: cannot start a PS: " << started.status() << "\n";
      return 1;
    }
    server = *std::move(started);
    target = server->address();
  } else {
    rss_pid = absl::GetFlag(FLAGS_ps_pid);
  }
  const std::string where =
      server ? "in-process PS" : absl::StrCat("PS at ", target);
  std::cout << absl::StrFormat(
                   "load_gen: %s, %d workers, %.0f s, %d rows per row op; "
                   "memory of %s",
                   where, num_workers, seconds, rows,
                   rss_pid ? absl::StrCat("pid ", rss_pid)
                           : std::string("this process"))
            << std::endl;

  std::unique_ptr<PsClient> setup = PsClient::Connect(target);
  if (absl::Status s = CreateVariables(setup.get()); !s.ok()) {
    std::cerr << "load_gen: creating variables: " << s << "\n";
    return 1;
  }
  absl::StatusOr<v1::StatsResponse> before = setup->Stats();
  if (!before.ok()) {
    std::cerr << "load_gen: Stats: " << before.status() << "\n";
    return 1;
  }

  // Memory sampler: every sample_seconds until the workers are done.
  std::vector<RssSample> samples;
  absl::Notification done;
  const auto start = SteadyClock::now();
  std::thread sampler([&] {
    do {
      const double t =
          std::chrono::duration<double>(SteadyClock::now() - start).count();
      samples.push_back({t, ReadRssKib(rss_pid)});
      std::cout << absl::StrFormat("  t=%6.0fs  RSS %s MiB", t,
                                   MiB(samples.back().kib))
                << std::endl;
    } while (!done.WaitForNotificationWithTimeout(
        absl::Seconds(sample_seconds)));
  });

  const auto deadline =
      start + std::chrono::duration_cast<SteadyClock::duration>(
                  std::chrono::duration<double>(seconds));
  std::vector<WorkerStats> stats(num_workers);
  std::vector<std::thread> workers;
  for (int w = 0; w < num_workers; ++w) {
    workers.emplace_back(RunWorker, target, w, rows, deadline, &stats[w]);
  }
  for (auto& t : workers) t.join();
  const double elapsed =
      std::chrono::duration<double>(SteadyClock::now() - start).count();
  done.Notify();
  sampler.join();
  const int64_t after_kib = ReadRssKib(rss_pid);  // workers stopped

  // Aggregate.
  std::array<OpStats, kNumOps> total;
  int64_t steps = 0, dense_ok = 0, rows_ok = 0;
  for (const WorkerStats& w : stats) {
    for (int op = 0; op < kNumOps; ++op) {
      total[op].latency.Merge(w.ops[op].latency);
      total[op].errors += w.ops[op].errors;
      total[op].bytes += w.ops[op].bytes;
      if (total[op].first_error.empty()) {
        total[op].first_error = w.ops[op].first_error;
      }
    }
    steps += w.steps;
    dense_ok += w.dense_pushes_ok;
    rows_ok += w.row_pushes_ok;
  }
  absl::StatusOr<v1::StatsResponse> after = setup->Stats();
  if (server) server->Shutdown(absl::Seconds(5));

  std::ostringstream report;
  report << absl::StrFormat(
      "%s, %d workers (one client and TCP connection each), %.0f s, %d "
      "embedding rows per row op.\n\n",
      where, num_workers, elapsed, rows);
  report << "| op | calls | errors | p50 ms | p99 ms | calls/s | MB/s |\n"
            "|---|---:|---:|---:|---:|---:|---:|\n";
  int64_t errors = 0;
  for (int op = 0; op < kNumOps; ++op) {
    const OpStats& s = total[op];
    errors += s.errors;
    report << absl::StrFormat(
        "| %s | %d | %d | %.2f | %.2f | %.0f | %.1f |\n", kOpNames[op],
        s.latency.count(), s.errors, s.latency.Quantile(0.5) / 1000,
        s.latency.Quantile(0.99) / 1000, s.latency.count() / elapsed,
        static_cast<double>(s.bytes) / elapsed / 1e6);
  }
  report << absl::StrFormat("\nSteps: %d (%.0f steps/s over all workers).\n",
                            steps, steps / elapsed);

  // Every successful push was applied exactly once (4 dense variables per
  // PushVariables, 1 per PushRows; no retries happen on a healthy server).
  bool applied_ok = false;
  if (after.ok()) {
    const int64_t applied = after->pushes_applied() - before->pushes_applied() +
                            after->pushes_duplicate() -
                            before->pushes_duplicate();
    const int64_t expected =
        dense_ok * static_cast<int64_t>(DenseVariables().size()) + rows_ok;
    applied_ok = applied == expected &&
                 after->pushes_duplicate() == before->pushes_duplicate();
    report << absl::StrFormat(
        "Server: %d pushes applied, %d duplicates (expected %d, 0).\n",
        after->pushes_applied() - before->pushes_applied(),
        after->pushes_duplicate() - before->pushes_duplicate(), expected);
  } else {
    report << "Server: Stats failed: " << after.status() << "\n";
  }

  report << "\nResident memory (VmRSS, MiB) over time:\n\n| t (s) |";
  for (const RssSample& s : samples) report << absl::StrFormat(" %.0f |", s.seconds);
  report << "\n|---|";
  for (size_t i = 0; i < samples.size(); ++i) report << "---:|";
  report << "\n| RSS |";
  for (const RssSample& s : samples) report << " " << MiB(s.kib) << " |";
  report << "\n";
  // Growth over the second half of the run (samples while the workers ran).
  const RssSample& last = samples.back();
  const RssSample* mid = &samples.front();
  for (const RssSample& s : samples) {
    if (s.seconds <= last.seconds / 2) mid = &s;
  }
  int64_t peak = 0;
  for (const RssSample& s : samples) peak = std::max(peak, s.kib);
  const double growth =
      mid->kib > 0 ? 100.0 * (last.kib - mid->kib) / mid->kib : 0;
  report << absl::StrFormat(
      "\nPeak %s MiB; second half of the run (t=%.0f s to %.0f s): %+.1f%% "
      "(%s MiB to %s MiB); %s MiB once the workers stopped.\n",
      MiB(peak), mid->seconds, last.seconds, growth, MiB(mid->kib),
      MiB(last.kib), MiB(after_kib));
  for (int op = 0; op < kNumOps; ++op) {
    if (total[op].errors > 0) {
      report << "First " << kOpNames[op] << " error: " << total[op].first_error
             << "\n";
    }
  }

  std::cout << "\n" << report.str();
  const std::string markdown = absl::GetFlag(FLAGS_markdown);
  if (!markdown.empty()) {
    std::ofstream out(markdown);
    out << report.str();
    std::cout << "load_gen: report written to " << markdown << "\n";
  }
  if (errors > 0 || !applied_ok) {
    std::cerr << "load_gen: FAILED (" << errors << " errors"
              << (applied_ok ? "" : "; pushes applied != pushes acknowledged")
              << ")\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace strata

namespace {

// --help: what load_gen is and its flags.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "load_gen";
  cli.usage =
      "load_gen [--target HOST:PORT [--ps-pid PID]] [--workers N] "
      "[--seconds S | --soak] [--markdown FILE]";
  cli.description =
      "Drives one parameter server with concurrent simulated workers for a "
      "bounded time and reports per operation p50/p99 latency, throughput, "
      "errors and the resident memory over the run.";
  cli.groups = {
      {"Target", {"target", "ps_pid"}},
      {"Load", {"workers", "rows", "seconds", "soak", "sample_seconds"}},
      {"Report", {"markdown"}}};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());
  return strata::Run(argc, argv);
}

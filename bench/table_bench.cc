// table_bench: dynamic embedding tables (issue 15), two measures.
//
//   table_bench --mode=throughput [--dims=16,64] [--clients=1,4]
//               [--batch=4096] [--seconds=3]
//     Row lookups + updates per second against an in-process PS on
//     127.0.0.1 (gRPC over loopback): each step a LookupRows (train) of a
//     batch of Zipf-distributed ids and a PushTableRows of as many gradient
//     rows; beside it, in the same run, a dense Pull and Push of the same
//     bytes (a [batch, dim] variable) and the same lookups + updates on a
//     DynamicTable in this process (no RPC). Prints a markdown table.
//
//   table_bench --mode=memory --ps_bin=build/bin/strata-ps
//               [--ids=100000000] [--max_rows=1000000] [--dim=16]
//     Streams `ids` distinct ids (lookups for training, then one gradient
//     row each) through a strata-ps child with a table capped at max_rows,
//     and samples the child's resident set size: the peak against the
//     bound (rows, slots and index) plus the process's base.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
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
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/ps_client.h"
#include "common/logging.h"
#include "kernels/row_optimizers.h"
#include "tables/dynamic_table.h"
#include "server/ps_server.h"
#include "tools/process.h"
#include "tools/zipf_sampler.h"

ABSL_FLAG(std::string, mode, "throughput", "throughput or memory");
ABSL_FLAG(std::string, dims, "16,64", "throughput: row widths");
ABSL_FLAG(std::string, clients, "1,4", "throughput: client threads");
ABSL_FLAG(int64_t, batch, 4096, "throughput: ids per step");
ABSL_FLAG(double, seconds, 3, "throughput: seconds per measurement");
ABSL_FLAG(std::string, ps_bin, "build/bin/strata-ps", "memory: strata-ps");
ABSL_FLAG(int64_t, ids, 100000000, "memory: distinct ids streamed");
ABSL_FLAG(int64_t, max_rows, 1000000, "memory: the table's capacity");
ABSL_FLAG(int64_t, dim, 16, "memory: row width");

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int> Ints(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int v = 0;
    if (absl::SimpleAtoi(part, &v)) out.push_back(v);
  }
  return out;
}

// Batches of Zipf ids over 10^7 ranks (a hot head and a long tail), fixed
// per client so every measure sees the same ids.
std::vector<std::vector<int64_t>> IdBatches(int client, int64_t batch) {
  auto zipf = ZipfSampler::Create(10000000, 1.05);
  SplitMix64 rng(1000 + static_cast<uint64_t>(client));
  std::vector<std::vector<int64_t>> out(16);
  for (auto& b : out) {
    b.resize(static_cast<size_t>(batch));
    for (int64_t& id : b) id = static_cast<int64_t>(zipf->Sample(&rng));
  }
  return out;
}

// Runs body(client, iteration) on `clients` threads for `seconds`;
// returns steps per second over all threads.
double Rate(int clients, double seconds,
            const std::function<bool(int, int64_t)>& body) {
  std::atomic<int64_t> steps{0};
  std::atomic<bool> failed{false};
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int64_t i = 0; Clock::now() < end; ++i) {
        if (!body(c, i)) {
          failed = true;
          return;
        }
        ++steps;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - start).count();
  return failed ? -1 : static_cast<double>(steps) / elapsed;
}

int Throughput() {
  std::ostringstream log_text;
  Logger logger("ps:bench", &log_text);
  absl::StatusOr<std::unique_ptr<PsServer>> server =
      PsServer::Start(PsServerOptions{}, &logger);
  if (!server.ok()) {
    std::cerr << server.status() << "\n";
    return 1;
  }
  const int64_t batch = absl::GetFlag(FLAGS_batch);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  std::printf(
      "| dim | clients | table lookup+update steps/s | ids/s | dense pull+push "
      "of the same bytes, steps/s | table / dense | in-process table "
      "steps/s | table over gRPC / in process |\n|---|---|---|---|---|---|---|"
      "---|\n");
  for (int dim : Ints(absl::GetFlag(FLAGS_dims))) {
    auto admin = PsClient::Connect((*server)->address());
    v1::TableSpec spec;
    spec.set_name(absl::StrCat("t", dim));
    spec.set_dim(dim);
    spec.mutable_optimizer()->set_type("adagrad");
    if (!admin->CreateTable(spec).ok()) return 1;
    v1::VariableSpec dense;
    dense.set_name(absl::StrCat("d", dim));
    dense.set_dtype(v1::DT_FLOAT32);
    dense.add_shape(batch);
    dense.add_shape(dim);
    dense.mutable_initializer()->set_type("zeros");
    dense.mutable_optimizer()->set_type("adagrad");
    if (!admin->CreateVariable(dense).ok()) return 1;
    DynamicTableOptions local_options;
    local_options.name = "local";
    local_options.dim = dim;
    auto local = DynamicTable::Create(local_options);
    RowOptimizerConfig config;
    config.type = RowOptimizerType::kAdagrad;
    auto optimizer = RowOptimizer::Create(config);
    std::mutex local_mu;
    for (int clients : Ints(absl::GetFlag(FLAGS_clients))) {
      std::vector<std::unique_ptr<PsClient>> conns;
      std::vector<std::vector<std::vector<int64_t>>> ids;
      for (int c = 0; c < clients; ++c) {
        conns.push_back(PsClient::Connect((*server)->address()));
        ids.push_back(IdBatches(c, batch));
      }
      // Distinct ids per batch, as a worker pushes them.
      std::vector<std::vector<std::vector<int64_t>>> distinct = ids;
      for (auto& per_client : distinct) {
        for (auto& b : per_client) {
          std::sort(b.begin(), b.end());
          b.erase(std::unique(b.begin(), b.end()), b.end());
        }
      }
      std::vector<std::vector<float>> rows(clients), grads(clients);
      int64_t ids_per_step = 0;
      for (auto& b : distinct[0]) ids_per_step += static_cast<int64_t>(b.size());
      ids_per_step /= static_cast<int64_t>(distinct[0].size());
      auto table_step = [&](int c, int64_t i) {
        const auto& b = distinct[c][static_cast<size_t>(i) % distinct[c].size()];
        rows[c].resize(b.size() * dim);
        grads[c].assign(b.size() * dim, 0.001f);
        if (!conns[c]->LookupRows(spec.name(), b, true,
                                  absl::MakeSpan(rows[c])).ok()) {
          return false;
        }
        return conns[c]
            ->PushTableRows(spec.name(), b, grads[c],
                            PushTag{"bench", c, i})
            .ok();
      };
      auto dense_step = [&](int c, int64_t i) {
        const size_t n = distinct[c][static_cast<size_t>(i) %
                                     distinct[c].size()].size();
        rows[c].resize(static_cast<size_t>(batch) * dim);
        grads[c].assign(static_cast<size_t>(batch) * dim, 0.001f);
        (void)n;
        if (!conns[c]->Pull(dense.name(), rows[c].data(),
                            rows[c].size() * sizeof(float)).ok()) {
          return false;
        }
        return conns[c]
            ->Push(dense.name(), DType::kFloat32, {batch, dim},
                   grads[c].data(), PushTag{"bench", c, i})
            .ok();
      };
      auto local_step = [&](int c, int64_t i) {
        const auto& b = distinct[c][static_cast<size_t>(i) % distinct[c].size()];
        std::vector<float> r(b.size() * dim), g(b.size() * dim, 0.001f);
        return (*local)->Lookup(b, absl::MakeSpan(r), true).ok() &&
               (*local)->ApplyGradients(b, g, **optimizer, i).ok();
      };
      const double t = Rate(clients, seconds, table_step);
      const double d = Rate(clients, seconds, dense_step);
      const double l = Rate(clients, seconds, local_step);
      std::printf("| %d | %d | %.0f | %.3g | %.0f | %.2f | %.0f | %.2f |\n",
                  dim, clients, t, t * static_cast<double>(ids_per_step), d,
                  t / d, l, t / l);
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nA step: a batch of %lld Zipf(1.05) ids over 1e7 ranks, deduplicated "
      "(ids/s counts the distinct ones), looked up for training then updated "
      "(adagrad); the dense step pulls and pushes a [%lld, dim] float32 "
      "variable (the batch's bytes before deduplication).\n",
      static_cast<long long>(batch), static_cast<long long>(batch));
  return 0;
}

int64_t RssBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kb = 0;
      std::istringstream(line.substr(6)) >> kb;
      return kb * 1024;
    }
  }
  return -1;
}

int Memory() {
  ChildProcess ps{"ps:0",
                  {absl::GetFlag(FLAGS_ps_bin), "--host=127.0.0.1",
                   "--port=0"}};
  ps.log_path = "/tmp/table_bench_ps.log";
  if (absl::Status s = Spawn(&ps, true, absl::Seconds(30)); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  const int64_t dim = absl::GetFlag(FLAGS_dim);
  const int64_t max_rows = absl::GetFlag(FLAGS_max_rows);
  const int64_t total = absl::GetFlag(FLAGS_ids);
  auto client = PsClient::Connect(ps.address);
  v1::TableSpec spec;
  spec.set_name("stream");
  spec.set_dim(dim);
  spec.set_max_rows(max_rows);
  spec.mutable_optimizer()->set_type("adagrad");
  if (!client->CreateTable(spec).ok()) return 1;
  const int64_t base = RssBytes(ps.pid);
  const int64_t batch = 8192;
  std::vector<int64_t> ids(static_cast<size_t>(batch));
  std::vector<float> rows(static_cast<size_t>(batch * dim));
  std::vector<float> grads(static_cast<size_t>(batch * dim), 0.01f);
  int64_t peak = base;
  const auto start = Clock::now();
  for (int64_t first = 0, step = 0; first < total; first += batch, ++step) {
    for (int64_t k = 0; k < batch; ++k) ids[static_cast<size_t>(k)] = first + k;
    if (!client->LookupRows("stream", ids, true, absl::MakeSpan(rows)).ok() ||
        !client->PushTableRows("stream", ids, grads,
                               PushTag{"mem", 0, step}).ok()) {
      std::cerr << "call failed at id " << first << "\n";
      Stop(&ps, absl::Seconds(5));
      return 1;
    }
    if (step % 256 == 0) peak = std::max(peak, RssBytes(ps.pid));
  }
  peak = std::max(peak, RssBytes(ps.pid));
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  auto stats = client->TableStats("stream");
  const int64_t rows_now = stats.ok() ? stats->tables(0).rows() : -1;
  const int64_t table_bytes = stats.ok() ? stats->tables(0).bytes() : -1;
  const int64_t evictions = stats.ok() ? stats->tables(0).evictions() : -1;
  // Values and adagrad's accumulator: 2 x dim floats a row.
  const int64_t bound = max_rows * dim * 4 * 2;
  std::printf(
      "| distinct ids streamed | max_rows | dim | rows at the end | evictions "
      "| values+slots bound | table bytes (its own count) | RSS before | peak "
      "RSS | peak - before | (peak - before) / bound | seconds |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
      "| %lld | %lld | %lld | %lld | %lld | %.1f MiB | %.1f MiB | %.1f MiB | "
      "%.1f MiB | %.1f MiB | %.2f | %.0f |\n",
      static_cast<long long>(total), static_cast<long long>(max_rows),
      static_cast<long long>(dim), static_cast<long long>(rows_now),
      static_cast<long long>(evictions), bound / 1048576.0,
      table_bytes / 1048576.0, base / 1048576.0, peak / 1048576.0,
      (peak - base) / 1048576.0,
      static_cast<double>(peak - base) / static_cast<double>(bound), seconds);
  Stop(&ps, absl::Seconds(10));
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "throughput") return strata::Throughput();
  if (mode == "memory") return strata::Memory();
  std::cerr << "table_bench: --mode must be throughput or memory\n";
  return 2;
}

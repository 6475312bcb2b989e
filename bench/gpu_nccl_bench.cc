// gpu_nccl_bench: the Mirrored strategy's NCCL all-reduce (collective/nccl.h)
// over every visible GPU (or --ranks of them), ranks as threads, on device
// buffers (NCCL alone) and host buffers (what Mirrored does with CPU-side
// gradients: staged through pinned memory), beside the CPU ring all-reduce
// over in-process transports for the same sizes. Prints ONE JSON line on
// stdout; exits 2 with a message on stderr where no GPU is usable.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "collective/collective.h"
#include "collective/in_process.h"
#include "collective/nccl.h"
#include "common/cli.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int, ranks, 0, "GPUs (ranks) from cuda:0; 0 = every visible GPU");
ABSL_FLAG(std::string, sizes_kb, "4,1024,65536",
          "Bytes per rank of each measured all-reduce, in KiB (float32)");
ABSL_FLAG(double, seconds, 1.0, "Measuring time per size and buffer kind");
ABSL_FLAG(bool, cpu_ring, true,
          "Also time the CPU ring all-reduce (in process) per size");

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  int64_t ops = 0;
  double seconds = 0;
  std::string error;
};

// Runs `op(rank)` on every rank's thread, repeatedly, until `budget` has
// passed on rank 0 (after 3 warm-up rounds); every rank runs the same number
// of rounds (rank 0 decides and publishes the count before each round).
template <typename Op>
Timing RunRounds(int ranks, double budget, Op op) {
  Timing t;
  for (int warm = 0; warm < 3; ++warm) {
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] { errors[r] = op(r); });
    }
    for (auto& th : threads) th.join();
    for (const auto& e : errors) {
      if (!e.empty()) {
        t.error = e;
        return t;
      }
    }
  }
  // Batches of `batch` rounds per thread launch, doubling until the budget.
  int64_t batch = 1;
  const auto start = Clock::now();
  while (true) {
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        for (int64_t i = 0; i < batch && errors[r].empty(); ++i) {
          errors[r] = op(r);
        }
      });
    }
    for (auto& th : threads) th.join();
    for (const auto& e : errors) {
      if (!e.empty()) {
        t.error = e;
        return t;
      }
    }
    t.ops += batch;
    t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (t.seconds >= budget) return t;
    batch *= 2;
  }
}

nlohmann::json Row(const std::string& kind, int ranks, int64_t bytes,
                   const Timing& t) {
  nlohmann::json row = {{"kind", kind}, {"ranks", ranks}, {"bytes", bytes}};
  if (!t.error.empty()) {
    row["error"] = t.error;
    return row;
  }
  const double per_op = t.seconds / static_cast<double>(t.ops);
  const double algbw = static_cast<double>(bytes) / per_op / 1e9;
  row["ops"] = t.ops;
  row["us_per_op"] = per_op * 1e6;
  row["algbw_gbps"] = algbw;
  row["busbw_gbps"] = collective::RingBusBandwidth(algbw, ranks);
  return row;
}

int Main() {
  absl::StatusOr<int> visible = collective::NcclVisibleDevices();
  if (!visible.ok()) {
    std::cerr << "gpu_nccl_bench: no usable GPU: " << visible.status().message()
              << "\n";
    return 2;
  }
  int ranks = absl::GetFlag(FLAGS_ranks);
  if (ranks <= 0) ranks = *visible;
  if (ranks > *visible) {
    std::cerr << "gpu_nccl_bench: --ranks=" << ranks << " but only "
              << *visible << " GPUs are visible\n";
    return 2;
  }
  std::vector<int64_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes_kb), ',',
                                            absl::SkipEmpty())) {
    int64_t kb = 0;
    if (!absl::SimpleAtoi(s, &kb) || kb <= 0) {
      std::cerr << "gpu_nccl_bench: bad --sizes_kb entry '" << s << "'\n";
      return 2;
    }
    sizes.push_back(kb * 1024);
  }
  const double budget = absl::GetFlag(FLAGS_seconds);

  std::vector<int> gpus;
  nlohmann::json devices = nlohmann::json::array();
  for (int i = 0; i < ranks; ++i) {
    gpus.push_back(i);
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
      devices.push_back(prop.name);
    }
  }
  absl::StatusOr<std::unique_ptr<collective::NcclGroup>> group =
      collective::NcclGroup::Create(gpus);
  if (!group.ok()) {
    std::cerr << "gpu_nccl_bench: " << group.status() << "\n";
    return 1;
  }
  nlohmann::json results = nlohmann::json::array();
  for (int64_t bytes : sizes) {
    const int64_t count = bytes / 4;
    // Device buffers: NCCL alone.
    std::vector<float*> device(static_cast<size_t>(ranks), nullptr);
    bool allocated = true;
    for (int r = 0; r < ranks; ++r) {
      if (cudaSetDevice(r) != cudaSuccess ||
          cudaMalloc(reinterpret_cast<void**>(&device[r]),
                     static_cast<size_t>(bytes)) != cudaSuccess ||
          cudaMemset(device[r], 0, static_cast<size_t>(bytes)) != cudaSuccess ||
          cudaDeviceSynchronize() != cudaSuccess) {
        allocated = false;
      }
    }
    if (allocated) {
      results.push_back(Row(
          "nccl_device", ranks, bytes,
          RunRounds(ranks, budget, [&](int r) -> std::string {
            absl::Status s = (*group)->AllReduce(
                r, DType::kFloat32, device[r], count,
                collective::NcclReduce::kSum);
            return s.ok() ? "" : s.ToString();
          })));
    } else {
      results.push_back({{"kind", "nccl_device"}, {"bytes", bytes},
                         {"error", "cudaMalloc failed"}});
    }
    for (int r = 0; r < ranks; ++r) {
      if (device[r] != nullptr) {
        cudaSetDevice(r);
        cudaFree(device[r]);
      }
    }
    if (!results.back().contains("error")) {
      // Host buffers: staged through pinned memory by NcclGroup.
      std::vector<std::vector<float>> host(
          static_cast<size_t>(ranks),
          std::vector<float>(static_cast<size_t>(count), 0.0f));
      results.push_back(Row(
          "nccl_host", ranks, bytes,
          RunRounds(ranks, budget, [&](int r) -> std::string {
            absl::Status s = (*group)->AllReduce(
                r, DType::kFloat32, host[r].data(), count,
                collective::NcclReduce::kSum);
            return s.ok() ? "" : s.ToString();
          })));
    }
    if (absl::GetFlag(FLAGS_cpu_ring) && ranks > 1) {
      std::vector<std::vector<float>> host(
          static_cast<size_t>(ranks),
          std::vector<float>(static_cast<size_t>(count), 0.0f));
      auto transports = collective::NewInProcessGroup(ranks);
      std::vector<int64_t> next(static_cast<size_t>(ranks), 0);
      results.push_back(Row(
          "cpu_ring", ranks, bytes,
          RunRounds(ranks, budget, [&](int r) -> std::string {
            absl::Status s = collective::AllReduceSum(
                transports[r].get(), DType::kFloat32, host[r].data(), count,
                "op" + std::to_string(next[r]++), {});
            return s.ok() ? "" : s.ToString();
          })));
    }
  }
  group->reset();
  nlohmann::json out = {{"bench", "gpu_nccl"},
                        {"ranks", ranks},
                        {"visible_gpus", *visible},
                        {"devices", devices},
                        {"seconds_per_case", budget},
                        {"results", results}};
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace strata

namespace {

// --help: what gpu_nccl_bench is and its flags.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "gpu_nccl_bench";
  cli.usage =
      "gpu_nccl_bench [--ranks N] [--sizes-kb 4,1024,65536] [--seconds S] "
      "[--cpu-ring=false]";
  cli.description =
      "The Mirrored strategy's NCCL all-reduce over the visible GPUs, on "
      "device and on host buffers, beside the CPU ring all-reduce; prints "
      "one JSON line (exit 2 where no GPU is usable).";
  cli.groups = {{"Benchmark", {"ranks", "sizes_kb", "seconds", "cpu_ring"}}};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());
  return strata::Main();
}

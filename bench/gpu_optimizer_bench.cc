// gpu_optimizer_bench: optimizer apply throughput on GPU-resident variables
// against the device's memory bandwidth, and the PS push path (gradient from
// host memory, new value back to a host copy) through VariableDevice.
//
// For each optimizer and variable size (float32; 64 MiB to 1 GiB by
// default) it times back-to-back applies on one stream (CUDA events) and
// counts the bytes an apply must move: every array it reads plus every
// array it writes (SGD: var, grad read, var written = 3x; SGD with
// momentum: 5x; Adam: var, m, v, grad read, var, m, v written = 7x). That
// rate is set beside a device-to-device cudaMemcpy of the largest size in
// the same process (read + write counted the same way) and beside the
// peak the driver reports (2 x memory clock x bus width).
//
// Prints ONE JSON line on stdout:
//   {"bench":"gpu_optimizer","device":...,"peak_memory_GBps":...,
//    "d2d_copy_GBps":...,"results":[{"optimizer":"adam","dtype":"float32",
//    "bytes":...,"bytes_moved_per_apply":...,"applies_per_s":...,
//    "effective_GBps":...,"fraction_of_copy_bandwidth":...,
//    "fraction_of_peak":...}],"ps_path":[{"optimizer":...,"bytes":...,
//    "pushes_per_s":...,"host_GBps":...}]}
// GB are 1e9 bytes. Without a usable device: a message on stderr, exit 2.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cli.h"
#include "common/status_macros.h"
#include "kernels/cuda/optimizer_kernels.h"
#include "nlohmann/json.hpp"
#include "server/device_state.h"

ABSL_FLAG(int, device, 0, "CUDA device index");
ABSL_FLAG(std::string, sizes_mib, "64,256,1024",
          "Variable sizes in MiB (float32), comma-separated");
ABSL_FLAG(double, seconds, 0.5,
          "Minimum measured time per (optimizer, size), after warm-up");
ABSL_FLAG(std::string, ps_sizes_mib, "64,256",
          "Variable sizes for the PS push path (host <-> device), MiB; empty "
          "skips it");

namespace strata {
namespace {

struct Bench {
  std::string name;
  OptimizerConfig config;
  int arrays_read;     // var, grad, slots
  int arrays_written;  // var, slots
};

std::vector<Bench> Benches() {
  OptimizerConfig sgd;
  sgd.type = OptimizerType::kSgd;
  OptimizerConfig momentum = sgd;
  momentum.momentum = 0.9;
  OptimizerConfig adam;
  adam.type = OptimizerType::kAdam;
  return {{"sgd", sgd, 2, 1},
          {"sgd_momentum", momentum, 3, 2},
          {"adam", adam, 4, 3}};
}

absl::StatusOr<std::vector<int64_t>> ParseSizes(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t mib = 0;
    if (!absl::SimpleAtoi(part, &mib) || mib <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad size '", part, "' (MiB, > 0)"));
    }
    out.push_back(mib << 20);
  }
  return out;
}

// Runs `op` (which queues work on `stream`) twice to warm up, then until at
// least `min_seconds` of device time; returns seconds per op.
template <typename Op>
absl::StatusOr<double> TimeOps(const CudaStream& stream, double min_seconds,
                               Op op) {
  STRATA_ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create(/*timing=*/true));
  STRATA_ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create(/*timing=*/true));
  for (int i = 0; i < 2; ++i) STRATA_RETURN_IF_ERROR(op());
  STRATA_RETURN_IF_ERROR(stream.Synchronize());
  int64_t reps = 1;
  while (true) {
    STRATA_RETURN_IF_ERROR(start.Record(stream.get()));
    for (int64_t i = 0; i < reps; ++i) STRATA_RETURN_IF_ERROR(op());
    STRATA_RETURN_IF_ERROR(stop.Record(stream.get()));
    STRATA_RETURN_IF_ERROR(stop.Synchronize());
    STRATA_ASSIGN_OR_RETURN(float ms, stop.ElapsedMsSince(start));
    const double seconds = ms / 1e3;
    if (seconds >= min_seconds || reps >= (int64_t{1} << 20)) {
      return seconds / static_cast<double>(reps);
    }
    reps *= seconds > 0 ? std::max<int64_t>(2, static_cast<int64_t>(
                                                   min_seconds / seconds) + 1)
                        : 8;
  }
}

// Device-to-device copy rate of `bytes`, counting read + write.
absl::StatusOr<double> CopyGBps(const CudaStream& stream, int64_t bytes,
                                double min_seconds) {
  STRATA_ASSIGN_OR_RETURN(DeviceArray src, DeviceArray::Allocate(bytes));
  STRATA_ASSIGN_OR_RETURN(DeviceArray dst, DeviceArray::Allocate(bytes));
  STRATA_RETURN_IF_ERROR(CudaZero(src.get(), bytes, stream.get()));
  STRATA_ASSIGN_OR_RETURN(double per_copy, TimeOps(stream, min_seconds, [&] {
                            return CudaCopyOnDevice(dst.get(), src.get(),
                                                    bytes, stream.get());
                          }));
  return 2.0 * static_cast<double>(bytes) / per_copy / 1e9;
}

absl::StatusOr<nlohmann::json> ApplyResult(const CudaStream& stream,
                                           const Bench& b, int64_t bytes,
                                           double copy_GBps, double peak_GBps,
                                           double min_seconds) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(float));
  std::unique_ptr<Optimizer> cpu;
  STRATA_ASSIGN_OR_RETURN(cpu, Optimizer::Create(b.config));
  const size_t num_slots = cpu->SlotNames().size();
  STRATA_ASSIGN_OR_RETURN(DeviceArray var, DeviceArray::Allocate(bytes));
  STRATA_ASSIGN_OR_RETURN(DeviceArray grad, DeviceArray::Allocate(bytes));
  std::vector<DeviceArray> slots;
  std::vector<void*> slot_ptrs;
  for (size_t k = 0; k < num_slots; ++k) {
    STRATA_ASSIGN_OR_RETURN(DeviceArray s, DeviceArray::Allocate(bytes));
    STRATA_RETURN_IF_ERROR(CudaZero(s.get(), bytes, stream.get()));
    slot_ptrs.push_back(s.get());
    slots.push_back(std::move(s));
  }
  STRATA_RETURN_IF_ERROR(CudaZero(var.get(), bytes, stream.get()));
  STRATA_RETURN_IF_ERROR(CudaZero(grad.get(), bytes, stream.get()));
  int64_t iterations = 0;
  STRATA_ASSIGN_OR_RETURN(
      double per_apply, TimeOps(stream, min_seconds, [&] {
        return CudaApplyDense(b.config, DType::kFloat32, iterations++,
                              var.get(), slot_ptrs, grad.get(), n,
                              stream.get());
      }));
  const int64_t moved = bytes * (b.arrays_read + b.arrays_written);
  const double effective = static_cast<double>(moved) / per_apply / 1e9;
  nlohmann::json r;
  r["optimizer"] = b.name;
  r["dtype"] = "float32";
  r["bytes"] = bytes;
  r["bytes_moved_per_apply"] = moved;
  r["applies_per_s"] = 1.0 / per_apply;
  r["effective_GBps"] = effective;
  r["fraction_of_copy_bandwidth"] = copy_GBps > 0 ? effective / copy_GBps : 0;
  r["fraction_of_peak"] = peak_GBps > 0 ? effective / peak_GBps : 0;
  return r;
}

// The PS push path: gradient from pageable host memory through the pinned
// stages, the kernel, and the new value back to the host copy.
absl::StatusOr<nlohmann::json> PsPathResult(int device, const Bench& b,
                                            int64_t bytes,
                                            double min_seconds) {
  PsDevice d;
  d.cuda_index = device;
  const int64_t n = bytes / static_cast<int64_t>(sizeof(float));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> cpu,
                          Optimizer::Create(b.config));
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<VariableDevice> state,
      NewVariableDevice(d, cpu->config(), DType::kFloat32, n, 1024));
  std::shared_ptr<Buffer> value = Buffer::Allocate(bytes);
  std::vector<std::shared_ptr<Buffer>> slots;
  for (size_t k = 0; k < cpu->SlotNames().size(); ++k) {
    slots.push_back(Buffer::Allocate(bytes));
  }
  STRATA_RETURN_IF_ERROR(state->Init(&value, slots));
  slots.clear();
  std::shared_ptr<Buffer> grad = Buffer::Allocate(bytes);
  int64_t iterations = 0;
  for (int i = 0; i < 2; ++i) {
    STRATA_RETURN_IF_ERROR(
        state->ApplyDense(iterations++, 1.0, grad->data(), &value));
  }
  int64_t pushes = 0;
  const auto start = std::chrono::steady_clock::now();
  double seconds = 0;
  while (seconds < min_seconds) {
    STRATA_RETURN_IF_ERROR(
        state->ApplyDense(iterations++, 1.0, grad->data(), &value));
    ++pushes;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            start)
                  .count();
  }
  nlohmann::json r;
  r["optimizer"] = b.name;
  r["dtype"] = "float32";
  r["bytes"] = bytes;
  r["pushes_per_s"] = static_cast<double>(pushes) / seconds;
  // Host traffic per push: the gradient in and the new value out.
  r["host_GBps"] =
      2.0 * static_cast<double>(bytes) * static_cast<double>(pushes) /
      seconds / 1e9;
  return r;
}

absl::StatusOr<nlohmann::json> Run() {
  const int device = absl::GetFlag(FLAGS_device);
  const double min_seconds = absl::GetFlag(FLAGS_seconds);
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                          ParseSizes(absl::GetFlag(FLAGS_sizes_mib)));
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> ps_sizes,
                          ParseSizes(absl::GetFlag(FLAGS_ps_sizes_mib)));
  STRATA_ASSIGN_OR_RETURN(CudaDeviceInfo info, CudaProbeDevice(device));
  STRATA_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create());
  int64_t largest = 0;
  for (int64_t s : sizes) largest = std::max(largest, s);
  nlohmann::json out;
  out["bench"] = "gpu_optimizer";
  out["device"] = info.Description();
  out["device_name"] = info.name;
  out["peak_memory_GBps"] = info.peak_memory_GBps();
  double copy = 0;
  if (largest > 0) {
    STRATA_ASSIGN_OR_RETURN(copy, CopyGBps(stream, largest, min_seconds));
  }
  out["d2d_copy_GBps"] = copy;
  out["d2d_copy_bytes"] = largest;
  nlohmann::json results = nlohmann::json::array();
  for (const Bench& b : Benches()) {
    for (int64_t bytes : sizes) {
      STRATA_ASSIGN_OR_RETURN(
          nlohmann::json r,
          ApplyResult(stream, b, bytes, copy, info.peak_memory_GBps(),
                      min_seconds));
      results.push_back(std::move(r));
    }
  }
  out["results"] = std::move(results);
  nlohmann::json ps = nlohmann::json::array();
  for (const Bench& b : Benches()) {
    if (b.name == "sgd_momentum") continue;
    for (int64_t bytes : ps_sizes) {
      STRATA_ASSIGN_OR_RETURN(nlohmann::json r,
                              PsPathResult(device, b, bytes, min_seconds));
      ps.push_back(std::move(r));
    }
  }
  out["ps_path"] = std::move(ps);
  return out;
}

}  // namespace
}  // namespace strata

namespace {

// --help: what gpu_optimizer_bench is and its flags.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "gpu_optimizer_bench";
  cli.usage =
      "gpu_optimizer_bench [--device N] [--sizes-mib 64,256,1024] "
      "[--seconds S] [--ps-sizes-mib 64,256]";
  cli.description =
      "Optimizer apply throughput on GPU-resident variables against the "
      "device's memory bandwidth, and the PS push path through "
      "VariableDevice; prints one JSON line (exit 2 where no GPU is usable).";
  cli.groups = {
      {"Benchmark", {"device", "sizes_mib", "seconds", "ps_sizes_mib"}}};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());
  // Without a usable device: say so and exit 2 (the contract of
  // bench/gpu_check.sh).
  absl::StatusOr<strata::CudaDeviceInfo> probe =
      strata::CudaProbeDevice(absl::GetFlag(FLAGS_device));
  if (!probe.ok()) {
    std::cerr << "gpu_optimizer_bench: cuda:" << absl::GetFlag(FLAGS_device)
              << ": " << probe.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<nlohmann::json> result = strata::Run();
  if (!result.ok()) {
    std::cerr << "gpu_optimizer_bench: " << result.status() << "\n";
    return 1;
  }
  std::cout << result->dump() << std::endl;
  return 0;
}

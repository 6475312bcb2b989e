// gpu_dense_bench: the reference model's training step (Dense(128, relu) on
// 784 inputs, then Dense(10, softmax); sparse categorical cross-entropy;
// Adam) on the GPU path against the CPU path, in one process, at each batch
// size. A step is LocalTrainer::Step: host parameters up, forward and
// backward, gradients down, the optimizer's update on the host (what a
// worker does per step).
//
// Prints one JSON line on stdout:
//   {"bench":"gpu_dense","device":"cuda:0","data":"fashion-mnist",
//    "results":[{"batch":128,"cpu_steps_per_s":...,"cpu_examples_per_s":...,
//                "gpu_steps_per_s":...,"gpu_examples_per_s":...,
//                "speedup":...}, ...]}
// and a readable line per measurement on stderr. Without a usable device it
// says why on stderr and exits 2.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cli.h"
#include "nlohmann/json.hpp"
#include "worker/dataset.h"
#include "job/job.h"
#include "worker/model.h"

ABSL_FLAG(std::string, device, "cuda:0", "The GPU to measure (cuda or cuda:N)");
ABSL_FLAG(std::string, batches, "128,1024", "Batch sizes, comma-separated");
ABSL_FLAG(double, min_seconds, 2.0, "Measure each path for at least this");
ABSL_FLAG(int, warmup_steps, 10, "Untimed steps before each measurement");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Fashion-MNIST IDX files (train-*); synthetic data where absent");
ABSL_FLAG(int64_t, examples, 16384, "Training examples to cycle through");

namespace {

strata::ModelSpec ReferenceModel() {
  strata::ModelSpec spec;
  spec.input_shape = {784};
  strata::LayerSpec hidden;
  hidden.type = strata::LayerType::kDense;
  hidden.units = 128;
  hidden.activation = strata::Activation::kRelu;
  strata::LayerSpec out = hidden;
  out.units = 10;
  out.activation = strata::Activation::kSoftmax;
  spec.layers = {hidden, out};
  return spec;
}

// Fashion-MNIST where present, else deterministic synthetic examples.
strata::Dataset LoadData(int64_t examples, std::string* source) {
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  absl::StatusOr<strata::Dataset> loaded =
      strata::LoadIdx(dir + "/train-images-idx3-ubyte.gz",
                      dir + "/train-labels-idx1-ubyte.gz", 255.0, examples);
  if (loaded.ok() && loaded->size > 0) {
    *source = "fashion-mnist";
    return *std::move(loaded);
  }
  *source = "synthetic";
  strata::Dataset d;
  d.size = examples;
  d.features = 784;
  d.num_classes = 10;
  d.x.resize(static_cast<size_t>(examples * 784));
  uint64_t state = 12345;
  for (float& v : d.x) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<float>(state >> 40) / 16777216.0f;
  }
  for (int64_t i = 0; i < examples; ++i) {
    d.labels.push_back(static_cast<int32_t>(i % 10));
  }
  return d;
}

struct Rate {
  double steps_per_s = 0;
  double examples_per_s = 0;
};

// Steps of `trainer` over `data` in batches of `batch` for at least
// min_seconds after the warm-up.
absl::StatusOr<Rate> Measure(strata::LocalTrainer* trainer,
                             const strata::Dataset& data, int64_t batch) {
  const std::vector<int64_t> perm = strata::EpochPermutation(data.size, 1, 0);
  const int64_t batches_per_pass = data.size / batch;
  if (batches_per_pass < 1) {
    return absl::InvalidArgumentError("fewer examples than one batch");
  }
  std::vector<float> x;
  std::vector<int32_t> y;
  int64_t step = trainer->iterations();
  auto run = [&](int64_t i) -> absl::Status {
    strata::GatherBatch(data, perm, i % batches_per_pass, batch, &x, &y);
    return trainer->Step(x.data(), y.data(), batch, step++).status();
  };
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup_steps); ++i) {
    if (absl::Status s = run(i); !s.ok()) return s;
  }
  const absl::Duration budget = absl::Seconds(absl::GetFlag(FLAGS_min_seconds));
  const absl::Time start = absl::Now();
  int64_t steps = 0;
  absl::Duration elapsed;
  do {
    if (absl::Status s = run(steps); !s.ok()) return s;
    ++steps;
    elapsed = absl::Now() - start;
  } while (elapsed < budget || steps < 5);
  Rate rate;
  rate.steps_per_s = static_cast<double>(steps) / absl::ToDoubleSeconds(elapsed);
  rate.examples_per_s = rate.steps_per_s * static_cast<double>(batch);
  return rate;
}

}  // namespace

namespace {

// --help: what gpu_dense_bench is and its flags.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "gpu_dense_bench";
  cli.usage =
      "gpu_dense_bench [--device cuda:N] [--batches 128,1024] "
      "[--min-seconds S] [flags]";
  cli.description =
      "The reference model's training step on the GPU path against the "
      "CPU path at each batch size; prints one JSON line (exit 2 where no "
      "GPU is usable).";
  cli.groups = {
      {"Benchmark", {"device", "batches", "min_seconds", "warmup_steps"}},
      {"Data", {"data_dir", "examples"}}};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());

  const std::string device = absl::GetFlag(FLAGS_device);
  absl::StatusOr<int> index = strata::ParseDeviceName(device, "--device");
  if (!index.ok() || *index < 0) {
    std::cerr << "gpu_dense_bench: --device must be cuda or cuda:N, got '"
              << device << "'\n";
    return 2;
  }
  const std::string cuda = "cuda:" + std::to_string(*index);
  if (absl::Status usable = strata::CheckDevice(cuda, "--device");
      !usable.ok()) {
    std::cerr << "gpu_dense_bench: " << usable.message() << "\n";
    return 2;
  }
  std::vector<int64_t> batches;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_batches), ',', absl::SkipEmpty())) {
    int64_t b = 0;
    if (!absl::SimpleAtoi(part, &b) || b < 1) {
      std::cerr << "gpu_dense_bench: bad --batches entry '" << part << "'\n";
      return 2;
    }
    batches.push_back(b);
  }
  std::string source;
  const strata::Dataset data = LoadData(absl::GetFlag(FLAGS_examples), &source);

  strata::OptimizerConfig adam;
  adam.type = strata::OptimizerType::kAdam;
  const std::string loss = "sparse_categorical_crossentropy";
  nlohmann::json results = nlohmann::json::array();
  for (int64_t batch : batches) {
    nlohmann::json row;
    row["batch"] = batch;
    double cpu_rate = 0;
    double gpu_rate = 0;
    for (const std::string& where : {std::string("cpu"), cuda}) {
      absl::StatusOr<strata::Model> model =
          strata::Model::Build(ReferenceModel(), loss, 1, where);
      if (!model.ok()) {
        std::cerr << "gpu_dense_bench: " << model.status() << "\n";
        return 1;
      }
      absl::StatusOr<std::unique_ptr<strata::LocalTrainer>> trainer =
          strata::LocalTrainer::Create(*std::move(model), adam, 1);
      if (!trainer.ok()) {
        std::cerr << "gpu_dense_bench: " << trainer.status() << "\n";
        return 1;
      }
      absl::StatusOr<Rate> rate = Measure(trainer->get(), data, batch);
      if (!rate.ok()) {
        std::cerr << "gpu_dense_bench: " << where << " batch " << batch
                  << ": " << rate.status() << "\n";
        return 1;
      }
      const std::string key = where == "cpu" ? "cpu" : "gpu";
      row[key + "_steps_per_s"] = rate->steps_per_s;
      row[key + "_examples_per_s"] = rate->examples_per_s;
      (where == "cpu" ? cpu_rate : gpu_rate) = rate->examples_per_s;
      std::fprintf(stderr, "%-7s batch %5lld: %9.1f steps/s %11.0f examples/s\n",
                   where.c_str(), static_cast<long long>(batch),
                   rate->steps_per_s, rate->examples_per_s);
    }
    row["speedup"] = cpu_rate > 0 ? gpu_rate / cpu_rate : 0.0;
    results.push_back(row);
  }
  nlohmann::json out;
  out["bench"] = "gpu_dense";
  out["device"] = cuda;
  out["data"] = source;
  out["model"] = "dense(128,relu,784)-dense(10,softmax)";
  out["results"] = results;
  std::cout << out.dump() << std::endl;
  return 0;
}

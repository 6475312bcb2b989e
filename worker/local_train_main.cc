// local_train: trains a job's model in this process (no cluster), printing a
// Keras-style line per epoch, and optionally writes a JSON summary. The
// single-process baseline every strategy is compared against.
//
//   local_train --job examples/fashion_mnist/job.json [--epochs N]
//               [--summary summary.json] [--device cpu|cuda|cuda:N]
//
// A job (or --device) on a CUDA device that cannot be used exits 1 at once
// with the reason, before any data is loaded.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cli.h"
#include "nlohmann/json.hpp"
#include "worker/dataset.h"
#include "worker/job.h"
#include "worker/model.h"

ABSL_FLAG(std::string, job, "", "Job file (JSON), required");
ABSL_FLAG(int, epochs, 0, "Override the job's epochs (0 keeps them)");
ABSL_FLAG(std::string, summary, "", "Write a JSON summary to this file");
ABSL_FLAG(std::string, device, "", "Where to compute: cpu, cuda or cuda:N "
          "(default: the job's \"device\")");

namespace {

double Seconds(absl::Time start) {
  return absl::ToDoubleSeconds(absl::Now() - start);
}

// --help: what local_train is and its flags.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "local_train";
  cli.usage =
      "local_train --job FILE [--epochs N] [--summary FILE] "
      "[--device cpu|cuda|cuda:N]";
  cli.description =
      "Trains a job's model in this process (no cluster), printing a line "
      "per epoch: the single-process baseline every strategy is compared "
      "against.";
  cli.groups = {{"Training", {"job", "epochs", "device", "summary"}}};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());

  const std::string job_path = absl::GetFlag(FLAGS_job);
  if (job_path.empty()) {
    std::cerr << "local_train: --job FILE is required\n";
    return 2;
  }
  absl::StatusOr<strata::JobSpec> job = strata::LoadJobFile(job_path);
  if (!job.ok()) {
    std::cerr << "local_train: " << job.status().message() << "\n";
    return 2;
  }
  // Refuse, before allocating anything, a model this machine cannot hold
  // and data files that are not there.
  const int64_t memory_bytes =
      static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
      static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  if (absl::Status fits = strata::CheckJobFitsMemory(*job, memory_bytes);
      !fits.ok()) {
    std::cerr << "local_train: " << fits.message() << "\n";
    return 2;
  }
  if (absl::Status files = strata::CheckDataFiles(*job); !files.ok()) {
    std::cerr << "local_train: " << files.message() << "\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_epochs) < 0) {
    std::cerr << "local_train: --epochs must be >= 0\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_epochs) > 0) job->epochs = absl::GetFlag(FLAGS_epochs);
  std::string device_source = "job.device";
  if (const std::string flag = absl::GetFlag(FLAGS_device); !flag.empty()) {
    absl::StatusOr<int> cuda = strata::ParseDeviceName(flag, "--device");
    if (!cuda.ok()) {
      std::cerr << "local_train: " << cuda.status().message() << "\n";
      return 2;
    }
    job->cuda_device = *cuda;
    job->device = *cuda < 0 ? "cpu" : absl::StrCat("cuda:", *cuda);
    device_source = "--device";
  }
  // Fail before loading data when the device cannot be used.
  if (absl::Status usable = strata::CheckDevice(job->device, device_source);
      !usable.ok()) {
    std::cerr << "local_train: " << usable << "\n";
    return 1;
  }

  const absl::Time load_start = absl::Now();
  absl::StatusOr<strata::Dataset> train = strata::LoadTrain(*job);
  if (!train.ok()) {
    std::cerr << "local_train: training data: " << train.status().message() << "\n";
    return 1;
  }
  std::optional<strata::Dataset> test;
  if (job->data.has_test) {
    absl::StatusOr<strata::Dataset> loaded = strata::LoadTest(*job);
    if (!loaded.ok()) {
      std::cerr << "local_train: test data: " << loaded.status().message() << "\n";
      return 1;
    }
    test = std::move(*loaded);
  }
  const double load_seconds = Seconds(load_start);

  absl::StatusOr<std::unique_ptr<strata::LocalTrainer>> trainer =
      strata::LocalTrainer::Create(*job);
  if (!trainer.ok()) {
    std::cerr << "local_train: " << trainer.status().message() << "\n";
    return 2;
  }
  const int64_t steps_per_epoch =
      strata::StepsPerEpoch(train->size, job->batch_size);
  std::printf("job %s: %lld training examples, %s test examples, "
              "%lld parameters on %s, loaded in %.1f s\n",
              job->name.c_str(), static_cast<long long>(train->size),
              test ? std::to_string(test->size).c_str() : "no",
              static_cast<long long>((*trainer)->model().num_parameters()),
              job->device.c_str(), load_seconds);

  strata::StepStats last_train;
  std::optional<strata::StepStats> last_test;
  double train_seconds = 0;
  int64_t train_examples = 0;
  const absl::Time wall_start = absl::Now();
  for (int epoch = 0; epoch < job->epochs; ++epoch) {
    const absl::Time epoch_start = absl::Now();
    absl::StatusOr<strata::StepStats> stats = (*trainer)->TrainEpoch(
        *train, job->batch_size, job->shuffle_seed, epoch);
    if (!stats.ok()) {
      std::cerr << "local_train: epoch " << epoch + 1 << ": "
                << stats.status().message() << "\n";
      return 1;
    }
    const double epoch_train_seconds = Seconds(epoch_start);
    train_seconds += epoch_train_seconds;
    train_examples += stats->examples;
    last_train = *stats;
    std::string line = absl::StrFormat(
        "Epoch %d/%d - %d steps - loss: %.4f - accuracy: %.4f", epoch + 1,
        job->epochs, steps_per_epoch, stats->loss, stats->accuracy);
    const bool evaluate =
        test && ((job->evaluation.every_epochs > 0 &&
                  (epoch + 1) % job->evaluation.every_epochs == 0) ||
                 epoch + 1 == job->epochs);
    if (evaluate) {
      absl::StatusOr<strata::StepStats> t = (*trainer)->Evaluate(*test);
      if (!t.ok()) {
        std::cerr << "local_train: evaluation: " << t.status().message() << "\n";
        return 1;
      }
      last_test = *t;
      line += absl::StrFormat(" - test_loss: %.4f - test_accuracy: %.4f",
                              t->loss, t->accuracy);
    }
    line += absl::StrFormat(
        " - %.0f examples/s - %.1f s",
        static_cast<double>(stats->examples) / epoch_train_seconds,
        Seconds(epoch_start));
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  const double wall_seconds = Seconds(wall_start);

  nlohmann::json summary;
  summary["job"] = job->name;
  summary["epochs"] = job->epochs;
  summary["steps"] = (*trainer)->iterations();
  summary["train_loss"] = last_train.loss;
  summary["train_accuracy"] = last_train.accuracy;
  summary["test_loss"] = last_test ? nlohmann::json(last_test->loss)
                                   : nlohmann::json(nullptr);
  summary["test_accuracy"] = last_test ? nlohmann::json(last_test->accuracy)
                                       : nlohmann::json(nullptr);
  summary["wall_seconds"] = wall_seconds;
  summary["load_seconds"] = load_seconds;
  summary["examples_per_second"] =
      train_seconds > 0 ? static_cast<double>(train_examples) / train_seconds
                        : 0.0;
  // As strata launch's summary names the same measure.
  summary["train_seconds"] = train_seconds;
  summary["train_examples_per_second"] = summary["examples_per_second"];
  if (last_test) {
    std::printf("test_accuracy: %.4f - test_loss: %.4f - %lld steps - "
                "%.1f s\n",
                last_test->accuracy, last_test->loss,
                static_cast<long long>((*trainer)->iterations()),
                wall_seconds);
  }
  const std::string summary_path = absl::GetFlag(FLAGS_summary);
  if (!summary_path.empty()) {
    std::ofstream out(summary_path);
    out << summary.dump(2) << "\n";
    out.close();
    if (!out) {
      std::cerr << "local_train: cannot write " << summary_path << "\n";
      return 1;
    }
  }
  return 0;
}

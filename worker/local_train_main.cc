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
#include "worker/criteo_data.h"
#include "worker/dataset.h"
#include "worker/embedding_model.h"
#include "job/job.h"
#include "worker/model.h"
#include "worker/progress.h"

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

int Fail(int code, absl::string_view message) {
  std::cerr << "local_train: " << message << "\n";
  return code;
}

// The job file with --epochs and --device applied, refused (before anything
// is allocated) when it does not fit this machine, its data files are
// missing or its device cannot be used. 0, or the exit code after the
// reason is printed.
int ResolveJob(strata::JobSpec* out) {
  const std::string job_path = absl::GetFlag(FLAGS_job);
  if (job_path.empty()) return Fail(2, "--job FILE is required");
  absl::StatusOr<strata::JobSpec> job = strata::LoadJobFile(job_path);
  if (!job.ok()) return Fail(2, job.status().message());
  const int64_t memory_bytes =
      static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
      static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  if (absl::Status fits = strata::CheckJobFitsMemory(*job, memory_bytes);
      !fits.ok()) {
    return Fail(2, fits.message());
  }
  if (absl::Status files = strata::CheckDataFiles(*job); !files.ok()) {
    return Fail(2, files.message());
  }
  if (absl::GetFlag(FLAGS_epochs) < 0) {
    return Fail(2, "--epochs must be >= 0");
  }
  if (absl::GetFlag(FLAGS_epochs) > 0) {
    job->epochs = absl::GetFlag(FLAGS_epochs);
  }
  std::string device_source = "job.device";
  if (const std::string flag = absl::GetFlag(FLAGS_device); !flag.empty()) {
    absl::StatusOr<int> cuda = strata::ParseDeviceName(flag, "--device");
    if (!cuda.ok()) return Fail(2, cuda.status().message());
    job->cuda_device = *cuda;
    job->device = *cuda < 0 ? "cpu" : absl::StrCat("cuda:", *cuda);
    device_source = "--device";
  }
  // Fail before loading data when the device cannot be used.
  if (absl::Status usable = strata::CheckDevice(job->device, device_source);
      !usable.ok()) {
    return Fail(1, usable.ToString());
  }
  *out = *std::move(job);
  return 0;
}

// The training and (where the job has it) test data. 0, or the exit code
// after the reason is printed.
int LoadData(const strata::JobSpec& job, strata::Dataset* train,
             std::optional<strata::Dataset>* test) {
  absl::StatusOr<strata::Dataset> loaded = strata::LoadTrain(job);
  if (!loaded.ok()) {
    return Fail(1, absl::StrCat("training data: ", loaded.status().message()));
  }
  *train = *std::move(loaded);
  if (job.data.has_test) {
    loaded = strata::LoadTest(job);
    if (!loaded.ok()) {
      return Fail(1, absl::StrCat("test data: ", loaded.status().message()));
    }
    *test = *std::move(loaded);
  }
  return 0;
}

// What the epochs measured.
struct RunStats {
  strata::StepStats last_train;
  std::optional<strata::StepStats> last_test;
  double train_seconds = 0;
  int64_t train_examples = 0;
};

// Trains job.epochs epochs, printing a line each. 0, or the exit code after
// the reason is printed.
int TrainEpochs(const strata::JobSpec& job, const strata::Dataset& train,
                const std::optional<strata::Dataset>& test,
                strata::LocalTrainer* trainer, RunStats* run) {
  const int64_t steps_per_epoch =
      strata::StepsPerEpoch(train.size, job.batch_size);
  for (int epoch = 0; epoch < job.epochs; ++epoch) {
    const absl::Time epoch_start = absl::Now();
    absl::StatusOr<strata::StepStats> stats =
        trainer->TrainEpoch(train, job.batch_size, job.shuffle_seed, epoch);
    if (!stats.ok()) {
      return Fail(1, absl::StrCat("epoch ", epoch + 1, ": ",
                                  stats.status().message()));
    }
    const double epoch_train_seconds = Seconds(epoch_start);
    run->train_seconds += epoch_train_seconds;
    run->train_examples += stats->examples;
    run->last_train = *stats;
    strata::EpochProgress progress;
    progress.epoch = epoch + 1;
    progress.epochs = job.epochs;
    progress.steps = steps_per_epoch;
    progress.loss = stats->loss;
    progress.accuracy = stats->accuracy;
    const bool evaluate =
        test && ((job.evaluation.every_epochs > 0 &&
                  (epoch + 1) % job.evaluation.every_epochs == 0) ||
                 epoch + 1 == job.epochs);
    if (evaluate) {
      absl::StatusOr<strata::StepStats> t = trainer->Evaluate(*test);
      if (!t.ok()) {
        return Fail(1, absl::StrCat("evaluation: ", t.status().message()));
      }
      run->last_test = *t;
      progress.evaluated = true;
      progress.test_loss = t->loss;
      progress.test_accuracy = t->accuracy;
    }
    progress.examples_per_second =
        static_cast<double>(stats->examples) / epoch_train_seconds;
    progress.seconds = Seconds(epoch_start);
    std::printf("%s\n", strata::FormatEpochLine(progress, " s").c_str());
    std::fflush(stdout);
  }
  return 0;
}

nlohmann::json Summary(const strata::JobSpec& job, const RunStats& run,
                       int64_t steps, double wall_seconds,
                       double load_seconds) {
  nlohmann::json summary;
  summary["job"] = job.name;
  summary["epochs"] = job.epochs;
  summary["steps"] = steps;
  summary["train_loss"] = run.last_train.loss;
  summary["train_accuracy"] = run.last_train.accuracy;
  summary["test_loss"] = run.last_test ? nlohmann::json(run.last_test->loss)
                                       : nlohmann::json(nullptr);
  summary["test_accuracy"] = run.last_test
                                 ? nlohmann::json(run.last_test->accuracy)
                                 : nlohmann::json(nullptr);
  summary["wall_seconds"] = wall_seconds;
  summary["load_seconds"] = load_seconds;
  summary["examples_per_second"] =
      run.train_seconds > 0
          ? static_cast<double>(run.train_examples) / run.train_seconds
          : 0.0;
  // As strata launch's summary names the same measure.
  summary["train_seconds"] = run.train_seconds;
  summary["train_examples_per_second"] = summary["examples_per_second"];
  return summary;
}

}  // namespace

// A job with embeddings over Criteo data: the files streamed each epoch,
// the tables in this process, AUC and log loss on the test split.
int TrainEmbeddings(const strata::JobSpec& job) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<strata::EmbeddingTrainer>> trainer =
      strata::EmbeddingTrainer::Create(job);
  if (!trainer.ok()) return Fail(2, trainer.status().message());
  const strata::CriteoReaderOptions options = strata::CriteoOptionsFor(job);
  auto open = [&](const std::string& path)
      -> absl::StatusOr<std::unique_ptr<strata::CriteoReader>> {
    return strata::CriteoReader::Create(path, options);
  };
  absl::StatusOr<std::unique_ptr<strata::CriteoReader>> train =
      open(job.data.train.path);
  if (!train.ok()) return Fail(1, train.status().message());
  std::unique_ptr<strata::CriteoReader> test;
  if (job.data.has_test) {
    absl::StatusOr<std::unique_ptr<strata::CriteoReader>> t =
        open(job.data.test.path);
    if (!t.ok()) return Fail(1, t.status().message());
    test = *std::move(t);
  }
  std::printf("job %s: embeddings over %s, %lld parameters in the layers, "
              "tables in this process\n",
              job.name.c_str(), job.data.train.path.c_str(),
              static_cast<long long>(
                  (*trainer)->layers().model().num_parameters()));
  RunStats run;
  std::optional<strata::BinaryEvaluation> last;
  for (int epoch = 0; epoch < job.epochs; ++epoch) {
    const absl::Time epoch_start = absl::Now();
    absl::StatusOr<strata::StepStats> stats = (*trainer)->TrainEpoch(**train);
    if (!stats.ok()) {
      return Fail(1, absl::StrCat("epoch ", epoch + 1, ": ",
                                  stats.status().message()));
    }
    const double train_seconds = Seconds(epoch_start);
    run.train_seconds += train_seconds;
    run.train_examples += stats->examples;
    run.last_train = *stats;
    std::string line = absl::StrFormat(
        "Epoch %d/%d - %lld examples - loss: %.4f - accuracy: %.4f",
        epoch + 1, job.epochs, static_cast<long long>(stats->examples),
        stats->loss, stats->accuracy);
    const bool evaluate =
        test != nullptr && ((job.evaluation.every_epochs > 0 &&
                             (epoch + 1) % job.evaluation.every_epochs == 0) ||
                            epoch + 1 == job.epochs);
    if (evaluate) {
      absl::StatusOr<strata::BinaryEvaluation> e = (*trainer)->Evaluate(*test);
      if (!e.ok()) {
        return Fail(1, absl::StrCat("evaluation: ", e.status().message()));
      }
      last = *e;
      absl::StrAppendFormat(&line,
                            " - test_loss: %.4f - test_accuracy: %.4f - "
                            "test_auc: %.4f",
                            e->loss, e->accuracy, e->auc);
    }
    if ((*train)->lines_skipped() > 0) {
      absl::StrAppendFormat(&line, " - skipped lines: %lld",
                            static_cast<long long>((*train)->lines_skipped()));
    }
    absl::StrAppendFormat(&line, " - %.0f examples/s - %.1f s",
                          static_cast<double>(stats->examples) / train_seconds,
                          Seconds(epoch_start));
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  nlohmann::json tables = nlohmann::json::object();
  for (const auto& [name, s] : (*trainer)->tables().Stats()) {
    tables[name] = {{"rows", s.rows},
                    {"bytes", s.bytes},
                    {"lookups", s.lookups},
                    {"admissions", s.admissions},
                    {"evictions", s.evictions},
                    {"gradients_dropped", s.gradients_dropped}};
  }
  const double wall_seconds = Seconds(start);
  if (last) {
    std::printf("test_auc: %.4f - test_log_loss: %.4f - test_accuracy: %.4f "
                "- %lld steps - %.1f s\n",
                last->auc, last->log_loss, last->accuracy,
                static_cast<long long>((*trainer)->iterations()), wall_seconds);
  }
  const std::string summary_path = absl::GetFlag(FLAGS_summary);
  if (!summary_path.empty()) {
    nlohmann::json summary =
        Summary(job, run, (*trainer)->iterations(), wall_seconds, 0);
    if (last) {
      summary["test_loss"] = last->loss;
      summary["test_accuracy"] = last->accuracy;
      summary["test_auc"] = last->auc;
      summary["test_log_loss"] = last->log_loss;
    }
    summary["tables"] = tables;
    summary["train_lines_skipped"] = (*train)->lines_skipped();
    std::ofstream out(summary_path);
    out << summary.dump(2) << "\n";
    out.close();
    if (!out) return Fail(1, absl::StrCat("cannot write ", summary_path));
  }
  return 0;
}

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());
  strata::JobSpec job;
  if (int code = ResolveJob(&job); code != 0) return code;
  if (!job.model.embeddings.empty()) return TrainEmbeddings(job);

  const absl::Time load_start = absl::Now();
  strata::Dataset train;
  std::optional<strata::Dataset> test;
  if (int code = LoadData(job, &train, &test); code != 0) return code;
  const double load_seconds = Seconds(load_start);

  absl::StatusOr<std::unique_ptr<strata::LocalTrainer>> trainer =
      strata::LocalTrainer::Create(job);
  if (!trainer.ok()) return Fail(2, trainer.status().message());
  std::printf("job %s: %lld training examples, %s test examples, "
              "%lld parameters on %s, loaded in %.1f s\n",
              job.name.c_str(), static_cast<long long>(train.size),
              test ? std::to_string(test->size).c_str() : "no",
              static_cast<long long>((*trainer)->model().num_parameters()),
              job.device.c_str(), load_seconds);

  RunStats run;
  const absl::Time wall_start = absl::Now();
  if (int code = TrainEpochs(job, train, test, trainer->get(), &run);
      code != 0) {
    return code;
  }
  const double wall_seconds = Seconds(wall_start);
  const int64_t steps = (*trainer)->iterations();
  if (run.last_test) {
    std::printf("test_accuracy: %.4f - test_loss: %.4f - %lld steps - "
                "%.1f s\n",
                run.last_test->accuracy, run.last_test->loss,
                static_cast<long long>(steps), wall_seconds);
  }
  const std::string summary_path = absl::GetFlag(FLAGS_summary);
  if (!summary_path.empty()) {
    std::ofstream out(summary_path);
    out << Summary(job, run, steps, wall_seconds, load_seconds).dump(2)
        << "\n";
    out.close();
    if (!out) return Fail(1, absl::StrCat("cannot write ", summary_path));
  }
  return 0;
}

// fashion_mnist_train: the seed's Fashion-MNIST model written with the Strata
// SDK, as its Keras original reads:
//
//   model = Sequential([Dense(128, activation="relu", input_dim=784),
//                       Dense(10, activation="softmax")])
//   model.compile(Adam(0.001), "sparse_categorical_crossentropy",
//                 ["accuracy"])
//   model.fit(x_train, y_train, epochs=10, batch_size=128,
//             validation_data=(x_test, y_test))
//
//   fashion_mnist_train [--strategy one_device|mirrored|parameter_server|
//                        central_storage|multi_worker_mirrored]
//                       [--workers N] [--ps N] [--update async|sync]
//                       [--collective ring|ps] [--epochs N] [--batch-size N]
//                       [--limit-train N] [--limit-test N] [--data-dir DIR]
//                       [--bin-dir DIR]
//
// Only the strategy differs between the runs: the model, Compile and Fit are
// the same code for every one. mirrored trains --workers replicas as threads
// here; the others after one_device start a local cluster of processes.
//
// Prints a line per epoch, the history, and the test accuracy of the
// trained weights evaluated in this process. Exits 0 on success, 1 when
// training fails, 2 on bad flags, 130 when interrupted.
#include <atomic>
#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "common/cli.h"
#include "sdk/strata.h"

ABSL_FLAG(std::string, strategy, "one_device",
          "one_device or mirrored (in this process), parameter_server, "
          "central_storage or multi_worker_mirrored (a local cluster of "
          "processes)");
ABSL_FLAG(int, ps, 2, "parameter_server, central_storage, "
          "multi_worker_mirrored with --collective=ps: PS tasks");
ABSL_FLAG(int, workers, 2, "Replicas: worker tasks of a cluster strategy, "
          "threads of mirrored");
ABSL_FLAG(std::string, update, "async", "parameter_server: async or sync");
ABSL_FLAG(std::string, collective, "ring", "multi_worker_mirrored: ring "
          "(all-reduce between the workers) or ps (through a PS task)");
ABSL_FLAG(std::string, model, "mlp",
          "mlp (the reference model) or cnn (the CNN of TensorFlow's "
          "distributed-training guide: Conv2D(32, 3, relu), MaxPooling2D, "
          "Flatten, Dense(64, relu), Dense(10) logits)");
ABSL_FLAG(int, epochs, 10, "Training epochs");
ABSL_FLAG(int64_t, batch_size, 128, "Examples per step");
ABSL_FLAG(int64_t, limit_train, 0, "Use only the first N training examples "
          "(0 = all 60000)");
ABSL_FLAG(int64_t, limit_test, 0, "Use only the first N test examples "
          "(0 = all 10000)");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Directory of the Fashion-MNIST .gz files");
ABSL_FLAG(std::string, bin_dir, "", "Cluster strategies: directory of "
          "strata-coordinator, strata-ps, strata-worker (default: this "
          "program's directory)");

namespace {

namespace sdk = strata::sdk;

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

int Fail(const char* what, const absl::Status& status) {
  std::cerr << "fashion_mnist_train: " << what << ": " << status << "\n";
  return status.code() == absl::StatusCode::kCancelled ? 130 : 1;
}

// --help: what fashion_mnist_train is and its flags, grouped.
strata::CliSpec Cli() {
  strata::CliSpec cli;
  cli.program = "fashion_mnist_train";
  cli.usage =
      "fashion_mnist_train [--strategy S] [--workers N] [--ps N] "
      "[--epochs N] [flags]";
  cli.description =
      "The reference Fashion-MNIST model written with the Strata SDK, "
      "trained under the strategy given (in this process, or on a local "
      "cluster of processes) and evaluated on the test set.";
  cli.groups = {
      {"Strategy",
       {"strategy", "workers", "ps", "update", "collective", "bin_dir"}},
      {"Training", {"model", "epochs", "batch_size", "limit_train",
                    "limit_test", "data_dir"}}};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ParseCli(argc, argv, Cli());

  const std::string strategy_name = absl::GetFlag(FLAGS_strategy);
  sdk::LocalClusterOptions cluster;
  cluster.num_ps = absl::GetFlag(FLAGS_ps);
  cluster.num_workers = absl::GetFlag(FLAGS_workers);
  cluster.update = absl::GetFlag(FLAGS_update);
  cluster.collective = absl::GetFlag(FLAGS_collective);
  cluster.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  std::unique_ptr<sdk::Strategy> strategy;
  if (strategy_name == "one_device") {
    strategy = std::make_unique<sdk::OneDeviceStrategy>();
  } else if (strategy_name == "mirrored") {
    absl::StatusOr<std::unique_ptr<sdk::MirroredStrategy>> mirrored =
        sdk::MirroredStrategy::Create(cluster.num_workers);
    if (!mirrored.ok()) {
      std::cerr << "fashion_mnist_train: --workers: "
                << mirrored.status().message() << "\n";
      return 2;
    }
    strategy = *std::move(mirrored);
  } else if (strategy_name == "parameter_server") {
    strategy = sdk::ParameterServerStrategy::Local(cluster);
  } else if (strategy_name == "central_storage") {
    strategy = sdk::CentralStorageStrategy::Local(cluster);
  } else if (strategy_name == "multi_worker_mirrored") {
    strategy = sdk::MultiWorkerMirroredStrategy::Local(cluster);
  } else {
    std::cerr << "fashion_mnist_train: --strategy must be one of one_device, "
                 "mirrored, parameter_server, central_storage, "
                 "multi_worker_mirrored; got '"
              << strategy_name << "'\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_limit_train) < 0 ||
      absl::GetFlag(FLAGS_limit_test) < 0) {
    std::cerr << "fashion_mnist_train: --limit-train and --limit-test must "
                 "be >= 0\n";
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  const std::string model_name = absl::GetFlag(FLAGS_model);
  if (model_name != "mlp" && model_name != "cnn") {
    std::cerr << "fashion_mnist_train: --model must be mlp or cnn; got '"
              << model_name << "'\n";
    return 2;
  }
  const bool cnn = model_name == "cnn";
  auto scope = strategy->Scope();
  sdk::Sequential model(
      cnn ? std::vector<sdk::Layer>{sdk::Reshape({28, 28, 1}, {784}),
                                    sdk::Conv2D(32, 3, "relu"),
                                    sdk::MaxPooling2D(2), sdk::Flatten(),
                                    sdk::Dense(64, "relu"), sdk::Dense(10)}
          : std::vector<sdk::Layer>{sdk::Dense(128, "relu", /*input_dim=*/784),
                                    sdk::Dense(10, "softmax")},
      {/*name=*/cnn ? "fashion-mnist-cnn" : "fashion-mnist-mlp", /*seed=*/1});
  absl::Status compiled = model.Compile(
      sdk::Adam(0.001),
      sdk::Loss("sparse_categorical_crossentropy", /*logits=*/cnn),
      {"accuracy"});
  if (!compiled.ok()) return Fail("compile", compiled);
  if (absl::StatusOr<std::string> summary = model.Summary(); summary.ok()) {
    std::cout << *summary;
  }

  sdk::datasets::TrainTest data =
      sdk::datasets::FashionMnist(absl::GetFlag(FLAGS_data_dir));
  if (absl::GetFlag(FLAGS_limit_train) > 0) {
    data.train = data.train.Take(absl::GetFlag(FLAGS_limit_train));
  }
  if (absl::GetFlag(FLAGS_limit_test) > 0) {
    data.test = data.test.Take(absl::GetFlag(FLAGS_limit_test));
  }

  sdk::FitOptions fit;
  fit.epochs = absl::GetFlag(FLAGS_epochs);
  fit.batch_size = absl::GetFlag(FLAGS_batch_size);
  fit.validation = data.test;
  fit.shuffle_seed = 42;
  fit.stop = &g_stop;
  absl::StatusOr<sdk::History> history = model.Fit(data.train, fit);
  if (!history.ok()) return Fail("fit", history.status());

  std::cout << "\nHistory (" << strategy->name() << ", "
            << strategy->num_replicas_in_sync() << " replicas in sync):\n"
            << absl::StrFormat("%5s %8s %9s %10s %14s %12s\n", "epoch",
                               "loss", "accuracy", "test_loss",
                               "test_accuracy", "examples/s");
  for (const sdk::EpochResult& e : history->epochs) {
    std::cout << absl::StrFormat("%5d %8.4f %9.4f ", e.epoch, e.loss,
                                 e.accuracy)
              << (e.evaluated ? absl::StrFormat("%10.4f %14.4f", e.test_loss,
                                                e.test_accuracy)
                              : absl::StrFormat("%10s %14s", "-", "-"))
              << absl::StrFormat(" %12.0f\n", e.examples_per_second);
  }

  absl::StatusOr<sdk::EvalResult> result = model.Evaluate(data.test);
  if (!result.ok()) return Fail("evaluate", result.status());
  std::cout << absl::StrFormat(
                   "test accuracy: %.4f - test loss: %.4f (%d examples, "
                   "trained weights evaluated in this process)\n",
                   result->accuracy, result->loss, result->examples)
            << std::flush;
  return 0;
}

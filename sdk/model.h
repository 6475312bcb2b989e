// The SDK's model: Sequential (Compile, Fit, Evaluate, Predict, weights and
// state) and what it takes and returns (Loss, FitOptions, FitProgress,
// History, EvalResult, OptimizerState, ...). Part of the SDK that
// sdk/strata.h includes whole; a model trains under the strategy current
// when it was built (sdk/strategy.h).
#ifndef STRATA_SDK_MODEL_H_
#define STRATA_SDK_MODEL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdk/data.h"
#include "sdk/layers.h"

namespace strata::sdk {

namespace internal {
struct ModelState;
}  // namespace internal

class Strategy;  // sdk/strategy.h

// How far a running Fit has got, for another thread to show (Keras's
// progress bar within an epoch). Fit writes it, any thread reads it at any
// time. In-process strategies update it after every step; the cluster
// strategies each time they poll the coordinator (about 10 times a second).
struct FitProgress {
  std::atomic<int> epoch{0};      // the epoch running, from 1 (0: not begun)
  std::atomic<int> epochs{0};     // the Fit's epochs
  std::atomic<int64_t> step{0};   // steps of that epoch done
  std::atomic<int64_t> steps{0};  // steps per epoch
  // Example-weighted means over the epoch's steps done so far.
  std::atomic<double> loss{0};
  std::atomic<double> accuracy{0};
};

struct EpochResult;

struct FitOptions {
  int epochs = 1;
  int64_t batch_size = 32;
  // Evaluated after every `validation_freq` epochs and after the last one.
  std::optional<Dataset> validation;
  int validation_freq = 1;
  uint64_t shuffle_seed = 0;  // epoch e's order is a function of (seed, e)
  // Progress (one Keras-style line per epoch): 0 silent, 1 lines.
  int verbose = 1;
  std::ostream* out = nullptr;  // nullptr: std::cout
  // Set (e.g. by a signal handler) to end Fit early with CANCELLED: between
  // epochs under OneDeviceStrategy and MirroredStrategy; the cluster is
  // stopped under the cluster strategies.
  const std::atomic<bool>* stop = nullptr;
  // Updated as steps complete when set (see FitProgress).
  FitProgress* progress = nullptr;
  // When set, called on the thread running Fit with each epoch as it ends
  // (as History will hold it; the cluster strategies when the coordinator
  // reports the epoch and its evaluation complete, as the epoch line).
  std::function<void(const EpochResult&)> on_epoch_end;
};

// One epoch of a Fit. Epochs are numbered from 1 within each Fit call.
struct EpochResult {
  int epoch = 0;
  int64_t steps = 0;
  double loss = 0;      // example-weighted mean over the epoch
  double accuracy = 0;
  bool evaluated = false;  // test_* hold the validation results
  double test_loss = 0;
  double test_accuracy = 0;
  // Models with embeddings and the "auc" metric: the validation AUC.
  std::optional<double> test_auc;
  double examples_per_second = 0;
  double seconds = 0;  // the epoch's wall time (cluster: elapsed since start)
};

// What Fit returns (Keras's History), one entry per epoch.
struct History {
  std::vector<EpochResult> epochs;
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  int64_t examples = 0;
  // Models with embeddings (binary): the exact AUC and the log loss.
  std::optional<double> auc;
  std::optional<double> log_loss;
};

// A loss by Keras's name ("sparse_categorical_crossentropy",
// "categorical_crossentropy", "binary_crossentropy", "mse", "mae",
// "huber" and their Keras aliases); with `from_logits` the model's output
// is logits and the cross-entropy applies the softmax (sigmoid) itself, as
// Keras's loss objects take it; `delta`: the Huber loss's (> 0).
struct Loss {
  Loss(std::string loss_name, bool logits = false)  // NOLINT: implicit
      : name(std::move(loss_name)), from_logits(logits) {}
  Loss(const char* loss_name) : name(loss_name) {}  // NOLINT: implicit
  std::string name;
  bool from_logits = false;
  double delta = 1.0;
};

// A Keras model config as model.to_json() writes it (Sequential or
// Functional, tf.keras 2.x or Keras 3; see README "Keras model format"):
// the graph of layers the model runtime trains. Its inputs are read side by
// side from each example's features, in the config's input order.
struct KerasModel {
  std::string config_json;
};

// A Keras optimizer's state: the updates applied, and per trainable weight
// (GetWeights order) its slots in `slot_names` order (Adam "m", "v";
// SGD with momentum "momentum"; ...).
struct OptimizerState {
  int64_t iterations = 0;
  std::vector<std::string> slot_names;
  std::vector<std::vector<std::vector<float>>> slots;  // [weight][slot]
};

struct ModelOptions {
  std::string name = "sequential";  // the job name: [A-Za-z0-9._-]+
  uint64_t seed = 1;  // initializers (and dropout) derive from it
};

// A Keras Sequential model bound to the strategy current when it was built
// (see Strategy::Scope). Thread-compatible; move-only.
class Sequential {
 public:
  explicit Sequential(std::vector<Layer> layers, ModelOptions options = {});
  // A model with embeddings over categorical columns (issue 15): `inputs`
  // gives the example's columns and embeddings, so the first layer takes
  // no input shape. Trained under OneDeviceStrategy (the tables in this
  // process) or ParameterServerStrategy (the tables on the PS tasks, read
  // back after Fit so Evaluate and Predict run here) on datasets::Criteo
  // files; the loss is "binary_crossentropy", and the metrics may hold
  // "auc". Evaluate and Predict take such a dataset too.
  Sequential(Inputs inputs, std::vector<Layer> layers,
             ModelOptions options = {});
  // A model from Keras's model config; Compile parses and checks it
  // (INVALID_ARGUMENT naming the layer and the argument it refuses).
  explicit Sequential(KerasModel keras, ModelOptions options = {});
  ~Sequential();
  Sequential(Sequential&&) noexcept;
  Sequential& operator=(Sequential&&) noexcept;

  // Validates the model, loss (see Loss) and metrics
  // ([] or {"accuracy"}), then (re)initializes the weights from the seed
  // and the optimizer's state. Errors: INVALID_ARGUMENT naming the job path
  // of the bad value; the model then stays uncompiled.
  absl::Status Compile(Optimizer optimizer, Loss loss,
                       std::vector<std::string> metrics = {});

  // Trains under the model's strategy. Errors: FAILED_PRECONDITION before
  // a successful Compile, or (the cluster strategies) when the model was
  // already fit on a cluster; INVALID_ARGUMENT for bad options or data that
  // does not fit the model; the loaders' errors; CANCELLED when `stop` was
  // set; from a cluster run, the launcher's errors with the run directory.
  absl::StatusOr<History> Fit(const Dataset& train,
                              const FitOptions& options = {});

  // Loss and accuracy over `data` with the current weights, in this
  // process. Errors: FAILED_PRECONDITION before Compile; INVALID_ARGUMENT
  // when the data does not fit the model; the loaders' errors.
  absl::StatusOr<EvalResult> Evaluate(const Dataset& data,
                                      int64_t batch_size = 1024) const;

  // The outputs for every example of `data` (or for the rows of `x`,
  // num_features() values each): examples x num_outputs(), row-major.
  // Errors: as Evaluate.
  absl::StatusOr<std::vector<float>> Predict(const Dataset& data,
                                             int64_t batch_size = 1024) const;
  absl::StatusOr<std::vector<float>> Predict(absl::Span<const float> x) const;

  // The weights in Keras's order (per dense layer its kernel, [in, units]
  // row-major, then its bias), and their names ("dense/kernel", ...).
  // Errors: FAILED_PRECONDITION before Compile.
  absl::StatusOr<std::vector<std::vector<float>>> GetWeights() const;
  absl::StatusOr<std::vector<std::string>> WeightNames() const;
  // Each weight's shape (a Dense kernel [in, units], a Conv2D kernel
  // [kh, kw, in, out]). Errors: FAILED_PRECONDITION before Compile.
  absl::StatusOr<std::vector<std::vector<int64_t>>> WeightShapes() const;

  // The non-trainable state (BatchNormalization's moving_mean and
  // moving_variance), in the graph's order: names, shapes and the values
  // held in this process (their initial values before a Fit). SetState
  // replaces them (Keras's set_weights for non-trainable weights).
  // Errors: FAILED_PRECONDITION before Compile; SetState INVALID_ARGUMENT
  // naming the variable whose count or size differs or that holds a
  // non-finite value (nothing changes then).
  absl::StatusOr<std::vector<std::string>> StateNames() const;
  absl::StatusOr<std::vector<std::vector<int64_t>>> StateShapes() const;
  absl::StatusOr<std::vector<std::vector<float>>> GetState() const;
  absl::Status SetState(std::vector<std::vector<float>> state);
  // Keras's set_weights: replaces the weights (same order and sizes as
  // GetWeights); the optimizer's state stays. The weights reached by a
  // MirroredStrategy Fit are replaced in every replica's next Fit; the
  // cluster strategies start each Fit from the initializers, so after
  // SetWeights their Fit is FAILED_PRECONDITION. Errors: FAILED_PRECONDITION
  // before Compile; INVALID_ARGUMENT naming the weight whose size differs
  // or that holds a non-finite value (nothing changes then).
  absl::Status SetWeights(std::vector<std::vector<float>> weights);

  // The optimizer's state held in this process (as Keras saves it with a
  // model), and its replacement (a loaded model's). Errors:
  // FAILED_PRECONDITION before Compile, or after a cluster Fit (the slots
  // stay on the cluster's PS tasks or workers); SetOptimizerState
  // INVALID_ARGUMENT naming the weight and slot whose size differs (nothing
  // changes then).
  absl::StatusOr<OptimizerState> GetOptimizerState() const;
  absl::Status SetOptimizerState(const OptimizerState& state);

  // Keras's `optimizer.learning_rate = lr` between Fits: the rate of the
  // steps that follow, under every strategy (a cluster Fit starts its
  // parameter servers' optimizers with it). Embedding tables keep theirs.
  // Errors: FAILED_PRECONDITION before Compile; INVALID_ARGUMENT for a
  // value that is not finite and > 0 (nothing changes then).
  absl::Status SetLearningRate(double learning_rate);
  // The learning rate in effect (0 before Compile).
  double learning_rate() const;

  // A Keras-style table of layers, output shapes and parameter counts.
  // Errors: FAILED_PRECONDITION before Compile.
  absl::StatusOr<std::string> Summary() const;

  bool compiled() const;
  // 0 before Compile.
  int64_t num_features() const;
  int64_t num_outputs() const;
  const Strategy& strategy() const;
  // Rows of each embedding table held here (in this process, or read back
  // from the PS tasks after a cluster Fit); empty without embeddings.
  std::vector<std::pair<std::string, int64_t>> TableRows() const;

 private:
  std::unique_ptr<internal::ModelState> state_;
};

}  // namespace strata::sdk

#endif  // STRATA_SDK_MODEL_H_

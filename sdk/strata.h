// The Strata SDK: training code shaped like tf.keras + tf.distribute.
//
//   namespace sdk = strata::sdk;
//   auto strategy = sdk::ParameterServerStrategy::Local({/*num_ps=*/2,
//                                                        /*num_workers=*/2});
//   {
//     auto scope = strategy->Scope();  // models built here use `strategy`
//     sdk::Sequential model({sdk::Dense(128, "relu", /*input_dim=*/784),
//                            sdk::Dense(10, "softmax")});
//     absl::Status s = model.Compile(sdk::Adam(0.001),
//                                    "sparse_categorical_crossentropy",
//                                    {"accuracy"});
//     auto data = sdk::datasets::FashionMnist();
//     absl::StatusOr<sdk::History> h =
//         model.Fit(data.train, {/*epochs=*/10, /*batch_size=*/128,
//                                /*validation=*/data.test});
//     absl::StatusOr<sdk::EvalResult> r = model.Evaluate(data.test);
//   }
//
// Everything lives in namespace strata::sdk (beside, not inside, the
// runtime's strata::Model, strata::Dataset and strata::Optimizer).
//
// A model is validated by turning it into a job (the JSON schema of
// worker/job.h, as examples/fashion_mnist/job.json) and parsing that job, so
// errors name the job path of the offending value
// ("job.model.layers[1].activation: 'relux' is not one of ...").
//
// Strategies: OneDeviceStrategy (the default) trains in this process.
// ParameterServerStrategy::Local starts a whole local cluster (coordinator,
// PS tasks, workers; tools/launcher.h) for each Fit and, when the job has
// succeeded, pulls the trained variables back into the model, so Evaluate,
// Predict and GetWeights afterwards run here on the trained parameters.
#ifndef STRATA_SDK_STRATA_H_
#define STRATA_SDK_STRATA_H_

#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strata {
struct Dataset;  // worker/dataset.h: examples in memory
}  // namespace strata

namespace strata::sdk {

namespace internal {
struct ModelState;
struct DatasetAccess;
}  // namespace internal

class Strategy;

// ---------------------------------------------------------------------------
// Data

// A dataset as tf.data sees it from Fit: a description of where examples
// come from (files, or arrays in memory), loaded on first use and cached by
// this value and its copies. Copies share the cache; Take() makes a new
// dataset with its own. Thread-safe.
class Dataset {
 public:
  // An empty in-memory dataset.
  Dataset();

  // The first `n` examples (n >= 1). n < 0 keeps them all (as tf.data's
  // take(-1)); Take(0) selects nothing, which Load() reports as
  // INVALID_ARGUMENT. Take(a).Take(b) keeps min(a, b).
  Dataset Take(int64_t n) const;

  // True for FromArrays datasets (they cannot be sent to a cluster).
  bool in_memory() const;
  // E.g. "idx(/path/train-images..., /path/train-labels...), scale 255,
  // take 3000".
  std::string DebugString() const;

  // The examples, loaded once (worker/dataset.h LoadIdx / LoadCsv, limited
  // and scaled). Errors: as those loaders (NOT_FOUND for a missing file,
  // DATA_LOSS for a corrupt one, INVALID_ARGUMENT naming "path:line" for a
  // bad CSV value), and INVALID_ARGUMENT for Take(0) or inconsistent arrays.
  absl::StatusOr<std::shared_ptr<const ::strata::Dataset>> Load() const;

  struct Source;  // internal
  struct Cache;   // internal

 private:
  friend struct internal::DatasetAccess;
  Dataset(std::shared_ptr<const Source> source, int64_t take);

  std::shared_ptr<const Source> source_;
  int64_t take_ = -1;  // -1: all
  std::shared_ptr<Cache> cache_;
};

namespace datasets {

struct TrainTest {
  Dataset train;
  Dataset test;
};

// Fashion-MNIST as the Debian package dataset-fashion-mnist installs it
// (train-*-ubyte.gz and t10k-*-ubyte.gz under `dir`), pixels / 255.
TrainTest FashionMnist(
    const std::string& dir = "/usr/share/datasets/fashion-mnist");

// An IDX pair (gzip or not); features are divided by `scale` (> 0).
Dataset Idx(std::string images, std::string labels, double scale = 1.0);

// A CSV file (gzip or not): column `label_column` is the integer label, the
// others the features (divided by `scale`); `header` skips the first line.
Dataset Csv(std::string path, int64_t label_column = 0, bool header = true,
            double scale = 1.0);

// Examples in memory: `x` holds labels.size() rows of `features` values.
// Consistency is checked by Load(). Usable under OneDeviceStrategy and by
// Evaluate / Predict; ParameterServerStrategy needs files.
Dataset FromArrays(std::vector<float> x, std::vector<int32_t> labels,
                   int64_t features);

}  // namespace datasets

// ---------------------------------------------------------------------------
// Layers and optimizers

// One Keras layer. Build them with Dense, Dropout and Flatten. Only the
// first layer of a model may carry an input shape (Keras's input_dim /
// input_shape).
struct Layer {
  std::string type;  // "dense", "dropout", "flatten"
  int64_t units = 0;                 // dense
  std::string activation = "linear";  // dense: linear relu sigmoid tanh softmax
  bool use_bias = true;              // dense
  double rate = 0;                   // dropout, in [0, 1)
  std::vector<int64_t> input_shape;  // one example's shape, without the batch
  std::string name;  // empty: Keras's automatic name ("dense", "dense_1", ...)

  // This layer with an explicit name (it names its variables:
  // "NAME/kernel", "NAME/bias").
  Layer Named(std::string layer_name) const;
};

Layer Dense(int64_t units, std::string activation = "linear",
            int64_t input_dim = 0);
Layer Dropout(double rate);
Layer Flatten(std::vector<int64_t> input_shape = {});

// An optimizer and its hyper-parameters (Keras's names and defaults;
// fields the type does not use are ignored). Implicitly built from a type
// name, so Compile("adam", ...) works as in Keras.
struct Optimizer {
  Optimizer(const char* optimizer_type) : type(optimizer_type) {}  // NOLINT
  Optimizer(std::string optimizer_type)                             // NOLINT
      : type(std::move(optimizer_type)) {}

  std::string type;           // "sgd", "adam", "adagrad", "rmsprop"
  double learning_rate = 0;   // 0: the type's default (SGD 0.01, else 0.001)
  double momentum = 0;        // sgd, rmsprop
  bool nesterov = false;      // sgd
  double beta_1 = 0.9;        // adam
  double beta_2 = 0.999;      // adam
  double epsilon = 1e-7;      // adam, adagrad, rmsprop
  bool amsgrad = false;       // adam
  double initial_accumulator_value = 0.1;  // adagrad
  double rho = 0.9;           // rmsprop
  bool centered = false;      // rmsprop
};

Optimizer SGD(double learning_rate = 0.01, double momentum = 0.0,
              bool nesterov = false);
Optimizer Adam(double learning_rate = 0.001, double beta_1 = 0.9,
               double beta_2 = 0.999, double epsilon = 1e-7,
               bool amsgrad = false);
Optimizer Adagrad(double learning_rate = 0.001,
                  double initial_accumulator_value = 0.1,
                  double epsilon = 1e-7);
Optimizer RMSprop(double learning_rate = 0.001, double rho = 0.9,
                  double momentum = 0.0, double epsilon = 1e-7,
                  bool centered = false);

// ---------------------------------------------------------------------------
// Training

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
  // epochs under OneDeviceStrategy; the cluster is stopped under
  // ParameterServerStrategy.
  const std::atomic<bool>* stop = nullptr;
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
  ~Sequential();
  Sequential(Sequential&&) noexcept;
  Sequential& operator=(Sequential&&) noexcept;

  // Validates the model, loss ("sparse_categorical_crossentropy",
  // "categorical_crossentropy", "binary_crossentropy", "mse") and metrics
  // ([] or {"accuracy"}), then (re)initializes the weights from the seed
  // and the optimizer's state. Errors: INVALID_ARGUMENT naming the job path
  // of the bad value; the model then stays uncompiled.
  absl::Status Compile(Optimizer optimizer, std::string loss,
                       std::vector<std::string> metrics = {});

  // Trains under the model's strategy. Errors: FAILED_PRECONDITION before
  // a successful Compile, or (ParameterServerStrategy) when the model was
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

  // A Keras-style table of layers, output shapes and parameter counts.
  // Errors: FAILED_PRECONDITION before Compile.
  absl::StatusOr<std::string> Summary() const;

  bool compiled() const;
  // 0 before Compile.
  int64_t num_features() const;
  int64_t num_outputs() const;
  const Strategy& strategy() const;

 private:
  std::unique_ptr<internal::ModelState> state_;
};

// ---------------------------------------------------------------------------
// Strategies

class StrategyScope;

// Where a model's variables live and how its replicas train (as
// tf.distribute.Strategy). Immutable after construction; thread-safe.
class Strategy {
 public:
  virtual ~Strategy() = default;

  // The job's strategy.type: "one_device", "parameter_server".
  virtual std::string name() const = 0;
  // Replicas whose gradients each step combines (tf.distribute's
  // num_replicas_in_sync): 1 for OneDevice, the workers for PS.
  virtual int num_replicas_in_sync() const = 0;

  // Makes (a copy of) this strategy the current one on this thread until
  // the returned scope is destroyed; models built meanwhile use it. Scopes
  // nest; each restores the strategy that was current before it, so they
  // must end in reverse order (as locals do) on the thread that made them.
  StrategyScope Scope() const;

  virtual std::unique_ptr<Strategy> Clone() const = 0;

 private:
  friend class Sequential;
  // Runs Sequential::Fit for a compiled model.
  virtual absl::StatusOr<History> Fit(internal::ModelState& model,
                                      const Dataset& train,
                                      const FitOptions& options) const = 0;
};

// See Strategy::Scope. Neither copyable nor movable.
class StrategyScope {
 public:
  ~StrategyScope();
  StrategyScope(const StrategyScope&) = delete;
  StrategyScope& operator=(const StrategyScope&) = delete;

 private:
  friend class Strategy;
  explicit StrategyScope(std::shared_ptr<const Strategy> strategy);
  std::shared_ptr<const Strategy> previous_;
};

// The strategy current on this thread (tf.distribute.get_strategy()): the
// innermost scope's, else the default OneDeviceStrategy.
std::shared_ptr<const Strategy> GetStrategy();
// True inside some Scope on this thread.
bool HasStrategy();

// Trains in this process (worker/model.h LocalTrainer), printing a line per
// epoch. The default strategy.
class OneDeviceStrategy : public Strategy {
 public:
  OneDeviceStrategy() = default;
  std::string name() const override { return "one_device"; }
  int num_replicas_in_sync() const override { return 1; }
  std::unique_ptr<Strategy> Clone() const override;

 private:
  absl::StatusOr<History> Fit(internal::ModelState& model,
                              const Dataset& train,
                              const FitOptions& options) const override;
};

// A local cluster started for each Fit (tools/launcher.h Launch): the
// coordinator, `num_ps` PS tasks and `num_workers` workers as processes on
// 127.0.0.1.
struct LocalClusterOptions {
  int num_ps = 2;        // >= 1
  int num_workers = 2;   // >= 1
  std::string update = "async";  // or "sync" (num_workers replicas a step)
  // Axis-0 shards per variable (a fixed partitioner), placed round-robin
  // over the PS tasks. 0: num_ps.
  int num_shards = 0;
  // Where strata-coordinator, strata-ps and strata-worker live. Empty: the
  // directory of the running executable (/proc/self/exe), as in build/bin.
  std::string bin_dir;
  // The job file and the cluster's logs, state and checkpoints. Empty: a
  // new temporary directory per Fit, removed after a successful one (kept,
  // and named in the error, after a failure).
  std::string run_dir;
  bool keep_run_dir = false;
  // Restart a PS task or the coordinator that dies (as Kubernetes would).
  bool restart_servers = true;
};

class ParameterServerStrategy : public Strategy {
 public:
  // A local cluster per Fit. Options are checked by Fit (INVALID_ARGUMENT
  // naming the field; FAILED_PRECONDITION when a daemon is not in bin_dir).
  static std::unique_ptr<ParameterServerStrategy> Local(
      LocalClusterOptions options = {});

  explicit ParameterServerStrategy(LocalClusterOptions options)
      : options_(std::move(options)) {}
  std::string name() const override { return "parameter_server"; }
  int num_replicas_in_sync() const override { return options_.num_workers; }
  const LocalClusterOptions& options() const { return options_; }
  std::unique_ptr<Strategy> Clone() const override;

 private:
  absl::StatusOr<History> Fit(internal::ModelState& model,
                              const Dataset& train,
                              const FitOptions& options) const override;

  LocalClusterOptions options_;
};

}  // namespace strata::sdk

#endif  // STRATA_SDK_STRATA_H_

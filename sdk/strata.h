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
// job/job.h, as examples/fashion_mnist/job.json) and parsing that job, so
// errors name the job path of the offending value
// ("job.model.layers[1].activation: 'relux' is not one of ...").
//
// Strategies (the same Sequential / Compile / Fit code runs under each):
// - OneDeviceStrategy (the default) trains in this process.
// - MirroredStrategy::Create(n) trains n replicas in this process, one thread
//   each, their gradients all-reduced in process every step.
// - ParameterServerStrategy::Local, CentralStorageStrategy::Local and
//   MultiWorkerMirroredStrategy::Local start a whole local cluster
//   (coordinator, PS tasks, workers; tools/launcher.h) for each Fit and, when
//   the job has succeeded, read the trained variables back into the model
//   (from the PS tasks, or from the state the first worker exports), so
//   Evaluate, Predict and GetWeights afterwards run here on the trained
//   parameters.
//
// Beside Fit, a strategy offers tf.distribute's replica API for code of
// one's own: Run(fn) calls fn once per replica of this process (with its
// ReplicaContext) and returns a PerReplica of the results, Reduce(kSum |
// kMean, per_replica) combines them, and DistributeDataset(data, batch)
// splits each global batch between the replicas:
//
//   auto strategy = *sdk::MirroredStrategy::Create(4);
//   absl::StatusOr<sdk::DistributedDataset> dist =
//       strategy->DistributeDataset(data, /*global_batch_size=*/256);
//   for (int64_t b = 0; b < dist->num_batches(); ++b) {
//     sdk::PerReplica<double> sums =
//         strategy->Run([&](const sdk::ReplicaContext& ctx) {
//           double sum = 0;
//           for (int32_t y : dist->Batch(b, ctx).labels) sum += y;
//           return sum;
//         });
//     double total = strategy->Reduce(sdk::ReduceOp::kSum, sums);
//   }
#ifndef STRATA_SDK_STRATA_H_
#define STRATA_SDK_STRATA_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
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
struct ClusterPlan;
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

  // True for FromArrays datasets (a cluster strategy's Fit writes them to
  // IDX files in its run directory).
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

// A Criteo display-ads TSV file (gzip or not: label, 13 integer and 26 hex
// categorical columns; `strata datagen` writes such files), read as a
// stream each epoch by models with embeddings (Sequential(Inputs, ...)).
// `bad_lines`: "stop" (a malformed line fails the Fit naming its line and
// column) or "skip" (skipped and counted). `multi_hot_columns`:
// categorical columns (0..25) whose fields are comma-separated id lists, for
// bag embeddings (Embedding combiner "sum" or "mean") over multi-hot
// features. Such a dataset has no in-memory form: Load() is
// INVALID_ARGUMENT, and Take() is refused by Fit.
Dataset Criteo(std::string path, std::string bad_lines = "stop",
               std::vector<int> multi_hot_columns = {});

// Examples of categorical ids in memory, for a model whose Inputs have no
// dense features (Inputs::dense 0), as Keras's Embedding layer reads them:
// example i's ids are ids[i * columns, (i + 1) * columns), each >= 0, and
// labels[i] is 0 or 1. `bag` false: column c of the model's categorical
// inputs holds id c (columns <= 26; for concat embeddings over columns
// 0..columns-1); `bag` true: categorical column 0 is multi-hot and holds
// all of an example's ids (for a "sum" or "mean" embedding over column 0;
// columns <= 2^20). The examples are written once, as a criteo file in
// `dir` (empty: the system's temporary directory) that every strategy's
// Fit streams (a cluster's workers read it too); the file is removed when
// the last copy of the dataset goes. Errors: INVALID_ARGUMENT naming the
// first bad value (a negative id, a label not 0 or 1, sizes that disagree);
// the file system's error.
absl::StatusOr<Dataset> FromIds(const std::vector<int64_t>& ids,
                                int64_t columns,
                                const std::vector<int32_t>& labels, bool bag,
                                const std::string& dir = "");

// Examples in memory: `x` holds labels.size() rows of `features` values.
// Consistency is checked by Load(). Usable under every strategy (a local
// cluster's Fit writes them as IDX files into its run directory).
Dataset FromArrays(std::vector<float> x, std::vector<int32_t> labels,
                   int64_t features);

}  // namespace datasets

// ---------------------------------------------------------------------------
// Layers and optimizers

// One Keras layer. Build them with Dense, Dropout and Flatten. Only the
// first layer of a model may carry an input shape (Keras's input_dim /
// input_shape).
struct Layer {
  // "dense", "dropout", "flatten", or any other layer of the model runtime
  // by its snake_case type ("conv2d", "max_pooling2d",
  // "batch_normalization", ...; see README "Layers"), whose Keras arguments
  // are `args_json`.
  std::string type;
  int64_t units = 0;                 // dense
  std::string activation = "linear";  // dense: linear relu sigmoid tanh softmax
  bool use_bias = true;              // dense
  double rate = 0;                   // dropout, in [0, 1)
  std::vector<int64_t> input_shape;  // one example's shape, without the batch
  std::string name;  // empty: Keras's automatic name ("dense", "dense_1", ...)
  std::string args_json;  // other types: Keras's arguments, a JSON object

  // This layer with an explicit name (it names its variables:
  // "NAME/kernel", "NAME/bias").
  Layer Named(std::string layer_name) const;
};

Layer Dense(int64_t units, std::string activation = "linear",
            int64_t input_dim = 0);
Layer Dropout(double rate);
Layer Flatten(std::vector<int64_t> input_shape = {});
// Any layer by type and Keras's arguments as a JSON object
// (KerasLayer("conv2d", R"({"filters": 32, "kernel_size": 3})")). The
// arguments are checked at Compile, errors naming the layer and argument.
Layer KerasLayer(std::string type, std::string args_json = "{}",
                 std::vector<int64_t> input_shape = {});
Layer Conv2D(int64_t filters, int64_t kernel_size,
             std::string activation = "linear",
             std::vector<int64_t> input_shape = {});
Layer MaxPooling2D(int64_t pool_size = 2);
Layer BatchNormalization();
Layer Reshape(std::vector<int64_t> target_shape,
              std::vector<int64_t> input_shape = {});

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
// Embeddings (sparse models)

// The optimizer of an embedding table's rows, applied where the rows live
// (this process, or the PS tasks), with its slots per row: "sgd",
// "adagrad", "lazy_adam" or "ftrl" (Keras's Ftrl formulas). Unset fields
// take the type's defaults (job/job.h EmbeddingSpec). Implicitly built from
// a type name.
struct TableOptimizer {
  TableOptimizer(const char* optimizer_type) : type(optimizer_type) {}  // NOLINT
  TableOptimizer(std::string optimizer_type)                             // NOLINT
      : type(std::move(optimizer_type)) {}

  std::string type;
  std::optional<double> learning_rate;
  std::optional<double> epsilon;                    // adagrad, lazy_adam
  std::optional<double> initial_accumulator_value;  // adagrad, ftrl
  std::optional<double> beta_1;                     // lazy_adam
  std::optional<double> beta_2;                     // lazy_adam
  std::optional<double> learning_rate_power;        // ftrl (<= 0)
  std::optional<double> l1_regularization_strength;  // ftrl
  std::optional<double> l2_regularization_strength;  // ftrl
};

// An embedding over categorical input columns: the int64 ids of `columns`
// (0-based among Inputs::categorical) are looked up in the dynamic table
// `table` (no vocabulary: a row is made from (seed, table, id) on first
// touch, once admitted) and combined as `combiner`: "concat" (output_dim
// values per column), "sum" or "mean" (the bag of the columns' rows: one
// output_dim slice). Embeddings naming the same table share it.
struct Embedding {
  Embedding(std::string table_name, std::vector<int64_t> input_columns,
            int64_t dim, std::string combine = "concat")
      : table(std::move(table_name)),
        columns(std::move(input_columns)),
        output_dim(dim),
        combiner(std::move(combine)) {}

  std::string table;
  std::vector<int64_t> columns;
  int64_t output_dim = 0;  // [1, 4096]
  std::string combiner = "concat";
  std::string initializer = "random_uniform";  // in [-init_scale, init_scale)
  double init_scale = 0.05;
  int64_t min_count = 1;  // admission after this many training lookups
  int64_t max_rows = 0;   // per table shard; 0: unbounded
  std::string eviction = "lru";  // or "lfu" (when max_rows is reached)
  int64_t ttl_steps = 0;  // evict rows not updated for this many steps
  TableOptimizer optimizer = "adagrad";
};

// The input-columns form of a model with embeddings: each example holds
// `dense` float features and `categorical` int64 ids; the layers take the
// dense features followed by the embeddings' outputs. Criteo data has 13
// and 26.
struct Inputs {
  int64_t dense = 0;
  int64_t categorical = 0;
  std::vector<Embedding> embeddings;
};

// One embedding per categorical column c (0-based), table
// "<table_prefix><c + 1>", of `output_dim` values (the usual Criteo model).
std::vector<Embedding> EmbeddingPerColumn(int64_t categorical,
                                          int64_t output_dim,
                                          TableOptimizer optimizer = "adagrad",
                                          const std::string& table_prefix = "C");

// ---------------------------------------------------------------------------
// Training

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

// ---------------------------------------------------------------------------
// Strategies

class StrategyScope;

// How Strategy::Reduce combines the replicas' values.
enum class ReduceOp { kSum, kMean };

// The replica a function given to Strategy::Run runs as (tf.distribute's
// ReplicaContext).
class ReplicaContext {
 public:
  ReplicaContext(int replica_id_in_sync_group, int num_replicas_in_sync)
      : replica_id_(replica_id_in_sync_group),
        num_replicas_(num_replicas_in_sync) {}
  // 0 .. num_replicas_in_sync() - 1.
  int replica_id_in_sync_group() const { return replica_id_; }
  int num_replicas_in_sync() const { return num_replicas_; }

 private:
  int replica_id_;
  int num_replicas_;
};

// One value per replica that ran in this process, in replica order
// (tf.distribute's PerReplica; values() is its experimental_local_results).
template <typename T>
class PerReplica {
 public:
  explicit PerReplica(std::vector<T> values) : values_(std::move(values)) {}
  int num_replicas() const { return static_cast<int>(values_.size()); }
  const T& operator[](int replica) const {
    return values_[static_cast<size_t>(replica)];
  }
  const std::vector<T>& values() const { return values_; }

 private:
  std::vector<T> values_;
};

// A dataset split between a strategy's replicas (tf.distribute's
// DistributedDataset), from Strategy::DistributeDataset. Global batch b holds
// examples [b * global_batch_size, (b + 1) * global_batch_size) in the
// dataset's order (the last one possibly smaller), and replica r of n
// computes a contiguous part of it, as Fit splits batches
// (strategies/placement_policy.h ReplicaRows: as even as possible, the first
// replicas one example more). Batches are views into the loaded examples, no
// copies. Immutable; thread-safe (Run's replicas may read it at once).
class DistributedDataset {
 public:
  // One replica's part of a global batch.
  struct ReplicaBatch {
    absl::Span<const float> x;        // examples() rows of `features` values
    absl::Span<const int32_t> labels;
    int64_t features = 0;
    // Examples in the whole global batch: a replica's mean weighted by
    // examples() / global_examples and summed over the replicas is the
    // global batch's mean.
    int64_t global_examples = 0;
    int64_t examples() const { return static_cast<int64_t>(labels.size()); }
  };

  int64_t num_examples() const;
  int64_t global_batch_size() const { return global_batch_size_; }
  // ceil(num_examples / global_batch_size).
  int64_t num_batches() const;
  int num_replicas_in_sync() const { return num_replicas_; }

  // Replica `replica`'s part of global batch `batch`. Empty (no examples)
  // for a batch or replica out of range, and for a replica with no share
  // (a batch of fewer examples than replicas).
  ReplicaBatch Batch(int64_t batch, const ReplicaContext& replica) const;

 private:
  friend class Strategy;
  DistributedDataset(std::shared_ptr<const ::strata::Dataset> data,
                     int64_t global_batch_size, int num_replicas)
      : data_(std::move(data)),
        global_batch_size_(global_batch_size),
        num_replicas_(num_replicas) {}

  std::shared_ptr<const ::strata::Dataset> data_;
  int64_t global_batch_size_;
  int num_replicas_;
};

// Where a model's variables live and how its replicas train (as
// tf.distribute.Strategy). Immutable after construction; thread-safe.
class Strategy {
 public:
  virtual ~Strategy() = default;

  // The job's strategy.type: "one_device", "mirrored", "parameter_server",
  // "central_storage", "multi_worker_mirrored".
  virtual std::string name() const = 0;
  // Replicas whose gradients each step combines (tf.distribute's
  // num_replicas_in_sync): 1 for OneDevice, the replicas for Mirrored, the
  // workers for the cluster strategies.
  virtual int num_replicas_in_sync() const = 0;

  // Makes (a copy of) this strategy the current one on this thread until
  // the returned scope is destroyed; models built meanwhile use it. Scopes
  // nest; each restores the strategy that was current before it, so they
  // must end in reverse order (as locals do) on the thread that made them.
  StrategyScope Scope() const;

  // Calls fn(const ReplicaContext&) once for each replica that runs in this
  // process and returns their results by replica (tf.distribute's
  // strategy.run). MirroredStrategy runs its replicas here: fn runs on
  // num_replicas_in_sync() threads at once (replica 0 on the calling
  // thread), so it must be safe to call concurrently. Every other strategy
  // runs fn once, as replica 0 of num_replicas_in_sync(): under the cluster
  // strategies the other replicas are worker processes that exist only
  // during Fit, and no function of this process runs in them. fn must
  // return a value (e.g. an absl::Status for code run for its effects).
  template <typename Fn>
  auto Run(Fn&& fn) const
      -> PerReplica<std::invoke_result_t<Fn&, const ReplicaContext&>>;

  // Combines the values of a PerReplica in replica order: their sum, or
  // their mean over value.num_replicas() (the replicas that ran here).
  // Vectors are combined element-wise; INVALID_ARGUMENT when their sizes
  // differ or there are no values.
  float Reduce(ReduceOp op, const PerReplica<float>& value) const;
  double Reduce(ReduceOp op, const PerReplica<double>& value) const;
  absl::StatusOr<std::vector<float>> Reduce(
      ReduceOp op, const PerReplica<std::vector<float>>& value) const;

  // `data` (loaded now) split into global batches of `global_batch_size`
  // examples, each split between num_replicas_in_sync() replicas (see
  // DistributedDataset). Errors: INVALID_ARGUMENT for global_batch_size < 1;
  // Dataset::Load's errors.
  absl::StatusOr<DistributedDataset> DistributeDataset(
      const Dataset& data, int64_t global_batch_size) const;

  virtual std::unique_ptr<Strategy> Clone() const = 0;

 private:
  friend class Sequential;
  // Runs Sequential::Fit for a compiled model.
  virtual absl::StatusOr<History> Fit(internal::ModelState& model,
                                      const Dataset& train,
                                      const FitOptions& options) const = 0;
  // Replicas whose functions Run calls in this process.
  virtual int num_local_replicas() const { return 1; }
  // Calls fn for replicas 0 .. num_local_replicas() - 1, on threads when
  // there are several (replica 0 on this one); returns when all returned.
  void RunReplicas(const std::function<void(const ReplicaContext&)>& fn) const;
};

template <typename Fn>
auto Strategy::Run(Fn&& fn) const
    -> PerReplica<std::invoke_result_t<Fn&, const ReplicaContext&>> {
  using T = std::invoke_result_t<Fn&, const ReplicaContext&>;
  static_assert(!std::is_void_v<T>,
                "Strategy::Run: the function must return a value (an "
                "absl::Status for code run for its effects)");
  std::vector<std::optional<T>> results(
      static_cast<size_t>(num_local_replicas()));
  RunReplicas([&](const ReplicaContext& replica) {
    results[static_cast<size_t>(replica.replica_id_in_sync_group())].emplace(
        fn(replica));
  });
  std::vector<T> values;
  values.reserve(results.size());
  for (std::optional<T>& r : results) values.push_back(std::move(*r));
  return PerReplica<T>(std::move(values));
}

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

// Replicas of the model in this process, one thread each
// (tf.distribute.MirroredStrategy on CPU). Fit splits every global batch
// between the replicas (ReplicaRows); each computes the gradient of its
// share, weighted by its share of the batch; one in-process all-reduce per
// step sums them (collective/in_process.h); and each replica applies the
// same optimizer update to its own copy of the weights, so the copies stay
// identical and training follows OneDeviceStrategy's up to float rounding
// (dropout masks differ with more than one replica). A later Fit continues
// from the weights and optimizer state reached. Run calls its function on
// the replicas' threads.
//
// On GPUs (CreateOnDevices, CreateOnAllGpus): one replica per GPU, replica i
// driving devices[i], and the all-reduce goes through NCCL between the GPUs
// (collective/nccl.h) instead of the in-process ring; a Fit forms the NCCL
// group at its start. (The replicas' forward and backward passes run where
// the model runtime runs them.)
class MirroredStrategy : public Strategy {
 public:
  static constexpr int kMaxReplicas = 256;
  // Errors: INVALID_ARGUMENT unless 1 <= num_replicas <= kMaxReplicas.
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> Create(
      int num_replicas = 2);
  // tf.distribute.MirroredStrategy(devices=["GPU:0", "GPU:1"]): one replica
  // per listed GPU, named "cuda" (cuda:0) or "cuda:N".
  // Errors: INVALID_ARGUMENT for an empty list, another name (e.g. "cpu":
  // use Create(n) for replicas on the CPU), a GPU listed twice, more than
  // kMaxReplicas; FAILED_PRECONDITION when this build has no CUDA/NCCL
  // support, no GPU is usable, or a listed GPU is not visible (naming both
  // numbers).
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> CreateOnDevices(
      const std::vector<std::string>& devices);
  // tf.distribute.MirroredStrategy(): one replica per visible GPU.
  // Errors: FAILED_PRECONDITION as CreateOnDevices.
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> CreateOnAllGpus();

  // The replicas' GPUs (CUDA ordinals); empty for replicas on the CPU.
  const std::vector<int>& gpus() const { return gpus_; }

  std::string name() const override { return "mirrored"; }
  int num_replicas_in_sync() const override { return num_replicas_; }
  std::unique_ptr<Strategy> Clone() const override;

 private:
  explicit MirroredStrategy(int num_replicas, std::vector<int> gpus = {})
      : num_replicas_(num_replicas), gpus_(std::move(gpus)) {}
  absl::StatusOr<History> Fit(internal::ModelState& model,
                              const Dataset& train,
                              const FitOptions& options) const override;
  int num_local_replicas() const override { return num_replicas_; }

  int num_replicas_;
  std::vector<int> gpus_;
};

// A local cluster started for each Fit (tools/launcher.h Launch): the
// coordinator, `num_ps` PS tasks and `num_workers` workers as processes on
// 127.0.0.1; or, with `coordinator` set, a cluster already running.
struct LocalClusterOptions {
  // >= 1 where the strategy needs PS tasks (parameter_server,
  // central_storage, multi_worker_mirrored with collective "ps"); ignored
  // by multi_worker_mirrored with collective "ring".
  int num_ps = 2;
  int num_workers = 2;   // >= 1
  // parameter_server: "async" or "sync" (num_workers replicas a step). The
  // other cluster strategies are synchronous and ignore it.
  std::string update = "async";
  // parameter_server: axis-0 shards per variable (a fixed partitioner),
  // placed round-robin over the PS tasks. 0: num_ps.
  int num_shards = 0;
  // More of the job's "strategy" object, as a JSON object merged over the
  // strategy's own fields: "partitioner" (parameter_server; replaces
  // num_shards' fixed one), "pack_bytes" and "timeout_seconds"
  // (multi_worker_mirrored's collective), ... Checked as job fields: an
  // unknown or bad one is INVALID_ARGUMENT naming "job.strategy.<field>".
  std::string strategy_json;
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
  // multi_worker_mirrored: how gradients are all-reduced, "ring" (between
  // the workers) or "ps" (summed through a PS task).
  std::string collective = "ring";

  // A running cluster instead of a local one: its coordinator's host:port
  // (where strata-ps and strata-worker daemons started by hand or by
  // Kubernetes registered; TF_CONFIG's chief). Fit then submits the job
  // there (tools/submit.h), waits until num_ps PS tasks and num_workers
  // workers are registered, follows the job (the same epoch lines) and
  // reads the trained weights back from the PS tasks the coordinator lists.
  // The workers read the job's data files at the same paths; in-memory data
  // is written under run_dir (a temporary directory when empty), so it must
  // be a directory they can read. bin_dir and restart_servers do not apply.
  std::string coordinator;
  // multi_worker_mirrored on a running cluster: the directory its first
  // worker writes its final state to (strata-worker --export-dir), readable
  // here. Required there: the weights live on the workers.
  std::string export_dir;
  // How long Fit on a running cluster waits for the tasks to register.
  int register_timeout_seconds = 600;
};

// The strategies that start a local cluster for each Fit, or submit to a
// running one (below): the options, the replicas in sync (the workers), and
// the Fit they share (launch and supervise, or submit and follow; then read
// the trained weights back). Options are checked by Fit (INVALID_ARGUMENT
// naming the field; FAILED_PRECONDITION when a daemon is not in bin_dir, or
// for multi_worker_mirrored on a running cluster without export_dir).
class LocalClusterStrategy : public Strategy {
 public:
  int num_replicas_in_sync() const override { return options_.num_workers; }
  const LocalClusterOptions& options() const { return options_; }

 protected:
  explicit LocalClusterStrategy(LocalClusterOptions options)
      : options_(std::move(options)) {}

 private:
  absl::StatusOr<History> Fit(internal::ModelState& model,
                              const Dataset& train,
                              const FitOptions& options) const final;
  // What this strategy's job says and where its weights are read from.
  virtual internal::ClusterPlan Plan() const = 0;

  LocalClusterOptions options_;
};

// Variables split over the PS tasks of a local cluster per Fit
// (tf.distribute's ParameterServerStrategy): each step is one worker's
// batch, applied by the PS (async, or sync: num_workers steps averaged).
// After Fit the weights are pulled from the PS shards.
class ParameterServerStrategy : public LocalClusterStrategy {
 public:
  static std::unique_ptr<ParameterServerStrategy> Local(
      LocalClusterOptions options = {});
  explicit ParameterServerStrategy(LocalClusterOptions options)
      : LocalClusterStrategy(std::move(options)) {}
  std::string name() const override { return "parameter_server"; }
  std::unique_ptr<Strategy> Clone() const override;

 private:
  internal::ClusterPlan Plan() const override;
};

// Every variable whole on PS task 0 of a local cluster per Fit
// (tf.distribute's CentralStorageStrategy with workers as its replicas):
// every worker runs every step on its share of the global batch, the store
// averages the workers' gradients of a step, applies them once, and every
// worker reads the new version. After Fit the weights are read from PS task
// 0. LocalClusterOptions' update and num_shards do not apply.
class CentralStorageStrategy : public LocalClusterStrategy {
 public:
  static std::unique_ptr<CentralStorageStrategy> Local(
      LocalClusterOptions options = {});
  explicit CentralStorageStrategy(LocalClusterOptions options)
      : LocalClusterStrategy(std::move(options)) {}
  std::string name() const override { return "central_storage"; }
  std::unique_ptr<Strategy> Clone() const override;

 private:
  internal::ClusterPlan Plan() const override;
};

// A full copy of the model on every worker of a local cluster per Fit
// (tf.distribute's MultiWorkerMirroredStrategy): every worker runs every
// step on its share of the global batch, the gradients are all-reduced
// (options.collective: "ring" between the workers, or "ps" through a PS
// task) and every worker applies the same update. The first worker exports
// its final state, from which the weights are read after Fit.
class MultiWorkerMirroredStrategy : public LocalClusterStrategy {
 public:
  static std::unique_ptr<MultiWorkerMirroredStrategy> Local(
      LocalClusterOptions options = {});
  explicit MultiWorkerMirroredStrategy(LocalClusterOptions options)
      : LocalClusterStrategy(std::move(options)) {}
  std::string name() const override { return "multi_worker_mirrored"; }
  std::unique_ptr<Strategy> Clone() const override;

 private:
  internal::ClusterPlan Plan() const override;
};

}  // namespace strata::sdk

#endif  // STRATA_SDK_STRATA_H_

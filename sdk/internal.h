// Internals of the SDK shared by its .cc files (and its tests): the state
// behind a Sequential, the job JSON it becomes, dataset sources, progress
// lines. Not part of the public API.
#ifndef STRATA_SDK_INTERNAL_H_
#define STRATA_SDK_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "sdk/strata.h"
#include "worker/criteo_data.h"
#include "worker/dataset.h"
#include "worker/embedding_model.h"
#include "job/job.h"
#include "worker/model.h"

namespace strata::sdk {

// Where a Dataset's examples come from.
struct Dataset::Source {
  enum class Kind { kIdx, kCsv, kArrays, kCriteo };
  Kind kind = Kind::kArrays;
  std::string images;  // idx
  std::string labels;  // idx
  std::string path;    // csv, criteo
  std::string bad_lines = "stop";  // criteo
  std::vector<int> multi_hot_columns;  // criteo
  int64_t max_ids_per_field = 0;       // criteo; 0: the reader's default
  int64_t label_column = 0;
  bool header = true;
  double scale = 1.0;
  // kArrays: as given to FromArrays (checked by Load).
  std::shared_ptr<const ::strata::Dataset> arrays;
  // A file this source wrote (FromIds) and removes when the last copy of
  // the dataset goes.
  std::shared_ptr<const void> owned_file;
};

// A Dataset's loaded examples, shared by its copies.
struct Dataset::Cache {
  absl::Mutex mu;
  std::shared_ptr<const ::strata::Dataset> data ABSL_GUARDED_BY(mu);
};

namespace internal {

struct DatasetAccess {
  static Dataset Make(std::shared_ptr<const Dataset::Source> source) {
    return Dataset(std::move(source), -1);
  }
  static const Dataset::Source& source(const Dataset& d) { return *d.source_; }
  // -1: all examples; otherwise the limit (0 selects nothing).
  static int64_t take(const Dataset& d) { return d.take_; }
};

// The job's "data" object for `train` and the optional `test` split.
// Errors: INVALID_ARGUMENT for in-memory data, Take(0), or splits the job
// schema cannot hold together (different formats or scales).
absl::StatusOr<nlohmann::json> DataJson(const Dataset& train,
                                        const std::optional<Dataset>& test);

// `data`'s examples (loaded, limited and scaled) written as the IDX pair
// PREFIX-images.idx / PREFIX-labels.idx (worker/dataset.h WriteIdx), and a
// dataset of those files. Errors: Load's and WriteIdx's.
absl::StatusOr<Dataset> WriteAsIdx(const Dataset& data,
                                   const std::string& prefix);

// INVALID_ARGUMENT ("`what`: examples have N features; the model takes M")
// when `data` does not fit `model`.
absl::Status CheckFeatures(const ::strata::Dataset& data, const Model& model,
                           absl::string_view what);

// A reader of a datasets::Criteo file with its bad-lines policy.
// Errors: INVALID_ARGUMENT naming `what` for any other dataset or Take();
// CriteoReader::Create's.
absl::StatusOr<std::unique_ptr<CriteoReader>> OpenCriteo(
    const Dataset& data, absl::string_view what);

// The state behind a Sequential. Thread-compatible.
struct ModelState {
  std::vector<Layer> layers;
  ModelOptions options;
  std::shared_ptr<const Strategy> strategy;
  // The input-columns form (a model with embeddings).
  std::optional<Inputs> inputs;
  // The Keras-config form (KerasModel); `layers` is then empty.
  std::optional<std::string> keras;

  // Set by a successful Compile.
  bool compiled = false;
  nlohmann::json model_json;      // the job's "model"
  nlohmann::json optimizer_json;  // the job's "optimizer"
  nlohmann::json loss;  // the job's "loss"
  std::vector<std::string> metrics;
  std::unique_ptr<LocalTrainer> trainer;  // model, weights, optimizer slots
  // With embeddings, instead of `trainer`: the layers and the tables in
  // this process.
  std::unique_ptr<EmbeddingTrainer> embedding;
  // The tables read back from the PS tasks after a cluster Fit (they then
  // replace the embedding trainer's).
  std::unique_ptr<EmbeddingTables> cluster_tables;
  std::vector<std::pair<std::string, int64_t>> cluster_table_rows;
  int epochs_trained = 0;  // by every Fit since Compile
  // Weights read back from a cluster after a Fit under a cluster strategy;
  // they replace the trainer's.
  std::optional<std::vector<std::vector<float>>> cluster_params;
  // SetWeights was called since Compile (a cluster Fit cannot honour it).
  bool weights_set = false;

  // Replica 0's weights, optimizer slots and update count once a
  // MirroredStrategy Fit has trained (they replace the trainer's; a later
  // Fit continues from them).
  struct ReplicaState {
    std::vector<std::vector<float>> params;
    std::vector<std::vector<std::vector<float>>> slots;  // [variable][slot]
    int64_t iterations = 0;
  };
  std::optional<ReplicaState> mirrored;

  LocalTrainer& local_layers() const {
    return embedding != nullptr ? embedding->layers() : *trainer;
  }
  const Model& model() const { return local_layers().model(); }
  const std::vector<std::vector<float>>& params() const {
    if (mirrored) return mirrored->params;
    return cluster_params ? *cluster_params : local_layers().params();
  }
  // Where Evaluate and Predict find the embedding rows.
  EmbeddingTables& tables() const {
    if (cluster_tables != nullptr) return *cluster_tables;
    return embedding->mutable_tables();
  }

  // The job JSON of the compiled model with `data` and `strategy` (JSON
  // objects) and the options' epochs, batch size, seeds and evaluation.
  nlohmann::json JobJson(const FitOptions& fit, nlohmann::json data,
                         nlohmann::json strategy) const;
};

// The data of a Fit in this process, loaded and checked against the model.
struct LocalFit {
  JobSpec job;  // the model's job with the Fit's options
  std::shared_ptr<const ::strata::Dataset> train;
  std::shared_ptr<const ::strata::Dataset> test;  // null without validation
};

// Validates the Fit's options as job fields (with `strategy` as the job's
// "strategy" object) and loads the data; any dataset works, in memory too.
// Errors: INVALID_ARGUMENT naming the job field or the data that does not
// fit the model (or has no examples); the loaders' errors.
absl::StatusOr<LocalFit> PrepareLocalFit(const ModelState& m,
                                         const Dataset& train,
                                         const FitOptions& options,
                                         nlohmann::json strategy);

// Called by an epoch's trainer after each step: the steps done and the
// example-weighted means so far.
using StepObserver =
    std::function<void(int64_t steps_done, const StepStats& so_far)>;

// Trains fit.job.epochs epochs with train_epoch(epoch, on_step), where
// `epoch` counts every epoch since Compile (so each gets its own order),
// evaluating m.params() on the validation data when due and printing a line
// per epoch. `on_step` (null without options.progress) updates
// options.progress. Checks options.stop before each epoch. Errors:
// train_epoch's and evaluation's; CANCELLED when stopped.
absl::StatusOr<History> RunLocalEpochs(
    ModelState& m, const LocalFit& fit, const FitOptions& options,
    const std::function<absl::StatusOr<StepStats>(
        int epoch, const StepObserver& on_step)>& train_epoch);

// How a LocalClusterStrategy runs its Fit: what the job says, and where the
// trained weights are read from afterwards.
struct ClusterPlan {
  nlohmann::json strategy;  // the job's "strategy" object
  int min_ps = 1;           // PS tasks the strategy needs
  // Reads the weights from the PS tasks (task order), after the job has
  // succeeded and while they still run. Null: the first worker exports its
  // final state (LaunchOptions::export_dir), read after the cluster stopped.
  std::function<absl::Status(const std::vector<std::string>& ps_addresses,
                             const JobSpec& job, const Model& model,
                             std::vector<std::vector<float>>* params)>
      read_from_ps;
};

// ClusterPlan::read_from_ps for parameter_server (variables sharded as its
// placement puts them) and central_storage (each whole on PS task 0):
// *params gets the model's weights, then its state variables (moving
// statistics). Errors: those of the PS calls.
absl::Status PullShardedWeights(const std::vector<std::string>& addresses,
                                const JobSpec& job, const Model& model,
                                std::vector<std::vector<float>>* params);
absl::Status PullWholeWeights(const std::vector<std::string>& addresses,
                              const JobSpec& job, const Model& model,
                              std::vector<std::vector<float>>* params);

// FAILED_PRECONDITION naming `method` unless the model is compiled.
absl::Status RequireCompiled(const ModelState& state,
                             absl::string_view method);

// The model's layers as the job's "model" object (with `inputs`, the
// input-columns form: its dense features, categorical columns and
// embeddings). Errors: INVALID_ARGUMENT for a missing input shape or one on
// a layer other than the first (or, with `inputs`, on any layer).
absl::StatusOr<nlohmann::json> ModelJson(const std::vector<Layer>& layers,
                                         const std::optional<Inputs>& inputs);

// Fits a model with embeddings in this process (OneDeviceStrategy): the
// Criteo files streamed each epoch, the tables in the embedding trainer.
absl::StatusOr<History> FitEmbeddingsHere(ModelState& m, const Dataset& train,
                                          const FitOptions& options,
                                          nlohmann::json strategy);

// After a cluster Fit of a model with embeddings: each PS task saves its
// state under `dir` and the tables' rows are loaded from those checkpoints
// into m.cluster_tables. Errors: those of Save and of the checkpoints.
absl::Status ReadTablesFromPs(ModelState& m,
                              const std::vector<std::string>& addresses,
                              const JobSpec& job, const std::string& dir);
// The job's "optimizer" object (only the keys the type takes).
nlohmann::json OptimizerJson(const Optimizer& optimizer);

// The stream progress lines go to: options.out (std::cout when null), or a
// sink when verbose is 0.
class ProgressStream {
 public:
  explicit ProgressStream(const FitOptions& options);
  std::ostream& stream() { return *stream_; }

 private:
  std::ostream sink_{nullptr};
  std::ostream* stream_;
};

// "Epoch 2/10 - 469 steps - loss: 0.4123 - accuracy: 0.8512 - test_loss:
// 0.4301 - test_accuracy: 0.8456 - 51234 examples/s - 1.2s", the format
// `strata launch` prints.
std::string EpochLine(const EpochResult& e, int epochs);
// Parses such a line (also the launcher's "... - 3.4s elapsed" ending);
// nullopt when `line` is not an epoch line.
std::optional<EpochResult> ParseEpochLine(absl::string_view line);

}  // namespace internal
}  // namespace strata::sdk

#endif  // STRATA_SDK_INTERNAL_H_

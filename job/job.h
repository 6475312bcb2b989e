// The job file: one JSON document describing a training job (model, loss,
// metrics, optimizer, data, strategy, epochs, batch size, checkpoint and
// evaluation policy). See examples/fashion_mnist/job.json.
//
// Parsing is strict: every error is INVALID_ARGUMENT and names the JSON path
// of the offending value ("job.model.layers[1].units: ..."), and for
// enumerations lists the allowed values. Unknown keys are errors. Absent
// optional fields take the defaults documented below.
#ifndef STRATA_JOB_JOB_H_
#define STRATA_JOB_JOB_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"
#include "kernels/initializers.h"
#include "kernels/optimizers.h"
#include "kernels/row_optimizers.h"
#include "model/layer_config.h"
#include "nlohmann/json.hpp"
#include "job/job_limits.h"
#include "strategies/placement_policy.h"

namespace strata {

enum class Activation { kLinear, kRelu, kSigmoid, kTanh, kSoftmax };

// "linear", "relu", "sigmoid", "tanh", "softmax".
absl::StatusOr<Activation> ParseActivation(absl::string_view name);
std::string ActivationName(Activation activation);

// kOther: any other layer of the model runtime (model/layers.h), given in
// the short list by its snake_case type ("conv2d") and Keras's arguments.
enum class LayerType { kDense, kDropout, kFlatten, kOther };
std::string LayerTypeName(LayerType type);

// One Keras layer. JSON keys by type:
//   dense:   units (> 0, required; bounded by the model's footprint, see
//            kMaxJobModelBytes), activation ("linear"), use_bias (true),
//            kernel_initializer ("glorot_uniform"), bias_initializer
//            ("zeros"), name. An initializer is a name
//            (kernels/initializers.h) or an object {"type", "seed", "value",
//            "minval", "maxval", "mean", "stddev"}.
//   dropout: rate (in [0, 1), required), name.
//   flatten: name.
//   any other type of model::ClassOfShortType ("conv2d",
//            "batch_normalization", "max_pooling2d", ...): Keras's
//            arguments of that class by their Keras names (model/layers.h),
//            checked when the model is built.
struct LayerSpec {
  LayerType type = LayerType::kDense;
  std::string name;  // empty: Keras's automatic name ("dense", "dense_1", ...)
  // dense
  int64_t units = 0;
  Activation activation = Activation::kLinear;
  bool use_bias = true;
  InitializerSpec kernel_initializer{InitializerType::kGlorotUniform};
  InitializerSpec bias_initializer{InitializerType::kZeros};
  // True when the JSON initializer object gave an explicit seed; otherwise
  // the model derives one from the job seed and the layer index.
  bool kernel_seed_set = false;
  bool bias_seed_set = false;
  // dropout
  double rate = 0.0;
  // kOther: Keras's class name ("Conv2D") and arguments.
  std::string class_name;
  nlohmann::json config;
};

// An embedding over categorical columns (issue 15): the ids of `columns`
// (0-based among the model's categorical_columns) are looked up in the
// dynamic table `table` (int64 ids, no vocabulary, rows of output_dim
// floats; tables/dynamic_table.h) and combined as `combiner`: "concat"
// (each column its own output_dim values), "sum" or "mean" (the bag of the
// columns' ids: one output_dim slice). Embeddings naming the same table
// share it (their output_dim and table options must agree). JSON: {"table"
// (required), "columns" (required, non-empty), "output_dim" (required, in
// [1, 4096]), "combiner" ("concat"), "initializer" ("random_uniform" in
// [-init_scale, init_scale), or "zeros"), "init_scale" (0.05), "min_count"
// (1: admission after this many training lookups), "max_rows" (0 =
// unbounded; per table shard), "eviction" ("lru" or "lfu"), "ttl_steps" (0
// = none), "optimizer" ({"type": "sgd"|"adagrad"|"lazy_adam"|"ftrl",
// "learning_rate", "epsilon", "initial_accumulator_value", "beta_1",
// "beta_2", "learning_rate_power", "l1_regularization_strength",
// "l2_regularization_strength"} or the type; default adagrad)}.
struct EmbeddingSpec {
  std::string table;
  std::vector<int64_t> columns;
  int64_t output_dim = 0;
  std::string combiner = "concat";
  std::string initializer = "random_uniform";
  double init_scale = 0.05;
  int64_t min_count = 1;
  int64_t max_rows = 0;
  std::string eviction = "lru";
  int64_t ttl_steps = 0;
  RowOptimizerConfig optimizer{RowOptimizerType::kAdagrad};
};

// A Keras Sequential model: the shape of one example (without the batch
// dimension; every dimension > 0) and the layers in order. With embeddings
// (issue 15), input_shape is the dense features', each example also holds
// `categorical_columns` int64 ids, and the layers take the dense features
// followed by the embeddings' outputs (DenseModelSpec).
//
// A model may instead be a Keras model config (model.to_json(): Sequential
// or Functional, tf.keras 2.x or Keras 3), held in `keras`; input_shape is
// then the total of its inputs' floats per example ([features]) and
// `layers` is empty. JSON: the Keras config itself as job.model, or
// {"keras": <config>, "categorical_columns", "embeddings", "inputs"} to put
// the PS's embedding tables before it. Its inputs are bound to "dense" (the
// dense features) and table names, by job.model.inputs or by the inputs'
// names, else read in order; parsing reorders keras->inputs and
// `embeddings` so that each example's row is the dense features followed
// by the embeddings' outputs, the graph's inputs side by side.
//
// `from_logits` (job.loss {"from_logits": true}): the output is logits and
// the cross-entropy applies the softmax (sigmoid) itself. `huber_delta`
// (job.loss {"name": "huber", "delta": D}, > 0): where the Huber loss turns
// from quadratic to linear.
struct ModelSpec {
  Shape input_shape;
  std::vector<LayerSpec> layers;
  std::optional<model::GraphSpec> keras;
  bool from_logits = false;
  double huber_delta = 1.0;
  int64_t categorical_columns = 0;
  std::vector<EmbeddingSpec> embeddings;
};

// The floats the embeddings add to each example's input to the layers.
int64_t EmbeddingWidth(const ModelSpec& model);
// The model as a layer graph: `keras` when set, else the layers in a
// Sequential chain over input_shape (with embeddings: DenseModelSpec's).
// Errors: INVALID_ARGUMENT for a model with no layers or input shape.
absl::StatusOr<model::GraphSpec> ModelGraphSpec(const ModelSpec& model);
// True when the model is the short list of dense, dropout and flatten
// layers only (the MLP the GPU backend runs).
bool IsDenseChain(const ModelSpec& model);

// The layers' model: `model` without embeddings, its input_shape the dense
// features plus EmbeddingWidth (the model itself when it has none).
ModelSpec DenseModelSpec(const ModelSpec& model);

// Files of one split. IDX: `images` and `labels` (gzip or not). Criteo
// (tab-separated: label, 13 integer and 26 categorical columns; gzip or
// not): `path`. CSV: `path`,
// the 0-based `label_column` (0) and whether the first line is a `header`
// (true); the other columns are the features.
struct DataSplitSpec {
  std::string images;
  std::string labels;
  std::string path;
  int64_t label_column = 0;
  bool header = true;
};

// data: {"format": "idx"|"csv"|"criteo", "train": {...} (required), "test": {...}
// (optional), "scale" (> 0, default 1: features are divided by it),
// "limit_train", "limit_test" (>= 0; use only the first N examples, 0 = all),
// "bad_lines" (criteo: "stop" or "skip"), "multi_hot_columns" (criteo:
// categorical columns 0..25 whose fields are comma-separated id lists),
// "max_ids_per_field" (criteo: 1 to 2^20, default 1024)}. Criteo data needs
// a model with input_shape [13] and categorical_columns 26; a concat
// embedding cannot read a multi-hot column.
struct DataSpec {
  std::string format;  // "idx", "csv" or "criteo"
  // criteo: a malformed line stops the run ("stop", naming the file, line
  // and column) or is skipped and counted ("skip").
  std::string bad_lines = "stop";
  // criteo: multi-hot categorical columns (each field 0 or more ids,
  // comma-separated), and the most ids one such field may hold.
  std::vector<int64_t> multi_hot_columns;
  int64_t max_ids_per_field = 1024;
  DataSplitSpec train;
  bool has_test = false;
  DataSplitSpec test;
  double scale = 1.0;
  int64_t limit_train = 0;
  int64_t limit_test = 0;
};

// strategy.partitioner: {"type": "fixed"|"min_size"|"max_size",
// "num_shards" (fixed; >= 1, default 1), "min_shard_bytes" (min_size; >= 1,
// default 256 KiB), "max_shard_bytes" (max_size; >= 1, required there),
// "max_shards" (min_size: >= 1, default 1; max_size: >= 0, default 0 =
// unlimited)}. Semantics as strategies/partitioner.h.
struct PartitionerSpec {
  std::string type = "fixed";
  int num_shards = 1;
  int64_t min_shard_bytes = 256 << 10;
  int64_t max_shard_bytes = 0;
  int max_shards = 0;
};

// strategy: {"type": "parameter_server" (default) | "central_storage" |
// "multi_worker_mirrored" | "mirrored" | "one_device", "update": "async" |
// "sync", "partitioner": {...}, "sync_replicas", "collective": "ring" |
// "ps", "replicas", "pack_bytes", "timeout_seconds", "gradient_compression":
// "none" | "bf16" | "fp16", "ps_replication": 1 | 2}. `update` defaults to "async" for
// parameter_server and "sync" for the others, which only support "sync"
// (one_device accepts either: it has one replica). `options` is the strategy
// object as written ({} when absent).
struct StrategySpec {
  std::string type = "parameter_server";
  std::string update = "async";
  PartitionerSpec partitioner;
  // parameter_server with update "sync": gradients of this many consecutive
  // steps are averaged and applied once (SyncReplicasOptimizer's
  // replicas_to_aggregate).
  int sync_replicas = 2;
  // multi_worker_mirrored: "ring" (default) or "ps".
  std::string collective = "ring";
  // mirrored: replicas in the one worker process (>= 1, default 2).
  int replicas = 2;
  // Collectives: pack size in bytes (>= 1, default 1 MiB) and the deadline
  // of one collective in seconds (> 0, default 30).
  int64_t pack_bytes = 1 << 20;
  double timeout_seconds = 30;
  // How gradients pushed to PS tasks over gRPC travel: "none" (float32,
  // the default), "bf16" or "fp16" (half the bytes, with error feedback;
  // common/gradient_encoding.h). Only for the strategies that push
  // gradients to PS tasks: parameter_server, central_storage and
  // multi_worker_mirrored with collective "ps".
  std::string gradient_compression = "none";
  // Replicas of each PS task (1 or 2): with 2, each task has a backup that
  // holds every change before it is acknowledged and takes over when the
  // primary dies (server/replication.h; strata launch runs both).
  int64_t ps_replication = 1;
  // parameter_server with update "async": how a stale gradient's learning
  // rate is scaled, its staleness being the updates a PS variable applied
  // since the values the gradient was computed from. "none" (the default)
  // or "inverse": the learning rate times 1 / (1 + max(0, staleness -
  // staleness_tolerance)) (staleness_tolerance >= 0, default 0).
  std::string staleness_lr = "none";
  int staleness_tolerance = 0;
  // parameter_server with update "async": delay compensation of stale
  // gradients on the PS (DC-ASGD; kernels/delay_compensation.h): "none"
  // (the default), "dc" (the gradient corrected by dc_lambda * g * g *
  // (w_now - w_base)) or "dc_adaptive" (dc_lambda divided by the root mean
  // square of the gradients, decaying by dc_mean_square_decay). dc_lambda
  // > 0 (default 0.04 for "dc", 2 for "dc_adaptive", the paper's);
  // dc_mean_square_decay in [0, 1) (default 0.95); dc_versions in [1,
  // 1024] (default 8): the values each PS variable keeps for it, which
  // costs dc_versions times the model's bytes of PS memory.
  std::string staleness_compensation = "none";
  double dc_lambda = 0;
  double dc_mean_square_decay = 0.95;
  int dc_versions = 8;
  nlohmann::json options = nlohmann::json::object();
};

// checkpoint: {"every_steps" (>= 0, 0 = off), "every_seconds" (>= 0, 0 =
// off), "keep" (>= 1, default 3: the newest checkpoints kept, older ones
// are deleted), "max_failures" (>= 0, default 3; 0 = never: the job fails
// after this many checkpoint attempts in a row failed, so that a full disk
// stops the run with its cause rather than letting a PS restart lose many
// checkpoint intervals)}.
struct CheckpointSpec {
  int64_t every_steps = 0;
  double every_seconds = 0;
  int keep = 3;
  int max_failures = 3;
};

// evaluation: {"every_epochs" (>= 0, 0 = never; default 1)}.
struct EvaluationSpec {
  int every_epochs = 1;
};

struct JobSpec {
  std::string name = "job";  // [A-Za-z0-9._-]+
  ModelSpec model;
  // "sparse_categorical_crossentropy", "categorical_crossentropy",
  // "binary_crossentropy", "mse", "mae" or "huber" (Keras's
  // "mean_squared_error", "mean_absolute_error" and "huber_loss" are stored
  // by those names; CanonicalLoss).
  std::string loss;
  std::vector<std::string> metrics;  // of "accuracy", "auc" (binary)
  // optimizer: {"type": "sgd"|"adam"|"adagrad"|"rmsprop", "learning_rate",
  // "momentum", "nesterov", "beta_1", "beta_2", "epsilon", "amsgrad",
  // "initial_accumulator_value", "rho", "centered"}, or just the type name.
  // Absent fields keep the Keras defaults of OptimizerConfig; a
  // learning_rate of 0 also selects the default. Ranges are checked as
  // Optimizer::Create does.
  OptimizerConfig optimizer;
  DataSpec data;
  StrategySpec strategy;
  int epochs = 1;           // >= 1
  int64_t batch_size = 32;  // >= 1
  uint64_t shuffle_seed = 0;
  uint64_t seed = 0;
  CheckpointSpec checkpoint;
  EvaluationSpec evaluation;
  // Where workers compute: "cpu" (default), "cuda" or "cuda:N" (GPU N;
  // "cuda" is stored as "cuda:0"). `cuda_device` is N, or -1 for the CPU.
  // Whether the device exists is checked where the job runs, not here.
  std::string device = "cpu";
  int cuda_device = -1;
  // The JSON text the spec was parsed from (ParseJob: the value re-dumped).
  std::string json;
};

// Checks a model against a loss: input dimensions >= 1, at least one layer,
// dense units >= 1, dropout rate in [0, 1), unique valid layer names, and an
// output layer (the last one other than flatten) that is dense and fits the
// loss: softmax with >= 2 units for the (sparse) categorical cross-entropies,
// sigmoid with 1 unit for binary_crossentropy, anything for mse. Errors:
// INVALID_ARGUMENT naming the path ("job.model.layers[3].activation: ...").
absl::Status ValidateModelAndLoss(const ModelSpec& model,
                                  absl::string_view loss);

// The name of every layer: its own, or Keras's automatic one ("dense",
// "dense_1", "dropout", ...; counted per type over the unnamed layers).
std::vector<std::string> ResolveLayerNames(const ModelSpec& model);

// A device name as jobs and flags give it: "cpu" is -1, "cuda" 0, "cuda:N"
// N. Errors: INVALID_ARGUMENT naming `path` and the allowed forms.
absl::StatusOr<int> ParseDeviceName(absl::string_view name,
                                    absl::string_view path);

// Parses and validates a job: CheckJobValueLimits first, then every field,
// then the model against the loss and its footprint (ComputeModelFootprint)
// against kMaxJobModelBytes. Errors: INVALID_ARGUMENT naming the JSON path
// ("job.model.layers[0].units: 1000000000000 units make the model 8.0e14
// parameters, needing 12.2 PiB (...); a job may need at most 256 GiB per
// worker").
absl::StatusOr<JobSpec> ParseJob(const nlohmann::json& job);
// As ParseJob from JSON text, after CheckJobTextLimits; malformed JSON is
// INVALID_ARGUMENT with the parser's position (its message shortened).
// `json` keeps `text` as given.
absl::StatusOr<JobSpec> ParseJobString(absl::string_view text);
// The job as the coordinator reads it: ParseJobString, except that model,
// loss, optimizer and data may be absent (the coordinator schedules a job it
// does not run). Every field present is parsed and validated by the same
// code as ParseJob, so a job the coordinator accepts is one every worker
// accepts. Errors: as ParseJobString.
absl::StatusOr<JobSpec> ParseJobControl(absl::string_view text);
// Reads and parses a job file. A file over kMaxJobBytes is refused by its
// size before it is read, and at most kMaxJobBytes + 1 bytes are ever read
// (a pipe, a growing file). Errors: NOT_FOUND when the file does not exist,
// PERMISSION_DENIED / INTERNAL when it cannot be read, INVALID_ARGUMENT
// when it is too large ("job file F: 52428800 bytes, at most 1048576
// (1 MiB)") or a directory, else as ParseJobString (messages prefixed with
// the path).
absl::StatusOr<JobSpec> LoadJobFile(const std::string& path);

// What one worker holds for a model, in float32 values: each parameter's
// value, gradient and optimizer slots, and the activations of one training
// batch (the input, each dense layer's outputs and their gradients, each
// dropout's mask, outputs and gradients). A lower bound: the training data
// and the runtime's other buffers are not counted. Counts saturate at
// INT64_MAX instead of overflowing (`saturated` is then set).
struct ModelFootprint {
  int64_t parameters = 0;   // weights and biases of every layer
  int slots = 0;            // optimizer slots per parameter (Adam: 2)
  int64_t activations = 0;  // floats of one batch
  int64_t bytes = 0;        // 4 * (parameters * (2 + slots) + activations)
  bool saturated = false;
  // The dense layer contributing the most bytes (its parameters and
  // activations, with the input's and dropouts' counted toward the dense
  // layer that consumes or precedes them); -1 when there is none.
  int largest_layer = -1;
  int64_t largest_layer_bytes = 0;
  // Models other than dense chains: the layer with the most parameters
  // ("conv2d (Conv2D)"), or empty.
  std::string largest_layer_name;
};

// The footprint of `model` trained by `optimizer` in batches of
// `batch_size` (< 1 counts as 1). Expects a model that passed
// ValidateModelAndLoss. Errors: INVALID_ARGUMENT from Optimizer::Create.
absl::StatusOr<ModelFootprint> ComputeModelFootprint(
    const ModelSpec& model, const OptimizerConfig& optimizer,
    int64_t batch_size);

// Refuses a job whose model needs more than `memory_bytes` (e.g. the
// machine's physical memory, found by the caller; <= 0: unknown, nothing
// checked). Errors: RESOURCE_EXHAUSTED naming the layer that contributes
// most ("job.model.layers[0].units: 4000000 units make the model 3.2e9
// parameters, needing 51.2 GiB (values, gradients, 2 adam slots,
// activations for batch 128); this machine has 23.4 GiB"), or
// INVALID_ARGUMENT as ComputeModelFootprint.
absl::Status CheckJobFitsMemory(const JobSpec& job, int64_t memory_bytes);

// The job's strategy as a placement-policy configuration.
PolicyConfig PolicyConfigFor(const JobSpec& job);
// MakePlacementPolicy(PolicyConfigFor(job)).
absl::StatusOr<std::unique_ptr<PlacementPolicy>> PolicyFor(const JobSpec& job);

// The losses computed on the outputs against the labels' values (one-hot
// with several outputs) rather than as class probabilities: "mse", "mae"
// and "huber" (a job's canonical names). from_logits does not apply to them.
inline bool IsRegressionLoss(const std::string& loss) {
  return loss == "mse" || loss == "mae" || loss == "huber";
}

// A loss's runtime name: "mse", "mae" and "huber" for Keras's
// mean_squared_error, mean_absolute_error and huber_loss; others as given.
std::string CanonicalLoss(const std::string& name);

}  // namespace strata

#endif  // STRATA_JOB_JOB_H_

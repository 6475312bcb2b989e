// The SDK's model-building blocks: layers (Dense, Conv2D, KerasLayer, ...),
// optimizers (SGD, Adam, Adagrad, RMSprop) and, for sparse models,
// embeddings over categorical columns (Embedding, TableOptimizer, Inputs).
// Part of the SDK that sdk/strata.h includes whole.
#ifndef STRATA_SDK_LAYERS_H_
#define STRATA_SDK_LAYERS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata::sdk {

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

}  // namespace strata::sdk

#endif  // STRATA_SDK_LAYERS_H_

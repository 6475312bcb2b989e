#include "job/job.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace strata {
namespace {

using nlohmann::json;

// The reference job, as in examples/fashion_mnist/job.json.
json ReferenceJob() {
  return json::parse(R"({
    "name": "fashion-mnist-mlp",
    "model": {"input_shape": [784],
              "layers": [{"type": "dense", "units": 128, "activation": "relu"},
                         {"type": "dense", "units": 10,
                          "activation": "softmax"}]},
    "loss": "sparse_categorical_crossentropy",
    "metrics": ["accuracy"],
    "optimizer": {"type": "adam", "learning_rate": 0.001},
    "data": {"format": "idx",
             "train": {"images": "/d/train-images-idx3-ubyte.gz",
                       "labels": "/d/train-labels-idx1-ubyte.gz"},
             "test": {"images": "/d/t10k-images-idx3-ubyte.gz",
                      "labels": "/d/t10k-labels-idx1-ubyte.gz"},
             "scale": 255.0},
    "strategy": {"type": "parameter_server", "update": "async",
                 "partitioner": {"type": "fixed", "num_shards": 2}},
    "epochs": 10, "batch_size": 128, "shuffle_seed": 42, "seed": 1,
    "checkpoint": {"every_steps": 200, "every_seconds": 0},
    "evaluation": {"every_epochs": 1}
  })");
}

// The smallest valid job.
json MinimalJob() {
  return json::parse(R"({
    "model": {"input_shape": [4],
              "layers": [{"type": "dense", "units": 3,
                          "activation": "softmax"}]},
    "loss": "sparse_categorical_crossentropy",
    "optimizer": "sgd",
    "data": {"format": "csv", "train": {"path": "train.csv"}}
  })");
}

std::string SourceDir() {
  std::string file = __FILE__;
  const size_t slash = file.rfind("/tests/");
  return slash == std::string::npos ? "." : file.substr(0, slash);
}

TEST(JobTest, ReferenceJobParses) {
  absl::StatusOr<JobSpec> job = ParseJob(ReferenceJob());
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->name, "fashion-mnist-mlp");
  EXPECT_EQ(job->model.input_shape, Shape({784}));
  ASSERT_EQ(job->model.layers.size(), 2u);
  EXPECT_EQ(job->model.layers[0].type, LayerType::kDense);
  EXPECT_EQ(job->model.layers[0].units, 128);
  EXPECT_EQ(job->model.layers[0].activation, Activation::kRelu);
  EXPECT_TRUE(job->model.layers[0].use_bias);
  EXPECT_EQ(job->model.layers[0].kernel_initializer.type,
            InitializerType::kGlorotUniform);
  EXPECT_EQ(job->model.layers[0].bias_initializer.type,
            InitializerType::kZeros);
  EXPECT_EQ(job->model.layers[1].activation, Activation::kSoftmax);
  EXPECT_EQ(job->loss, "sparse_categorical_crossentropy");
  EXPECT_EQ(job->metrics, std::vector<std::string>({"accuracy"}));
  EXPECT_EQ(job->optimizer.type, OptimizerType::kAdam);
  EXPECT_DOUBLE_EQ(job->optimizer.learning_rate, 0.001);
  EXPECT_DOUBLE_EQ(job->optimizer.beta_1, 0.9);
  EXPECT_DOUBLE_EQ(job->optimizer.epsilon, 1e-7);
  EXPECT_EQ(job->data.format, "idx");
  EXPECT_EQ(job->data.train.images, "/d/train-images-idx3-ubyte.gz");
  EXPECT_TRUE(job->data.has_test);
  EXPECT_EQ(job->data.test.labels, "/d/t10k-labels-idx1-ubyte.gz");
  EXPECT_DOUBLE_EQ(job->data.scale, 255.0);
  EXPECT_EQ(job->strategy.type, "parameter_server");
  EXPECT_EQ(job->strategy.update, "async");
  EXPECT_EQ(job->strategy.partitioner.type, "fixed");
  EXPECT_EQ(job->strategy.partitioner.num_shards, 2);
  EXPECT_EQ(job->strategy.options["partitioner"]["num_shards"], 2);
  EXPECT_EQ(job->epochs, 10);
  EXPECT_EQ(job->batch_size, 128);
  EXPECT_EQ(job->shuffle_seed, 42u);
  EXPECT_EQ(job->seed, 1u);
  EXPECT_EQ(job->checkpoint.every_steps, 200);
  EXPECT_EQ(job->checkpoint.max_failures, 3);  // the default
  EXPECT_EQ(job->evaluation.every_epochs, 1);
  EXPECT_EQ(json::parse(job->json), ReferenceJob());
}

TEST(JobTest, ExampleJobFileLoads) {
  const std::string path = SourceDir() + "/examples/fashion_mnist/job.json";
  absl::StatusOr<JobSpec> job = LoadJobFile(path);
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->name, "fashion-mnist-mlp");
  ASSERT_EQ(job->model.layers.size(), 2u);
  EXPECT_EQ(job->model.layers[0].units, 128);
  EXPECT_EQ(job->model.layers[1].units, 10);
  EXPECT_EQ(job->optimizer.type, OptimizerType::kAdam);
  EXPECT_EQ(job->epochs, 10);
  EXPECT_EQ(job->batch_size, 128);
  EXPECT_EQ(job->strategy.partitioner.num_shards, 2);
  EXPECT_EQ(job->checkpoint.every_steps, 200);
  EXPECT_EQ(job->data.train.images,
            "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
  // The original text is kept as is.
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  EXPECT_EQ(job->json, text);
}

TEST(JobTest, DefaultsApply) {
  absl::StatusOr<JobSpec> job = ParseJob(MinimalJob());
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->name, "job");
  EXPECT_EQ(job->epochs, 1);
  EXPECT_EQ(job->batch_size, 32);
  EXPECT_EQ(job->shuffle_seed, 0u);
  EXPECT_EQ(job->seed, 0u);
  EXPECT_EQ(job->checkpoint.every_steps, 0);
  EXPECT_EQ(job->evaluation.every_epochs, 1);
  EXPECT_TRUE(job->metrics.empty());
  EXPECT_EQ(job->optimizer.type, OptimizerType::kSgd);
  EXPECT_LE(job->optimizer.learning_rate, 0);  // Optimizer::Create's default
  EXPECT_EQ(job->data.train.label_column, 0);
  EXPECT_TRUE(job->data.train.header);
  EXPECT_FALSE(job->data.has_test);
  EXPECT_DOUBLE_EQ(job->data.scale, 1.0);
  EXPECT_EQ(job->strategy.type, "parameter_server");
  EXPECT_EQ(job->strategy.update, "async");
  EXPECT_EQ(job->strategy.partitioner.num_shards, 1);
}

TEST(JobTest, DeviceDefaultsToCpuAndAcceptsCudaForms) {
  absl::StatusOr<JobSpec> job = ParseJob(MinimalJob());
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->device, "cpu");
  EXPECT_EQ(job->cuda_device, -1);
  for (const auto& [given, stored, index] :
       std::vector<std::tuple<std::string, std::string, int>>{
           {"cpu", "cpu", -1},
           {"cuda", "cuda:0", 0},
           {"cuda:0", "cuda:0", 0},
           {"cuda:3", "cuda:3", 3}}) {
    json j = MinimalJob();
    j["device"] = given;
    absl::StatusOr<JobSpec> parsed = ParseJob(j);
    STRATA_ASSERT_OK(parsed);
    EXPECT_EQ(parsed->device, stored) << given;
    EXPECT_EQ(parsed->cuda_device, index) << given;
  }
}

TEST(JobTest, BadDeviceNamesTheFieldAndTheForms) {
  for (const json& bad : {json("gpu"), json("cuda:"), json("cuda:-1"),
                          json("cuda:x"), json("cuda:99999")}) {
    json j = MinimalJob();
    j["device"] = bad;
    absl::StatusOr<JobSpec> parsed = ParseJob(j);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("job.device"), std::string::npos)
        << parsed.status();
    EXPECT_NE(parsed.status().message().find("cpu, cuda, cuda:N"),
              std::string::npos)
        << parsed.status();
  }
  for (const json& bad : {json(0), json("")}) {
    json j = MinimalJob();
    j["device"] = bad;
    absl::StatusOr<JobSpec> parsed = ParseJob(j);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("job.device"), std::string::npos)
        << parsed.status();
  }
}

TEST(JobTest, LayerOptionsParse) {
  json j = MinimalJob();
  j["model"]["input_shape"] = {2, 2};
  j["model"]["layers"] = json::parse(R"([
    {"type": "flatten"},
    {"type": "dense", "units": 5, "activation": "tanh", "use_bias": false,
     "kernel_initializer": {"type": "random_normal", "stddev": 0.1,
                            "seed": 7},
     "bias_initializer": "ones", "name": "hidden"},
    {"type": "dropout", "rate": 0.25},
    {"type": "dense", "units": 3, "activation": "softmax"}])");
  absl::StatusOr<JobSpec> job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  const LayerSpec& hidden = job->model.layers[1];
  EXPECT_EQ(hidden.name, "hidden");
  EXPECT_FALSE(hidden.use_bias);
  EXPECT_EQ(hidden.kernel_initializer.type, InitializerType::kRandomNormal);
  EXPECT_DOUBLE_EQ(hidden.kernel_initializer.stddev, 0.1);
  EXPECT_EQ(hidden.kernel_initializer.seed, 7u);
  EXPECT_TRUE(hidden.kernel_seed_set);
  EXPECT_EQ(hidden.bias_initializer.type, InitializerType::kOnes);
  EXPECT_DOUBLE_EQ(job->model.layers[2].rate, 0.25);
  EXPECT_EQ(ResolveLayerNames(job->model),
            std::vector<std::string>({"flatten", "hidden", "dropout",
                                      "dense"}));
}

TEST(JobTest, OptimizerFieldsCarriedIntoConfig) {
  json j = MinimalJob();
  j["optimizer"] = {{"type", "rmsprop"}, {"learning_rate", 0.01},
                    {"rho", 0.8},        {"momentum", 0.5},
                    {"epsilon", 1e-6},   {"centered", true}};
  absl::StatusOr<JobSpec> job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->optimizer.type, OptimizerType::kRmsprop);
  EXPECT_DOUBLE_EQ(job->optimizer.learning_rate, 0.01);
  EXPECT_DOUBLE_EQ(job->optimizer.rho, 0.8);
  EXPECT_DOUBLE_EQ(job->optimizer.momentum, 0.5);
  EXPECT_DOUBLE_EQ(job->optimizer.epsilon, 1e-6);
  EXPECT_TRUE(job->optimizer.centered);

  j["optimizer"] = {{"type", "sgd"}, {"momentum", 0.9}, {"nesterov", true}};
  job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  EXPECT_TRUE(job->optimizer.nesterov);
  EXPECT_DOUBLE_EQ(job->optimizer.momentum, 0.9);

  j["optimizer"] = {{"type", "adagrad"},
                    {"initial_accumulator_value", 0.5}};
  job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  EXPECT_DOUBLE_EQ(job->optimizer.initial_accumulator_value, 0.5);
}

TEST(JobTest, LossAliasAndCsvData) {
  json j = MinimalJob();
  j["loss"] = "mean_squared_error";
  j["model"]["layers"][0]["activation"] = "linear";
  j["data"] = json::parse(R"({"format": "csv",
      "train": {"path": "a.csv", "label_column": 4, "header": false},
      "test": {"path": "b.csv"}, "limit_train": 100, "limit_test": 10})");
  absl::StatusOr<JobSpec> job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->loss, "mse");
  EXPECT_EQ(job->data.train.path, "a.csv");
  EXPECT_EQ(job->data.train.label_column, 4);
  EXPECT_FALSE(job->data.train.header);
  EXPECT_EQ(job->data.test.path, "b.csv");
  EXPECT_EQ(job->data.limit_train, 100);
  EXPECT_EQ(job->data.limit_test, 10);
}

TEST(JobTest, StrategiesAndPartitioners) {
  json j = MinimalJob();
  j["strategy"] = {{"type", "central_storage"}};
  absl::StatusOr<JobSpec> job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->strategy.update, "sync");

  j["strategy"] = json::parse(R"({"type": "parameter_server", "update": "sync",
      "partitioner": {"type": "min_size", "min_shard_bytes": 1024}})");
  job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->strategy.update, "sync");
  EXPECT_EQ(job->strategy.partitioner.type, "min_size");
  EXPECT_EQ(job->strategy.partitioner.min_shard_bytes, 1024);
  EXPECT_EQ(job->strategy.partitioner.max_shards, 1);

  j["strategy"] = json::parse(R"({"type": "parameter_server",
      "partitioner": {"type": "max_size", "max_shard_bytes": 4096}})");
  job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->strategy.partitioner.max_shard_bytes, 4096);
  EXPECT_EQ(job->strategy.partitioner.max_shards, 0);
}

// Parses `j` and expects INVALID_ARGUMENT with `substr` in the message.
void ExpectError(const json& j, const std::string& substr) {
  absl::StatusOr<JobSpec> job = ParseJob(j);
  EXPECT_THAT(job, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                       substr))
      << j.dump();
}

TEST(JobTest, CheckpointsAStrategyCannotTakeAreRefusedNotDropped) {
  // Coordinated checkpoints save the parameter servers of parameter_server
  // and central_storage; another strategy asking for them is refused
  // naming the field (the coordinator used to set them to 0 without a
  // word).
  json j = MinimalJob();
  j["checkpoint"] = {{"every_steps", 100}};
  STRATA_ASSERT_OK(ParseJob(j));  // parameter_server, the default
  j["strategy"] = {{"type", "central_storage"}};
  STRATA_ASSERT_OK(ParseJob(j));
  for (const char* strategy : {"multi_worker_mirrored", "mirrored"}) {
    j["strategy"] = {{"type", strategy}};
    ExpectError(j, absl::StrCat("job.checkpoint.every_steps: strategy ",
                                strategy,
                                " takes no coordinated checkpoints"));
  }
  j["checkpoint"] = {{"every_seconds", 30}};
  ExpectError(j, "job.checkpoint.every_seconds: strategy mirrored takes no");
  j["checkpoint"] = {{"every_steps", 0}, {"keep", 2}};
  STRATA_ASSERT_OK(ParseJob(j));
}

TEST(JobTest, GradientCompressionIsForStrategiesThatPushToPsTasks) {
  json j = MinimalJob();
  STRATA_ASSERT_OK(ParseJob(j));
  EXPECT_EQ(ParseJob(j)->strategy.gradient_compression, "none");
  for (const char* strategy :
       {R"({"type": "parameter_server", "gradient_compression": "bf16"})",
        R"({"type": "central_storage", "gradient_compression": "fp16"})",
        R"({"type": "multi_worker_mirrored", "collective": "ps",
            "gradient_compression": "bf16"})"}) {
    j["strategy"] = json::parse(strategy);
    absl::StatusOr<JobSpec> job = ParseJob(j);
    STRATA_ASSERT_OK(job);
    EXPECT_NE(job->strategy.gradient_compression, "none") << strategy;
  }
  j["strategy"] = json::parse(
      R"({"type": "parameter_server", "gradient_compression": "int8"})");
  ExpectError(j,
              "job.strategy.gradient_compression: 'int8' is not one of none, "
              "bf16, fp16");
  j["strategy"] = json::parse(
      R"({"type": "mirrored", "gradient_compression": "bf16"})");
  ExpectError(j,
              "job.strategy.gradient_compression: 'bf16' compresses the "
              "gradients pushed to PS tasks; mirrored pushes none");
  j["strategy"] = json::parse(
      R"({"type": "multi_worker_mirrored", "gradient_compression": "fp16"})");
  ExpectError(j, "multi_worker_mirrored with collective 'ring' pushes none");
}

TEST(JobTest, UnknownLayerTypeNamesPath) {
  json j = ReferenceJob();
  j["model"]["layers"][1]["type"] = "conv3d";
  ExpectError(j,
              "job.model.layers[1].type: 'conv3d' is not one of dense, "
              "activation, dropout, flatten, reshape, conv1d, conv2d");
  // A known type with its Keras arguments checked when the graph builds.
  j["model"]["layers"][1] = {{"type", "conv2d"}, {"kernel_size", 3}};
  ExpectError(j,
              "job.model.layers[1]: layer 'conv2d' (Conv2D): argument "
              "'filters': is required");
  j["model"]["input_shape"] = {28, 28, 1};
  j["model"]["layers"] = {{{"type", "conv2d"}, {"filters", 4},
                           {"kernel_size", 3}, {"padding", "full"}}};
  ExpectError(j, "argument 'padding'");
}

// The regression losses by Keras's names and aliases, the Huber delta,
// and what they refuse.
TEST(JobTest, MaeAndHuberLosses) {
  for (const auto& [given, stored] : std::vector<std::pair<std::string,
                                                           std::string>>{
           {"mae", "mae"},
           {"mean_absolute_error", "mae"},
           {"huber", "huber"},
           {"huber_loss", "huber"},
           {"mean_squared_error", "mse"}}) {
    SCOPED_TRACE(given);
    json j = ReferenceJob();
    j["loss"] = given;
    absl::StatusOr<JobSpec> job = ParseJob(j);
    STRATA_ASSERT_OK(job);
    EXPECT_EQ(job->loss, stored);
    EXPECT_EQ(job->model.huber_delta, 1.0);
  }
  json j = ReferenceJob();
  j["loss"] = {{"name", "huber_loss"}, {"delta", 2.5}};
  absl::StatusOr<JobSpec> job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->loss, "huber");
  EXPECT_EQ(job->model.huber_delta, 2.5);
  j["loss"] = {{"name", "huber"}, {"delta", 0}};
  ExpectError(j, "job.loss.delta: must be > 0, got 0");
  j["loss"] = {{"name", "huber"}, {"delta", -1}};
  ExpectError(j, "job.loss.delta");
  j["loss"] = {{"name", "mse"}, {"delta", 2}};
  ExpectError(j, "job.loss.delta: applies to the huber loss only");
  j["loss"] = {{"name", "mae"}, {"from_logits", true}};
  ExpectError(j, "job.loss.from_logits: applies to the cross-entropies only");
  j["loss"] = "log_cosh";
  ExpectError(j, "job.loss: 'log_cosh' is not one of");
}

TEST(JobTest, KerasModelJsonIsTheModel) {
  json j = ReferenceJob();
  json model = json::parse(R"({"class_name": "Sequential", "config": {
    "name": "s", "layers": [
      {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 28, 28, 1], "name": "in"}},
      {"class_name": "Conv2D", "config": {"name": "c", "filters": 4, "kernel_size": [3, 3], "activation": "relu"}},
      {"class_name": "GlobalMaxPooling2D", "config": {"name": "g"}},
      {"class_name": "Dense", "config": {"name": "out", "units": 10}}]}})");
  j["model"] = model;
  // A linear output needs from_logits.
  ExpectError(j, "job.loss: sparse_categorical_crossentropy needs a softmax "
                 "output (layer 'out' ends in linear)");
  j["loss"] = {{"name", "sparse_categorical_crossentropy"},
               {"from_logits", true}};
  absl::StatusOr<JobSpec> job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  EXPECT_TRUE(job->model.keras.has_value());
  EXPECT_TRUE(job->model.from_logits);
  EXPECT_EQ(job->model.input_shape, Shape({28, 28, 1}));
  // A Conv2D on a flat input, a pooling window larger than its input, and
  // a model with two outputs are refused naming the layer.
  json bad = j;
  bad["model"]["config"]["layers"][0]["config"]["batch_input_shape"] = {
      nullptr, 784};
  ExpectError(bad, "layer 'c' (Conv2D): expects");
  bad = j;
  bad["model"]["config"]["layers"][2] = {
      {"class_name", "MaxPooling2D"},
      {"config", {{"name", "p"}, {"pool_size", 40}}}};
  ExpectError(bad, "layer 'p' (MaxPooling2D)");
  bad = j;
  bad["model"]["config"]["layers"][3]["config"]["units"] = 1;
  ExpectError(bad, "needs an output of >= 2 units");
  // A model too large for any machine: the footprint names the layer.
  bad = j;
  bad["model"]["config"]["layers"][1]["config"]["filters"] = 1 << 30;
  ExpectError(bad, "layer 'c' (Conv2D)");
}

// A criteo job whose Keras model has inputs "C2" (2 floats), "dense" (13)
// and "C1" (4), added into one logit; embeddings on C1 (dim 4), C2 (dim 2).
json ThreeInputJob() {
  json j = json::parse(R"({
    "model": {"categorical_columns": 26,
      "embeddings": [{"table": "C1", "columns": [0], "output_dim": 4},
                     {"table": "C2", "columns": [1], "output_dim": 2}],
      "keras": {"class_name": "Functional", "config": {"name": "f",
        "layers": [
          {"class_name": "InputLayer", "name": "C2", "inbound_nodes": [],
           "config": {"batch_input_shape": [null, 2], "name": "C2"}},
          {"class_name": "InputLayer", "name": "dense", "inbound_nodes": [],
           "config": {"batch_input_shape": [null, 13], "name": "dense"}},
          {"class_name": "InputLayer", "name": "C1", "inbound_nodes": [],
           "config": {"batch_input_shape": [null, 4], "name": "C1"}},
          {"class_name": "Concatenate", "name": "cat",
           "config": {"name": "cat", "axis": -1},
           "inbound_nodes": [[["C2", 0, 0, {}], ["dense", 0, 0, {}],
                              ["C1", 0, 0, {}]]]},
          {"class_name": "Dense", "name": "out",
           "config": {"name": "out", "units": 1, "activation": "sigmoid"},
           "inbound_nodes": [[["cat", 0, 0, {}]]]}],
        "input_layers": [["C2", 0, 0], ["dense", 0, 0], ["C1", 0, 0]],
        "output_layers": [["out", 0, 0]]}}},
    "loss": "binary_crossentropy",
    "optimizer": "adam",
    "data": {"format": "criteo", "train": {"path": "train.tsv"}},
    "strategy": {"type": "parameter_server"}
  })");
  return j;
}

std::vector<std::string> InputNames(const JobSpec& job) {
  std::vector<std::string> names;
  for (const model::InputSpec& in : job.model.keras->inputs) {
    names.push_back(in.name);
  }
  return names;
}

std::vector<std::string> TableOrder(const JobSpec& job) {
  std::vector<std::string> names;
  for (const EmbeddingSpec& e : job.model.embeddings) names.push_back(e.table);
  return names;
}

TEST(JobTest, KerasInputsBindToDenseColumnsAndTablesByName) {
  // Inputs named "dense" and after the tables bind by name, whatever their
  // order in the model: each example's row becomes dense, C2, C1.
  absl::StatusOr<JobSpec> job = ParseJob(ThreeInputJob());
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->model.input_shape, Shape({13}));
  EXPECT_EQ(InputNames(*job),
            std::vector<std::string>({"dense", "C2", "C1"}));
  EXPECT_EQ(TableOrder(*job), std::vector<std::string>({"C2", "C1"}));
}

TEST(JobTest, KerasInputsBindByTheInputsMap) {
  // Renamed inputs bound through job.model.inputs; one input may take
  // several tables (side by side, in the listed order).
  json j = ThreeInputJob();
  json& layers = j["model"]["keras"]["config"]["layers"];
  layers[0]["name"] = "ids";
  layers[0]["config"]["name"] = "ids";
  layers[0]["config"]["batch_input_shape"] = {nullptr, 6};
  layers[1]["name"] = "numeric";
  layers[1]["config"]["name"] = "numeric";
  layers.erase(2);
  layers[2]["inbound_nodes"] = json::parse(
      R"([[["ids", 0, 0, {}], ["numeric", 0, 0, {}]]])");
  j["model"]["keras"]["config"]["input_layers"] =
      json::parse(R"([["ids", 0, 0], ["numeric", 0, 0]])");
  // Without a map, inputs with other names read the row in order.
  absl::StatusOr<JobSpec> job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(InputNames(*job), std::vector<std::string>({"ids", "numeric"}));
  EXPECT_EQ(TableOrder(*job), std::vector<std::string>({"C1", "C2"}));
  j["model"]["inputs"] = {{"ids", {"C2", "C1"}}, {"numeric", "dense"}};
  job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(InputNames(*job), std::vector<std::string>({"numeric", "ids"}));
  EXPECT_EQ(TableOrder(*job), std::vector<std::string>({"C2", "C1"}));
  EXPECT_EQ(job->model.input_shape, Shape({13}));

  // Bad bindings are refused naming the input and the source.
  json bad = j;
  bad["model"]["inputs"]["wide"] = "dense";
  ExpectError(bad, "job.model.inputs.wide: the model has no input 'wide'; "
                   "its inputs: ids, numeric");
  bad = j;
  bad["model"]["inputs"]["ids"] = {"C2", "C3"};
  ExpectError(bad, "job.model.inputs.ids: 'C3' is neither \"dense\" nor a "
                   "table of job.model.embeddings");
  bad = j;
  bad["model"]["inputs"]["ids"] = {"C2", "C1", "C1"};
  ExpectError(bad, "'C1' feeds both input 'ids' and input 'ids'");
  bad = j;
  bad["model"]["inputs"]["ids"] = "C2";
  ExpectError(bad, "job.model.inputs: the embeddings on table 'C1' feed no "
                   "input");
  bad = j;
  bad["model"]["inputs"].erase("numeric");
  ExpectError(bad, "job.model.inputs: input 'numeric' is bound to nothing");
  bad = j;
  bad["model"]["inputs"]["ids"] = {"C2"};
  bad["model"]["inputs"]["numeric"] = {"C1", "dense"};
  ExpectError(bad, "input 'numeric': \"dense\" must be its first source");
  bad = j;
  bad["model"]["embeddings"][0]["output_dim"] = 5;
  ExpectError(bad, "input 'ids' takes 6 floats per example; its embeddings "
                   "give 7");
  bad = j;
  bad["model"]["inputs"]["ids"] = 3;
  ExpectError(bad, "job.model.inputs.ids: expected \"dense\", a table name "
                   "or a non-empty list of them, got 3");
}

TEST(JobTest, BadActivationNamesPath) {
  json j = ReferenceJob();
  j["model"]["layers"][0]["activation"] = "gelu";
  ExpectError(j,
              "job.model.layers[0].activation: 'gelu' is not one of relu, "
              "sigmoid, tanh, softmax, linear");
}

TEST(JobTest, BadLossNamesPath) {
  json j = ReferenceJob();
  j["loss"] = "hinge";
  ExpectError(j, "job.loss: 'hinge' is not one of "
                 "sparse_categorical_crossentropy, categorical_crossentropy, "
                 "binary_crossentropy, mse, mean_squared_error");
}

TEST(JobTest, UnknownKeysNamed) {
  json j = ReferenceJob();
  j["epoch"] = 3;
  ExpectError(j, "job: unknown key 'epoch'");
  ExpectError(j, "allowed keys: name, model, loss");

  j = ReferenceJob();
  j["model"]["layers"][0]["unit"] = 3;
  ExpectError(j, "job.model.layers[0]: unknown key 'unit' for a dense layer");

  j = ReferenceJob();
  j["model"]["layers"][0]["rate"] = 0.5;
  ExpectError(j, "job.model.layers[0]: unknown key 'rate'");

  j = ReferenceJob();
  j["data"]["train"]["path"] = "x.csv";
  ExpectError(j, "job.data.train: unknown key 'path' for format idx");

  j = ReferenceJob();
  j["checkpoint"]["dir"] = "/tmp";
  ExpectError(j, "job.checkpoint: unknown key 'dir'");

  j = ReferenceJob();
  j["strategy"]["partitioner"]["max_shard_bytes"] = 10;
  ExpectError(j,
              "job.strategy.partitioner: unknown key 'max_shard_bytes' for a "
              "fixed partitioner");
}

TEST(JobTest, NonPositiveUnitsNamePath) {
  json j = ReferenceJob();
  j["model"]["layers"][0]["units"] = -5;
  ExpectError(j, "job.model.layers[0].units: must be >= 1, got -5");
  j["model"]["layers"][0]["units"] = 0;
  ExpectError(j, "job.model.layers[0].units: must be >= 1, got 0");
  j["model"]["layers"][0]["units"] = "many";
  ExpectError(j, "job.model.layers[0].units: expected an integer, got "
                 "\"many\"");
  j["model"]["layers"][0]["units"] = 1.5;
  ExpectError(j, "job.model.layers[0].units: expected an integer, got 1.5");
  j["model"]["layers"][0].erase("units");
  ExpectError(j, "job.model.layers[0].units: required but missing");
}

TEST(JobTest, BadOptimizerNamesPath) {
  json j = ReferenceJob();
  j["optimizer"]["type"] = "adamw";
  ExpectError(j,
              "job.optimizer.type: 'adamw' is not one of sgd, adam, adagrad, "
              "rmsprop");
  j["optimizer"] = "assign_add";
  ExpectError(j, "job.optimizer.type: 'assign_add' is not one of sgd, adam, "
                 "adagrad, rmsprop");
  j["optimizer"] = {{"type", "adam"}, {"beta_1", 1.0}};
  ExpectError(j, "job.optimizer.beta_1: must be in [0, 1), got 1.0");
  j["optimizer"] = {{"type", "adam"}, {"momentum", 0.9}};
  ExpectError(j, "job.optimizer: unknown key 'momentum' for adam");
  j["optimizer"] = {{"type", "sgd"}, {"learning_rate", -1}};
  ExpectError(j, "job.optimizer.learning_rate: must be >= 0, got -1");
  j.erase("optimizer");
  ExpectError(j, "job.optimizer: required but missing");
}

TEST(JobTest, MissingDataNamesPath) {
  json j = ReferenceJob();
  j.erase("data");
  ExpectError(j, "job.data: required but missing");
  j = ReferenceJob();
  j["data"].erase("train");
  ExpectError(j, "job.data.train: required but missing");
  j = ReferenceJob();
  j["data"]["train"].erase("labels");
  ExpectError(j, "job.data.train.labels: required but missing");
  j = ReferenceJob();
  j["data"]["format"] = "parquet";
  ExpectError(j, "job.data.format: 'parquet' is not one of idx, csv");
  j = ReferenceJob();
  j["data"]["scale"] = 0;
  ExpectError(j, "job.data.scale: must be > 0");
  j = ReferenceJob();
  j["data"]["limit_train"] = -1;
  ExpectError(j, "job.data.limit_train: must be >= 0, got -1");
}

TEST(JobTest, OtherFieldErrorsNamePath) {
  json j = ReferenceJob();
  j["epochs"] = 0;
  ExpectError(j, "job.epochs: must be >= 1, got 0");
  j = ReferenceJob();
  j["batch_size"] = "big";
  ExpectError(j, "job.batch_size: expected an integer, got \"big\"");
  j = ReferenceJob();
  j["seed"] = -1;
  ExpectError(j, "job.seed: expected an integer in [0, 2^64), got -1");
  j = ReferenceJob();
  j["metrics"] = {"precision"};
  ExpectError(j, "job.metrics[0]: \"precision\" is not one of accuracy, auc");
  j = ReferenceJob();
  j["metrics"] = {"accuracy", "auc"};
  ExpectError(j, "job.metrics[1]: auc needs loss binary_crossentropy");
  j = ReferenceJob();
  j["model"]["input_shape"] = {28, 0};
  ExpectError(j, "job.model.input_shape[1]: expected a positive integer");
  j = ReferenceJob();
  j["model"]["layers"] = json::array();
  ExpectError(j, "job.model.layers: expected a non-empty array of layers");
  j = ReferenceJob();
  j["model"]["layers"][0] = {{"type", "dropout"}, {"rate", 1.0}};
  ExpectError(j, "job.model.layers[0].rate: must be in [0, 1), got 1.0");
  j = ReferenceJob();
  j["strategy"]["type"] = "tpu";
  ExpectError(j, "job.strategy.type: 'tpu' is not one of parameter_server, "
                 "central_storage, multi_worker_mirrored, mirrored, "
                 "one_device");
  j = ReferenceJob();
  j["strategy"]["update"] = "eventually";
  ExpectError(j, "job.strategy.update: 'eventually' is not one of async, "
                 "sync");
  j = ReferenceJob();
  j["strategy"] = {{"type", "multi_worker_mirrored"}, {"update", "async"}};
  ExpectError(j, "job.strategy.update: 'async' is not supported by "
                 "multi_worker_mirrored");
  j = ReferenceJob();
  j["strategy"]["partitioner"] = {{"type", "max_size"}};
  ExpectError(j, "job.strategy.partitioner.max_shard_bytes: required but "
                 "missing");
  j = ReferenceJob();
  j["model"]["layers"][0]["kernel_initializer"] = "xavier";
  ExpectError(j, "job.model.layers[0].kernel_initializer: 'xavier' is not "
                 "one of zeros");
  j = ReferenceJob();
  j["name"] = "a/b";
  ExpectError(j, "job.name: 'a/b' may only hold");
  j = ReferenceJob();
  j["model"]["layers"][1]["name"] = "dense";  // layer 0's automatic name
  ExpectError(j, "job.model.layers[1]: duplicate layer name 'dense'");
}

TEST(JobTest, ModelAndLossMustAgree) {
  json j = ReferenceJob();
  j["model"]["layers"][1]["activation"] = "sigmoid";
  ExpectError(j, "job.model.layers[1].activation: job.loss "
                 "sparse_categorical_crossentropy needs a softmax output "
                 "layer, got sigmoid");
  j = ReferenceJob();
  j["loss"] = "binary_crossentropy";
  ExpectError(j, "job.model.layers[1].activation: job.loss "
                 "binary_crossentropy needs a sigmoid output layer");
  j["model"]["layers"][1]["activation"] = "sigmoid";
  ExpectError(j, "job.model.layers[1].units: job.loss binary_crossentropy "
                 "needs an output layer of 1 unit");
  j = ReferenceJob();
  j["model"]["layers"].push_back({{"type", "dropout"}, {"rate", 0.1}});
  ExpectError(j, "job.model.layers[2]: the output layer must be dense, got "
                 "dropout");
}

TEST(JobTest, MalformedJsonIsInvalidArgument) {
  EXPECT_THAT(ParseJobString("{\"name\": "),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "parse error"));
  EXPECT_THAT(ParseJobString("[1, 2]"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job: expected an object"));
}

TEST(JobTest, ParseJobStringKeepsText) {
  const std::string text = MinimalJob().dump(2);
  absl::StatusOr<JobSpec> job = ParseJobString(text);
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->json, text);
}

TEST(JobTest, LoadJobFileErrors) {
  EXPECT_THAT(LoadJobFile("/nonexistent/strata/job.json"),
              StatusIs(absl::StatusCode::kNotFound));
  const std::string path = ::testing::TempDir() + "/strata_job_test_bad.json";
  {
    std::ofstream out(path);
    out << R"({"model": 1})";
  }
  EXPECT_THAT(LoadJobFile(path),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  path + ": job.model: expected an object"));
  std::remove(path.c_str());
}

// ---------------------------------------------------------------------------
// Limits: file size, nesting, strings, model footprint.

// The status of parsing `j`, its message kept short in failure output.
absl::Status ParseStatus(const json& j) { return ParseJob(j).status(); }

// `text` as JSON text padded with spaces to exactly `size` bytes.
std::string PadTo(std::string text, size_t size) {
  if (text.size() < size) text.append(size - text.size(), ' ');
  return text;
}

// n nested arrays: "[[...]]".
std::string Nested(int n) {
  return std::string(n, '[') + std::string(n, ']');
}

TEST(JobLimitsTest, TextSizeIsRefusedJustAboveTheLimit) {
  const std::string at = PadTo(MinimalJob().dump(), kMaxJobBytes);
  ASSERT_EQ(at.size(), kMaxJobBytes);
  STRATA_ASSERT_OK(CheckJobTextLimits(at));
  STRATA_ASSERT_OK(ParseJobString(at));
  const std::string above = at + " ";
  EXPECT_THAT(CheckJobTextLimits(above),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job: 1048577 bytes, at most 1048576 "
                                  "(1 MiB)"));
  EXPECT_THAT(ParseJobString(above),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "at most 1048576"));
}

TEST(JobLimitsTest, FiftyMegabytesOfBracketsAreRefusedBySize) {
  const std::string text(size_t{50} << 20, '[');
  const absl::Status s = ParseJobString(text).status();
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                     "job: 52428800 bytes, at most 1048576"));
  EXPECT_LT(s.message().size(), 200u);
  // A megabyte of them is within the size limit and refused by depth.
  const std::string mib(kMaxJobBytes, '[');
  EXPECT_THAT(ParseJobString(mib),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job: more than 32 nested arrays or "
                                  "objects (at byte 32)"));
}

TEST(JobLimitsTest, NestingIsRefusedJustAboveTheLimit) {
  STRATA_ASSERT_OK(CheckJobTextLimits(Nested(kMaxJobDepth)));
  EXPECT_THAT(CheckJobTextLimits(Nested(kMaxJobDepth + 1)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "more than 32 nested arrays or objects"));
  // Objects count as arrays do.
  std::string objects;
  for (int i = 0; i <= kMaxJobDepth; ++i) objects += "{\"a\":";
  objects += "1" + std::string(kMaxJobDepth + 1, '}');
  EXPECT_THAT(CheckJobTextLimits(objects),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Siblings do not add up.
  STRATA_ASSERT_OK(CheckJobTextLimits(
      "[" + Nested(kMaxJobDepth - 1) + "," + Nested(kMaxJobDepth - 1) + "]"));
}

TEST(JobLimitsTest, NestingScanRespectsStringsAndEscapes) {
  // Brackets inside strings, escaped quotes among them, are no nesting.
  const std::string brackets(100, '[');
  STRATA_ASSERT_OK(CheckJobTextLimits("{\"a\": \"" + brackets + "\\\"" +
                                      brackets + "\"}"));
  // An escaped backslash ends its escape: the quote after it closes the
  // string, so the brackets that follow are nesting.
  EXPECT_THAT(CheckJobTextLimits("[\"\\\\\", " + Nested(kMaxJobDepth) + "]"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  STRATA_ASSERT_OK(
      CheckJobTextLimits("[\"\\\\\", " + Nested(kMaxJobDepth - 1) + "]"));
}

TEST(JobLimitsTest, ParsedValueNestingIsRefused) {
  json deep = 1;
  for (int i = 0; i < kMaxJobDepth; ++i) deep = json::array({deep});
  json j = ReferenceJob();
  j["evaluation"] = deep;  // depth 1 (job) + 32
  const absl::Status s = ParseStatus(j);
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                     "more than 32 nested arrays or objects"));
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                     "job.evaluation"));
  // One level less is within the limit (and then refused as a bad type).
  j["evaluation"] = deep[0];
  EXPECT_THAT(ParseStatus(j),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.evaluation: expected an object"));
}

TEST(JobLimitsTest, NameIsRefusedJustAboveTheLimit) {
  json j = ReferenceJob();
  j["name"] = std::string(kMaxJobNameChars, 'n');
  STRATA_ASSERT_OK(ParseJob(j));
  j["name"] = std::string(kMaxJobNameChars + 1, 'n');
  EXPECT_THAT(ParseStatus(j),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.name: 129 characters, at most 128"));
  j = ReferenceJob();
  j["model"]["layers"][0]["name"] = std::string(kMaxJobNameChars, 'l');
  STRATA_ASSERT_OK(ParseJob(j));
  j["model"]["layers"][0]["name"] = std::string(kMaxJobNameChars + 1, 'l');
  EXPECT_THAT(ParseStatus(j),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.model.layers[0].name: 129 characters, "
                                  "at most 128"));
}

TEST(JobLimitsTest, FiftyMegabyteNameIsRefusedWithoutEchoingIt) {
  json j = ReferenceJob();
  j["name"] = std::string(size_t{50} << 20, 'n');
  const absl::Status s = ParseStatus(j);
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                     "job.name: 52428800 characters, at most "
                                     "128"));
  EXPECT_LT(s.message().size(), 200u);
}

TEST(JobLimitsTest, OtherStringsAreRefusedJustAboveTheLimit) {
  json j = MinimalJob();
  // Characters, not bytes: 4096 two-byte characters are within the limit.
  std::string path;
  for (size_t i = 0; i < kMaxJobStringChars; ++i) path += "\xc3\xa9";
  j["data"]["train"]["path"] = path;
  STRATA_ASSERT_OK(ParseJob(j));
  j["data"]["train"]["path"] = path + "x";
  EXPECT_THAT(ParseStatus(j),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.data.train.path: 4097 characters, at "
                                  "most 4096"));
  j = ReferenceJob();
  j["metrics"] = {std::string(5000, 'm')};
  EXPECT_THAT(ParseStatus(j),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.metrics[0]: 5000 characters, at most "
                                  "4096"));
  j = ReferenceJob();
  j[std::string(5000, 'k')] = 1;
  EXPECT_THAT(ParseStatus(j),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job: a key of 5000 characters, at most "
                                  "4096"));
}

TEST(JobLimitsTest, LongValuesAreShortenedInMessages) {
  const std::string long_value(4000, 'v');
  json j = ReferenceJob();
  j["loss"] = long_value;
  absl::Status s = ParseStatus(j);
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                     "job.loss: 'vvvv"));
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                     "...' is not one of"));
  EXPECT_LT(s.message().size(), 300u);
  j = ReferenceJob();
  j[long_value] = 1;  // an unknown key within the key limit
  s = ParseStatus(j);
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                     "job: unknown key 'vvvv"));
  EXPECT_LT(s.message().size(), 400u);
  j = ReferenceJob();
  j["name"] = std::string(100, '/');
  s = ParseStatus(j);
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                     "job.name: '////"));
  EXPECT_LT(s.message().size(), 200u);
  // A parse error quotes the token it read: shortened too.
  s = ParseJobString("{\"name\": \"" + std::string(900000, 'a')).status();
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                     "parse error"));
  EXPECT_LT(s.message().size(), 400u);
}

TEST(JobLimitsTest, LoadJobFileRefusesLargeFilesByTheirSize) {
  const std::string dir = ::testing::TempDir();
  const std::string at = dir + "/strata_job_test_at_limit.json";
  {
    std::ofstream out(at);
    out << PadTo(MinimalJob().dump(), kMaxJobBytes);
  }
  STRATA_ASSERT_OK(LoadJobFile(at));
  const std::string above = dir + "/strata_job_test_above_limit.json";
  {
    std::ofstream out(above);
    out << PadTo(MinimalJob().dump(), kMaxJobBytes + 1);
  }
  EXPECT_THAT(LoadJobFile(above),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job file " + above +
                                      ": 1048577 bytes, at most 1048576 "
                                      "(1 MiB)"));
  // 50 MB, sparse: refused by its size, nothing read.
  const std::string huge = dir + "/strata_job_test_huge.json";
  {
    std::ofstream out(huge);
  }
  ASSERT_EQ(truncate(huge.c_str(), off_t{50} << 20), 0);
  EXPECT_THAT(LoadJobFile(huge),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  ": 52428800 bytes, at most 1048576"));
  std::remove(at.c_str());
  std::remove(above.c_str());
  std::remove(huge.c_str());
}

TEST(JobLimitsTest, LoadJobFileReadsAtMostOneBytePastTheLimit) {
  // Endless, and without a size: only the bounded read can refuse it.
  EXPECT_THAT(LoadJobFile("/dev/zero"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job file /dev/zero: more than 1048576 "
                                  "bytes"));
  EXPECT_THAT(LoadJobFile(::testing::TempDir()),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "is a directory"));
}

// A model of `input` features and dense layers of these units (the last
// one softmax), trained by `optimizer` in batches of `batch`.
json DenseJob(int64_t input, std::vector<int64_t> units,
              const std::string& optimizer = "adam", int64_t batch = 128) {
  json j = ReferenceJob();
  j["model"]["input_shape"] = {input};
  j["model"]["layers"] = json::array();
  for (size_t i = 0; i < units.size(); ++i) {
    j["model"]["layers"].push_back(
        {{"type", "dense"},
         {"units", units[i]},
         {"activation", i + 1 == units.size() ? "softmax" : "relu"}});
  }
  j["optimizer"] = optimizer;
  j["batch_size"] = batch;
  return j;
}

TEST(ModelFootprintTest, ReferenceModel) {
  absl::StatusOr<JobSpec> job = ParseJob(ReferenceJob());
  STRATA_ASSERT_OK(job);
  absl::StatusOr<ModelFootprint> f =
      ComputeModelFootprint(job->model, job->optimizer, job->batch_size);
  STRATA_ASSERT_OK(f);
  // 784 * 128 + 128 + 128 * 10 + 10, as Keras's model.summary() counts.
  EXPECT_EQ(f->parameters, 101770);
  EXPECT_EQ(f->slots, 2);  // adam: m and v
  // 128 x (784 inputs + 2 * 128 + 2 * 10).
  EXPECT_EQ(f->activations, 135680);
  EXPECT_EQ(f->bytes, 4 * (101770 * 4 + 135680));
  EXPECT_FALSE(f->saturated);
  EXPECT_EQ(f->largest_layer, 0);
  EXPECT_EQ(f->largest_layer_bytes, 16 * 100480 + 4 * (100352 + 32768));
}

TEST(ModelFootprintTest, SlotsFollowTheOptimizer) {
  ModelSpec model;
  model.input_shape = {4};
  model.layers.resize(1);
  model.layers[0].units = 3;
  OptimizerConfig sgd;
  sgd.type = OptimizerType::kSgd;
  absl::StatusOr<ModelFootprint> f = ComputeModelFootprint(model, sgd, 1);
  STRATA_ASSERT_OK(f);
  EXPECT_EQ(f->slots, 0);
  EXPECT_EQ(f->parameters, 15);
  EXPECT_EQ(f->bytes, 4 * (15 * 2 + 4 + 6));
  sgd.momentum = 0.9;
  f = ComputeModelFootprint(model, sgd, 1);
  STRATA_ASSERT_OK(f);
  EXPECT_EQ(f->slots, 1);
  EXPECT_EQ(f->bytes, 4 * (15 * 3 + 4 + 6));
  OptimizerConfig bad;
  bad.type = OptimizerType::kAdam;
  bad.beta_1 = 2;
  EXPECT_THAT(ComputeModelFootprint(model, bad, 1),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.optimizer"));
}

TEST(ModelFootprintTest, DropoutAndFlattenActivations) {
  ModelSpec model;
  model.input_shape = {2, 2};
  model.layers.resize(4);
  model.layers[0].type = LayerType::kFlatten;
  model.layers[1].units = 8;
  model.layers[2].type = LayerType::kDropout;
  model.layers[2].rate = 0.5;
  model.layers[3].units = 3;
  OptimizerConfig sgd;
  absl::StatusOr<ModelFootprint> f = ComputeModelFootprint(model, sgd, 2);
  STRATA_ASSERT_OK(f);
  EXPECT_EQ(f->parameters, 4 * 8 + 8 + 8 * 3 + 3);
  // Input 2 x 4, dense 2 x (2 x 8), dropout 3 x (2 x 8), dense 2 x (2 x 3).
  EXPECT_EQ(f->activations, 8 + 32 + 48 + 12);
  EXPECT_EQ(f->bytes, 8 * 67 + 4 * 100);
  // The dropout's activations count toward the dense layer before it.
  EXPECT_EQ(f->largest_layer, 1);
  EXPECT_EQ(f->largest_layer_bytes, 8 * 40 + 4 * (8 + 32 + 48));
}

TEST(ModelFootprintTest, HugeCountsSaturateInsteadOfOverflowing) {
  ModelSpec model;
  model.input_shape = {784};
  model.layers.resize(2);
  model.layers[0].units = int64_t{1} << 62;  // 784 << 62 overflows
  model.layers[1].units = 10;
  OptimizerConfig adam;
  adam.type = OptimizerType::kAdam;
  absl::StatusOr<ModelFootprint> f = ComputeModelFootprint(model, adam, 128);
  STRATA_ASSERT_OK(f);
  EXPECT_TRUE(f->saturated);
  EXPECT_EQ(f->parameters, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(f->bytes, std::numeric_limits<int64_t>::max());
  // 2^31 x 2^31 fits in int64; 16 bytes each do not.
  model.input_shape = {int64_t{1} << 31};
  model.layers[0].units = int64_t{1} << 31;
  f = ComputeModelFootprint(model, adam, 1);
  STRATA_ASSERT_OK(f);
  EXPECT_TRUE(f->saturated);
  EXPECT_EQ(f->parameters, (int64_t{1} << 62) + (int64_t{1} << 31) +
                               (int64_t{1} << 31) * 10 + 10);
  EXPECT_EQ(f->bytes, std::numeric_limits<int64_t>::max());
  // Just below: no saturation.
  model.layers[0].units = 1;
  f = ComputeModelFootprint(model, adam, 1);
  STRATA_ASSERT_OK(f);
  EXPECT_FALSE(f->saturated);
}

TEST(ModelFootprintTest, BlamesTheLayerContributingMost) {
  ModelSpec model;
  model.input_shape = {1};
  model.layers.resize(3);
  model.layers[0].units = 8;
  model.layers[1].units = int64_t{1} << 31;
  model.layers[2].units = 3;
  OptimizerConfig sgd;
  absl::StatusOr<ModelFootprint> f = ComputeModelFootprint(model, sgd, 1);
  STRATA_ASSERT_OK(f);
  EXPECT_EQ(f->largest_layer, 1);  // 9 x 2^31 parameters against 3 x 2^31
  model.layers[2].units = 16;
  f = ComputeModelFootprint(model, sgd, 1);
  STRATA_ASSERT_OK(f);
  EXPECT_EQ(f->largest_layer, 2);  // 16 x 2^31 against 9 x 2^31
}

TEST(JobLimitsTest, TrillionUnitsAreRefusedWithTheSizeTheyNeed) {
  const absl::Status s =
      ParseStatus(DenseJob(784, {1000000000000, 10}, "adam", 128));
  EXPECT_THAT(s, StatusIsWithMessage(
                     absl::StatusCode::kInvalidArgument,
                     "job.model.layers[0].units: 1000000000000 units make the "
                     "model 8.0e14 parameters, needing 12.2 PiB (values, "
                     "gradients, 2 adam slots, activations for batch 128); a "
                     "job may need at most 256 GiB per worker"));
  // Units past int64 arithmetic: the footprint saturates.
  EXPECT_THAT(ParseStatus(DenseJob(784, {std::numeric_limits<int64_t>::max(),
                                         10})),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "parameters, needing at least 8 EiB"));
  // The largest layer is blamed, wherever it is.
  EXPECT_THAT(ParseStatus(DenseJob(784, {16, int64_t{1} << 34, 10})),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.model.layers[1].units: 17179869184 "
                                  "units make the model"));
}

TEST(JobLimitsTest, ModelIsRefusedJustAboveTheCeiling) {
  // sgd with momentum (1 slot), no bias, batch 1: 20 * units + 4 bytes, so
  // (2^36 - 1) / 5 units need exactly 256 GiB.
  const int64_t units = ((int64_t{1} << 36) - 1) / 5;
  json j = MinimalJob();
  j["model"]["input_shape"] = {1};
  j["model"]["layers"] = {{{"type", "dense"}, {"units", units},
                           {"use_bias", false}}};
  j["loss"] = "mse";
  j["optimizer"] = {{"type", "sgd"}, {"momentum", 0.9}};
  j["batch_size"] = 1;
  absl::StatusOr<JobSpec> job = ParseJob(j);
  STRATA_ASSERT_OK(job);
  absl::StatusOr<ModelFootprint> f =
      ComputeModelFootprint(job->model, job->optimizer, job->batch_size);
  STRATA_ASSERT_OK(f);
  EXPECT_EQ(f->bytes, kMaxJobModelBytes);
  j["model"]["layers"][0]["units"] = units + 1;
  EXPECT_THAT(ParseStatus(j),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.model.layers[0].units: 13743895348 "
                                  "units make the model 1.4e10 parameters"));
}

TEST(JobLimitsTest, CheckJobFitsMemoryNamesTheLayerAndTheMachine) {
  absl::StatusOr<JobSpec> job = ParseJob(ReferenceJob());
  STRATA_ASSERT_OK(job);
  const int64_t need = 4 * (101770 * 4 + 135680);
  STRATA_ASSERT_OK(CheckJobFitsMemory(*job, need));
  STRATA_ASSERT_OK(CheckJobFitsMemory(*job, 0));  // unknown: not checked
  EXPECT_THAT(CheckJobFitsMemory(*job, need - 1),
              StatusIsWithMessage(absl::StatusCode::kResourceExhausted,
                                  "job.model.layers[0].units: 128 units make "
                                  "the model 101770 parameters, needing "
                                  "2.1 MiB (values, gradients, 2 adam slots, "
                                  "activations for batch 128); this machine "
                                  "has 2.1 MiB"));
  job = ParseJob(DenseJob(784, {4000000, 10}));
  STRATA_ASSERT_OK(job);
  EXPECT_THAT(CheckJobFitsMemory(*job, int64_t{1} << 30),
              StatusIsWithMessage(absl::StatusCode::kResourceExhausted,
                                  "job.model.layers[0].units: 4000000 units "
                                  "make the model 3.2e9 parameters, needing "
                                  "51.2 GiB (values, gradients, 2 adam slots, "
                                  "activations for batch 128); this machine "
                                  "has 1 GiB"));
  job = ParseJob(DenseJob(784, {4000000, 10}, "sgd", 32));
  STRATA_ASSERT_OK(job);
  EXPECT_THAT(CheckJobFitsMemory(*job, int64_t{1} << 30),
              StatusIsWithMessage(absl::StatusCode::kResourceExhausted,
                                  "(values, gradients, activations for batch "
                                  "32)"));
}

}  // namespace
}  // namespace strata

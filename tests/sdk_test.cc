// Tests of the SDK (sdk/strata.h): models, datasets, errors, strategy
// scopes, the replica API (Run, Reduce, DistributeDataset) and
// MirroredStrategy in process; the cluster strategies' Local Fit and the
// example program fashion_mnist_train against whole local clusters of
// processes.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "sdk/internal.h"
#include "sdk/strata.h"
#include "tests/test_util.h"
#include "tools/process.h"

extern char** environ;

namespace strata::sdk {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kDataDir[] = "/usr/share/datasets/fashion-mnist";

bool HaveFashionMnist() {
  return fs::exists(std::string(kDataDir) + "/train-images-idx3-ubyte.gz") &&
         fs::exists(std::string(kDataDir) + "/t10k-images-idx3-ubyte.gz");
}

// SIGCHLD is blocked in this process so that a test can wait for its child
// with sigtimedwait (a bounded wait; no sleeping).
class BlockSigchld : public ::testing::Environment {
 public:
  void SetUp() override {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
};
const auto* const kBlockSigchld =
    ::testing::AddGlobalTestEnvironment(new BlockSigchld);

// A separable toy problem: label 1 when x0 > x1, in [0, 1)^2.
Dataset ToyData(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int i = 0; i < n; ++i) {
    const float a = u(rng);
    const float b = u(rng);
    x.push_back(a);
    x.push_back(b);
    y.push_back(a > b ? 1 : 0);
  }
  return datasets::FromArrays(std::move(x), std::move(y), 2);
}

Sequential ToyModel() {
  return Sequential({Dense(16, "relu", /*input_dim=*/2), Dense(2, "softmax")});
}

// Writes the toy data as a CSV file (label first) and returns its path.
std::string WriteToyCsv(const std::string& name, int n) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream f(path);
  f << "label,a,b\n";
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int i = 0; i < n; ++i) {
    const float a = u(rng);
    const float b = u(rng);
    f << (a > b ? 1 : 0) << "," << a << "," << b << "\n";
  }
  return path;
}

// --- Errors ----------------------------------------------------------------

TEST(SdkTest, FitBeforeCompileFailsPrecondition) {
  Sequential model = ToyModel();
  EXPECT_FALSE(model.compiled());
  EXPECT_THAT(model.Fit(ToyData(10, 1)),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "Fit: the model is not compiled"));
  EXPECT_THAT(model.Evaluate(ToyData(10, 1)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(model.Predict(ToyData(10, 1)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(model.GetWeights(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(model.Summary(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(SdkTest, BadActivationIsNamedAndLeavesTheModelUncompiled) {
  Sequential model({Dense(8, "relux", /*input_dim=*/2), Dense(2, "softmax")});
  absl::Status s = model.Compile("adam", "sparse_categorical_crossentropy");
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                     "job.model.layers[0].activation"));
  EXPECT_THAT(s, StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                     "'relux' is not one of"));
  EXPECT_FALSE(model.compiled());
  EXPECT_THAT(model.Fit(ToyData(10, 1)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(SdkTest, BadLossOptimizerAndMetricAreNamed) {
  Sequential model = ToyModel();
  EXPECT_THAT(model.Compile("adam", "hinge"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.loss: 'hinge' is not one of"));
  EXPECT_THAT(model.Compile("adamw", "sparse_categorical_crossentropy"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.optimizer.type: 'adamw'"));
  EXPECT_THAT(model.Compile(SGD(-1), "sparse_categorical_crossentropy"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.optimizer.learning_rate"));
  EXPECT_THAT(
      model.Compile("adam", "sparse_categorical_crossentropy", {"auc"}),
      StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                          "job.metrics[0]"));
  // The output layer must fit the loss (ValidateModelAndLoss).
  Sequential sigmoid({Dense(4, "relu", 2), Dense(3, "sigmoid")});
  EXPECT_THAT(sigmoid.Compile("adam", "sparse_categorical_crossentropy"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.model.layers[1]"));
}

TEST(SdkTest, InputShapeMustBeOnTheFirstLayer) {
  Sequential none({Dense(4, "relu"), Dense(2, "softmax")});
  EXPECT_THAT(none.Compile("adam", "sparse_categorical_crossentropy"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "the first layer needs an input shape"));
  Sequential twice({Dense(4, "relu", 2), Dense(2, "softmax", 4)});
  EXPECT_THAT(twice.Compile("adam", "sparse_categorical_crossentropy"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.model.layers[1]: only the first"));
  Sequential empty(std::vector<Layer>{});
  EXPECT_THAT(empty.Compile("adam", "mse"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SdkTest, FitOptionsAreValidatedAsJobFields) {
  Sequential model = ToyModel();
  ASSERT_TRUE(model.Compile("adam", "sparse_categorical_crossentropy").ok());
  FitOptions zero_epochs;
  zero_epochs.epochs = 0;
  EXPECT_THAT(model.Fit(ToyData(10, 1), zero_epochs),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.epochs"));
  FitOptions zero_batch;
  zero_batch.batch_size = 0;
  EXPECT_THAT(model.Fit(ToyData(10, 1), zero_batch),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.batch_size"));
}

TEST(SdkTest, DataThatDoesNotFitTheModelIsRefused) {
  Sequential model = ToyModel();
  ASSERT_TRUE(model.Compile("adam", "sparse_categorical_crossentropy").ok());
  Dataset three = datasets::FromArrays(std::vector<float>(9, 0.5f), {0, 1, 0},
                                       3);
  FitOptions quiet;
  quiet.verbose = 0;
  EXPECT_THAT(model.Fit(three, quiet),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "training data: examples have 3 features; "
                                  "the model takes 2"));
  quiet.validation = three;
  EXPECT_THAT(model.Fit(ToyData(10, 1), quiet),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "validation data"));
  EXPECT_THAT(model.Evaluate(three),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Inconsistent arrays, a label out of range, Take(0), a missing file.
  Dataset ragged = datasets::FromArrays(std::vector<float>(5, 0.f), {0, 1}, 2);
  EXPECT_THAT(model.Evaluate(ragged),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "FromArrays"));
  Dataset big_label = datasets::FromArrays({0.f, 1.f}, {7}, 2);
  EXPECT_THAT(model.Evaluate(big_label),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model.Evaluate(ToyData(10, 1).Take(0)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "Take(0)"));
  EXPECT_THAT(model.Evaluate(datasets::Csv("/nonexistent/toy.csv")),
              StatusIs(absl::StatusCode::kNotFound));
}

// --- Training in process ---------------------------------------------------

// Fits a compiled ToyModel 15 epochs on 400 toy examples (batch 16, 200
// for validation) and checks what Fit returns and prints, and that Evaluate
// sees the weights of the last evaluation, under any in-process strategy.
void FitToyAndCheck(Sequential& model) {
  std::ostringstream out;
  FitOptions fit{/*epochs=*/15, /*batch_size=*/16,
                 /*validation=*/ToyData(200, 2)};
  fit.out = &out;
  absl::StatusOr<History> h = model.Fit(ToyData(400, 1), fit);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->epochs.size(), 15u);
  EXPECT_EQ(h->epochs[0].epoch, 1);
  EXPECT_EQ(h->epochs[0].steps, 25);
  EXPECT_TRUE(h->epochs.back().evaluated);
  EXPECT_LT(h->epochs.back().loss, h->epochs[0].loss);
  EXPECT_GT(h->epochs.back().test_accuracy, 0.9);
  EXPECT_THAT(out.str(), HasSubstr("Epoch 15/15 - 25 steps - loss: "));
  EXPECT_THAT(out.str(), HasSubstr("test_accuracy: "));

  absl::StatusOr<EvalResult> r = model.Evaluate(ToyData(200, 2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->examples, 200);
  EXPECT_DOUBLE_EQ(r->accuracy, h->epochs.back().test_accuracy);
}

TEST(SdkTest, OneDeviceLearnsFromArraysAndPredicts) {
  Sequential model = ToyModel();
  ASSERT_TRUE(model.Compile(Adam(0.01), "sparse_categorical_crossentropy",
                            {"accuracy"})
                  .ok());
  EXPECT_EQ(model.strategy().name(), "one_device");
  EXPECT_EQ(model.num_features(), 2);
  EXPECT_EQ(model.num_outputs(), 2);
  auto initial = model.GetWeights();
  ASSERT_TRUE(initial.ok());
  FitToyAndCheck(model);

  absl::StatusOr<std::vector<float>> p =
      model.Predict(std::vector<float>{0.9f, 0.1f, 0.1f, 0.9f});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 4u);
  EXPECT_GT((*p)[1], 0.5f);  // x0 > x1: class 1
  EXPECT_GT((*p)[2], 0.5f);  // x0 < x1: class 0
  EXPECT_NEAR((*p)[0] + (*p)[1], 1.0f, 1e-5);
  EXPECT_THAT(model.Predict(std::vector<float>{1.f, 2.f, 3.f}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "whole number of examples"));
  absl::StatusOr<std::vector<float>> all =
      model.Predict(ToyData(200, 2), /*batch_size=*/64);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 400u);

  absl::StatusOr<std::vector<std::string>> names = model.WeightNames();
  ASSERT_TRUE(names.ok());
  EXPECT_THAT(*names, ::testing::ElementsAre("dense/kernel", "dense/bias",
                                             "dense_1/kernel",
                                             "dense_1/bias"));
  auto trained = model.GetWeights();
  ASSERT_TRUE(trained.ok());
  ASSERT_EQ(trained->size(), 4u);
  EXPECT_EQ((*trained)[0].size(), 32u);
  EXPECT_NE((*trained)[0], (*initial)[0]);

  // Compile again: fresh weights from the same seed.
  ASSERT_TRUE(model.Compile("sgd", "sparse_categorical_crossentropy").ok());
  EXPECT_EQ(*model.GetWeights(), *initial);

  // SetWeights: the trained weights back, so Evaluate sees the trained model.
  const double before = model.Evaluate(ToyData(200, 2))->accuracy;
  ASSERT_TRUE(model.SetWeights(*trained).ok());
  EXPECT_EQ(*model.GetWeights(), *trained);
  EXPECT_GT(model.Evaluate(ToyData(200, 2))->accuracy, before);
  std::vector<std::vector<float>> bad = *trained;
  bad[2].pop_back();
  EXPECT_THAT(model.SetWeights(bad),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "weight 2 ('dense_1/kernel') has 32 values "
                                  "(shape [16, 2]), got 31"));
  bad = *trained;
  bad[1][3] = std::nanf("");
  EXPECT_THAT(model.SetWeights(bad),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "weight 1 ('dense/bias') value 3 is not "
                                  "finite"));
  EXPECT_THAT(model.SetWeights({}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "the model has 4 weight arrays, got 0"));
  EXPECT_EQ(*model.GetWeights(), *trained);  // unchanged by the refusals
  // A cluster Fit cannot start from them.
  auto cluster = ParameterServerStrategy::Local({1, 1});
  Sequential on_cluster = [&] {
    auto scope = cluster->Scope();
    return ToyModel();
  }();
  ASSERT_TRUE(
      on_cluster.Compile("adam", "sparse_categorical_crossentropy").ok());
  ASSERT_TRUE(on_cluster.SetWeights(*trained).ok());
  FitOptions quiet;
  quiet.verbose = 0;
  EXPECT_THAT(on_cluster.Fit(ToyData(50, 3), quiet),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "starts each Fit from the initializers"));
}

TEST(SdkTest, CsvDataAndVerboseZero) {
  const std::string path = WriteToyCsv("toy.csv", 300);
  Sequential model = ToyModel();
  ASSERT_TRUE(model.Compile(RMSprop(0.01), "sparse_categorical_crossentropy",
                            {"accuracy"})
                  .ok());
  std::ostringstream out;
  FitOptions fit{/*epochs=*/10, /*batch_size=*/16};
  fit.out = &out;
  fit.verbose = 0;
  absl::StatusOr<History> h = model.Fit(datasets::Csv(path).Take(200), fit);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->epochs.size(), 10u);
  EXPECT_FALSE(h->epochs.back().evaluated);
  EXPECT_EQ(out.str(), "");
  absl::StatusOr<EvalResult> r = model.Evaluate(datasets::Csv(path));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->examples, 300);
  EXPECT_GT(r->accuracy, 0.85);
}

TEST(SdkTest, SummaryListsLayersAndParameters) {
  Sequential model({Flatten({28, 28}), Dense(128, "relu"), Dropout(0.2),
                    Dense(10, "softmax").Named("logits")},
                   {"mlp", 7});
  ASSERT_TRUE(model.Compile("adam", "sparse_categorical_crossentropy").ok());
  absl::StatusOr<std::string> s = model.Summary();
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(*s, HasSubstr("Model: \"mlp\" (one_device, 1 replicas"));
  EXPECT_THAT(*s, HasSubstr("flatten (Flatten)"));
  EXPECT_THAT(*s, HasSubstr("(None, 784)"));
  EXPECT_THAT(*s, HasSubstr("100480"));
  EXPECT_THAT(*s, HasSubstr("dropout (Dropout)"));
  EXPECT_THAT(*s, HasSubstr("logits (Dense)"));
  EXPECT_THAT(*s, HasSubstr("Total params: 101770"));
  EXPECT_EQ(model.num_features(), 784);
}

TEST(SdkTest, OneDeviceFashionMnistSliceReachesSeventyPercent) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  Sequential model({Dense(128, "relu", /*input_dim=*/784),
                    Dense(10, "softmax")});
  ASSERT_TRUE(model.Compile(Adam(0.001), "sparse_categorical_crossentropy",
                            {"accuracy"})
                  .ok());
  datasets::TrainTest data = datasets::FashionMnist();
  std::ostringstream out;
  FitOptions fit{/*epochs=*/2, /*batch_size=*/32,
                 /*validation=*/data.test.Take(1000)};
  fit.out = &out;
  absl::StatusOr<History> h = model.Fit(data.train.Take(3000), fit);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->epochs.size(), 2u);
  EXPECT_EQ(h->epochs[0].steps, 94);
  EXPECT_GT(h->epochs[1].examples_per_second, 0);
  EXPECT_THAT(out.str(), HasSubstr("Epoch 2/2 - 94 steps"));
  absl::StatusOr<EvalResult> r = model.Evaluate(data.test.Take(1000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->examples, 1000);
  EXPECT_GT(r->accuracy, 0.7);
  EXPECT_DOUBLE_EQ(r->accuracy, h->epochs[1].test_accuracy);
}

// A small CNN with BatchNormalization through the SDK (KerasLayer and the
// Conv2D / MaxPooling2D / BatchNormalization helpers): it compiles, prints
// Keras's summary with trainable and non-trainable counts, learns in one
// device and under MirroredStrategy(2), whose replicas' moving statistics
// are averaged (raw pixels 0..255: with statistics left at their start the
// evaluation collapses).
Sequential SmallCnn() {
  return Sequential({Reshape({28, 28, 1}, /*input_shape=*/{784}),
                     Conv2D(8, 3, "linear"), BatchNormalization(),
                     KerasLayer("activation", R"({"activation": "relu"})"),
                     MaxPooling2D(2), Flatten(),
                     Dense(10, "softmax")});
}

TEST(SdkTest, CnnWithBatchNormalizationTrainsInOneDeviceAndMirrored) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  // Raw pixels: scale 1.
  datasets::TrainTest data{
      datasets::Idx(dir + "train-images-idx3-ubyte.gz",
                    dir + "train-labels-idx1-ubyte.gz"),
      datasets::Idx(dir + "t10k-images-idx3-ubyte.gz",
                    dir + "t10k-labels-idx1-ubyte.gz")};
  for (int replicas : {1, 2}) {
    SCOPED_TRACE(replicas);
    absl::StatusOr<std::unique_ptr<MirroredStrategy>> strategy =
        MirroredStrategy::Create(replicas);
    ASSERT_TRUE(strategy.ok()) << strategy.status();
    auto scope = (*strategy)->Scope();
    Sequential model = SmallCnn();
    ASSERT_TRUE(model.Compile(Adam(0.003), "sparse_categorical_crossentropy",
                              {"accuracy"})
                    .ok());
    absl::StatusOr<std::string> summary = model.Summary();
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_THAT(*summary, HasSubstr("conv2d (Conv2D)"));
    EXPECT_THAT(*summary, HasSubstr("(None, 26, 26, 8)"));
    // Conv 3*3*8 + 8, batch norm 4 * 8 (16 non-trainable), dense 1352*10+10.
    EXPECT_THAT(*summary, HasSubstr("Non-trainable params: 16"));
    EXPECT_THAT(*summary, HasSubstr("Trainable params: 13626"));
    FitOptions fit{/*epochs=*/2, /*batch_size=*/32,
                   /*validation=*/data.test.Take(1000)};
    fit.verbose = 0;
    absl::StatusOr<History> h = model.Fit(data.train.Take(4000), fit);
    ASSERT_TRUE(h.ok()) << h.status();
    absl::StatusOr<EvalResult> r = model.Evaluate(data.test.Take(1000));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(r->accuracy, 0.7);
    EXPECT_LT(r->loss, 1.0);
  }
}

TEST(SdkTest, BadLayerArgumentsAreNamedAtCompile) {
  Sequential model({Reshape({28, 28, 1}, {784}),
                    KerasLayer("conv2d", R"({"filters": 4, "kernel_size": 3,
                                             "padding": "full"})"),
                    Flatten(), Dense(10, "softmax")});
  EXPECT_THAT(model.Compile("adam", "sparse_categorical_crossentropy"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "argument 'padding'"));
  Sequential bad_json({Dense(4, "relu", 8), KerasLayer("reshape", "[1, 2]"),
                       Dense(1, "sigmoid")});
  EXPECT_THAT(bad_json.Compile("adam", "mse"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "must be a JSON object"));
}

// A Functional Keras config with two inputs (a and b, one feature each,
// read side by side from each example's two features), concatenated, a
// BatchNormalization and a Dense output of logits: it trains with a
// from_logits loss, and its weight shapes and moving statistics are the
// graph's.
constexpr char kTwoInputConfig[] = R"({
  "class_name": "Functional",
  "config": {"name": "two_inputs",
    "layers": [
      {"class_name": "InputLayer", "name": "a", "inbound_nodes": [],
       "config": {"name": "a", "batch_input_shape": [null, 1]}},
      {"class_name": "InputLayer", "name": "b", "inbound_nodes": [],
       "config": {"name": "b", "batch_input_shape": [null, 1]}},
      {"class_name": "Concatenate", "name": "cat",
       "config": {"name": "cat", "axis": -1},
       "inbound_nodes": [[["a", 0, 0, {}], ["b", 0, 0, {}]]]},
      {"class_name": "Dense", "name": "hidden",
       "config": {"name": "hidden", "units": 16, "activation": "relu"},
       "inbound_nodes": [[["cat", 0, 0, {}]]]},
      {"class_name": "BatchNormalization", "name": "bn",
       "config": {"name": "bn"}, "inbound_nodes": [[["hidden", 0, 0, {}]]]},
      {"class_name": "Dense", "name": "logits",
       "config": {"name": "logits", "units": 2},
       "inbound_nodes": [[["bn", 0, 0, {}]]]}],
    "input_layers": [["a", 0, 0], ["b", 0, 0]],
    "output_layers": [["logits", 0, 0]]}})";

TEST(SdkTest, KerasConfigModelTrainsWithFromLogitsAndExposesItsState) {
  Sequential model(KerasModel{kTwoInputConfig});
  // The output is linear: a plain cross-entropy is refused, from_logits
  // is accepted.
  EXPECT_THAT(model.Compile(Adam(0.01), "sparse_categorical_crossentropy"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "from_logits"));
  ASSERT_TRUE(model
                  .Compile(Adam(0.01),
                           Loss("sparse_categorical_crossentropy",
                                /*logits=*/true),
                           {"accuracy"})
                  .ok());
  EXPECT_EQ(model.num_features(), 2);
  absl::StatusOr<std::vector<std::vector<int64_t>>> shapes =
      model.WeightShapes();
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_EQ(*shapes, (std::vector<std::vector<int64_t>>{
                         {2, 16}, {16}, {16}, {16}, {16, 2}, {2}}));
  absl::StatusOr<std::vector<std::string>> state_names = model.StateNames();
  ASSERT_TRUE(state_names.ok());
  EXPECT_EQ(*state_names,
            (std::vector<std::string>{"bn/moving_mean", "bn/moving_variance"}));
  absl::StatusOr<std::vector<std::vector<float>>> before = model.GetState();
  ASSERT_TRUE(before.ok());
  EXPECT_EQ((*before)[1], std::vector<float>(16, 1.0f));  // ones at start
  FitOptions fit;
  fit.epochs = 5;
  fit.verbose = 0;
  ASSERT_TRUE(model.Fit(ToyData(2000, 1), fit).ok());
  absl::StatusOr<EvalResult> r = model.Evaluate(ToyData(500, 2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->accuracy, 0.9);
  absl::StatusOr<std::vector<std::vector<float>>> after = model.GetState();
  ASSERT_TRUE(after.ok());
  EXPECT_NE((*after)[1], (*before)[1]);  // the moving variance moved
  // SetState replaces it (and refuses a wrong size, naming the variable).
  EXPECT_THAT(model.SetState({std::vector<float>(16, 0.0f),
                              std::vector<float>(3, 1.0f)}),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "bn/moving_variance"));
  ASSERT_TRUE(model.SetState(*before).ok());
  EXPECT_EQ(*model.GetState(), *before);
  absl::StatusOr<std::string> summary = model.Summary();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(*summary, HasSubstr("bn (BatchNormalization)"));
  EXPECT_THAT(*summary, HasSubstr("Non-trainable params: 32"));

  Sequential not_keras(KerasModel{R"({"layers": []})"});
  EXPECT_THAT(not_keras.Compile("adam", "mse"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "Keras model config"));
}

// The optimizer's state goes with the weights: a model given another's
// weights and optimizer state trains on exactly as the other does; the
// learning rate set between Fits is the one the steps use.
TEST(SdkTest, OptimizerStateAndLearningRateCarryOver) {
  Sequential a = ToyModel();
  ASSERT_TRUE(a.Compile(Adam(0.01), "sparse_categorical_crossentropy").ok());
  FitOptions fit;
  fit.verbose = 0;
  ASSERT_TRUE(a.Fit(ToyData(500, 1), fit).ok());
  absl::StatusOr<OptimizerState> state = a.GetOptimizerState();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->slot_names, (std::vector<std::string>{"m", "v"}));
  EXPECT_EQ(state->iterations, 16);  // ceil(500 / 32) steps
  Sequential b = ToyModel();
  ASSERT_TRUE(b.Compile(Adam(0.01), "sparse_categorical_crossentropy").ok());
  // An epoch of other data first: the next Fit shuffles as a's next one
  // (epoch 1's order); the weights and state are then replaced by a's.
  ASSERT_TRUE(b.Fit(ToyData(300, 9), fit).ok());
  ASSERT_TRUE(b.SetWeights(*a.GetWeights()).ok());
  ASSERT_TRUE(b.SetOptimizerState(*state).ok());
  ASSERT_TRUE(a.Fit(ToyData(200, 2), fit).ok());
  ASSERT_TRUE(b.Fit(ToyData(200, 2), fit).ok());
  EXPECT_EQ(*a.GetWeights(), *b.GetWeights());
  // Refused: another optimizer's slots, a wrong size (nothing changes).
  OptimizerState bad = *state;
  bad.slot_names = {"momentum"};
  EXPECT_THAT(b.SetOptimizerState(bad),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "not the compiled optimizer's"));
  bad = *state;
  bad.slots[1][0].pop_back();
  EXPECT_THAT(b.SetOptimizerState(bad),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "slot 'm' of variable"));
  // A learning rate of ~0 from now on: the next Fit leaves the weights.
  EXPECT_THAT(b.SetLearningRate(-1),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "learning_rate"));
  ASSERT_TRUE(b.SetLearningRate(1e-30).ok());
  EXPECT_EQ(b.learning_rate(), 1e-30);
  const std::vector<std::vector<float>> before = *b.GetWeights();
  ASSERT_TRUE(b.Fit(ToyData(200, 3), fit).ok());
  const std::vector<std::vector<float>> after = *b.GetWeights();
  for (size_t i = 0; i < before.size(); ++i) {
    for (size_t j = 0; j < before[i].size(); ++j) {
      EXPECT_NEAR(after[i][j], before[i][j], 1e-12);
    }
  }
}

// --- Strategies and scopes -------------------------------------------------

TEST(SdkTest, ScopeNestingRestoresThePreviousStrategy) {
  EXPECT_FALSE(HasStrategy());
  EXPECT_EQ(GetStrategy()->name(), "one_device");
  auto ps = ParameterServerStrategy::Local({/*num_ps=*/1, /*num_workers=*/3});
  OneDeviceStrategy one;
  {
    auto outer = ps->Scope();
    EXPECT_TRUE(HasStrategy());
    EXPECT_EQ(GetStrategy()->name(), "parameter_server");
    EXPECT_EQ(GetStrategy()->num_replicas_in_sync(), 3);
    {
      auto inner = one.Scope();
      EXPECT_EQ(GetStrategy()->name(), "one_device");
      Sequential model = ToyModel();
      EXPECT_EQ(model.strategy().name(), "one_device");
    }
    EXPECT_EQ(GetStrategy()->name(), "parameter_server");
    Sequential model = ToyModel();
    EXPECT_EQ(model.strategy().name(), "parameter_server");
    EXPECT_EQ(model.strategy().num_replicas_in_sync(), 3);
  }
  EXPECT_FALSE(HasStrategy());
  EXPECT_EQ(GetStrategy()->num_replicas_in_sync(), 1);
  // A model keeps the strategy it was built with after the scope ends.
  std::optional<Sequential> kept;
  {
    auto scope = ps->Scope();
    kept.emplace(ToyModel());
  }
  EXPECT_EQ(kept->strategy().name(), "parameter_server");
}

// --- The replica API (Run, Reduce, DistributeDataset) ----------------------

std::unique_ptr<MirroredStrategy> Mirrored(int n) {
  absl::StatusOr<std::unique_ptr<MirroredStrategy>> s =
      MirroredStrategy::Create(n);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

TEST(SdkStrategyTest, MirroredRunCallsEveryReplicaOnceOnItsOwnThread) {
  auto strategy = Mirrored(4);
  EXPECT_EQ(strategy->name(), "mirrored");
  EXPECT_EQ(strategy->num_replicas_in_sync(), 4);
  const std::thread::id caller = std::this_thread::get_id();
  PerReplica<std::pair<int, std::thread::id>> seen =
      strategy->Run([](const ReplicaContext& ctx) {
        EXPECT_EQ(ctx.num_replicas_in_sync(), 4);
        return std::make_pair(ctx.replica_id_in_sync_group(),
                              std::this_thread::get_id());
      });
  ASSERT_EQ(seen.num_replicas(), 4);
  std::set<std::thread::id> threads;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(seen[r].first, r);
    threads.insert(seen[r].second);
  }
  EXPECT_EQ(threads.size(), 4u);
  EXPECT_EQ(seen[0].second, caller);  // replica 0 runs on the caller

  // Status-returning functions (code run for its effects) work too.
  std::vector<int> calls(4, 0);
  PerReplica<absl::Status> done =
      strategy->Run([&](const ReplicaContext& ctx) {
        ++calls[static_cast<size_t>(ctx.replica_id_in_sync_group())];
        return absl::OkStatus();
      });
  EXPECT_EQ(done.num_replicas(), 4);
  EXPECT_THAT(calls, ::testing::ElementsAre(1, 1, 1, 1));
}

TEST(SdkStrategyTest, OtherStrategiesRunOnceAsReplicaZero) {
  OneDeviceStrategy one;
  PerReplica<int> a = one.Run([](const ReplicaContext& ctx) {
    return ctx.replica_id_in_sync_group() * 10 + ctx.num_replicas_in_sync();
  });
  ASSERT_EQ(a.num_replicas(), 1);
  EXPECT_EQ(a[0], 1);
  // A cluster strategy's other replicas are worker processes during Fit.
  const std::vector<std::shared_ptr<Strategy>> clusters = {
      ParameterServerStrategy::Local({/*num_ps=*/1, /*num_workers=*/3}),
      CentralStorageStrategy::Local({1, 3}),
      MultiWorkerMirroredStrategy::Local({0, 3})};
  for (const auto& strategy : clusters) {
    EXPECT_EQ(strategy->num_replicas_in_sync(), 3) << strategy->name();
    PerReplica<int> b = strategy->Run([](const ReplicaContext& ctx) {
      return ctx.replica_id_in_sync_group() * 10 + ctx.num_replicas_in_sync();
    });
    ASSERT_EQ(b.num_replicas(), 1) << strategy->name();
    EXPECT_EQ(b[0], 3) << strategy->name();
  }
}

TEST(SdkStrategyTest, ReduceSumsAndAveragesInReplicaOrder) {
  auto strategy = Mirrored(3);
  PerReplica<float> f = strategy->Run([](const ReplicaContext& ctx) {
    return static_cast<float>(ctx.replica_id_in_sync_group() + 1);
  });
  EXPECT_FLOAT_EQ(strategy->Reduce(ReduceOp::kSum, f), 6.0f);
  EXPECT_FLOAT_EQ(strategy->Reduce(ReduceOp::kMean, f), 2.0f);
  PerReplica<double> d({0.5, 1.5});
  EXPECT_DOUBLE_EQ(strategy->Reduce(ReduceOp::kSum, d), 2.0);
  EXPECT_DOUBLE_EQ(strategy->Reduce(ReduceOp::kMean, d), 1.0);

  PerReplica<std::vector<float>> v =
      strategy->Run([](const ReplicaContext& ctx) {
        const float r = static_cast<float>(ctx.replica_id_in_sync_group());
        return std::vector<float>{r, 2 * r, 1.0f};
      });
  absl::StatusOr<std::vector<float>> sum = strategy->Reduce(ReduceOp::kSum, v);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_THAT(*sum, ::testing::ElementsAre(3.0f, 6.0f, 3.0f));
  absl::StatusOr<std::vector<float>> mean =
      strategy->Reduce(ReduceOp::kMean, v);
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_THAT(*mean, ::testing::ElementsAre(1.0f, 2.0f, 1.0f));

  EXPECT_THAT(strategy->Reduce(ReduceOp::kSum,
                               PerReplica<std::vector<float>>({{1, 2}, {3}})),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "replica 1 has 1 values, replica 0 has 2"));
  EXPECT_THAT(
      strategy->Reduce(ReduceOp::kMean, PerReplica<std::vector<float>>({})),
      StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SdkStrategyTest, DistributeDatasetSplitsEachGlobalBatch) {
  // 10 examples of 2 features: example i is (i, -i), label i.
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int i = 0; i < 10; ++i) {
    x.push_back(static_cast<float>(i));
    x.push_back(static_cast<float>(-i));
    y.push_back(i);
  }
  const Dataset data = datasets::FromArrays(x, y, 2);
  auto strategy = Mirrored(3);
  absl::StatusOr<DistributedDataset> dist =
      strategy->DistributeDataset(data, /*global_batch_size=*/4);
  ASSERT_TRUE(dist.ok()) << dist.status();
  EXPECT_EQ(dist->num_examples(), 10);
  EXPECT_EQ(dist->num_batches(), 3);
  EXPECT_EQ(dist->global_batch_size(), 4);
  EXPECT_EQ(dist->num_replicas_in_sync(), 3);

  // Batch 0 is examples 0-3: replicas get 2, 1 and 1 of them.
  DistributedDataset::ReplicaBatch b = dist->Batch(0, ReplicaContext(0, 3));
  EXPECT_THAT(std::vector<int32_t>(b.labels.begin(), b.labels.end()),
              ::testing::ElementsAre(0, 1));
  EXPECT_THAT(std::vector<float>(b.x.begin(), b.x.end()),
              ::testing::ElementsAre(0, 0, 1, -1));
  EXPECT_EQ(b.features, 2);
  EXPECT_EQ(b.global_examples, 4);
  b = dist->Batch(0, ReplicaContext(2, 3));
  EXPECT_THAT(std::vector<int32_t>(b.labels.begin(), b.labels.end()),
              ::testing::ElementsAre(3));
  // The last batch has 2 examples: the third replica gets none.
  b = dist->Batch(2, ReplicaContext(1, 3));
  EXPECT_THAT(std::vector<int32_t>(b.labels.begin(), b.labels.end()),
              ::testing::ElementsAre(9));
  EXPECT_EQ(b.global_examples, 2);
  EXPECT_EQ(dist->Batch(2, ReplicaContext(2, 3)).examples(), 0);
  EXPECT_EQ(dist->Batch(3, ReplicaContext(0, 3)).examples(), 0);
  EXPECT_EQ(dist->Batch(0, ReplicaContext(3, 3)).examples(), 0);

  // With Run and Reduce: every example is seen once per pass, and the
  // share-weighted means add up to each global batch's mean.
  double label_sum = 0;
  for (int64_t batch = 0; batch < dist->num_batches(); ++batch) {
    PerReplica<double> sums = strategy->Run([&](const ReplicaContext& ctx) {
      double sum = 0;
      for (int32_t label : dist->Batch(batch, ctx).labels) sum += label;
      return sum;
    });
    label_sum += strategy->Reduce(ReduceOp::kSum, sums);
    PerReplica<double> weighted =
        strategy->Run([&](const ReplicaContext& ctx) {
          DistributedDataset::ReplicaBatch mine = dist->Batch(batch, ctx);
          if (mine.examples() == 0) return 0.0;
          double sum = 0;
          for (int32_t label : mine.labels) sum += label;
          return sum / static_cast<double>(mine.global_examples);
        });
    const int64_t first = batch * 4;
    const int64_t n = std::min<int64_t>(4, 10 - first);
    EXPECT_DOUBLE_EQ(strategy->Reduce(ReduceOp::kSum, weighted),
                     static_cast<double>(first) + (n - 1) / 2.0);
  }
  EXPECT_DOUBLE_EQ(label_sum, 45.0);

  EXPECT_THAT(strategy->DistributeDataset(data, 0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "global_batch_size must be >= 1"));
  EXPECT_THAT(strategy->DistributeDataset(data.Take(0), 4),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// --- MirroredStrategy ------------------------------------------------------

TEST(SdkStrategyTest, MirroredRefusesAReplicaCountOutOfRange) {
  EXPECT_THAT(MirroredStrategy::Create(0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "num_replicas must be in [1, 256], got 0"));
  EXPECT_THAT(MirroredStrategy::Create(MirroredStrategy::kMaxReplicas + 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Trains a fresh model (same seed) under `strategy`: two Fit calls of
// `epochs` epochs each, so the second continues from the first.
struct Trained {
  std::vector<std::vector<float>> weights;
  History first;
  History second;
};
Trained TrainToy(const Strategy& strategy, const Optimizer& optimizer,
                 std::vector<Layer> layers, int64_t batch_size, int epochs) {
  auto scope = strategy.Scope();
  Sequential model(std::move(layers), {"toy", /*seed=*/5});
  EXPECT_TRUE(
      model.Compile(optimizer, "sparse_categorical_crossentropy", {"accuracy"})
          .ok());
  FitOptions fit{epochs, batch_size, /*validation=*/ToyData(50, 9)};
  fit.verbose = 0;
  fit.shuffle_seed = 3;
  Trained out;
  absl::StatusOr<History> h = model.Fit(ToyData(95, 4), fit);
  EXPECT_TRUE(h.ok()) << h.status();
  if (h.ok()) out.first = *h;
  h = model.Fit(ToyData(95, 4), fit);
  EXPECT_TRUE(h.ok()) << h.status();
  if (h.ok()) out.second = *h;
  out.weights = *model.GetWeights();
  return out;
}

// max |a - b| / max(1, |b|) over every weight.
double MaxRelativeDifference(const std::vector<std::vector<float>>& a,
                             const std::vector<std::vector<float>>& b) {
  double worst = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t v = 0; v < a.size() && v < b.size(); ++v) {
    EXPECT_EQ(a[v].size(), b[v].size());
    for (size_t i = 0; i < a[v].size() && i < b[v].size(); ++i) {
      const double d = std::abs(static_cast<double>(a[v][i]) - b[v][i]) /
                       std::max(1.0, std::abs(static_cast<double>(b[v][i])));
      worst = std::max(worst, d);
    }
  }
  return worst;
}

TEST(SdkStrategyTest, OneMirroredReplicaTrainsExactlyAsOneDevice) {
  // Bitwise, dropout included: replica 0 draws OneDevice's dropout seeds.
  const std::vector<Layer> layers = {Dense(16, "relu", 2), Dropout(0.25),
                                     Dense(2, "softmax")};
  Trained one = TrainToy(OneDeviceStrategy(), Adam(0.01), layers, 10, 2);
  Trained mirrored = TrainToy(*Mirrored(1), Adam(0.01), layers, 10, 2);
  EXPECT_EQ(mirrored.weights, one.weights);
  ASSERT_EQ(mirrored.second.epochs.size(), 2u);
  EXPECT_DOUBLE_EQ(mirrored.second.epochs[1].test_accuracy,
                   one.second.epochs[1].test_accuracy);
}

TEST(SdkStrategyTest, MirroredReplicasMatchOneDeviceWithinFloatTolerance) {
  const std::vector<Layer> layers = {Dense(16, "relu", 2),
                                     Dense(8, "tanh"), Dense(2, "softmax")};
  struct Case {
    Optimizer optimizer;
    int replicas;
    int64_t batch_size;
  };
  // 95 examples: uneven shares, a short last batch, and with 4 replicas on
  // a batch of 3 a replica without examples.
  const std::vector<Case> cases = {{SGD(0.1, 0.9), 3, 10},
                                   {Adam(0.01), 2, 16},
                                   {Adam(0.01), 4, 3},
                                   {RMSprop(0.01), 5, 32}};
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.optimizer.type, ", ", c.replicas,
                              " replicas, batch ", c.batch_size));
    Trained one = TrainToy(OneDeviceStrategy(), c.optimizer, layers,
                           c.batch_size, 2);
    Trained mirrored = TrainToy(*Mirrored(c.replicas), c.optimizer, layers,
                                c.batch_size, 2);
    EXPECT_LT(MaxRelativeDifference(mirrored.weights, one.weights), 1e-5);
    ASSERT_EQ(mirrored.second.epochs.size(), 2u);
    EXPECT_EQ(mirrored.second.epochs[1].steps, one.second.epochs[1].steps);
    EXPECT_NEAR(mirrored.first.epochs[0].loss, one.first.epochs[0].loss, 1e-5);
    EXPECT_NEAR(mirrored.second.epochs[1].loss, one.second.epochs[1].loss,
                1e-5);
    EXPECT_NEAR(mirrored.second.epochs[1].accuracy,
                one.second.epochs[1].accuracy, 1e-6);
  }
}

TEST(SdkStrategyTest, MirroredLearnsAndEvaluatesItsWeights) {
  auto strategy = Mirrored(4);
  auto scope = strategy->Scope();
  Sequential model = ToyModel();
  ASSERT_TRUE(model.Compile(Adam(0.01), "sparse_categorical_crossentropy",
                            {"accuracy"})
                  .ok());
  EXPECT_THAT(*model.Summary(), HasSubstr("(mirrored, 4 replicas in sync)"));
  const std::vector<std::vector<float>> initial = *model.GetWeights();
  FitToyAndCheck(model);
  EXPECT_NE(*model.GetWeights(), initial);

  // Compile again: the replicas' state is dropped; fresh weights.
  ASSERT_TRUE(model.Compile(Adam(0.01), "sparse_categorical_crossentropy")
                  .ok());
  EXPECT_EQ(*model.GetWeights(), initial);
}

TEST(SdkStrategyTest, AFailingMirroredReplicaEndsTheFitWithItsError) {
  auto strategy = Mirrored(3);
  auto scope = strategy->Scope();
  Sequential model = ToyModel();
  ASSERT_TRUE(model.Compile("adam", "sparse_categorical_crossentropy").ok());
  // Label 7 is out of range for 2 outputs: whichever replica's share it
  // falls in after shuffling fails its step.
  std::vector<float> x(60, 0.5f);
  std::vector<int32_t> y(30, 0);
  y[17] = 7;
  FitOptions quiet;
  quiet.verbose = 0;
  quiet.batch_size = 6;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(model.Fit(datasets::FromArrays(x, y, 2), quiet),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // The others' all-reduce is aborted, not left to its 30 s deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(SdkTest, ParameterServerRefusesBadOptionsBeforeStartingProcesses) {
  const std::string csv = WriteToyCsv("toy_ps.csv", 50);
  struct Case {
    LocalClusterOptions options;
    Dataset data;
    absl::StatusCode code;
    std::string message;
  };
  LocalClusterOptions no_ps{/*num_ps=*/0, /*num_workers=*/1};
  LocalClusterOptions no_workers{/*num_ps=*/1, /*num_workers=*/0};
  LocalClusterOptions bad_update{1, 1, "eventually"};
  LocalClusterOptions no_daemons{1, 1};
  no_daemons.bin_dir = "/nonexistent";
  const std::vector<Case> cases = {
      {no_ps, datasets::Csv(csv), absl::StatusCode::kInvalidArgument,
       "LocalClusterOptions.num_ps: must be >= 1"},
      {no_workers, datasets::Csv(csv), absl::StatusCode::kInvalidArgument,
       "LocalClusterOptions.num_workers"},
      {bad_update, datasets::Csv(csv), absl::StatusCode::kInvalidArgument,
       "job.strategy.update: 'eventually'"},
      {no_daemons, datasets::Csv(csv), absl::StatusCode::kFailedPrecondition,
       "/nonexistent/strata-coordinator is not an executable"},
  };
  for (const Case& c : cases) {
    auto strategy = ParameterServerStrategy::Local(c.options);
    auto scope = strategy->Scope();
    Sequential model = ToyModel();
    ASSERT_TRUE(model.Compile("adam", "sparse_categorical_crossentropy").ok());
    FitOptions quiet;
    quiet.verbose = 0;
    EXPECT_THAT(model.Fit(c.data, quiet), StatusIsWithMessage(c.code, c.message))
        << c.message;
  }
  // Splits the job cannot hold together: different formats.
  auto strategy = ParameterServerStrategy::Local({1, 1});
  auto scope = strategy->Scope();
  Sequential model = ToyModel();
  ASSERT_TRUE(model.Compile("adam", "sparse_categorical_crossentropy").ok());
  FitOptions mixed;
  mixed.validation = datasets::Idx("/a", "/b");
  EXPECT_THAT(model.Fit(datasets::Csv(csv), mixed),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "one format for both splits"));
}

TEST(SdkTest, EpochLinesRoundTrip) {
  EpochResult e;
  e.epoch = 3;
  e.steps = 469;
  e.loss = 0.4123;
  e.accuracy = 0.8512;
  e.evaluated = true;
  e.test_loss = 0.4301;
  e.test_accuracy = 0.8456;
  e.examples_per_second = 51234;
  e.seconds = 1.2;
  const std::string line = internal::EpochLine(e, 10);
  EXPECT_EQ(line,
            "Epoch 3/10 - 469 steps - loss: 0.4123 - accuracy: 0.8512 - "
            "test_loss: 0.4301 - test_accuracy: 0.8456 - 51234 examples/s - "
            "1.2s");
  std::optional<EpochResult> parsed = internal::ParseEpochLine(line);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->epoch, 3);
  EXPECT_EQ(parsed->steps, 469);
  EXPECT_DOUBLE_EQ(parsed->test_accuracy, 0.8456);
  EXPECT_DOUBLE_EQ(parsed->seconds, 1.2);
  // The launcher's form.
  parsed = internal::ParseEpochLine(
      "Epoch 1/3 - 188 steps - loss: 0.6000 - accuracy: 0.7900 - 9000 "
      "examples/s - 2.5s elapsed");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_FALSE(parsed->evaluated);
  EXPECT_DOUBLE_EQ(parsed->seconds, 2.5);
  EXPECT_FALSE(internal::ParseEpochLine("Test accuracy: 0.8").has_value());
  EXPECT_FALSE(internal::ParseEpochLine("strata launch: job").has_value());
}

// FitOptions.progress follows every step and on_epoch_end sees each epoch
// as History will hold it, in process (one device and mirrored replicas).
TEST(SdkTest, FitReportsProgressAndEachEpochAsItEnds) {
  std::vector<std::shared_ptr<Strategy>> strategies = {
      std::make_shared<OneDeviceStrategy>()};
  strategies.push_back(*MirroredStrategy::Create(2));
  for (const std::shared_ptr<Strategy>& strategy : strategies) {
    SCOPED_TRACE(strategy->name());
    auto scope = strategy->Scope();
    Sequential model = ToyModel();
    ASSERT_TRUE(model.Compile("adam", "sparse_categorical_crossentropy",
                              {"accuracy"})
                    .ok());
    FitProgress progress;
    std::vector<EpochResult> ended;
    std::vector<int64_t> steps_seen;
    FitOptions fit{/*epochs=*/3, /*batch_size=*/32};
    fit.verbose = 0;
    fit.progress = &progress;
    fit.on_epoch_end = [&](const EpochResult& e) {
      // Called after the epoch's last step: the progress shows all of it.
      steps_seen.push_back(progress.step);
      EXPECT_EQ(progress.epoch, e.epoch);
      ended.push_back(e);
    };
    absl::StatusOr<History> h = model.Fit(ToyData(200, 5), fit);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_EQ(ended.size(), 3u);
    for (size_t i = 0; i < ended.size(); ++i) {
      EXPECT_EQ(ended[i].epoch, h->epochs[i].epoch);
      EXPECT_EQ(ended[i].loss, h->epochs[i].loss);
      EXPECT_EQ(ended[i].accuracy, h->epochs[i].accuracy);
      EXPECT_EQ(steps_seen[i], 7);  // 200 examples in batches of 32
    }
    EXPECT_EQ(progress.epoch, 3);
    EXPECT_EQ(progress.epochs, 3);
    EXPECT_EQ(progress.steps, 7);
    EXPECT_EQ(progress.step, 7);
    // The running means over the whole epoch are the epoch's figures.
    EXPECT_NEAR(progress.loss, h->epochs[2].loss, 1e-12);
    EXPECT_NEAR(progress.accuracy, h->epochs[2].accuracy, 1e-12);
  }
}

// --- Local clusters (processes) --------------------------------------------

// In process: the SDK starts a cluster (daemons beside this test binary),
// trains, and pulls the trained weights back, so a local Evaluate sees what
// the cluster's last evaluation saw.
TEST(SdkClusterTest, ParameterServerFitPullsTheTrainedWeights) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  auto strategy = ParameterServerStrategy::Local({/*num_ps=*/2,
                                                  /*num_workers=*/2});
  auto scope = strategy->Scope();
  Sequential model({Dense(64, "relu", 784), Dense(10, "softmax")});
  ASSERT_TRUE(model.Compile(Adam(0.002), "sparse_categorical_crossentropy",
                            {"accuracy"})
                  .ok());
  auto initial = model.GetWeights();
  ASSERT_TRUE(initial.ok());
  datasets::TrainTest data = datasets::FashionMnist();
  std::ostringstream out;
  FitOptions fit{/*epochs=*/2, /*batch_size=*/64,
                 /*validation=*/data.test.Take(1000)};
  fit.out = &out;
  // 6000 examples: 188 async steps, enough that the staleness of four
  // steps in flight (2 workers x 2) cannot keep the model near chance under
  // a sanitizer's timing (3000 examples reached 0.49 there, 1 run in 4).
  absl::StatusOr<History> h = model.Fit(data.train.Take(6000), fit);
  ASSERT_TRUE(h.ok()) << h.status() << "\n" << out.str();
  EXPECT_THAT(out.str(), HasSubstr("strata launch: job 'sequential'"));
  ASSERT_EQ(h->epochs.size(), 2u) << out.str();
  EXPECT_EQ(h->epochs[0].epoch, 1);
  EXPECT_EQ(h->epochs[1].steps, 94);
  ASSERT_TRUE(h->epochs[1].evaluated) << out.str();
  EXPECT_GT(h->epochs[1].test_accuracy, 0.6) << out.str();

  auto trained = model.GetWeights();
  ASSERT_TRUE(trained.ok());
  EXPECT_NE((*trained)[0], (*initial)[0]);
  absl::StatusOr<EvalResult> r = model.Evaluate(data.test.Take(1000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->accuracy, h->epochs[1].test_accuracy, 1e-9);
  EXPECT_NEAR(r->loss, h->epochs[1].test_loss, 1e-6);

  // The cluster started from the initial weights; a second Fit would too.
  EXPECT_THAT(model.Fit(data.train.Take(6000), fit),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// Trains the Fashion-MNIST slice model under `strategy` (1 epoch on 3000
// examples, validation on 1000) and checks that the weights it reads back
// are the cluster's: a local Evaluate gives the cluster's last evaluation.
// Returns the trained weights.
std::vector<std::vector<float>> FitSliceAndCheckEvaluate(
    const Strategy& strategy) {
  auto scope = strategy.Scope();
  Sequential model({Dense(64, "relu", 784), Dense(10, "softmax")});
  EXPECT_TRUE(model.Compile(Adam(0.002), "sparse_categorical_crossentropy",
                            {"accuracy"})
                  .ok());
  const std::vector<std::vector<float>> initial = *model.GetWeights();
  datasets::TrainTest data = datasets::FashionMnist();
  std::ostringstream out;
  FitOptions fit{/*epochs=*/1, /*batch_size=*/64,
                 /*validation=*/data.test.Take(1000)};
  fit.out = &out;
  fit.shuffle_seed = 7;
  absl::StatusOr<History> h = model.Fit(data.train.Take(3000), fit);
  EXPECT_TRUE(h.ok()) << h.status() << "\n" << out.str();
  if (!h.ok()) return {};
  EXPECT_THAT(out.str(), HasSubstr(absl::StrCat("strategy ", strategy.name())));
  EXPECT_EQ(h->epochs.size(), 1u) << out.str();
  if (h->epochs.size() != 1u) return {};
  EXPECT_EQ(h->epochs[0].steps, 47);
  EXPECT_TRUE(h->epochs[0].evaluated) << out.str();
  EXPECT_GT(h->epochs[0].test_accuracy, 0.6);
  std::vector<std::vector<float>> trained = *model.GetWeights();
  EXPECT_NE(trained[0], initial[0]);
  absl::StatusOr<EvalResult> r = model.Evaluate(data.test.Take(1000));
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) {
    EXPECT_NEAR(r->accuracy, h->epochs[0].test_accuracy, 1e-9);
    EXPECT_NEAR(r->loss, h->epochs[0].test_loss, 1e-6);
  }
  // Every cluster Fit starts from the initial weights: a second is refused.
  EXPECT_THAT(model.Fit(data.train.Take(3000), fit),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  return trained;
}

// The same model and data in this process, for comparison.
std::vector<std::vector<float>> FitSliceInProcess() {
  OneDeviceStrategy one;
  auto scope = one.Scope();
  Sequential model({Dense(64, "relu", 784), Dense(10, "softmax")});
  EXPECT_TRUE(model.Compile(Adam(0.002), "sparse_categorical_crossentropy",
                            {"accuracy"})
                  .ok());
  FitOptions fit{/*epochs=*/1, /*batch_size=*/64};
  fit.verbose = 0;
  fit.shuffle_seed = 7;
  EXPECT_TRUE(model.Fit(datasets::FashionMnist().train.Take(3000), fit).ok());
  return *model.GetWeights();
}

// Central storage and both all-reduce backends compute the global batch's
// mean gradient with OneDevice's optimizer: the weights they read back
// agree with a OneDevice run up to float rounding.
TEST(SdkClusterTest, CentralStorageFitReadsTheWeightsFromPsTaskZero) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::vector<std::vector<float>> trained = FitSliceAndCheckEvaluate(
      *CentralStorageStrategy::Local({/*num_ps=*/1, /*num_workers=*/2}));
  ASSERT_FALSE(trained.empty());
  EXPECT_LT(MaxRelativeDifference(trained, FitSliceInProcess()), 1e-5);
}

// In-memory arrays reach the cluster as IDX files of the run directory,
// bit for bit: the weights agree with the in-process run on the same
// examples as from the dataset's own files.
TEST(SdkClusterTest, CentralStorageFitTrainsOnInMemoryArrays) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  datasets::TrainTest files = datasets::FashionMnist();
  auto arrays = [](const Dataset& d) {
    std::shared_ptr<const ::strata::Dataset> loaded = *d.Load();
    return datasets::FromArrays(loaded->x, loaded->labels, loaded->features);
  };
  const Dataset train = arrays(files.train.Take(3000));
  const Dataset test = arrays(files.test.Take(1000));
  auto strategy = CentralStorageStrategy::Local({/*num_ps=*/1,
                                                 /*num_workers=*/2});
  auto scope = strategy->Scope();
  Sequential model({Dense(64, "relu", 784), Dense(10, "softmax")});
  ASSERT_TRUE(model.Compile(Adam(0.002), "sparse_categorical_crossentropy",
                            {"accuracy"})
                  .ok());
  std::ostringstream out;
  FitOptions fit{/*epochs=*/1, /*batch_size=*/64, /*validation=*/test};
  fit.out = &out;
  fit.shuffle_seed = 7;
  absl::StatusOr<History> h = model.Fit(train, fit);
  ASSERT_TRUE(h.ok()) << h.status() << "\n" << out.str();
  ASSERT_EQ(h->epochs.size(), 1u) << out.str();
  EXPECT_EQ(h->epochs[0].steps, 47);
  ASSERT_TRUE(h->epochs[0].evaluated) << out.str();
  absl::StatusOr<EvalResult> r = model.Evaluate(test);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->accuracy, h->epochs[0].test_accuracy, 1e-9);
  EXPECT_LT(MaxRelativeDifference(*model.GetWeights(), FitSliceInProcess()),
            1e-5);
}

TEST(SdkClusterTest, MultiWorkerMirroredFitReadsTheExportedWeights) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::vector<std::vector<float>> one_device = FitSliceInProcess();
  for (const char* collective : {"ring", "ps"}) {
    SCOPED_TRACE(collective);
    LocalClusterOptions options{/*num_ps=*/1, /*num_workers=*/2};
    options.collective = collective;
    const std::vector<std::vector<float>> trained =
        FitSliceAndCheckEvaluate(*MultiWorkerMirroredStrategy::Local(options));
    ASSERT_FALSE(trained.empty());
    EXPECT_LT(MaxRelativeDifference(trained, one_device), 1e-5);
  }
}

// A cluster already running (daemons started by hand, as on Kubernetes):
// Fit submits the job to its coordinator, follows it (progress and epoch
// ends as they come) and pulls the trained weights from its PS tasks.
TEST(SdkClusterTest, ParameterServerFitOnARunningCluster) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string bin = fs::read_symlink("/proc/self/exe").parent_path();
  const std::string dir =
      (fs::temp_directory_path() /
       absl::StrCat("strata_sdk_running_", ::getpid()))
          .string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<ChildProcess> daemons;
  daemons.reserve(4);
  struct StopAll {
    std::vector<ChildProcess>* daemons;
    ~StopAll() {
      for (ChildProcess& d : *daemons) Stop(&d, absl::Seconds(10));
    }
  } stop_all{&daemons};
  daemons.push_back({"coordinator",
                     {bin + "/strata-coordinator", "--host=127.0.0.1",
                      "--port=0", "--state-dir=" + dir + "/state"}});
  daemons.back().log_path = dir + "/coordinator.log";
  ASSERT_TRUE(Spawn(&daemons.back(), true, absl::Seconds(30)).ok());
  const std::string coordinator = daemons[0].address;
  daemons.push_back({"ps:0",
                     {bin + "/strata-ps", "--host=127.0.0.1", "--port=0",
                      "--task-index=0", "--checkpoint-dir=" + dir + "/ckpt",
                      "--coordinator=" + coordinator}});
  daemons.back().log_path = dir + "/ps.log";
  ASSERT_TRUE(Spawn(&daemons.back(), true, absl::Seconds(30)).ok());
  for (int i = 0; i < 2; ++i) {
    daemons.push_back({absl::StrCat("worker:", i),
                       {bin + "/strata-worker", "--coordinator=" + coordinator,
                        absl::StrCat("--task-index=", i)}});
    daemons.back().log_path = absl::StrCat(dir, "/worker", i, ".log");
    ASSERT_TRUE(Spawn(&daemons.back(), false, absl::Seconds(30)).ok());
  }

  LocalClusterOptions options{/*num_ps=*/1, /*num_workers=*/2};
  options.coordinator = coordinator;
  options.bin_dir = "/nonexistent";  // not used: nothing is started
  options.register_timeout_seconds = 60;
  auto strategy = ParameterServerStrategy::Local(options);
  auto scope = strategy->Scope();
  Sequential model({Dense(64, "relu", 784), Dense(10, "softmax")});
  ASSERT_TRUE(model.Compile(Adam(0.002), "sparse_categorical_crossentropy",
                            {"accuracy"})
                  .ok());
  const std::vector<std::vector<float>> initial = *model.GetWeights();
  datasets::TrainTest data = datasets::FashionMnist();
  std::ostringstream out;
  FitOptions fit{/*epochs=*/2, /*batch_size=*/64,
                 /*validation=*/data.test.Take(1000)};
  fit.out = &out;
  FitProgress progress;
  fit.progress = &progress;
  std::vector<EpochResult> ended;
  fit.on_epoch_end = [&](const EpochResult& e) { ended.push_back(e); };
  absl::StatusOr<History> h = model.Fit(data.train.Take(6000), fit);
  ASSERT_TRUE(h.ok()) << h.status() << "\n" << out.str();
  EXPECT_THAT(out.str(), HasSubstr("strata submit: job 'sequential'"));
  ASSERT_EQ(h->epochs.size(), 2u) << out.str();
  ASSERT_EQ(ended.size(), 2u) << out.str();
  EXPECT_EQ(ended[1].epoch, 2);
  EXPECT_EQ(ended[1].test_accuracy, h->epochs[1].test_accuracy);
  EXPECT_EQ(progress.epoch, 2);
  EXPECT_EQ(progress.steps, 94);
  EXPECT_EQ(progress.step, 94);
  ASSERT_TRUE(h->epochs[1].evaluated) << out.str();
  EXPECT_GT(h->epochs[1].test_accuracy, 0.6) << out.str();
  EXPECT_NE((*model.GetWeights())[0], initial[0]);
  absl::StatusOr<EvalResult> r = model.Evaluate(data.test.Take(1000));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->accuracy, h->epochs[1].test_accuracy, 1e-9);
  fs::remove_all(dir);
}

TEST(SdkTest, RunningClusterOptionsAreChecked) {
  // Without export_dir the weights of a multi_worker_mirrored job on a
  // running cluster could not be read back: refused before submitting.
  LocalClusterOptions options{/*num_ps=*/1, /*num_workers=*/2};
  options.coordinator = "127.0.0.1:1";
  auto strategy = MultiWorkerMirroredStrategy::Local(options);
  auto scope = strategy->Scope();
  Sequential model = ToyModel();
  ASSERT_TRUE(model.Compile("adam", "sparse_categorical_crossentropy").ok());
  FitOptions quiet;
  quiet.verbose = 0;
  EXPECT_THAT(model.Fit(ToyData(50, 1), quiet),
              StatusIsWithMessage(absl::StatusCode::kFailedPrecondition,
                                  "LocalClusterOptions.export_dir"));
  // A coordinator that does not answer: UNAVAILABLE within the timeout,
  // naming it.
  options.register_timeout_seconds = 1;
  auto ps = ParameterServerStrategy::Local(options);
  auto ps_scope = ps->Scope();
  Sequential ps_model = ToyModel();
  ASSERT_TRUE(ps_model.Compile("adam", "sparse_categorical_crossentropy").ok());
  EXPECT_THAT(ps_model.Fit(ToyData(50, 1), quiet),
              StatusIsWithMessage(absl::StatusCode::kUnavailable,
                                  "127.0.0.1:1"));
}

TEST(SdkTest, CentralStorageAndMultiWorkerMirroredCheckTheirOptions) {
  const std::string csv = WriteToyCsv("toy_sync.csv", 50);
  FitOptions quiet;
  quiet.verbose = 0;
  struct Case {
    std::shared_ptr<Strategy> strategy;
    absl::StatusCode code;
    std::string message;
  };
  LocalClusterOptions no_ps{/*num_ps=*/0, /*num_workers=*/2};
  no_ps.bin_dir = "/nonexistent";
  LocalClusterOptions mesh{1, 2};
  mesh.collective = "mesh";
  LocalClusterOptions through_ps = no_ps;
  through_ps.collective = "ps";
  const std::vector<Case> cases = {
      {CentralStorageStrategy::Local(no_ps),
       absl::StatusCode::kInvalidArgument,
       "LocalClusterOptions.num_ps: must be >= 1, got 0"},
      {CentralStorageStrategy::Local({1, 0}),
       absl::StatusCode::kInvalidArgument, "LocalClusterOptions.num_workers"},
      {MultiWorkerMirroredStrategy::Local(mesh),
       absl::StatusCode::kInvalidArgument, "job.strategy.collective: 'mesh'"},
      {MultiWorkerMirroredStrategy::Local(through_ps),
       absl::StatusCode::kInvalidArgument,
       "LocalClusterOptions.num_ps: must be >= 1, got 0"},
      // The ring needs no PS task: past the options, to the daemons.
      {MultiWorkerMirroredStrategy::Local(no_ps),
       absl::StatusCode::kFailedPrecondition,
       "/nonexistent/strata-coordinator is not an executable"},
  };
  for (const Case& c : cases) {
    auto scope = c.strategy->Scope();
    Sequential model = ToyModel();
    ASSERT_TRUE(model.Compile("adam", "sparse_categorical_crossentropy").ok());
    EXPECT_THAT(model.Fit(datasets::Csv(csv), quiet),
                StatusIsWithMessage(c.code, c.message))
        << c.message;
  }
}

struct ChildRun {
  int exit_code = -1;  // -1: did not finish in time
  std::string output;
};

// Runs `args` with stdout and stderr to a file; waits (bounded) for it.
ChildRun RunProcess(std::vector<std::string> args, const std::string& log,
                    std::chrono::seconds limit) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  ChildRun run;
  if (rc != 0) {
    run.output = "posix_spawn failed: " + std::to_string(rc);
    return run;
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                        : 128 + WTERMSIG(status);
      done = true;
      break;
    }
    // Wakes on SIGCHLD, or after 200 ms to recheck the deadline.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    timespec ts{0, 200 * 1000 * 1000};
    sigtimedwait(&set, nullptr, &ts);
  }
  if (!done) {
    kill(pid, SIGTERM);  // it stops its cluster and exits
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (waitpid(pid, nullptr, WNOHANG) != pid) {
      if (std::chrono::steady_clock::now() > grace) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        break;
      }
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGCHLD);
      timespec ts{0, 200 * 1000 * 1000};
      sigtimedwait(&set, nullptr, &ts);
    }
  }
  std::ifstream f(log);
  run.output.assign(std::istreambuf_iterator<char>(f), {});
  return run;
}

TEST(SdkClusterTest, FashionMnistTrainRunsOnALocalCluster) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string log = ::testing::TempDir() + "/fashion_mnist_train_" +
                          std::to_string(getpid()) + ".log";
  ChildRun run = RunProcess(
      {STRATA_FASHION_MNIST_TRAIN, "--strategy=parameter_server", "--ps=1",
       "--workers=2", "--epochs=2", "--limit-train=3000", "--limit-test=1000"},
      log, std::chrono::seconds(240));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // Two epochs (48 async steps): one epoch ended between 0.48 and 0.64 under
  // ASan's timing, too close to the bar; two end between 0.64 and 0.70.
  EXPECT_THAT(run.output, HasSubstr("Epoch 2/2 - "));
  const size_t at = run.output.find("test accuracy: ");
  ASSERT_NE(at, std::string::npos) << run.output;
  const double accuracy =
      std::stod(run.output.substr(at + std::string("test accuracy: ").size()));
  EXPECT_GT(accuracy, 0.5) << run.output;
  EXPECT_THAT(run.output, HasSubstr("(1000 examples"));
}

TEST(SdkClusterTest, FashionMnistTrainRunsMirroredInProcess) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string log = ::testing::TempDir() + "/fashion_mnist_mirrored_" +
                          std::to_string(getpid()) + ".log";
  ChildRun run = RunProcess(
      {STRATA_FASHION_MNIST_TRAIN, "--strategy=mirrored", "--workers=3",
       "--epochs=1", "--limit-train=3000", "--limit-test=1000"},
      log, std::chrono::seconds(120));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("(mirrored, 3 replicas in sync)"));
  EXPECT_THAT(run.output, HasSubstr("Epoch 1/1 - 24 steps"));
  EXPECT_THAT(run.output, HasSubstr("(1000 examples"));
}

TEST(SdkClusterTest, FashionMnistTrainRejectsAnUnknownStrategy) {
  const std::string log = ::testing::TempDir() + "/fashion_mnist_bad_" +
                          std::to_string(getpid()) + ".log";
  ChildRun run = RunProcess({STRATA_FASHION_MNIST_TRAIN, "--strategy=mirror"},
                            log, std::chrono::seconds(60));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--strategy must be one of one_device, "
                                    "mirrored, parameter_server, "
                                    "central_storage, multi_worker_mirrored"));
}

}  // namespace
}  // namespace strata::sdk

// BatchNormalization and LayerNormalization: gradients against central
// finite differences (training and inference), the moving statistics,
// forward values computed by hand, Keras's arguments and refusals.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/layers.h"
#include "tests/model_test_util.h"

namespace strata {
namespace model {
namespace {

using nlohmann::json;
using testing::CheckGradients;
using testing::FiniteDifferenceOptions;
using testing::MakeLayer;
using testing::MakeLayerStatus;

// Runs Forward once; `state` gets the new values of non-trainable weights
// in training (empty vectors for trainable ones).
std::vector<Real> RunForward(const Layer& layer, int64_t batch,
                              const std::vector<Real>& input,
                              const std::vector<std::vector<Real>>& weights,
                              bool training,
                              std::vector<std::vector<Real>>* state = nullptr,
                              LayerScratch* scratch = nullptr) {
  LayerScratch local;
  ForwardArgs a;
  a.batch = batch;
  a.training = training;
  a.inputs = {input.data()};
  std::vector<std::vector<Real>> out_state(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    a.weights.emplace_back(weights[i].data(), weights[i].size());
    if (training && !layer.weights()[i].trainable) {
      out_state[i].assign(weights[i].size(), -777.0f);
      a.state_out.push_back(out_state[i].data());
    } else {
      a.state_out.push_back(nullptr);
    }
  }
  std::vector<Real> out(
      static_cast<size_t>(batch * NumElements(layer.output_shape())));
  a.output = out.data();
  a.scratch = scratch != nullptr ? scratch : &local;
  layer.Forward(a);
  if (state != nullptr) *state = out_state;
  return out;
}

std::vector<Real> RandomValues(size_t n, uint64_t seed, Real lo, Real hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<Real> uni(lo, hi);
  std::vector<Real> v(n);
  for (Real& x : v) x = uni(rng);
  return v;
}

// ---------------------------------------------------------------------------
// BatchNormalization

TEST(BatchNormalizationLayerTest, WeightsInKerasOrderWithStateNotTrainable) {
  auto layer = MakeLayer(CreateBatchNormalization, "BatchNormalization",
                         json::object(), {{3, 5, 4}});
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->output_shape(), Shape({3, 5, 4}));
  ASSERT_EQ(layer->weights().size(), 4u);
  const char* names[] = {"gamma", "beta", "moving_mean", "moving_variance"};
  const bool trainable[] = {true, true, false, false};
  const InitializerType inits[] = {InitializerType::kOnes,
                                   InitializerType::kZeros,
                                   InitializerType::kZeros,
                                   InitializerType::kOnes};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(layer->weights()[i].name, names[i]);
    EXPECT_EQ(layer->weights()[i].shape, Shape({4}));
    EXPECT_EQ(layer->weights()[i].trainable, trainable[i]);
    EXPECT_EQ(layer->weights()[i].init.type, inits[i]);
  }
  auto no_affine = MakeLayer(CreateBatchNormalization, "BatchNormalization",
                             {{"center", false}, {"scale", false}}, {{6}});
  ASSERT_NE(no_affine, nullptr);
  ASSERT_EQ(no_affine->weights().size(), 2u);
  EXPECT_EQ(no_affine->weights()[0].name, "moving_mean");
  EXPECT_EQ(no_affine->weights()[1].name, "moving_variance");
  auto only_beta = MakeLayer(CreateBatchNormalization, "BatchNormalization",
                             {{"scale", false}}, {{6}});
  ASSERT_NE(only_beta, nullptr);
  ASSERT_EQ(only_beta->weights().size(), 3u);
  EXPECT_EQ(only_beta->weights()[0].name, "beta");
}

TEST(BatchNormalizationLayerTest, TrainingGradientsMatchFiniteDifferences) {
  struct Case {
    Shape shape;
    bool center;
    bool scale;
  };
  for (const Case& c : {Case{{7}, true, true}, Case{{3, 5, 4}, true, true},
                        Case{{5, 3}, false, true}, Case{{2, 3, 5}, true, false},
                        Case{{3}, false, false}}) {
    auto layer = MakeLayer(CreateBatchNormalization, "BatchNormalization",
                           {{"center", c.center}, {"scale", c.scale}},
                           {c.shape});
    ASSERT_NE(layer, nullptr) << ShapeString(c.shape);
    FiniteDifferenceOptions o;
    o.step = 1e-3;
    o.weight_scale = 1.5;
    o.max_checks = 64;
    SCOPED_TRACE(ShapeString(c.shape));
    CheckGradients(*layer, o);
    o.batch = 5;
    o.seed = 11;
    CheckGradients(*layer, o);
  }
}

TEST(BatchNormalizationLayerTest, InferenceGradientsMatchFiniteDifferences) {
  for (const Shape& shape : {Shape{7}, Shape{3, 5, 4}}) {
    auto layer = MakeLayer(CreateBatchNormalization, "BatchNormalization",
                           {{"epsilon", 0.01}}, {shape});
    ASSERT_NE(layer, nullptr);
    FiniteDifferenceOptions o;
    o.training = false;
    o.weight_scale = 1.5;
    SCOPED_TRACE(ShapeString(shape));
    CheckGradients(*layer, o);
  }
}

TEST(BatchNormalizationLayerTest, TrainingForwardAndMovingStatisticsByHand) {
  auto layer = MakeLayer(CreateBatchNormalization, "BatchNormalization",
                         {{"momentum", 0.9}}, {{2}});
  ASSERT_NE(layer, nullptr);
  // Two examples [1, 2], [3, 6]: mean [2, 4], biased variance [1, 4].
  const std::vector<Real> x = {1, 2, 3, 6};
  const std::vector<std::vector<Real>> w = {
      {2.0f, 1.0f}, {0.5f, -1.0f}, {0.0f, 1.0f}, {1.0f, 2.0f}};
  std::vector<std::vector<Real>> state;
  std::vector<Real> y = RunForward(*layer, 2, x, w, true, &state);
  const double s0 = 1.0 / std::sqrt(1.0 + 1e-3);
  const double s1 = 1.0 / std::sqrt(4.0 + 1e-3);
  EXPECT_NEAR(y[0], 2.0 * -1.0 * s0 + 0.5, 1e-6);
  EXPECT_NEAR(y[1], 1.0 * -2.0 * s1 - 1.0, 1e-6);
  EXPECT_NEAR(y[2], 2.0 * 1.0 * s0 + 0.5, 1e-6);
  EXPECT_NEAR(y[3], 1.0 * 2.0 * s1 - 1.0, 1e-6);
  // moving = moving * 0.9 + batch * 0.1.
  ASSERT_EQ(state.size(), 4u);
  EXPECT_NEAR(state[2][0], 0.0 * 0.9 + 2.0 * 0.1, 1e-6);
  EXPECT_NEAR(state[2][1], 1.0 * 0.9 + 4.0 * 0.1, 1e-6);
  EXPECT_NEAR(state[3][0], 1.0 * 0.9 + 1.0 * 0.1, 1e-6);
  EXPECT_NEAR(state[3][1], 2.0 * 0.9 + 4.0 * 0.1, 1e-6);
  // Trainable weights get no state.
  EXPECT_TRUE(state[0].empty());

  // Inference uses the moving statistics: (x - mm) / sqrt(mv + eps).
  y = RunForward(*layer, 2, x, w, false);
  EXPECT_NEAR(y[0], 2.0 * (1 - 0.0) / std::sqrt(1.0 + 1e-3) + 0.5, 1e-5);
  EXPECT_NEAR(y[1], 1.0 * (2 - 1.0) / std::sqrt(2.0 + 1e-3) - 1.0, 1e-5);
  EXPECT_NEAR(y[2], 2.0 * (3 - 0.0) / std::sqrt(1.0 + 1e-3) + 0.5, 1e-5);
  EXPECT_NEAR(y[3], 1.0 * (6 - 1.0) / std::sqrt(2.0 + 1e-3) - 1.0, 1e-5);
}

TEST(BatchNormalizationLayerTest, MovingStatisticsOverSpatialPositions) {
  // Statistics per channel over batch x 3 x 5 positions, against a double
  // computation; a mean far from 0 checks the variance's accuracy.
  auto layer = MakeLayer(CreateBatchNormalization, "BatchNormalization",
                         {{"momentum", 0.75}, {"epsilon", 1e-5}},
                         {{3, 5, 4}});
  ASSERT_NE(layer, nullptr);
  const int64_t batch = 7;
  const int64_t c = 4;
  const int64_t n = batch * 15;
  std::vector<Real> x = RandomValues(static_cast<size_t>(n * c), 3, -1, 1);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < c; ++j) x[r * c + j] += 100.0f * j;
  }
  const std::vector<std::vector<Real>> w = {
      {1.0f, 0.5f, 2.0f, -1.0f},
      {0.0f, 0.1f, 0.2f, 0.3f},
      {0.5f, 50.0f, 150.0f, 250.0f},
      {1.0f, 2.0f, 3.0f, 0.25f}};
  std::vector<std::vector<Real>> state;
  std::vector<Real> y = RunForward(*layer, batch, x, w, true, &state);
  for (int64_t j = 0; j < c; ++j) {
    double mean = 0;
    for (int64_t r = 0; r < n; ++r) mean += x[r * c + j];
    mean /= n;
    double var = 0;
    for (int64_t r = 0; r < n; ++r) {
      var += (x[r * c + j] - mean) * (x[r * c + j] - mean);
    }
    var /= n;
    const double new_mean = w[2][j] * 0.75 + mean * 0.25;
    EXPECT_NEAR(state[2][j], new_mean, 1e-7 * (1 + std::fabs(new_mean)))
        << j;
    EXPECT_NEAR(state[3][j], w[3][j] * 0.75 + var * 0.25, 1e-6) << j;
    // The output's per-channel statistics: mean beta, std |gamma| (almost).
    double ym = 0;
    double yv = 0;
    for (int64_t r = 0; r < n; ++r) ym += y[r * c + j];
    ym /= n;
    for (int64_t r = 0; r < n; ++r) {
      yv += (y[r * c + j] - ym) * (y[r * c + j] - ym);
    }
    yv /= n;
    EXPECT_NEAR(ym, w[1][j], 1e-6) << j;
    EXPECT_NEAR(yv, w[0][j] * w[0][j] * var / (var + 1e-5), 2e-6) << j;
  }
}

TEST(BatchNormalizationLayerTest, BackwardOverwritesAndSkipsNullGradients) {
  auto layer = MakeLayer(CreateBatchNormalization, "BatchNormalization",
                         json::object(), {{3, 4}});
  ASSERT_NE(layer, nullptr);
  const int64_t batch = 2;
  std::vector<Real> x = RandomValues(24, 5, -1, 1);
  std::vector<std::vector<Real>> w = {RandomValues(4, 6, 0.5f, 1.5f),
                                       RandomValues(4, 7, -1, 1),
                                       {0, 0, 0, 0},
                                       {1, 1, 1, 1}};
  LayerScratch scratch;
  std::vector<Real> y = RunForward(*layer, batch, x, w, true, nullptr,
                                    &scratch);
  std::vector<Real> g = RandomValues(24, 8, -1, 1);
  auto backward = [&](Real* dx, Real* dgamma, Real* dbeta) {
    BackwardArgs b;
    b.batch = batch;
    b.training = true;
    b.inputs = {x.data()};
    for (auto& v : w) b.weights.emplace_back(v.data(), v.size());
    b.output = y.data();
    b.output_grad = g.data();
    b.input_grads = {dx};
    b.weight_grads = {dgamma, dbeta, nullptr, nullptr};
    b.scratch = &scratch;
    layer->Backward(b);
  };
  std::vector<Real> dx1(24, 0.0f), dg1(4, 0.0f), db1(4, 0.0f);
  backward(dx1.data(), dg1.data(), db1.data());
  std::vector<Real> dx2(24, 55.0f), dg2(4, -3.0f), db2(4, 9.0f);
  backward(dx2.data(), dg2.data(), db2.data());
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(dg1, dg2);
  EXPECT_EQ(db1, db2);
  std::vector<Real> dx3(24, 0.0f);
  backward(dx3.data(), nullptr, nullptr);
  EXPECT_EQ(dx1, dx3);
  // The input gradient of batch normalization sums to 0 per channel.
  for (int j = 0; j < 4; ++j) {
    double s = 0;
    for (int r = 0; r < 6; ++r) s += dx1[r * 4 + j];
    EXPECT_NEAR(s, 0.0, 1e-5);
  }
}

TEST(BatchNormalizationLayerTest, AcceptsTheLastAxisAsKerasWritesIt) {
  // -1, the batch-inclusive index (Keras 3: 3), tf.keras's built list [3].
  for (const json& axis : {json(-1), json(3), json::array({3}),
                           json::array({-1})}) {
    auto layer = MakeLayer(CreateBatchNormalization, "BatchNormalization",
                           {{"axis", axis}}, {{2, 3, 4}});
    EXPECT_NE(layer, nullptr) << axis.dump();
  }
  auto flat = MakeLayer(CreateBatchNormalization, "BatchNormalization",
                        {{"axis", 1}}, {{6}});
  EXPECT_NE(flat, nullptr);
}

TEST(BatchNormalizationLayerTest, AcceptsFullKerasConfigs) {
  // Keras 3 (3.x with renorm) get_config().
  const json keras3 = {
      {"name", "bn"},
      {"trainable", true},
      {"dtype", {{"module", "keras"}, {"class_name", "DTypePolicy"},
                 {"config", {{"name", "float32"}}}, {"registered_name", nullptr}}},
      {"axis", -1},
      {"momentum", 0.99},
      {"epsilon", 0.001},
      {"center", true},
      {"scale", true},
      {"beta_initializer", {{"module", "keras.initializers"},
                            {"class_name", "Zeros"}, {"config", json::object()},
                            {"registered_name", nullptr}}},
      {"gamma_initializer", {{"module", "keras.initializers"},
                             {"class_name", "Ones"}, {"config", json::object()},
                             {"registered_name", nullptr}}},
      {"moving_mean_initializer", {{"module", "keras.initializers"},
                                   {"class_name", "Zeros"},
                                   {"config", json::object()},
                                   {"registered_name", nullptr}}},
      {"moving_variance_initializer", {{"module", "keras.initializers"},
                                       {"class_name", "Ones"},
                                       {"config", json::object()},
                                       {"registered_name", nullptr}}},
      {"beta_regularizer", nullptr},
      {"gamma_regularizer", nullptr},
      {"beta_constraint", nullptr},
      {"gamma_constraint", nullptr},
      {"synchronized", false},
      {"renorm", false},
      {"renorm_clipping", nullptr},
      {"renorm_momentum", 0.99}};
  EXPECT_TRUE(MakeLayerStatus(CreateBatchNormalization, "BatchNormalization",
                              keras3, {{5, 8}})
                  .ok());
  // tf.keras 2.x: the built axis list, string initializers, fused.
  const json tf_keras = {
      {"name", "batch_normalization"},
      {"trainable", true},
      {"dtype", "float32"},
      {"axis", json::array({2})},
      {"momentum", 0.9},
      {"epsilon", 1e-5},
      {"center", true},
      {"scale", true},
      {"beta_initializer", {{"class_name", "Zeros"}, {"config", json::object()}}},
      {"gamma_initializer", {{"class_name", "Ones"}, {"config", json::object()}}},
      {"moving_mean_initializer",
       {{"class_name", "Zeros"}, {"config", json::object()}}},
      {"moving_variance_initializer",
       {{"class_name", "Ones"}, {"config", json::object()}}},
      {"beta_regularizer", nullptr},
      {"gamma_regularizer",
       {{"class_name", "L2"}, {"config", {{"l2", 0.0001}}}}},
      {"beta_constraint", nullptr},
      {"gamma_constraint", nullptr},
      {"fused", true},
      {"virtual_batch_size", nullptr},
      {"adjustment", nullptr}};
  auto layer = MakeLayer(CreateBatchNormalization, "BatchNormalization",
                         tf_keras, {{5, 8}});
  ASSERT_NE(layer, nullptr);
  EXPECT_DOUBLE_EQ(layer->weights()[0].l2, 0.0001);
  EXPECT_EQ(layer->weights()[0].shape, Shape({8}));
}

TEST(BatchNormalizationLayerTest, RefusesUnsupportedArgumentsNamingThem) {
  struct Case {
    json config;
    const char* arg;
  };
  const Case cases[] = {
      {{{"axis", 1}}, "argument 'axis'"},
      {{{"axis", -2}}, "argument 'axis'"},
      {{{"axis", 0}}, "argument 'axis'"},
      {{{"axis", json::array({1, 2})}}, "argument 'axis'"},
      {{{"axis", "last"}}, "argument 'axis'"},
      {{{"renorm", true}}, "argument 'renorm'"},
      {{{"synchronized", true}}, "argument 'synchronized'"},
      {{{"virtual_batch_size", 4}}, "argument 'virtual_batch_size'"},
      {{{"momentum", 1.5}}, "argument 'momentum'"},
      {{{"epsilon", -1}}, "argument 'epsilon'"},
      {{{"gamma_constraint", "non_neg"}}, "argument 'gamma_constraint'"},
      {{{"moving_variance_initializer", "orthogonal"}},
       "argument 'moving_variance_initializer'"},
      {{{"trainable", false}}, "argument 'trainable'"},
      {{{"groups", 2}}, "argument 'groups'"},
  };
  for (const Case& c : cases) {
    json config = c.config;
    config["name"] = "bn";
    absl::Status s = MakeLayerStatus(CreateBatchNormalization,
                                     "BatchNormalization", config, {{3, 5, 4}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << config.dump();
    EXPECT_NE(s.message().find("layer 'bn' (BatchNormalization)"),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find(c.arg), std::string::npos) << s;
  }
  absl::Status s = MakeLayerStatus(CreateBatchNormalization,
                                   "BatchNormalization", {{"name", "bn"}},
                                   {Shape{}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// ---------------------------------------------------------------------------
// LayerNormalization

TEST(LayerNormalizationLayerTest, GradientsMatchFiniteDifferences) {
  struct Case {
    Shape shape;
    bool center;
    bool scale;
  };
  for (const Case& c : {Case{{7}, true, true}, Case{{3, 5, 4}, true, true},
                        Case{{5, 3}, false, true}, Case{{3, 5}, true, false},
                        Case{{9}, false, false}}) {
    auto layer = MakeLayer(CreateLayerNormalization, "LayerNormalization",
                           {{"center", c.center}, {"scale", c.scale}},
                           {c.shape});
    ASSERT_NE(layer, nullptr);
    EXPECT_EQ(layer->output_shape(), c.shape);
    FiniteDifferenceOptions o;
    o.step = 1e-3;
    o.weight_scale = 1.5;
    o.max_checks = 64;
    SCOPED_TRACE(ShapeString(c.shape));
    CheckGradients(*layer, o);
    o.training = false;  // the same math
    CheckGradients(*layer, o);
  }
}

TEST(LayerNormalizationLayerTest, ForwardValuesByHand) {
  auto layer = MakeLayer(CreateLayerNormalization, "LayerNormalization",
                         {{"epsilon", 0.01}}, {{2, 3}});
  ASSERT_NE(layer, nullptr);
  ASSERT_EQ(layer->weights().size(), 2u);
  EXPECT_EQ(layer->weights()[0].name, "gamma");
  EXPECT_EQ(layer->weights()[1].name, "beta");
  EXPECT_EQ(layer->weights()[0].shape, Shape({3}));
  // Rows [1, 2, 3] (mean 2, var 2/3) and [4, 4, 10] (mean 6, var 8).
  const std::vector<Real> x = {1, 2, 3, 4, 4, 10};
  const std::vector<std::vector<Real>> w = {{1.0f, 2.0f, -1.0f},
                                             {0.0f, 0.5f, 1.0f}};
  std::vector<Real> y = RunForward(*layer, 1, x, w, true);
  const double i0 = 1.0 / std::sqrt(2.0 / 3.0 + 0.01);
  const double i1 = 1.0 / std::sqrt(8.0 + 0.01);
  const double expected[] = {-1 * i0,          0 * 2 * i0 + 0.5,
                             -1 * i0 + 1.0,    -2 * i1,
                             -2 * 2 * i1 + 0.5, 4 * -1 * i1 + 1.0};
  for (int k = 0; k < 6; ++k) EXPECT_NEAR(y[k], expected[k], 1e-5) << k;
}

TEST(LayerNormalizationLayerTest, AxisAndKerasConfigs) {
  for (const json& axis : {json(-1), json(3), json::array({3}),
                           json::array({-1})}) {
    EXPECT_NE(MakeLayer(CreateLayerNormalization, "LayerNormalization",
                        {{"axis", axis}}, {{2, 3, 4}}),
              nullptr)
        << axis.dump();
  }
  const json keras3 = {
      {"name", "ln"},
      {"trainable", true},
      {"dtype", "float32"},
      {"axis", json::array({-1})},
      {"epsilon", 1e-6},
      {"center", true},
      {"scale", true},
      {"rms_scaling", false},
      {"beta_initializer", "zeros"},
      {"gamma_initializer", "ones"},
      {"beta_regularizer", nullptr},
      {"gamma_regularizer", nullptr},
      {"beta_constraint", nullptr},
      {"gamma_constraint", nullptr}};
  EXPECT_TRUE(MakeLayerStatus(CreateLayerNormalization, "LayerNormalization",
                              keras3, {{4, 6}})
                  .ok());
  struct Case {
    json config;
    const char* arg;
  };
  const Case cases[] = {
      {{{"axis", 1}}, "argument 'axis'"},
      {{{"axis", json::array({1, 2})}}, "argument 'axis'"},
      {{{"axis", json::array({2, 3})}}, "argument 'axis'"},
      {{{"rms_scaling", true}}, "argument 'rms_scaling'"},
      {{{"beta_regularizer", "l3"}}, "argument 'beta_regularizer'"},
      {{{"momentum", 0.9}}, "argument 'momentum'"},
  };
  for (const Case& c : cases) {
    json config = c.config;
    config["name"] = "ln";
    absl::Status s = MakeLayerStatus(CreateLayerNormalization,
                                     "LayerNormalization", config, {{2, 3, 4}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << config.dump();
    EXPECT_NE(s.message().find("layer 'ln' (LayerNormalization)"),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find(c.arg), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace model
}  // namespace strata

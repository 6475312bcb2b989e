// DotInteraction and Cross (TensorFlow Recommenders): gradients against
// central finite differences, TFRS's output order and formulas by hand,
// Keras configs and refusals.
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
using testing::MakeLayer;
using testing::MakeLayerStatus;

std::vector<Real> RunForward(const Layer& layer,
                              const std::vector<std::vector<Real>>& inputs,
                              const std::vector<std::vector<Real>>& weights,
                              int64_t batch) {
  LayerScratch scratch;
  std::vector<Real> out(
      static_cast<size_t>(batch * NumElements(layer.output_shape())), -7.0f);
  ForwardArgs a;
  a.batch = batch;
  for (const auto& v : inputs) a.inputs.push_back(v.data());
  for (const auto& v : weights) {
    a.weights.emplace_back(v.data(), v.size());
    a.state_out.push_back(nullptr);
  }
  a.output = out.data();
  a.scratch = &scratch;
  layer.Forward(a);
  return out;
}

void ExpectRefused(LayerOr (*factory)(ConfigReader*), const std::string& cls,
                   json config, const std::vector<Shape>& inputs,
                   const std::string& needle) {
  config["name"] = "x";
  absl::Status s = MakeLayerStatus(factory, cls, config, inputs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << config.dump();
  EXPECT_NE(s.message().find("layer 'x' (" + cls + "): " + needle),
            std::string::npos)
      << s;
}

TEST(DotInteractionLayerTest, GradientsMatchFiniteDifferences) {
  for (int n = 2; n <= 5; ++n) {
    for (int64_t d : {1, 3, 5}) {
      for (bool self : {false, true}) {
        for (bool skip : {false, true}) {
          auto layer = MakeLayer(
              CreateDotInteraction, "DotInteraction",
              {{"self_interaction", self}, {"skip_gather", skip}},
              std::vector<Shape>(static_cast<size_t>(n), Shape{d}));
          ASSERT_NE(layer, nullptr);
          const int64_t out = skip   ? n * n
                              : self ? n * (n + 1) / 2
                                     : n * (n - 1) / 2;
          EXPECT_EQ(layer->output_shape(), Shape({out}));
          EXPECT_TRUE(layer->weights().empty());
          SCOPED_TRACE(::testing::Message()
                       << "n " << n << " d " << d << " self " << self
                       << " skip " << skip);
          testing::FiniteDifferenceOptions o;
          o.batch = 3;
          CheckGradients(*layer, o);
        }
      }
    }
  }
}

TEST(DotInteractionLayerTest, OutputOrderIsTfrsLowerTriangleRowMajor) {
  // a = [1, 2], b = [3, 4], c = [5, 6]: a.a 5, b.a 11, b.b 25, c.a 17,
  // c.b 39, c.c 61; a second example doubles every input (dots x4).
  const std::vector<std::vector<Real>> in = {
      {1, 2, 2, 4}, {3, 4, 6, 8}, {5, 6, 10, 12}};
  const std::vector<Shape> shapes(3, Shape{2});
  struct Case {
    bool self, skip;
    std::vector<Real> want;
  };
  const Case cases[] = {
      {false, false, {11, 17, 39}},
      {true, false, {5, 11, 25, 17, 39, 61}},
      {false, true, {0, 0, 0, 11, 0, 0, 17, 39, 0}},
      {true, true, {5, 0, 0, 11, 25, 0, 17, 39, 61}},
  };
  for (const Case& c : cases) {
    auto layer = MakeLayer(CreateDotInteraction, "DotInteraction",
                           {{"self_interaction", c.self},
                            {"skip_gather", c.skip}},
                           shapes);
    ASSERT_NE(layer, nullptr);
    std::vector<Real> want = c.want;
    for (Real v : c.want) want.push_back(4 * v);
    EXPECT_EQ(RunForward(*layer, in, {}, 2), want)
        << "self " << c.self << " skip " << c.skip;
  }
}

TEST(DotInteractionLayerTest, BackwardSkipsNullInputGrads) {
  auto layer = MakeLayer(CreateDotInteraction, "DotInteraction",
                         json::object(), {{2}, {2}, {2}});
  ASSERT_NE(layer, nullptr);
  const std::vector<std::vector<Real>> in = {{1, 2}, {3, 4}, {5, 6}};
  std::vector<Real> out = RunForward(*layer, in, {}, 1);
  // d/d b of (b.a, c.a, c.b) . (1, 10, 100) = a + 100 c.
  const std::vector<Real> dy = {1, 10, 100};
  std::vector<Real> db(2, 999.0f);
  LayerScratch scratch;
  BackwardArgs b;
  b.batch = 1;
  for (const auto& v : in) b.inputs.push_back(v.data());
  b.output = out.data();
  b.output_grad = dy.data();
  b.input_grads = {nullptr, db.data(), nullptr};
  b.scratch = &scratch;
  layer->Backward(b);
  EXPECT_EQ(db, std::vector<Real>({1 + 500, 2 + 600}));
}

TEST(DotInteractionLayerTest, ReadsTfrsAndKerasRsConfigs) {
  // TFRS writes only the base keys; keras_rs writes both arguments.
  EXPECT_NE(MakeLayer(CreateDotInteraction, "DotInteraction",
                      json::parse(R"({"name": "dot_interaction",
                                      "trainable": true,
                                      "dtype": "float32"})"),
                      {{4}, {4}}),
            nullptr);
  EXPECT_NE(MakeLayer(CreateDotInteraction, "DotInteraction",
                      json::parse(R"({"name": "dot_interaction",
                                      "trainable": true,
                                      "dtype": "float32",
                                      "self_interaction": true,
                                      "skip_gather": false})"),
                      {{4}, {4}}),
            nullptr);
}

TEST(DotInteractionLayerTest, RefusesBadInputsAndArguments) {
  ExpectRefused(CreateDotInteraction, "DotInteraction", json::object(),
                {{3}, {3}, {4}},
                "every input must have the shape of input 0, [3]; input 2 "
                "has shape [4]");
  ExpectRefused(CreateDotInteraction, "DotInteraction", json::object(),
                {{2, 3}, {2, 3}}, "expects inputs of rank 1");
  ExpectRefused(CreateDotInteraction, "DotInteraction", json::object(),
                {{3}}, "takes at least 2 inputs");
  ExpectRefused(CreateDotInteraction, "DotInteraction",
                {{"self_interaction", 1}}, {{3}, {3}},
                "argument 'self_interaction'");
  ExpectRefused(CreateDotInteraction, "DotInteraction", {{"wobble", true}},
                {{3}, {3}}, "argument 'wobble'");
}

TEST(CrossLayerTest, FullRankGradientsMatchFiniteDifferences) {
  for (int inputs : {1, 2}) {
    for (bool use_bias : {true, false}) {
      for (double diag : {0.0, 0.7}) {
        auto layer = MakeLayer(
            CreateCross, "Cross",
            {{"use_bias", use_bias}, {"diag_scale", diag}},
            std::vector<Shape>(static_cast<size_t>(inputs), Shape{5}));
        ASSERT_NE(layer, nullptr);
        EXPECT_EQ(layer->output_shape(), Shape({5}));
        ASSERT_EQ(layer->weights().size(), use_bias ? 2u : 1u);
        EXPECT_EQ(layer->weights()[0].name, "kernel");
        EXPECT_EQ(layer->weights()[0].shape, Shape({5, 5}));
        if (use_bias) {
          EXPECT_EQ(layer->weights()[1].name, "bias");
          EXPECT_EQ(layer->weights()[1].shape, Shape({5}));
        }
        SCOPED_TRACE(::testing::Message() << "inputs " << inputs << " bias "
                                          << use_bias << " diag " << diag);
        CheckGradients(*layer);
      }
    }
  }
}

TEST(CrossLayerTest, LowRankGradientsMatchFiniteDifferences) {
  for (int inputs : {1, 2}) {
    for (bool use_bias : {true, false}) {
      for (double diag : {0.0, 1.3}) {
        auto layer = MakeLayer(
            CreateCross, "Cross",
            {{"projection_dim", 2}, {"use_bias", use_bias},
             {"diag_scale", diag}},
            std::vector<Shape>(static_cast<size_t>(inputs), Shape{3, 7}));
        ASSERT_NE(layer, nullptr);
        EXPECT_EQ(layer->output_shape(), Shape({3, 7}));
        ASSERT_EQ(layer->weights().size(), use_bias ? 3u : 2u);
        EXPECT_EQ(layer->weights()[0].name, "u_kernel");
        EXPECT_EQ(layer->weights()[0].shape, Shape({7, 2}));
        EXPECT_EQ(layer->weights()[1].name, "v_kernel");
        EXPECT_EQ(layer->weights()[1].shape, Shape({2, 7}));
        if (use_bias) {
          EXPECT_EQ(layer->weights()[2].name, "bias");
          EXPECT_EQ(layer->weights()[2].shape, Shape({7}));
        }
        SCOPED_TRACE(::testing::Message() << "inputs " << inputs << " bias "
                                          << use_bias << " diag " << diag);
        CheckGradients(*layer);
      }
    }
  }
}

TEST(CrossLayerTest, ForwardByHand) {
  // Full rank: x0 = [1, 2], x = [3, -1], W = [[1, 2], [3, 4]] ([in, out]),
  // b = [0.5, -0.5], diag_scale 0.5:
  // P = x W + b + 0.5 x = [0, 2] + [0.5, -0.5] + [1.5, -0.5] = [2, 1];
  // y = x0 * P + x = [2 + 3, 2 - 1] = [5, 1].
  auto full = MakeLayer(CreateCross, "Cross", {{"diag_scale", 0.5}},
                        {{2}, {2}});
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(RunForward(*full, {{1, 2}, {3, -1}}, {{1, 2, 3, 4}, {0.5, -0.5}},
                       1),
            std::vector<Real>({5, 1}));
  // One input: x = x0 = [1, 2]: P = [7, 10] + b + [0.5, 1] = [8, 10.5];
  // y = [8 + 1, 21 + 2].
  auto one = MakeLayer(CreateCross, "Cross", {{"diag_scale", 0.5}}, {{2}});
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(RunForward(*one, {{1, 2}}, {{1, 2, 3, 4}, {0.5, -0.5}}, 1),
            std::vector<Real>({9, 23}));
  // Low rank, p = 1, no bias: U = [[1], [2]], V = [[3, -1]]:
  // x U = 3 - 2 = 1; P = [3, -1]; y = [1 * 3 + 3, 2 * -1 - 1] = [6, -3].
  auto low = MakeLayer(CreateCross, "Cross",
                       {{"projection_dim", 1}, {"use_bias", false}},
                       {{2}, {2}});
  ASSERT_NE(low, nullptr);
  EXPECT_EQ(RunForward(*low, {{1, 2}, {3, -1}}, {{1, 2}, {3, -1}}, 1),
            std::vector<Real>({6, -3}));
}

TEST(CrossLayerTest, ReadsTfrsConfigs) {
  json tfrs = json::parse(R"({
    "name": "cross", "trainable": true, "dtype": "float32",
    "projection_dim": null, "diag_scale": 0.0, "use_bias": true,
    "preactivation": "linear",
    "kernel_initializer": {"class_name": "TruncatedNormal",
        "config": {"mean": 0.0, "stddev": 0.05, "seed": null}},
    "bias_initializer": {"class_name": "Zeros", "config": {}},
    "kernel_regularizer": {"class_name": "L2", "config": {"l2": 0.01}},
    "bias_regularizer": null})");
  auto layer = MakeLayer(CreateCross, "Cross", tfrs, {{6}});
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->weights()[0].init.type, InitializerType::kTruncatedNormal);
  EXPECT_DOUBLE_EQ(layer->weights()[0].l2, 0.01);
  EXPECT_EQ(layer->weights()[1].init.type, InitializerType::kZeros);
  // Defaults: truncated_normal kernels, zeros bias; the low-rank kernels
  // share the kernel arguments.
  tfrs["projection_dim"] = 2;
  tfrs.erase("kernel_initializer");
  tfrs["preactivation"] = nullptr;
  layer = MakeLayer(CreateCross, "Cross", tfrs, {{6}});
  ASSERT_NE(layer, nullptr);
  ASSERT_EQ(layer->weights().size(), 3u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(layer->weights()[i].init.type,
              InitializerType::kTruncatedNormal);
    EXPECT_DOUBLE_EQ(layer->weights()[i].init.stddev, 0.05);
    EXPECT_DOUBLE_EQ(layer->weights()[i].l2, 0.01);
  }
  EXPECT_DOUBLE_EQ(layer->weights()[2].l2, 0.0);
  // The older TFRS config (no preactivation key).
  tfrs.erase("preactivation");
  EXPECT_NE(MakeLayer(CreateCross, "Cross", tfrs, {{6}}), nullptr);
}

TEST(CrossLayerTest, RefusesBadInputsAndArguments) {
  ExpectRefused(CreateCross, "Cross", json::object(), {{3}, {3}, {3}},
                "takes 1 or 2 inputs (x0, or x0 and x), got 3");
  ExpectRefused(CreateCross, "Cross", json::object(), {{3}, {4}},
                "input x has shape [4], x0 has shape [3]; they must match");
  ExpectRefused(CreateCross, "Cross", json::object(), {{}},
                "expects an input of rank >= 1");
  ExpectRefused(CreateCross, "Cross", {{"preactivation", "relu"}}, {{3}},
                "argument 'preactivation': \"relu\" is not supported");
  ExpectRefused(CreateCross, "Cross", {{"diag_scale", -1.0}}, {{3}},
                "argument 'diag_scale'");
  ExpectRefused(CreateCross, "Cross", {{"projection_dim", 0}}, {{3}},
                "argument 'projection_dim'");
  ExpectRefused(CreateCross, "Cross", {{"use_bias", "yes"}}, {{3}},
                "argument 'use_bias'");
  ExpectRefused(CreateCross, "Cross", {{"kernel_initializer", "orthogonal"}},
                {{3}}, "argument 'kernel_initializer'");
  ExpectRefused(CreateCross, "Cross", {{"activity_regularizer", "l2"}},
                {{3}}, "argument 'activity_regularizer'");
  ExpectRefused(CreateCross, "Cross", {{"wobble", 1}}, {{3}},
                "argument 'wobble'");
}

}  // namespace
}  // namespace model
}  // namespace strata

// Concatenate, Add, Multiply and Dot: gradients against central finite
// differences, output shapes, forward values computed by hand, refusals.
#include <cmath>
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

std::vector<Real> RunForward(const Layer& layer, int64_t batch,
                              const std::vector<std::vector<Real>>& inputs) {
  LayerScratch scratch;
  ForwardArgs a;
  a.batch = batch;
  for (const auto& v : inputs) a.inputs.push_back(v.data());
  std::vector<Real> out(
      static_cast<size_t>(batch * NumElements(layer.output_shape())));
  a.output = out.data();
  a.scratch = &scratch;
  layer.Forward(a);
  return out;
}

void ExpectNear(const std::vector<Real>& got,
                const std::vector<double>& want, double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_NEAR(got[k], want[k], tol) << "element " << k;
  }
}

void ExpectRefused(absl::Status s, const std::string& what) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(what), std::string::npos) << s;
}

// ---------------------------------------------------------------------------
// Concatenate

TEST(ConcatenateLayerTest, ShapesAndGradientsOnEveryAxis) {
  struct Case {
    json axis;
    std::vector<Shape> inputs;
    Shape output;
  };
  const Case cases[] = {
      {-1, {{3}, {5}}, {8}},
      {json(), {{2, 3}, {2, 1}, {2, 4}}, {2, 8}},
      {1, {{3, 5, 2}, {1, 5, 2}}, {4, 5, 2}},
      {2, {{3, 5, 2}, {3, 1, 2}, {3, 4, 2}}, {3, 10, 2}},  // middle axis
      {-2, {{3, 5, 2}, {3, 7, 2}}, {3, 12, 2}},
      {3, {{3, 5, 2}, {3, 5, 3}, {3, 5, 1}}, {3, 5, 6}},
  };
  for (const Case& c : cases) {
    json config = json::object();
    if (!c.axis.is_null()) config["axis"] = c.axis;
    auto layer = MakeLayer(CreateConcatenate, "Concatenate", config, c.inputs);
    ASSERT_NE(layer, nullptr) << config.dump();
    EXPECT_EQ(layer->output_shape(), c.output) << config.dump();
    EXPECT_EQ(layer->num_inputs(), -2);
    SCOPED_TRACE(config.dump());
    CheckGradients(*layer);
  }
}

TEST(ConcatenateLayerTest, ForwardValuesByHand) {
  // Per example [2, 1] and [2, 2] on axis 2 (the last): rows interleave.
  auto layer = MakeLayer(CreateConcatenate, "Concatenate", {{"axis", 2}},
                         {{2, 1}, {2, 2}});
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->output_shape(), Shape({2, 3}));
  ExpectNear(RunForward(*layer, 2, {{1, 2, 3, 4}, {10, 11, 12, 13, 14, 15,
                                                   16, 17}}),
             {1, 10, 11, 2, 12, 13, 3, 14, 15, 4, 16, 17});
  // The same on axis 1 (the first per-example axis): blocks stack.
  layer = MakeLayer(CreateConcatenate, "Concatenate", {{"axis", 1}},
                    {{1, 2}, {2, 2}});
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->output_shape(), Shape({3, 2}));
  ExpectNear(RunForward(*layer, 2, {{1, 2, 3, 4}, {10, 11, 12, 13, 14, 15,
                                                   16, 17}}),
             {1, 2, 10, 11, 12, 13, 3, 4, 14, 15, 16, 17});
}

TEST(ConcatenateLayerTest, RefusesMismatchedShapesAndTheBatchAxis) {
  absl::Status s = MakeLayerStatus(CreateConcatenate, "Concatenate",
                                   {{"name", "cat"}, {"axis", -1}},
                                   {{2, 3}, {3, 3}});
  ExpectRefused(s, "layer 'cat' (Concatenate)");
  ExpectRefused(s, "[2, 3], [3, 3]");
  s = MakeLayerStatus(CreateConcatenate, "Concatenate", {{"name", "cat"}},
                      {{2, 3}, {3}});
  ExpectRefused(s, "[2, 3], [3]");
  s = MakeLayerStatus(CreateConcatenate, "Concatenate",
                      {{"name", "cat"}, {"axis", 0}}, {{2}, {2}});
  ExpectRefused(s, "argument 'axis'");
  s = MakeLayerStatus(CreateConcatenate, "Concatenate",
                      {{"name", "cat"}, {"axis", 3}}, {{2, 2}, {2, 2}});
  ExpectRefused(s, "argument 'axis'");
  s = MakeLayerStatus(CreateConcatenate, "Concatenate",
                      {{"name", "cat"}, {"axis", -3}}, {{2, 2}, {2, 2}});
  ExpectRefused(s, "argument 'axis'");
  s = MakeLayerStatus(CreateConcatenate, "Concatenate", {{"name", "cat"}},
                      {{2}});
  ExpectRefused(s, "at least 2 inputs");
  s = MakeLayerStatus(CreateConcatenate, "Concatenate",
                      {{"name", "cat"}, {"axis", "last"}}, {{2}, {2}});
  ExpectRefused(s, "argument 'axis'");
}

// ---------------------------------------------------------------------------
// Add and Multiply

TEST(AddLayerTest, ValuesAndGradientsWithTwoAndThreeInputs) {
  auto layer = MakeLayer(CreateAdd, "Add", {{"name", "add"}, {"trainable", true}},
                         {{2, 3}, {2, 3}});
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->output_shape(), Shape({2, 3}));
  CheckGradients(*layer);
  layer = MakeLayer(CreateAdd, "Add", json::object(), {{5}, {5}, {5}});
  ASSERT_NE(layer, nullptr);
  CheckGradients(*layer);
  ExpectNear(RunForward(*layer, 1, {{1, 2, 3, 4, 5}, {10, 20, 30, 40, 50},
                                    {-1, -1, 0.5, 0, 2}}),
             {10, 21, 33.5, 44, 57});
}

TEST(MultiplyLayerTest, ValuesAndGradientsWithTwoAndThreeInputs) {
  auto layer =
      MakeLayer(CreateMultiply, "Multiply", json::object(), {{3, 5}, {3, 5}});
  ASSERT_NE(layer, nullptr);
  CheckGradients(*layer);
  layer = MakeLayer(CreateMultiply, "Multiply", json::object(),
                    {{7}, {7}, {7}});
  ASSERT_NE(layer, nullptr);
  CheckGradients(*layer);
  ExpectNear(RunForward(*layer, 1, {{1, 2, 3, 4, 5, 6, 0},
                                    {2, 2, 2, -1, 0.5, 1, 3},
                                    {1, 3, -1, 2, 2, 0, 4}}),
             {2, 12, -6, -8, 5, 0, 0});
}

TEST(MultiplyLayerTest, GradientThroughAZeroInput) {
  // d(x0 x1 x2)/dx0 = x1 x2 even where x0 = 0 (no division).
  auto layer = MakeLayer(CreateMultiply, "Multiply", json::object(),
                         {{2}, {2}, {2}});
  ASSERT_NE(layer, nullptr);
  std::vector<Real> x0 = {0, 1}, x1 = {2, 0}, x2 = {3, 4};
  std::vector<Real> y = RunForward(*layer, 1, {x0, x1, x2});
  std::vector<Real> g = {1, 1};
  std::vector<Real> d0(2, 9), d1(2, 9), d2(2, 9);
  LayerScratch scratch;
  BackwardArgs b;
  b.batch = 1;
  b.inputs = {x0.data(), x1.data(), x2.data()};
  b.output = y.data();
  b.output_grad = g.data();
  b.input_grads = {d0.data(), d1.data(), d2.data()};
  b.scratch = &scratch;
  layer->Backward(b);
  ExpectNear(d0, {6, 0});
  ExpectNear(d1, {0, 4});
  ExpectNear(d2, {0, 0});
}

TEST(MergeLayerTest, AddAndMultiplyRefuseDifferentShapes) {
  for (auto factory : {CreateAdd, CreateMultiply}) {
    absl::Status s = MakeLayerStatus(factory, "Add", {{"name", "m"}},
                                     {{2, 3}, {2, 3}, {3, 2}});
    ExpectRefused(s, "[2, 3], [2, 3], [3, 2]");
    s = MakeLayerStatus(factory, "Add", {{"name", "m"}}, {{3}, {1}});
    ExpectRefused(s, "no broadcasting");
    s = MakeLayerStatus(factory, "Add", {{"name", "m"}}, {{3}});
    ExpectRefused(s, "at least 2 inputs");
    s = MakeLayerStatus(factory, "Add", {{"name", "m"}, {"axis", 1}},
                        {{3}, {3}});
    ExpectRefused(s, "argument 'axis'");
  }
}

// ---------------------------------------------------------------------------
// Dot

TEST(DotLayerTest, ShapesAndGradientsForEveryAxesChoice) {
  struct Case {
    json axes;
    std::vector<Shape> inputs;
    Shape output;
  };
  const Case cases[] = {
      {1, {{7}, {7}}, {1}},
      {-1, {{7}, {7}}, {1}},
      {2, {{3, 5}, {4, 5}}, {3, 4}},                  // [a, n] x [b, n]
      {-1, {{3, 5}, {4, 5}}, {3, 4}},
      {1, {{5, 3}, {5, 4}}, {3, 4}},                  // [n, a] x [n, b]
      {json::array({1, 2}), {{5, 3}, {4, 5}}, {3, 4}},
      {json::array({2, 1}), {{3, 5}, {5, 4}}, {3, 4}},  // matmul
      {json::array({-1, -2}), {{3, 5}, {5, 4}}, {3, 4}},
      {json::array({1, 1}), {{5}, {5, 4}}, {4}},      // mixed ranks
      {json::array({2, 1}), {{3, 5}, {5}}, {3}},
      {2, {{1, 5}, {1, 5}}, {1, 1}},
  };
  for (const Case& c : cases) {
    for (bool normalize : {false, true}) {
      json config = {{"axes", c.axes}, {"normalize", normalize}};
      auto layer = MakeLayer(CreateDot, "Dot", config, c.inputs);
      ASSERT_NE(layer, nullptr) << config.dump();
      EXPECT_EQ(layer->output_shape(), c.output) << config.dump();
      SCOPED_TRACE(config.dump());
      FiniteDifferenceOptions o;
      o.step = 1e-3;
      CheckGradients(*layer, o);
    }
  }
}

TEST(DotLayerTest, ForwardValuesByHand) {
  auto layer = MakeLayer(CreateDot, "Dot", {{"axes", 1}}, {{3}, {3}});
  ASSERT_NE(layer, nullptr);
  ExpectNear(RunForward(*layer, 2, {{1, 2, 3, 1, 0, -1}, {4, 5, 6, 2, 2, 2}}),
             {32, 0});
  layer = MakeLayer(CreateDot, "Dot", {{"axes", 1}, {"normalize", true}},
                    {{3}, {3}});
  ASSERT_NE(layer, nullptr);
  ExpectNear(RunForward(*layer, 2, {{1, 2, 3, 1, 0, 0}, {4, 5, 6, 0, 0, 0}}),
             {32 / (std::sqrt(14.0) * std::sqrt(77.0)), 0});
  // x = [[1, 2], [3, 4]], y = [[5, 6], [7, 8]] per example.
  const std::vector<std::vector<Real>> xy = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  layer = MakeLayer(CreateDot, "Dot", {{"axes", 2}}, {{2, 2}, {2, 2}});
  ASSERT_NE(layer, nullptr);
  ExpectNear(RunForward(*layer, 1, xy), {17, 23, 39, 53});  // x y^T
  layer = MakeLayer(CreateDot, "Dot", {{"axes", 1}}, {{2, 2}, {2, 2}});
  ASSERT_NE(layer, nullptr);
  ExpectNear(RunForward(*layer, 1, xy), {26, 30, 38, 44});  // x^T y
  layer = MakeLayer(CreateDot, "Dot", {{"axes", {2, 1}}}, {{2, 2}, {2, 2}});
  ASSERT_NE(layer, nullptr);
  ExpectNear(RunForward(*layer, 1, xy), {19, 22, 43, 50});  // x y
  layer = MakeLayer(CreateDot, "Dot", {{"axes", {1, 2}}}, {{2, 2}, {2, 2}});
  ASSERT_NE(layer, nullptr);
  ExpectNear(RunForward(*layer, 1, xy), {23, 31, 34, 46});  // x^T y^T
  // Cosine: rows of x against rows of y, each normalized.
  layer = MakeLayer(CreateDot, "Dot", {{"axes", 2}, {"normalize", true}},
                    {{2, 2}, {2, 2}});
  ASSERT_NE(layer, nullptr);
  const double nx[] = {std::sqrt(5.0), 5.0};
  const double ny[] = {std::sqrt(61.0), std::sqrt(113.0)};
  ExpectNear(RunForward(*layer, 1, xy),
             {17 / (nx[0] * ny[0]), 23 / (nx[0] * ny[1]),
              39 / (nx[1] * ny[0]), 53 / (nx[1] * ny[1])});
  // Normalized along axis 1 (the columns of x and y).
  layer = MakeLayer(CreateDot, "Dot", {{"axes", 1}, {"normalize", true}},
                    {{2, 2}, {2, 2}});
  ASSERT_NE(layer, nullptr);
  const double cx[] = {std::sqrt(10.0), std::sqrt(20.0)};
  const double cy[] = {std::sqrt(74.0), std::sqrt(100.0)};
  ExpectNear(RunForward(*layer, 1, xy),
             {26 / (cx[0] * cy[0]), 30 / (cx[0] * cy[1]),
              38 / (cx[1] * cy[0]), 44 / (cx[1] * cy[1])});
}

TEST(DotLayerTest, RefusesBadAxesAndShapes) {
  absl::Status s = MakeLayerStatus(CreateDot, "Dot", {{"name", "dot"}},
                                   {{3}, {3}});
  ExpectRefused(s, "argument 'axes': is required");
  s = MakeLayerStatus(CreateDot, "Dot", {{"name", "dot"}, {"axes", 0}},
                      {{3}, {3}});
  ExpectRefused(s, "argument 'axes'");
  ExpectRefused(s, "batch axis");
  s = MakeLayerStatus(CreateDot, "Dot", {{"name", "dot"}, {"axes", 2}},
                      {{3}, {3}});
  ExpectRefused(s, "argument 'axes'");
  s = MakeLayerStatus(CreateDot, "Dot", {{"name", "dot"}, {"axes", 2}},
                      {{3, 4}, {3, 5}});
  ExpectRefused(s, "layer 'dot' (Dot): argument 'axes'");
  ExpectRefused(s, "[3, 4], [3, 5]");
  s = MakeLayerStatus(CreateDot, "Dot", {{"name", "dot"}, {"axes", {1, 2, 1}}},
                      {{3}, {3}});
  ExpectRefused(s, "argument 'axes'");
  s = MakeLayerStatus(CreateDot, "Dot", {{"name", "dot"}, {"axes", -1}},
                      {{2, 3, 4}, {2, 3, 4}});
  ExpectRefused(s, "rank 1 or 2");
  s = MakeLayerStatus(CreateDot, "Dot", {{"name", "dot"}, {"axes", -1}},
                      {{3}, {3}, {3}});
  ExpectRefused(s, "takes 2 inputs");
  s = MakeLayerStatus(CreateDot, "Dot",
                      {{"name", "dot"}, {"axes", 1}, {"normalize", 1}},
                      {{3}, {3}});
  ExpectRefused(s, "argument 'normalize'");
  // Keras's full config is accepted.
  EXPECT_TRUE(MakeLayerStatus(CreateDot, "Dot",
                              {{"name", "dot"}, {"trainable", true},
                               {"dtype", "float32"}, {"axes", {2, 2}},
                               {"normalize", false}},
                              {{3, 4}, {5, 4}})
                  .ok());
}

}  // namespace
}  // namespace model
}  // namespace strata

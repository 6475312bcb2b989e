// Max/AveragePooling1D/2D and Global{Average,Max}Pooling1D/2D: gradients
// against central finite differences over every pool / stride / padding
// combination, hand-computed values, ties, Keras's arguments and refusals.
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
                              const std::vector<Real>& x,
                              LayerScratch* scratch) {
  ForwardArgs a;
  a.batch = batch;
  a.training = true;
  a.inputs = {x.data()};
  std::vector<Real> out(
      static_cast<size_t>(batch * NumElements(layer.output_shape())));
  a.output = out.data();
  a.scratch = scratch;
  layer.Forward(a);
  return out;
}

std::vector<Real> RunBackward(const Layer& layer, int64_t batch,
                               const std::vector<Real>& x,
                               const std::vector<Real>& out,
                               const std::vector<Real>& dy,
                               LayerScratch* scratch) {
  std::vector<Real> dx(x.size(), 777.0f);  // overwritten
  BackwardArgs a;
  a.batch = batch;
  a.inputs = {x.data()};
  a.output = out.data();
  a.output_grad = dy.data();
  a.input_grads = {dx.data()};
  a.scratch = scratch;
  layer.Backward(a);
  return dx;
}

// Max pooling copies inputs, so its differences are exact up to the
// rounding of x +- h: a small step keeps near-ties from flipping the max.
FiniteDifferenceOptions MaxOptions() {
  FiniteDifferenceOptions o;
  o.step = 1e-4;
  return o;
}

TEST(Pooling2DLayerTest, GradientsMatchFiniteDifferencesOverEveryCombination) {
  const std::vector<json> pools = {2, 3, json::array({3, 2})};
  const std::vector<json> strides = {nullptr, 1, 2, json::array({1, 3})};
  for (const char* padding : {"valid", "same"}) {
    for (const json& pool : pools) {
      for (const json& stride : strides) {
        const json config = {
            {"pool_size", pool}, {"strides", stride}, {"padding", padding}};
        SCOPED_TRACE(config.dump());
        auto max = MakeLayer(CreateMaxPooling2D, "MaxPooling2D", config,
                             {{7, 5, 3}});
        ASSERT_NE(max, nullptr);
        CheckGradients(*max, MaxOptions());
        auto avg = MakeLayer(CreateAveragePooling2D, "AveragePooling2D",
                             config, {{7, 5, 3}});
        ASSERT_NE(avg, nullptr);
        EXPECT_EQ(avg->output_shape(), max->output_shape());
        CheckGradients(*avg);
      }
    }
  }
}

TEST(Pooling1DLayerTest, GradientsMatchFiniteDifferencesOverEveryCombination) {
  for (const char* padding : {"valid", "same"}) {
    for (int pool : {1, 2, 3}) {
      for (const json& stride : {json(nullptr), json(1), json(2), json(4)}) {
        const json config = {
            {"pool_size", pool}, {"strides", stride}, {"padding", padding}};
        SCOPED_TRACE(config.dump());
        auto max = MakeLayer(CreateMaxPooling1D, "MaxPooling1D", config,
                             {{9, 2}});
        ASSERT_NE(max, nullptr);
        CheckGradients(*max, MaxOptions());
        auto avg = MakeLayer(CreateAveragePooling1D, "AveragePooling1D",
                             config, {{9, 2}});
        ASSERT_NE(avg, nullptr);
        CheckGradients(*avg);
      }
    }
  }
}

TEST(Pooling2DLayerTest, OutputShapesFollowKeras) {
  struct Case {
    json config;
    Shape in, out;
  };
  const std::vector<Case> cases = {
      {json::object(), {28, 28, 8}, {14, 14, 8}},
      {json::object(), {7, 5, 3}, {3, 2, 3}},
      {{{"padding", "same"}}, {7, 5, 3}, {4, 3, 3}},
      {{{"pool_size", 3}, {"strides", 1}}, {7, 5, 3}, {5, 3, 3}},
      {{{"pool_size", 3}, {"strides", 1}, {"padding", "same"}}, {7, 5, 3},
       {7, 5, 3}},
      {{{"pool_size", {3, 2}}, {"strides", {2, 1}}}, {7, 5, 1}, {3, 4, 1}},
      {{{"pool_size", 1}, {"strides", 3}, {"padding", "same"}}, {7, 5, 1},
       {3, 2, 1}},
  };
  for (const Case& c : cases) {
    for (auto factory : {CreateMaxPooling2D, CreateAveragePooling2D}) {
      auto layer = MakeLayer(factory, "Pooling", c.config, {c.in});
      ASSERT_NE(layer, nullptr) << c.config;
      EXPECT_EQ(layer->output_shape(), c.out) << c.config;
      EXPECT_TRUE(layer->weights().empty());
    }
  }
  auto p1 = MakeLayer(CreateMaxPooling1D, "MaxPooling1D",
                      {{"pool_size", 3}, {"strides", 2}}, {{10, 4}});
  ASSERT_NE(p1, nullptr);
  EXPECT_EQ(p1->output_shape(), Shape({4, 4}));
}

TEST(Pooling2DLayerTest, ForwardMatchesHandComputedValues) {
  // 1..9 on a 3x3 grid, one channel; pool 2, strides 2.
  const std::vector<Real> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  LayerScratch scratch;
  auto max_valid = MakeLayer(CreateMaxPooling2D, "MaxPooling2D",
                             json::object(), {{3, 3, 1}});
  ASSERT_NE(max_valid, nullptr);
  EXPECT_EQ(RunForward(*max_valid, 1, x, &scratch), std::vector<Real>({5}));
  // 'same': padding after (TF's rule); the padding never wins a max and is
  // left out of an average.
  auto max_same = MakeLayer(CreateMaxPooling2D, "MaxPooling2D",
                            {{"padding", "same"}}, {{3, 3, 1}});
  ASSERT_NE(max_same, nullptr);
  EXPECT_EQ(RunForward(*max_same, 1, {-1, -2, -3, -4, -5, -6, -7, -8, -9},
                       &scratch),
            std::vector<Real>({-1, -3, -7, -9}));
  auto avg_valid = MakeLayer(CreateAveragePooling2D, "AveragePooling2D",
                             json::object(), {{3, 3, 1}});
  ASSERT_NE(avg_valid, nullptr);
  EXPECT_EQ(RunForward(*avg_valid, 1, x, &scratch), std::vector<Real>({3}));
  auto avg_same = MakeLayer(CreateAveragePooling2D, "AveragePooling2D",
                            {{"padding", "same"}}, {{3, 3, 1}});
  ASSERT_NE(avg_same, nullptr);
  EXPECT_EQ(RunForward(*avg_same, 1, x, &scratch),
            std::vector<Real>({3, 4.5, 7.5, 9}));
  // Two channels pool independently.
  auto two = MakeLayer(CreateMaxPooling2D, "MaxPooling2D",
                       {{"pool_size", {1, 2}}}, {{1, 2, 2}});
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(RunForward(*two, 1, {1, 9, 5, 2}, &scratch),
            std::vector<Real>({5, 9}));
}

TEST(Pooling1DLayerTest, ForwardMatchesHandComputedValues) {
  const std::vector<Real> x = {1, 3, 2, 5, 4};
  LayerScratch scratch;
  auto max_valid =
      MakeLayer(CreateMaxPooling1D, "MaxPooling1D", json::object(), {{5, 1}});
  ASSERT_NE(max_valid, nullptr);
  EXPECT_EQ(RunForward(*max_valid, 1, x, &scratch),
            std::vector<Real>({3, 5}));
  auto max_same = MakeLayer(CreateMaxPooling1D, "MaxPooling1D",
                            {{"padding", "same"}}, {{5, 1}});
  ASSERT_NE(max_same, nullptr);
  EXPECT_EQ(RunForward(*max_same, 1, x, &scratch),
            std::vector<Real>({3, 5, 4}));
  auto avg_same = MakeLayer(CreateAveragePooling1D, "AveragePooling1D",
                            {{"padding", "same"}}, {{5, 1}});
  ASSERT_NE(avg_same, nullptr);
  EXPECT_EQ(RunForward(*avg_same, 1, x, &scratch),
            std::vector<Real>({2, 3.5, 4}));
  // Overlapping windows: pool 3, stride 1, 'same' pads one on each side.
  auto avg_overlap = MakeLayer(CreateAveragePooling1D, "AveragePooling1D",
                               {{"pool_size", 3}, {"strides", 1},
                                {"padding", "same"}},
                               {{5, 1}});
  ASSERT_NE(avg_overlap, nullptr);
  const std::vector<Real> overlap = RunForward(*avg_overlap, 1, x, &scratch);
  const std::vector<Real> want = {2, 2, 10.0f / 3, 11.0f / 3, 4.5};
  ASSERT_EQ(overlap.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_FLOAT_EQ(overlap[i], want[i]) << i;
  }
}

TEST(MaxPoolingLayerTest, BackwardRoutesToTheFirstMaximumOnTies) {
  auto layer =
      MakeLayer(CreateMaxPooling1D, "MaxPooling1D", json::object(), {{4, 1}});
  ASSERT_NE(layer, nullptr);
  LayerScratch scratch;
  const std::vector<Real> x = {2, 2, 1, 1};
  std::vector<Real> out = RunForward(*layer, 1, x, &scratch);
  EXPECT_EQ(RunBackward(*layer, 1, x, out, {10, 20}, &scratch),
            std::vector<Real>({10, 0, 20, 0}));
  // Overlapping windows that share a maximum add into it.
  auto overlap = MakeLayer(CreateMaxPooling2D, "MaxPooling2D",
                           {{"pool_size", 2}, {"strides", 1}}, {{2, 3, 1}});
  ASSERT_NE(overlap, nullptr);
  const std::vector<Real> y = {0, 9, 0, 1, 1, 1};
  out = RunForward(*overlap, 1, y, &scratch);
  EXPECT_EQ(out, std::vector<Real>({9, 9}));
  EXPECT_EQ(RunBackward(*overlap, 1, y, out, {1, 2}, &scratch),
            std::vector<Real>({0, 3, 0, 0, 0, 0}));
  auto global = MakeLayer(CreateGlobalMaxPooling1D, "GlobalMaxPooling1D",
                          json::object(), {{3, 2}});
  ASSERT_NE(global, nullptr);
  const std::vector<Real> z = {1, 5, 3, 5, 3, 0};
  out = RunForward(*global, 1, z, &scratch);
  EXPECT_EQ(out, std::vector<Real>({3, 5}));
  EXPECT_EQ(RunBackward(*global, 1, z, out, {10, 20}, &scratch),
            std::vector<Real>({0, 20, 10, 0, 0, 0}));
}

TEST(GlobalPoolingLayerTest, GradientsMatchFiniteDifferences) {
  for (bool keepdims : {false, true}) {
    const json config = {{"keepdims", keepdims}};
    auto gap1 = MakeLayer(CreateGlobalAveragePooling1D,
                          "GlobalAveragePooling1D", config, {{7, 3}});
    auto gmp1 = MakeLayer(CreateGlobalMaxPooling1D, "GlobalMaxPooling1D",
                          config, {{7, 3}});
    auto gap2 = MakeLayer(CreateGlobalAveragePooling2D,
                          "GlobalAveragePooling2D", config, {{5, 3, 4}});
    auto gmp2 = MakeLayer(CreateGlobalMaxPooling2D, "GlobalMaxPooling2D",
                          config, {{5, 3, 4}});
    ASSERT_TRUE(gap1 && gmp1 && gap2 && gmp2);
    EXPECT_EQ(gap1->output_shape(), keepdims ? Shape({1, 3}) : Shape({3}));
    EXPECT_EQ(gmp1->output_shape(), keepdims ? Shape({1, 3}) : Shape({3}));
    EXPECT_EQ(gap2->output_shape(),
              keepdims ? Shape({1, 1, 4}) : Shape({4}));
    EXPECT_EQ(gmp2->output_shape(),
              keepdims ? Shape({1, 1, 4}) : Shape({4}));
    CheckGradients(*gap1);
    CheckGradients(*gap2);
    CheckGradients(*gmp1, MaxOptions());
    CheckGradients(*gmp2, MaxOptions());
  }
}

TEST(GlobalPoolingLayerTest, ForwardMatchesHandComputedValues) {
  // [2, 2, 2]: channel 0 holds 1, 2, 3, 6; channel 1 holds -1, -2, -3, -4.
  const std::vector<Real> x = {1, -1, 2, -2, 3, -3, 6, -4};
  LayerScratch scratch;
  auto gap = MakeLayer(CreateGlobalAveragePooling2D, "GlobalAveragePooling2D",
                       json::object(), {{2, 2, 2}});
  auto gmp = MakeLayer(CreateGlobalMaxPooling2D, "GlobalMaxPooling2D",
                       json::object(), {{2, 2, 2}});
  ASSERT_TRUE(gap && gmp);
  EXPECT_EQ(RunForward(*gap, 1, x, &scratch),
            std::vector<Real>({3, -2.5}));
  EXPECT_EQ(RunForward(*gmp, 1, x, &scratch), std::vector<Real>({6, -1}));
  // Two examples.
  std::vector<Real> two = x;
  for (Real v : x) two.push_back(2 * v);
  EXPECT_EQ(RunForward(*gap, 2, two, &scratch),
            std::vector<Real>({3, -2.5, 6, -5}));
  std::vector<Real> out = RunForward(*gmp, 2, two, &scratch);
  EXPECT_EQ(out, std::vector<Real>({6, -1, 12, -2}));
  EXPECT_EQ(RunBackward(*gmp, 2, two, out, {1, 2, 3, 4}, &scratch),
            std::vector<Real>({0, 2, 0, 0, 0, 0, 1, 0,
                                0, 4, 0, 0, 0, 0, 3, 0}));
  EXPECT_EQ(RunBackward(*gap, 2, two, out, {4, 8, 12, 16}, &scratch),
            std::vector<Real>({1, 2, 1, 2, 1, 2, 1, 2,
                                3, 4, 3, 4, 3, 4, 3, 4}));
}

TEST(PoolingLayerTest, AcceptsEveryKeyKerasWrites) {
  // Keras 3's and tf.keras 2.x's get_config.
  EXPECT_NE(MakeLayer(CreateMaxPooling2D, "MaxPooling2D",
                      {{"name", "p"}, {"trainable", true},
                       {"dtype", "float32"}, {"pool_size", {2, 2}},
                       {"padding", "valid"}, {"strides", {2, 2}},
                       {"data_format", "channels_last"}},
                      {{4, 4, 1}}),
            nullptr);
  EXPECT_NE(MakeLayer(CreateAveragePooling1D, "AveragePooling1D",
                      {{"name", "p"}, {"pool_size", {2}}, {"padding", "SAME"},
                       {"strides", nullptr}, {"data_format", nullptr}},
                      {{4, 1}}),
            nullptr);
  EXPECT_NE(MakeLayer(CreateGlobalAveragePooling2D, "GlobalAveragePooling2D",
                      {{"name", "g"}, {"trainable", true},
                       {"dtype", "float32"},
                       {"data_format", "channels_last"}, {"keepdims", false}},
                      {{4, 4, 1}}),
            nullptr);
}

TEST(PoolingLayerTest, RefusesWhatItDoesNotSupport) {
  absl::Status s = MakeLayerStatus(CreateMaxPooling2D, "MaxPooling2D",
                                   {{"name", "p"}, {"pool_size", 3}},
                                   {{2, 5, 1}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 'p' (MaxPooling2D)"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("argument 'pool_size'"), std::string::npos) << s;
  // The same window fits with 'same' padding.
  EXPECT_TRUE(MakeLayerStatus(CreateMaxPooling2D, "MaxPooling2D",
                              {{"pool_size", 3}, {"padding", "same"}},
                              {{2, 5, 1}})
                  .ok());
  s = MakeLayerStatus(CreateAveragePooling1D, "AveragePooling1D",
                      {{"name", "p"}, {"pool_size", 4}}, {{3, 2}});
  EXPECT_NE(s.message().find("argument 'pool_size'"), std::string::npos) << s;
  s = MakeLayerStatus(CreateAveragePooling2D, "AveragePooling2D",
                      {{"name", "p"}, {"padding", "full"}}, {{4, 4, 1}});
  EXPECT_NE(s.message().find("argument 'padding'"), std::string::npos) << s;
  s = MakeLayerStatus(CreateMaxPooling1D, "MaxPooling1D",
                      {{"name", "p"}, {"padding", "causal"}}, {{4, 1}});
  EXPECT_NE(s.message().find("argument 'padding'"), std::string::npos) << s;
  s = MakeLayerStatus(CreateMaxPooling2D, "MaxPooling2D",
                      {{"name", "p"}, {"strides", 0}}, {{4, 4, 1}});
  EXPECT_NE(s.message().find("argument 'strides'"), std::string::npos) << s;
  s = MakeLayerStatus(CreateMaxPooling2D, "MaxPooling2D",
                      {{"name", "p"}, {"pool_size", {2, 2, 2}}}, {{4, 4, 1}});
  EXPECT_NE(s.message().find("argument 'pool_size'"), std::string::npos) << s;
  s = MakeLayerStatus(CreateMaxPooling2D, "MaxPooling2D",
                      {{"name", "p"}, {"data_format", "channels_first"}},
                      {{4, 4, 1}});
  EXPECT_NE(s.message().find("argument 'data_format'"), std::string::npos)
      << s;
  s = MakeLayerStatus(CreateGlobalAveragePooling2D, "GlobalAveragePooling2D",
                      {{"name", "g"}, {"keepdims", "yes"}}, {{4, 4, 1}});
  EXPECT_NE(s.message().find("argument 'keepdims'"), std::string::npos) << s;
}

TEST(PoolingLayerTest, RefusesWrongRanks) {
  struct Case {
    LayerOr (*factory)(ConfigReader*);
    const char* cls;
    Shape bad;
    const char* expects;
  };
  const std::vector<Case> cases = {
      {CreateMaxPooling2D, "MaxPooling2D", {16}, "(height, width, channels)"},
      {CreateAveragePooling2D, "AveragePooling2D", {4, 4},
       "(height, width, channels)"},
      {CreateMaxPooling1D, "MaxPooling1D", {4, 4, 1}, "(steps, channels)"},
      {CreateAveragePooling1D, "AveragePooling1D", {8}, "(steps, channels)"},
      {CreateGlobalAveragePooling2D, "GlobalAveragePooling2D", {4, 4},
       "(height, width, channels)"},
      {CreateGlobalMaxPooling2D, "GlobalMaxPooling2D", {2, 4, 4, 1},
       "(height, width, channels)"},
      {CreateGlobalAveragePooling1D, "GlobalAveragePooling1D", {4, 4, 1},
       "(steps, channels)"},
      {CreateGlobalMaxPooling1D, "GlobalMaxPooling1D", {8},
       "(steps, channels)"},
  };
  for (const Case& c : cases) {
    absl::Status s =
        MakeLayerStatus(c.factory, c.cls, {{"name", "q"}}, {c.bad});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.cls;
    EXPECT_NE(s.message().find(std::string("layer 'q' (") + c.cls + ")"),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find(c.expects), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace model
}  // namespace strata

// Conv1D and Conv2D: gradients against central finite differences over
// every padding / stride / dilation combination, a naive convolution as
// reference on a batch large enough to split the input gradient in chunks,
// hand-computed values, Keras's arguments and refusals.
#include <algorithm>
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
using testing::MakeLayer;
using testing::MakeLayerStatus;

// Forward on `x` (batch examples) with `weights`; returns the output.
std::vector<Real> RunForward(const Layer& layer, int64_t batch,
                              const std::vector<Real>& x,
                              const std::vector<std::vector<Real>>& weights,
                              LayerScratch* scratch) {
  ForwardArgs a;
  a.batch = batch;
  a.training = true;
  a.inputs = {x.data()};
  for (const auto& w : weights) a.weights.emplace_back(w.data(), w.size());
  a.state_out.assign(weights.size(), nullptr);
  std::vector<Real> out(
      static_cast<size_t>(batch * NumElements(layer.output_shape())));
  a.output = out.data();
  a.scratch = scratch;
  layer.Forward(a);
  return out;
}

struct Grads {
  std::vector<Real> dx;
  std::vector<std::vector<Real>> dw;
};

Grads RunBackward(const Layer& layer, int64_t batch,
                  const std::vector<Real>& x,
                  const std::vector<std::vector<Real>>& weights,
                  const std::vector<Real>& out,
                  const std::vector<Real>& out_grad, LayerScratch* scratch,
                  bool grad_is_preactivation = false) {
  Grads g;
  g.dx.assign(x.size(), 777.0f);  // overwritten, not accumulated
  BackwardArgs a;
  a.batch = batch;
  a.inputs = {x.data()};
  for (const auto& w : weights) a.weights.emplace_back(w.data(), w.size());
  a.output = out.data();
  a.output_grad = out_grad.data();
  a.grad_is_preactivation = grad_is_preactivation;
  a.input_grads = {g.dx.data()};
  for (const auto& w : weights) g.dw.emplace_back(w.size(), 777.0f);
  for (auto& w : g.dw) a.weight_grads.push_back(w.data());
  a.scratch = scratch;
  layer.Backward(a);
  return g;
}

std::vector<Real> Random(size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<Real> uni(-1.0f, 1.0f);
  std::vector<Real> v(n);
  for (Real& x : v) x = uni(*rng);
  return v;
}

// TensorFlow's output size and leading padding of one axis.
void Axis(const std::string& padding, int64_t in, int64_t k, int64_t s,
          int64_t d, int64_t* out, int64_t* before) {
  const int64_t eff = (k - 1) * d + 1;
  if (padding == "valid") {
    *out = (in - eff) / s + 1;
    *before = 0;
  } else if (padding == "same") {
    *out = (in + s - 1) / s;
    *before = std::max<int64_t>((*out - 1) * s + eff - in, 0) / 2;
  } else {
    *out = (in + s - 1) / s;
    *before = eff - 1;
  }
}

// A naive channels-last 2-D convolution (no activation) and its gradients,
// in double.
struct NaiveConv {
  int64_t h, w, c, kh, kw, sh, sw, dh, dw, f;
  std::string padding;
  int64_t oh = 0, ow = 0, pt = 0, pl = 0;

  void Setup() {
    Axis(padding, h, kh, sh, dh, &oh, &pt);
    Axis(padding, w, kw, sw, dw, &ow, &pl);
  }
  // Calls fn(x index, w index, out index) for every product term.
  template <typename Fn>
  void Each(int64_t batch, Fn fn) const {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t iy = oy * sh - pt + ky * dh;
              const int64_t ix = ox * sw - pl + kx * dw;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              for (int64_t ci = 0; ci < c; ++ci)
                for (int64_t fo = 0; fo < f; ++fo)
                  fn(((b * h + iy) * w + ix) * c + ci,
                     ((ky * kw + kx) * c + ci) * f + fo,
                     ((b * oh + oy) * ow + ox) * f + fo);
            }
  }
};

void ExpectClose(const std::vector<Real>& got, const std::vector<double>& want,
                 double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i])))
        << what << " element " << i;
  }
}

TEST(Conv2DLayerTest, GradientsMatchFiniteDifferencesOverEveryCombination) {
  struct Case {
    json strides, dilation;
  };
  const std::vector<Case> cases = {
      {1, 1}, {2, 1}, {json::array({2, 1}), 1}, {json::array({1, 3}), 1},
      {1, 2}, {1, json::array({2, 1})}, {1, json::array({1, 3})}};
  for (const char* padding : {"valid", "same"}) {
    for (const Case& c : cases) {
      for (const json& kernel : {json(3), json::array({3, 2})}) {
        const json config = {{"filters", 4},
                             {"kernel_size", kernel},
                             {"strides", c.strides},
                             {"dilation_rate", c.dilation},
                             {"padding", padding}};
        auto layer = MakeLayer(CreateConv2D, "Conv2D", config, {{7, 9, 3}});
        ASSERT_NE(layer, nullptr) << config;
        SCOPED_TRACE(config.dump());
        CheckGradients(*layer);
      }
    }
  }
}

TEST(Conv2DLayerTest, GradientsWithActivationsNoBiasAndOneByOne) {
  for (const char* act : {"tanh", "sigmoid", "softmax", "elu", "gelu"}) {
    auto layer = MakeLayer(
        CreateConv2D, "Conv2D",
        {{"filters", 3}, {"kernel_size", 2}, {"activation", act},
         {"padding", "same"}},
        {{5, 3, 2}});
    ASSERT_NE(layer, nullptr) << act;
    EXPECT_EQ(layer->output_activation(), act);
    CheckGradients(*layer);
  }
  // 1x1 stride 1: the input is its own im2col.
  for (const char* padding : {"valid", "same"}) {
    auto layer = MakeLayer(CreateConv2D, "Conv2D",
                           {{"filters", 5}, {"kernel_size", 1},
                            {"use_bias", false}, {"padding", padding}},
                           {{3, 5, 4}});
    ASSERT_NE(layer, nullptr);
    EXPECT_EQ(layer->weights().size(), 1u);
    EXPECT_EQ(layer->output_shape(), Shape({3, 5, 5}));
    CheckGradients(*layer);
  }
  // 1x1 with stride 2 goes through im2col.
  auto strided = MakeLayer(CreateConv2D, "Conv2D",
                           {{"filters", 2}, {"kernel_size", 1},
                            {"strides", 2}},
                           {{5, 5, 3}});
  ASSERT_NE(strided, nullptr);
  EXPECT_EQ(strided->output_shape(), Shape({3, 3, 2}));
  CheckGradients(*strided);
}

TEST(Conv2DLayerTest, OutputShapesAndWeightsFollowKeras) {
  struct Case {
    json config;
    Shape in, out;
  };
  const std::vector<Case> cases = {
      {{{"filters", 8}, {"kernel_size", 3}}, {28, 28, 1}, {26, 26, 8}},
      {{{"filters", 8}, {"kernel_size", 3}, {"padding", "same"}},
       {28, 28, 1}, {28, 28, 8}},
      {{{"filters", 2}, {"kernel_size", 3}, {"strides", 2}}, {7, 8, 3},
       {3, 3, 2}},
      {{{"filters", 2}, {"kernel_size", 3}, {"strides", 2},
        {"padding", "same"}}, {7, 8, 3}, {4, 4, 2}},
      {{{"filters", 2}, {"kernel_size", 3}, {"dilation_rate", 2}}, {7, 8, 3},
       {3, 4, 2}},
      {{{"filters", 2}, {"kernel_size", {2, 5}}, {"strides", {1, 3}},
        {"padding", "same"}}, {4, 10, 1}, {4, 4, 2}},
  };
  for (const Case& c : cases) {
    auto layer = MakeLayer(CreateConv2D, "Conv2D", c.config, {c.in});
    ASSERT_NE(layer, nullptr) << c.config;
    EXPECT_EQ(layer->output_shape(), c.out) << c.config;
    ASSERT_EQ(layer->weights().size(), 2u);
    EXPECT_EQ(layer->weights()[0].name, "kernel");
    EXPECT_EQ(layer->weights()[1].name, "bias");
    const json k = c.config["kernel_size"];
    const int64_t kh = k.is_array() ? k[0].get<int64_t>() : k.get<int64_t>();
    const int64_t kw = k.is_array() ? k[1].get<int64_t>() : k.get<int64_t>();
    EXPECT_EQ(layer->weights()[0].shape,
              Shape({kh, kw, c.in[2], c.config["filters"].get<int64_t>()}));
    EXPECT_EQ(layer->weights()[1].shape,
              Shape({c.config["filters"].get<int64_t>()}));
    EXPECT_EQ(layer->weights()[0].init.type, InitializerType::kGlorotUniform);
    EXPECT_EQ(layer->weights()[1].init.type, InitializerType::kZeros);
  }
}

TEST(Conv2DLayerTest, ForwardMatchesHandComputedValues) {
  // x = 1..9 on a 3x3 grid, one channel; kernel [[1, 2], [3, 4]], bias 1.
  std::vector<Real> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<std::vector<Real>> weights = {{1, 2, 3, 4}, {1}};
  LayerScratch scratch;
  auto valid = MakeLayer(CreateConv2D, "Conv2D",
                         {{"filters", 1}, {"kernel_size", 2}}, {{3, 3, 1}});
  ASSERT_NE(valid, nullptr);
  EXPECT_EQ(RunForward(*valid, 1, x, weights, &scratch),
            std::vector<Real>({38, 48, 68, 78}));
  // 'same' with stride 2: one row / column of padding, after (TF's rule).
  auto same = MakeLayer(CreateConv2D, "Conv2D",
                        {{"filters", 1}, {"kernel_size", 2}, {"strides", 2},
                         {"padding", "same"}},
                        {{3, 3, 1}});
  ASSERT_NE(same, nullptr);
  EXPECT_EQ(RunForward(*same, 1, x, weights, &scratch),
            std::vector<Real>({38, 22, 24, 10}));
  // Two filters, relu: the second filter is the negated first.
  auto relu = MakeLayer(CreateConv2D, "Conv2D",
                        {{"filters", 2}, {"kernel_size", 2},
                         {"activation", "relu"}, {"use_bias", false}},
                        {{3, 3, 1}});
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(relu->output_activation(), "relu");
  EXPECT_EQ(RunForward(*relu, 1, x, {{1, -1, 2, -2, 3, -3, 4, -4}}, &scratch),
            std::vector<Real>({37, 0, 47, 0, 67, 0, 77, 0}));
}

TEST(Conv2DLayerTest, MatchesNaiveConvolutionAcrossInputGradientChunks) {
  // batch * oh * ow * kh * kw * c well over the 2^20 floats of one dCols
  // chunk, with padding, stride and dilation on the edges.
  struct Case {
    json config;
    NaiveConv naive;
    int64_t batch;
  };
  const std::vector<Case> cases = {
      {{{"filters", 6}, {"kernel_size", 3}, {"padding", "same"}},
       {33, 31, 16, 3, 3, 1, 1, 1, 1, 6, "same"}, 8},
      {{{"filters", 5}, {"kernel_size", {3, 2}}, {"strides", {2, 3}},
        {"padding", "same"}},
       {34, 29, 9, 3, 2, 2, 3, 1, 1, 5, "same"}, 120},
      {{{"filters", 3}, {"kernel_size", 3}, {"dilation_rate", {2, 3}}},
       {30, 33, 12, 3, 3, 1, 1, 2, 3, 3, "valid"}, 20},
  };
  std::mt19937 rng(11);
  for (Case c : cases) {
    SCOPED_TRACE(c.config.dump());
    NaiveConv& n = c.naive;
    n.Setup();
    auto layer = MakeLayer(CreateConv2D, "Conv2D", c.config, {{n.h, n.w, n.c}});
    ASSERT_NE(layer, nullptr);
    ASSERT_EQ(layer->output_shape(), Shape({n.oh, n.ow, n.f}));
    std::vector<Real> x =
        Random(static_cast<size_t>(c.batch * n.h * n.w * n.c), &rng);
    std::vector<std::vector<Real>> weights = {
        Random(static_cast<size_t>(n.kh * n.kw * n.c * n.f), &rng),
        Random(static_cast<size_t>(n.f), &rng)};
    const size_t out_n = static_cast<size_t>(c.batch * n.oh * n.ow * n.f);
    std::vector<Real> dy = Random(out_n, &rng);
    std::vector<double> y(out_n), dx(x.size()), dw(weights[0].size()),
        db(n.f);
    for (size_t i = 0; i < out_n; ++i) {
      y[i] = weights[1][i % n.f];
      db[i % n.f] += dy[i];
    }
    n.Each(c.batch, [&](int64_t xi, int64_t wi, int64_t oi) {
      y[oi] += double{x[xi]} * weights[0][wi];
      dx[xi] += double{dy[oi]} * weights[0][wi];
      dw[wi] += double{dy[oi]} * x[xi];
    });
    LayerScratch scratch;
    std::vector<Real> out = RunForward(*layer, c.batch, x, weights, &scratch);
    ExpectClose(out, y, 1e-4, "output");
    Grads g = RunBackward(*layer, c.batch, x, weights, out, dy, &scratch);
    ExpectClose(g.dx, dx, 1e-4, "input grad");
    ExpectClose(g.dw[0], dw, 1e-3, "kernel grad");
    ExpectClose(g.dw[1], db, 1e-3, "bias grad");
  }
}

TEST(Conv2DLayerTest, GradIsPreactivationSkipsTheActivation) {
  const Shape in = {4, 5, 2};
  auto softmax = MakeLayer(CreateConv2D, "Conv2D",
                           {{"filters", 3}, {"kernel_size", 2},
                            {"activation", "softmax"}},
                           {in});
  auto linear = MakeLayer(CreateConv2D, "Conv2D",
                          {{"filters", 3}, {"kernel_size", 2}}, {in});
  ASSERT_NE(softmax, nullptr);
  ASSERT_NE(linear, nullptr);
  std::mt19937 rng(5);
  std::vector<Real> x = Random(2 * 40, &rng);
  std::vector<std::vector<Real>> weights = {Random(2 * 2 * 2 * 3, &rng),
                                             Random(3, &rng)};
  LayerScratch s1, s2;
  std::vector<Real> out1 = RunForward(*softmax, 2, x, weights, &s1);
  std::vector<Real> out2 = RunForward(*linear, 2, x, weights, &s2);
  std::vector<Real> dz = Random(out1.size(), &rng);
  Grads g1 = RunBackward(*softmax, 2, x, weights, out1, dz, &s1, true);
  Grads g2 = RunBackward(*linear, 2, x, weights, out2, dz, &s2);
  EXPECT_EQ(g1.dx, g2.dx);
  EXPECT_EQ(g1.dw, g2.dw);
}

TEST(Conv2DLayerTest, AcceptsEveryKeyKerasWrites) {
  // Keras 3's get_config (tf.keras 2.x writes the same keys).
  const json config = {
      {"name", "conv2d"}, {"trainable", true},
      {"dtype", {{"module", "keras"}, {"class_name", "DTypePolicy"},
                 {"config", {{"name", "float32"}}}}},
      {"filters", 4}, {"kernel_size", {3, 3}}, {"strides", {1, 1}},
      {"padding", "valid"}, {"data_format", "channels_last"},
      {"dilation_rate", {1, 1}}, {"groups", 1}, {"activation", "relu"},
      {"use_bias", true},
      {"kernel_initializer", {{"module", "keras.initializers"},
                              {"class_name", "GlorotUniform"},
                              {"config", {{"seed", nullptr}}}}},
      {"bias_initializer", {{"module", "keras.initializers"},
                            {"class_name", "Zeros"}, {"config", json::object()}}},
      {"kernel_regularizer", {{"class_name", "L2"},
                              {"config", {{"l2", 0.001}}}}},
      {"bias_regularizer", nullptr}, {"activity_regularizer", nullptr},
      {"kernel_constraint", nullptr}, {"bias_constraint", nullptr}};
  auto layer = MakeLayer(CreateConv2D, "Conv2D", config, {{6, 6, 2}});
  ASSERT_NE(layer, nullptr);
  EXPECT_DOUBLE_EQ(layer->weights()[0].l2, 0.001);
  auto conv1d = MakeLayer(CreateConv1D, "Conv1D",
                          {{"filters", 4}, {"kernel_size", {3}},
                           {"strides", {1}}, {"dilation_rate", {1}},
                           {"groups", 1}, {"padding", "causal"},
                           {"data_format", "channels_last"}},
                          {{6, 2}});
  ASSERT_NE(conv1d, nullptr);
}

TEST(Conv2DLayerTest, RefusesWhatItDoesNotSupport) {
  const json base = {{"name", "c"}, {"filters", 2}, {"kernel_size", 3}};
  auto with = [&](const char* key, const json& value) {
    json c = base;
    c[key] = value;
    return c;
  };
  absl::Status s = MakeLayerStatus(CreateConv2D, "Conv2D", base, {{784}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 'c' (Conv2D)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("(height, width, channels)"), std::string::npos)
      << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D", base, {{2, 5, 1}});
  EXPECT_NE(s.message().find("argument 'kernel_size'"), std::string::npos)
      << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D", with("dilation_rate", 3),
                      {{6, 6, 1}});
  EXPECT_NE(s.message().find("argument 'kernel_size'"), std::string::npos)
      << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D", with("padding", "full"),
                      {{6, 6, 1}});
  EXPECT_NE(s.message().find("argument 'padding'"), std::string::npos) << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D", with("padding", "causal"),
                      {{6, 6, 1}});
  EXPECT_NE(s.message().find("argument 'padding'"), std::string::npos) << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D", with("groups", 2), {{6, 6, 2}});
  EXPECT_NE(s.message().find("argument 'groups'"), std::string::npos) << s;
  json strided = with("strides", 2);
  strided["dilation_rate"] = 2;
  s = MakeLayerStatus(CreateConv2D, "Conv2D", strided, {{9, 9, 1}});
  EXPECT_NE(s.message().find("argument 'dilation_rate'"), std::string::npos)
      << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D", with("kernel_size", {3, 3, 3}),
                      {{6, 6, 1}});
  EXPECT_NE(s.message().find("argument 'kernel_size'"), std::string::npos)
      << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D", with("strides", 0), {{6, 6, 1}});
  EXPECT_NE(s.message().find("argument 'strides'"), std::string::npos) << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D",
                      {{"name", "c"}, {"kernel_size", 3}}, {{6, 6, 1}});
  EXPECT_NE(s.message().find("argument 'filters'"), std::string::npos) << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D", {{"name", "c"}, {"filters", 2}},
                      {{6, 6, 1}});
  EXPECT_NE(s.message().find("argument 'kernel_size'"), std::string::npos)
      << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D",
                      with("data_format", "channels_first"), {{6, 6, 1}});
  EXPECT_NE(s.message().find("argument 'data_format'"), std::string::npos)
      << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D", with("lora_rank", 4),
                      {{6, 6, 1}});
  EXPECT_NE(s.message().find("argument 'lora_rank'"), std::string::npos) << s;
  s = MakeLayerStatus(CreateConv2D, "Conv2D",
                      with("kernel_constraint", "max_norm"), {{6, 6, 1}});
  EXPECT_NE(s.message().find("argument 'kernel_constraint'"),
            std::string::npos) << s;
}

TEST(Conv1DLayerTest, GradientsMatchFiniteDifferencesOverEveryCombination) {
  for (const char* padding : {"valid", "same", "causal"}) {
    for (int strides : {1, 2, 3}) {
      for (int dilation : {1, 2}) {
        if (strides > 1 && dilation > 1) continue;  // refused, as Keras
        for (int kernel : {1, 3}) {
          const json config = {{"filters", 3},
                               {"kernel_size", kernel},
                               {"strides", strides},
                               {"dilation_rate", dilation},
                               {"padding", padding}};
          auto layer = MakeLayer(CreateConv1D, "Conv1D", config, {{11, 2}});
          ASSERT_NE(layer, nullptr) << config;
          SCOPED_TRACE(config.dump());
          CheckGradients(*layer);
        }
      }
    }
  }
  auto tanh = MakeLayer(CreateConv1D, "Conv1D",
                        {{"filters", 2}, {"kernel_size", 4},
                         {"activation", "tanh"}, {"use_bias", false}},
                        {{9, 3}});
  ASSERT_NE(tanh, nullptr);
  EXPECT_EQ(tanh->output_activation(), "tanh");
  CheckGradients(*tanh);
}

TEST(Conv1DLayerTest, OutputShapesAndWeightsFollowKeras) {
  struct Case {
    json config;
    Shape out;
  };
  const Shape in = {10, 3};
  const std::vector<Case> cases = {
      {{{"filters", 4}, {"kernel_size", 3}}, {8, 4}},
      {{{"filters", 4}, {"kernel_size", 3}, {"padding", "same"}}, {10, 4}},
      {{{"filters", 4}, {"kernel_size", 3}, {"padding", "causal"}}, {10, 4}},
      {{{"filters", 4}, {"kernel_size", 3}, {"padding", "causal"},
        {"strides", 3}}, {4, 4}},
      {{{"filters", 4}, {"kernel_size", 3}, {"strides", 3}}, {3, 4}},
      {{{"filters", 4}, {"kernel_size", 3}, {"dilation_rate", 4}}, {2, 4}},
  };
  for (const Case& c : cases) {
    auto layer = MakeLayer(CreateConv1D, "Conv1D", c.config, {in});
    ASSERT_NE(layer, nullptr) << c.config;
    EXPECT_EQ(layer->output_shape(), c.out) << c.config;
    EXPECT_EQ(layer->weights()[0].shape, Shape({3, 3, 4}));
    EXPECT_EQ(layer->weights()[1].shape, Shape({4}));
  }
}

TEST(Conv1DLayerTest, CausalForwardMatchesHandComputedValues) {
  // out[t] = x[t - 1] * 1 + x[t] * 10 (x[-1] = 0).
  auto layer = MakeLayer(CreateConv1D, "Conv1D",
                         {{"filters", 1}, {"kernel_size", 2},
                          {"padding", "causal"}, {"use_bias", false}},
                         {{4, 1}});
  ASSERT_NE(layer, nullptr);
  LayerScratch scratch;
  EXPECT_EQ(RunForward(*layer, 1, {1, 2, 3, 4}, {{1, 10}}, &scratch),
            std::vector<Real>({10, 21, 32, 43}));
  // Dilation 2: out[t] = x[t - 2] + 10 x[t].
  auto dilated = MakeLayer(CreateConv1D, "Conv1D",
                           {{"filters", 1}, {"kernel_size", 2},
                            {"padding", "causal"}, {"dilation_rate", 2},
                            {"use_bias", false}},
                           {{4, 1}});
  ASSERT_NE(dilated, nullptr);
  EXPECT_EQ(RunForward(*dilated, 1, {1, 2, 3, 4}, {{1, 10}}, &scratch),
            std::vector<Real>({10, 20, 31, 42}));
}

TEST(Conv1DLayerTest, RefusesWrongRanksAndBigKernels) {
  const json base = {{"name", "c1"}, {"filters", 2}, {"kernel_size", 3}};
  absl::Status s = MakeLayerStatus(CreateConv1D, "Conv1D", base, {{5, 5, 1}});
  EXPECT_NE(s.message().find("layer 'c1' (Conv1D)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("(steps, channels)"), std::string::npos) << s;
  s = MakeLayerStatus(CreateConv1D, "Conv1D", base, {{2, 1}});
  EXPECT_NE(s.message().find("argument 'kernel_size'"), std::string::npos)
      << s;
  json groups = base;
  groups["groups"] = 2;
  s = MakeLayerStatus(CreateConv1D, "Conv1D", groups, {{6, 2}});
  EXPECT_NE(s.message().find("argument 'groups'"), std::string::npos) << s;
}

}  // namespace
}  // namespace model
}  // namespace strata

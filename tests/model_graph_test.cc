// The layer graph (model/graph.h) and Keras's model format
// (model/keras_format.h): fixtures written from Keras's documented
// to_json() layout (tf.keras 2.x and Keras 3), shapes and variables, whole
// graph gradients against finite differences, and refused models.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/graph.h"
#include "model/keras_format.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace model {
namespace {

using nlohmann::json;

json Fixture(const std::string& name) {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/tests/data/keras/" +
                   name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

Graph MustBuild(const json& j, uint64_t seed = 1) {
  absl::StatusOr<GraphSpec> spec = ParseKerasModel(j, "job.model");
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<Graph> g = Graph::Build(*spec, seed, "job.model");
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(*g);
}

absl::Status BuildStatus(const json& j) {
  absl::StatusOr<GraphSpec> spec = ParseKerasModel(j, "job.model");
  if (!spec.ok()) return spec.status();
  return Graph::Build(*spec, 1, "job.model").status();
}

std::vector<std::string> Names(const std::vector<GraphVariable>& vars) {
  std::vector<std::string> out;
  for (const auto& v : vars) out.push_back(v.name);
  return out;
}

TEST(KerasFormatTest, TfKeras2SequentialCnn) {
  Graph g = MustBuild(Fixture("cnn_tf_keras2.json"));
  EXPECT_EQ(g.num_features(), 784);
  EXPECT_EQ(g.inputs()[0].shape, Shape({28, 28, 1}));
  EXPECT_EQ(Names(g.variables()),
            (std::vector<std::string>{"conv2d/kernel", "conv2d/bias",
                                      "dense/kernel", "dense/bias",
                                      "dense_1/kernel", "dense_1/bias"}));
  EXPECT_EQ(g.variables()[0].shape, Shape({3, 3, 1, 32}));
  EXPECT_EQ(g.variables()[2].shape, Shape({13 * 13 * 32, 64}));
  EXPECT_EQ(g.output_shape(0), Shape({10}));
  EXPECT_EQ(g.output_layer(0).output_activation(), "linear");
  EXPECT_TRUE(g.states().empty());
  // Unseeded initializers take the model seed plus the layer's index.
  EXPECT_EQ(g.variables()[0].init.seed, 1u);
  EXPECT_EQ(g.variables()[4].init.seed, 1u + 4);
}

TEST(KerasFormatTest, Keras3SequentialWithBatchNormalization) {
  Graph g = MustBuild(Fixture("cnn_keras3.json"));
  EXPECT_EQ(g.num_features(), 784);
  EXPECT_EQ(Names(g.states()),
            (std::vector<std::string>{"batch_normalization/moving_mean",
                                      "batch_normalization/moving_variance"}));
  EXPECT_EQ(Names(g.variables()),
            (std::vector<std::string>{
                "conv2d/kernel", "conv2d/bias", "batch_normalization/gamma",
                "batch_normalization/beta", "dense/kernel", "dense/bias"}));
  EXPECT_DOUBLE_EQ(g.variables()[4].l2, 0.0001);
  EXPECT_EQ(g.output_layer(0).output_activation(), "softmax");
}

TEST(KerasFormatTest, Keras3FunctionalResidualBlock) {
  Graph g = MustBuild(Fixture("resnet_block_keras3.json"));
  EXPECT_EQ(g.num_layers(), 10);
  EXPECT_EQ(g.output_shape(0), Shape({10}));
  EXPECT_EQ(g.states().size(), 4u);
  EXPECT_TRUE(g.HasLayerClass("Add"));
}

TEST(KerasFormatTest, TfKeras2FunctionalTwoInputsAndASharedLayer) {
  Graph g = MustBuild(Fixture("wide_deep_tf_keras2.json"));
  ASSERT_EQ(g.inputs().size(), 2u);
  EXPECT_EQ(g.inputs()[0].name, "wide");
  EXPECT_EQ(g.inputs()[1].shape, Shape({4, 3}));
  EXPECT_EQ(g.num_features(), 18);
  // The shared layer's kernel once, though it is called twice.
  EXPECT_EQ(Names(g.variables()),
            (std::vector<std::string>{"hidden/kernel", "hidden/bias",
                                      "shared/kernel", "output/kernel",
                                      "output/bias"}));
  EXPECT_EQ(g.variables()[0].init.seed, 3u);  // the config's seed
  EXPECT_DOUBLE_EQ(g.variables()[0].l1, 0.001);
  EXPECT_EQ(g.variables()[3].shape, Shape({11, 3}));
}

TEST(KerasFormatTest, ToKerasJsonReadsBack) {
  for (const char* name : {"cnn_tf_keras2.json", "cnn_keras3.json",
                           "resnet_block_keras3.json",
                           "wide_deep_tf_keras2.json"}) {
    absl::StatusOr<GraphSpec> spec = ParseKerasModel(Fixture(name), "m");
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<GraphSpec> back = ParseKerasModel(ToKerasJson(*spec), "m");
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    absl::StatusOr<Graph> a = Graph::Build(*spec, 5, "m");
    absl::StatusOr<Graph> b = Graph::Build(*back, 5, "m");
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    EXPECT_EQ(Names(a->variables()), Names(b->variables())) << name;
    EXPECT_EQ(a->num_features(), b->num_features()) << name;
  }
}

// L = sum r * output over the batch; every variable's and the input's
// gradient from Backward against central differences.
void CheckGraphGradients(const Graph& g, int64_t batch, double step,
                         double tol) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<std::vector<float>> params;
  for (const GraphVariable& v : g.variables()) {
    std::vector<float> p(static_cast<size_t>(NumElements(v.shape)));
    for (float& x : p) x = 0.3f * uni(rng);
    params.push_back(std::move(p));
  }
  std::vector<std::vector<float>> states;
  for (const GraphVariable& v : g.states()) {
    std::vector<float> p(static_cast<size_t>(NumElements(v.shape)));
    for (float& x : p) x = v.name.find("variance") != std::string::npos
                               ? 1.0f + 0.5f * std::fabs(uni(rng))
                               : 0.2f * uni(rng);
    states.push_back(std::move(p));
  }
  std::vector<float> x(static_cast<size_t>(batch * g.num_features()));
  for (float& v : x) v = uni(rng);
  const int64_t out_n = batch * NumElements(g.output_shape(0));
  std::vector<float> r(static_cast<size_t>(out_n));
  for (float& v : r) v = uni(rng);
  GraphWorkspace ws;
  auto views = [](const std::vector<std::vector<float>>& v) {
    std::vector<absl::Span<const float>> out;
    for (const auto& e : v) out.emplace_back(e);
    return out;
  };
  auto loss = [&]() {
    std::vector<std::vector<float>> new_state;
    absl::Status s = g.Forward(views(params), views(states), x.data(), batch,
                               true, 3, &ws, &new_state);
    EXPECT_TRUE(s.ok()) << s;
    const float* out = g.Output(ws, 0);
    double l = 0;
    for (int64_t i = 0; i < out_n; ++i) l += double{r[i]} * out[i];
    return l;
  };
  loss();
  std::vector<std::vector<float>> grads;
  std::vector<float> dx(x.size());
  g.Backward(views(params), views(states), x.data(), batch, 3, {r.data()},
             {false}, &ws, &grads, dx.data());
  auto check = [&](std::vector<float>* values, const std::vector<float>& an,
                   const std::string& what) {
    const size_t stride = std::max<size_t>(1, values->size() / 17);
    for (size_t k = 0; k < values->size(); k += stride) {
      const float saved = (*values)[k];
      (*values)[k] = saved + static_cast<float>(step);
      const double up = loss();
      (*values)[k] = saved - static_cast<float>(step);
      const double down = loss();
      (*values)[k] = saved;
      const double numeric = (up - down) / (2 * step);
      EXPECT_NEAR(an[k], numeric,
                  tol * std::max({1.0, std::fabs(numeric), double{std::fabs(an[k])}}))
          << what << " [" << k << "]";
    }
  };
  for (size_t v = 0; v < params.size(); ++v) {
    check(&params[v], grads[v], g.variables()[v].name);
  }
  check(&x, dx, "input");
}

TEST(GraphTest, FunctionalGradientsMatchFiniteDifferences) {
  // Two inputs, a shared layer called twice, a concatenation, L1/L2.
  Graph g = MustBuild(Fixture("wide_deep_tf_keras2.json"));
  CheckGraphGradients(g, 4, 1e-2, 2e-2);
}

TEST(GraphTest, ResidualBlockGradientsMatchFiniteDifferences) {
  // Convolutions, batch normalization in training, a skip connection.
  Graph g = MustBuild(Fixture("resnet_block_keras3.json"));
  CheckGraphGradients(g, 3, 2e-3, 3e-2);
}

json Seq(json layers, json shape = json::array({nullptr, 8})) {
  json ls = json::array();
  ls.push_back({{"class_name", "InputLayer"},
                {"config", {{"batch_input_shape", shape}, {"name", "in"}}}});
  for (auto& l : layers) ls.push_back(l);
  return {{"class_name", "Sequential"},
          {"config", {{"name", "s"}, {"layers", ls}}}};
}

json L(const std::string& cls, const std::string& name, json config) {
  config["name"] = name;
  return {{"class_name", cls}, {"config", config}};
}

json F(const std::string& cls, const std::string& name, json config,
       json inbound) {
  json l = L(cls, name, config);
  l["name"] = name;
  l["inbound_nodes"] = inbound;
  return l;
}

void ExpectRefused(const json& model, const std::string& part) {
  absl::Status s = BuildStatus(model);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << model.dump();
  EXPECT_NE(s.message().find(part), std::string::npos)
      << "'" << s.message() << "' does not name '" << part << "'";
}

TEST(GraphTest, BadModelsAreRefusedNamingTheLayerAndField) {
  ExpectRefused(Seq({L("Conv3D", "c3", {{"filters", 2}})}),
                "layer 'c3': class 'Conv3D' is not supported");
  ExpectRefused(Seq({L("Conv2D", "conv", {{"filters", 2}, {"kernel_size", 3}})}),
                "layer 'conv' (Conv2D)");
  ExpectRefused(Seq({L("Dense", "d", {{"units", 4}, {"activation", "mish"}})}),
                "layer 'd' (Dense): argument 'activation'");
  ExpectRefused(Seq({L("Reshape", "r", {{"target_shape", {2, 2, 2}}}),
                     L("MaxPooling2D", "pool", {{"pool_size", {3, 3}}})}),
                "layer 'pool' (MaxPooling2D)");
  ExpectRefused(Seq({L("Dense", "d", {{"units", 4}}),
                     L("Dense", "d", {{"units", 4}})}),
                "duplicate layer name 'd'");
  ExpectRefused(Seq({L("Dense", "d", {{"units", 4}, {"dtype", "float16"}})}),
                "argument 'dtype'");
  // Functional: a cycle, an unknown tensor, shapes that do not add.
  json in = {{"class_name", "InputLayer"},
             {"config", {{"batch_input_shape", {nullptr, 4}}, {"name", "x"}}},
             {"name", "x"},
             {"inbound_nodes", json::array()}};
  json cycle = {
      {"class_name", "Functional"},
      {"config",
       {{"name", "f"},
        {"layers",
         {in, F("Dense", "a", {{"units", 4}}, {{{"b", 0, 0, json::object()}}}),
          F("Dense", "b", {{"units", 4}}, {{{"a", 0, 0, json::object()}}})}},
        {"input_layers", {{"x", 0, 0}}},
        {"output_layers", {{"b", 0, 0}}}}}};
  ExpectRefused(cycle, "part of a cycle");
  json unknown = cycle;
  unknown["config"]["layers"][1]["inbound_nodes"] =
      json::array({json::array({json::array({"nope", 0, 0, json::object()})})});
  ExpectRefused(unknown, "['nope', 0, 0] names no input and no call");
  json add = {
      {"class_name", "Functional"},
      {"config",
       {{"name", "f"},
        {"layers",
         {in, F("Dense", "a", {{"units", 3}}, {{{"x", 0, 0, json::object()}}}),
          F("Add", "sum", json::object(),
            {{{"x", 0, 0, json::object()}, {"a", 0, 0, json::object()}}})}},
        {"input_layers", {{"x", 0, 0}}},
        {"output_layers", {{"sum", 0, 0}}}}}};
  ExpectRefused(add, "layer 'sum' (Add)");
  json nested = Seq({{{"class_name", "Sequential"},
                      {"config", {{"name", "inner"}, {"layers", json::array()}}}}});
  ExpectRefused(nested, "nested model");
  json no_shape = {{"class_name", "Sequential"},
                   {"config", {{"name", "s"},
                               {"layers", {L("Dense", "d", {{"units", 2}})}}}}};
  ExpectRefused(no_shape, "input shape is unknown");
}

}  // namespace
}  // namespace model
}  // namespace strata

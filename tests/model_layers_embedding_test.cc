// Embedding: lookups and the dense weight gradient against finite
// differences, the ids check, Keras's arguments and refusals.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/layers.h"
#include "tests/model_test_util.h"

namespace strata {
namespace model {

// Defined in model/layers_embedding.cc.
absl::Status CheckEmbeddingIds(const Layer& layer, const Real* ids,
                               int64_t batch);

namespace {

using nlohmann::json;
using testing::CheckGradients;
using testing::MakeLayer;
using testing::MakeLayerStatus;

std::vector<Real> RunForward(const Layer& layer, const std::vector<Real>& ids,
                              const std::vector<Real>& table, int64_t batch) {
  LayerScratch scratch;
  std::vector<Real> out(
      static_cast<size_t>(batch * NumElements(layer.output_shape())), -7.0f);
  ForwardArgs a;
  a.batch = batch;
  a.inputs = {ids.data()};
  a.weights = {absl::Span<const Real>(table.data(), table.size())};
  a.state_out = {nullptr};
  a.output = out.data();
  a.scratch = &scratch;
  layer.Forward(a);
  return out;
}

TEST(EmbeddingLayerTest, GradientsMatchFiniteDifferences) {
  for (const Shape& in : {Shape{5}, Shape{1}, Shape{}, Shape{3, 2}}) {
    auto layer = MakeLayer(CreateEmbedding, "Embedding",
                           {{"input_dim", 7}, {"output_dim", 3}}, {in});
    ASSERT_NE(layer, nullptr) << ShapeString(in);
    Shape out = in;
    out.push_back(3);
    EXPECT_EQ(layer->output_shape(), out);
    ASSERT_EQ(layer->weights().size(), 1u);
    EXPECT_EQ(layer->weights()[0].name, "embeddings");
    EXPECT_EQ(layer->weights()[0].shape, Shape({7, 3}));
    testing::FiniteDifferenceOptions o;
    o.batch = 5;
    o.int_inputs = {true};
    o.int_inputs_max = 7;
    o.max_checks = 21;  // every element of the table
    CheckGradients(*layer, o);
  }
}

TEST(EmbeddingLayerTest, ForwardLooksUpRows) {
  auto layer = MakeLayer(CreateEmbedding, "Embedding",
                         {{"input_dim", 4}, {"output_dim", 2}}, {{3}});
  ASSERT_NE(layer, nullptr);
  const std::vector<Real> table = {0, 1, 10, 11, 20, 21, 30, 31};
  const std::vector<Real> ids = {3, 0, 3, 1, 2, 1};  // 2 examples
  EXPECT_EQ(RunForward(*layer, ids, table, 2),
            std::vector<Real>({30, 31, 0, 1, 30, 31, 10, 11, 20, 21, 10, 11}));
}

TEST(EmbeddingLayerTest, BackwardScatterAddsRepeatedIdsAndZeroesIdGrads) {
  auto layer = MakeLayer(CreateEmbedding, "Embedding",
                         {{"input_dim", 4}, {"output_dim", 2}}, {{3}});
  ASSERT_NE(layer, nullptr);
  const std::vector<Real> table(8, 0.5f);
  const std::vector<Real> ids = {3, 0, 3, 1, 2, 1};
  const std::vector<Real> dy = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<Real> out = RunForward(*layer, ids, table, 2);
  std::vector<Real> dw(8, 999.0f);
  std::vector<Real> dids(6, 999.0f);
  LayerScratch scratch;
  BackwardArgs b;
  b.batch = 2;
  b.inputs = {ids.data()};
  b.weights = {absl::Span<const Real>(table.data(), table.size())};
  b.output = out.data();
  b.output_grad = dy.data();
  b.input_grads = {dids.data()};
  b.weight_grads = {dw.data()};
  b.scratch = &scratch;
  layer->Backward(b);
  // Row 0: position 1; row 1: positions 3 and 5; row 2: position 4; row 3:
  // positions 0 and 2.
  EXPECT_EQ(dw, std::vector<Real>({3, 4, 7 + 11, 8 + 12, 9, 10, 1 + 5,
                                    2 + 6}));
  EXPECT_EQ(dids, std::vector<Real>(6, 0.0f));
}

TEST(EmbeddingLayerTest, CheckIdsNamesTheFirstBadId) {
  auto layer = MakeLayer(CreateEmbedding, "Embedding",
                         {{"name", "emb"}, {"input_dim", 1000},
                          {"output_dim", 4}},
                         {{2}});
  ASSERT_NE(layer, nullptr);
  std::vector<Real> ids = {0, 999, 5, 6, 1000, 3};
  absl::Status s = CheckEmbeddingIds(*layer, ids.data(), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "layer 'emb' (Embedding): id 1000 at example 2, position 0 is out "
            "of range [0, 1000)");
  ids[4] = -1;
  s = CheckEmbeddingIds(*layer, ids.data(), 3);
  EXPECT_EQ(s.message(),
            "layer 'emb' (Embedding): id -1 at example 2, position 0 is out "
            "of range [0, 1000)");
  ids[4] = 4;
  ids[3] = 2.5f;
  s = CheckEmbeddingIds(*layer, ids.data(), 3);
  EXPECT_EQ(s.message(),
            "layer 'emb' (Embedding): id 2.5 at example 1, position 1 is not "
            "an integer");
  ids[3] = std::numeric_limits<Real>::quiet_NaN();
  s = CheckEmbeddingIds(*layer, ids.data(), 3);
  EXPECT_EQ(s.message(),
            "layer 'emb' (Embedding): id nan at example 1, position 1 is not "
            "an integer");
  ids[3] = 6;
  EXPECT_TRUE(CheckEmbeddingIds(*layer, ids.data(), 3).ok());
  // Only the first `batch` examples are read.
  ids[4] = 1000;
  EXPECT_TRUE(CheckEmbeddingIds(*layer, ids.data(), 2).ok());

  auto other = MakeLayer(CreateDense, "Dense", {{"units", 2}}, {{2}});
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(CheckEmbeddingIds(*other, ids.data(), 1).ok());
}

TEST(EmbeddingLayerTest, ForwardOfABadIdIsAZeroRowWithoutGradient) {
  auto layer = MakeLayer(CreateEmbedding, "Embedding",
                         {{"input_dim", 2}, {"output_dim", 2}}, {{2}});
  ASSERT_NE(layer, nullptr);
  const std::vector<Real> table = {1, 2, 3, 4};
  const std::vector<Real> ids = {5, 1};
  EXPECT_EQ(RunForward(*layer, ids, table, 1),
            std::vector<Real>({0, 0, 3, 4}));
}

TEST(EmbeddingLayerTest, ReadsKerasConfigs) {
  // Keras 3.
  json k3 = json::parse(R"({
    "name": "embedding", "trainable": true,
    "dtype": {"module": "keras", "class_name": "DTypePolicy",
              "config": {"name": "float32"}, "registered_name": null},
    "input_dim": 1000, "output_dim": 64,
    "embeddings_initializer": {"module": "keras.initializers",
        "class_name": "RandomUniform",
        "config": {"seed": null, "minval": -0.05, "maxval": 0.05},
        "registered_name": null},
    "embeddings_regularizer": {"module": "keras.regularizers",
        "class_name": "L2", "config": {"l2": 0.001},
        "registered_name": null},
    "activity_regularizer": null, "embeddings_constraint": null,
    "mask_zero": false, "quantization_config": null})");
  auto layer = MakeLayer(CreateEmbedding, "Embedding", k3, {{10}});
  ASSERT_NE(layer, nullptr);
  const WeightDef& w = layer->weights()[0];
  EXPECT_EQ(w.init.type, InitializerType::kRandomUniform);
  EXPECT_DOUBLE_EQ(w.init.minval, -0.05);
  EXPECT_DOUBLE_EQ(w.init.maxval, 0.05);
  EXPECT_DOUBLE_EQ(w.l2, 0.001);
  EXPECT_EQ(layer->output_shape(), Shape({10, 64}));

  // tf.keras 2.x.
  json k2 = json::parse(R"({
    "name": "embedding", "trainable": true, "dtype": "float32",
    "batch_input_shape": [null, 10], "input_dim": 50, "output_dim": 8,
    "embeddings_initializer": {"class_name": "RandomUniform",
        "config": {"minval": -0.05, "maxval": 0.05, "seed": null}},
    "embeddings_regularizer": null, "activity_regularizer": null,
    "embeddings_constraint": null, "mask_zero": false,
    "input_length": 10})");
  EXPECT_NE(MakeLayer(CreateEmbedding, "Embedding", k2, {{10}}), nullptr);

  // Keras's "uniform" alias (the constructor's default), and "normal".
  layer = MakeLayer(CreateEmbedding, "Embedding",
                    {{"input_dim", 5}, {"output_dim", 2},
                     {"embeddings_initializer", "uniform"}},
                    {{1}});
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->weights()[0].init.type, InitializerType::kRandomUniform);
  EXPECT_DOUBLE_EQ(layer->weights()[0].init.minval, -0.05);
  EXPECT_DOUBLE_EQ(layer->weights()[0].init.maxval, 0.05);
  layer = MakeLayer(CreateEmbedding, "Embedding",
                    {{"input_dim", 5}, {"output_dim", 2},
                     {"embeddings_initializer", "normal"}},
                    {{1}});
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->weights()[0].init.type, InitializerType::kRandomNormal);
  // No initializer given: Keras's default.
  layer = MakeLayer(CreateEmbedding, "Embedding",
                    {{"input_dim", 5}, {"output_dim", 2}}, {{1}});
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->weights()[0].init.type, InitializerType::kRandomUniform);
}

TEST(EmbeddingLayerTest, RefusesUnsupportedArguments) {
  auto refuse = [](const json& config, const std::string& arg) {
    json c = config;
    c["name"] = "e";
    absl::Status s = MakeLayerStatus(CreateEmbedding, "Embedding", c, {{3}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.dump();
    EXPECT_NE(s.message().find("layer 'e' (Embedding): argument '" + arg +
                               "'"),
              std::string::npos)
        << s;
  };
  refuse({{"output_dim", 2}}, "input_dim");
  refuse({{"input_dim", 4}}, "output_dim");
  refuse({{"input_dim", 0}, {"output_dim", 2}}, "input_dim");
  refuse({{"input_dim", 4}, {"output_dim", 0}}, "output_dim");
  refuse({{"input_dim", 4}, {"output_dim", 2.5}}, "output_dim");
  refuse({{"input_dim", 20000000}, {"output_dim", 2}}, "input_dim");
  refuse({{"input_dim", 4}, {"output_dim", 2}, {"mask_zero", true}},
         "mask_zero");
  refuse({{"input_dim", 4}, {"output_dim", 2}, {"sparse", true}}, "sparse");
  refuse({{"input_dim", 4}, {"output_dim", 2}, {"lora_rank", 2}},
         "lora_rank");
  refuse({{"input_dim", 4}, {"output_dim", 2},
          {"embeddings_constraint", "non_neg"}},
         "embeddings_constraint");
  refuse({{"input_dim", 4}, {"output_dim", 2},
          {"activity_regularizer", "l2"}},
         "activity_regularizer");
  refuse({{"input_dim", 4}, {"output_dim", 2},
          {"embeddings_initializer", "orthogonal"}},
         "embeddings_initializer");
  refuse({{"input_dim", 4}, {"output_dim", 2}, {"wobble", 1}}, "wobble");
}

}  // namespace
}  // namespace model
}  // namespace strata

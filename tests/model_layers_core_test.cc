// Dense, Activation, Dropout, Flatten and Reshape: gradients against
// central finite differences, Keras's arguments and refusals.
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

TEST(DenseLayerTest, GradientsMatchFiniteDifferences) {
  for (const char* act : {"linear", "tanh", "sigmoid", "softmax", "gelu",
                          "silu", "elu", "softplus"}) {
    auto layer = MakeLayer(CreateDense, "Dense",
                           {{"units", 5}, {"activation", act}}, {{7}});
    ASSERT_NE(layer, nullptr) << act;
    EXPECT_EQ(layer->output_shape(), Shape({5}));
    ASSERT_EQ(layer->weights().size(), 2u);
    EXPECT_EQ(layer->weights()[0].shape, Shape({7, 5}));
    CheckGradients(*layer);
  }
}

TEST(DenseLayerTest, AppliesToTheLastAxisOfHigherRanks) {
  auto layer = MakeLayer(CreateDense, "Dense",
                         {{"units", 3}, {"use_bias", false}}, {{4, 6}});
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->output_shape(), Shape({4, 3}));
  EXPECT_EQ(layer->weights().size(), 1u);
  CheckGradients(*layer);
}

TEST(DenseLayerTest, RefusesUnknownAndBadArguments) {
  absl::Status s = MakeLayerStatus(CreateDense, "Dense",
                                   {{"name", "d"}, {"units", 0}}, {{3}});
  EXPECT_NE(s.message().find("layer 'd' (Dense): argument 'units'"),
            std::string::npos) << s;
  s = MakeLayerStatus(CreateDense, "Dense",
                      {{"name", "d"}, {"units", 2}, {"activation", "mish"}},
                      {{3}});
  EXPECT_NE(s.message().find("argument 'activation'"), std::string::npos)
      << s;
  s = MakeLayerStatus(CreateDense, "Dense",
                      {{"name", "d"}, {"units", 2}, {"wobble", 1}}, {{3}});
  EXPECT_NE(s.message().find("argument 'wobble'"), std::string::npos) << s;
  s = MakeLayerStatus(CreateDense, "Dense",
                      {{"name", "d"}, {"units", 2},
                       {"activity_regularizer", "l2"}}, {{3}});
  EXPECT_NE(s.message().find("argument 'activity_regularizer'"),
            std::string::npos) << s;
  // Keras's own defaults are accepted.
  EXPECT_TRUE(MakeLayerStatus(
                  CreateDense, "Dense",
                  {{"name", "d"}, {"units", 2}, {"trainable", true},
                   {"dtype", "float32"}, {"kernel_constraint", nullptr},
                   {"kernel_regularizer", {{"class_name", "L2"},
                                           {"config", {{"l2", 0.001}}}}},
                   {"kernel_initializer", {{"class_name", "GlorotUniform"},
                                           {"config", {{"seed", nullptr}}}}}},
                  {{3}})
                  .ok());
}

TEST(ActivationLayerTest, GradientsMatchFiniteDifferences) {
  for (const char* act : {"relu", "tanh", "sigmoid", "softmax", "gelu",
                          "swish", "elu", "leaky_relu", "linear"}) {
    auto layer =
        MakeLayer(CreateActivation, "Activation", {{"activation", act}}, {{9}});
    ASSERT_NE(layer, nullptr) << act;
    testing::FiniteDifferenceOptions o;
    o.step = 1e-3;  // relu's kink: inputs rarely lie within 1e-3 of 0
    CheckGradients(*layer, o);
  }
}

TEST(DropoutLayerTest, GradientsFollowTheMaskAndInferencePassesThrough) {
  auto layer = MakeLayer(CreateDropout, "Dropout", {{"rate", 0.4}}, {{11}});
  ASSERT_NE(layer, nullptr);
  CheckGradients(*layer);
  testing::FiniteDifferenceOptions o;
  o.training = false;
  CheckGradients(*layer, o);
  EXPECT_FALSE(MakeLayerStatus(CreateDropout, "Dropout", {{"rate", 1.0}},
                               {{3}}).ok());
}

TEST(ReshapeLayerTest, ShapesAndGradients) {
  auto layer = MakeLayer(CreateReshape, "Reshape",
                         {{"target_shape", {3, -1}}}, {{2, 6}});
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->output_shape(), Shape({3, 4}));
  CheckGradients(*layer);
  auto flat = MakeLayer(CreateFlatten, "Flatten", json::object(), {{2, 3, 4}});
  ASSERT_NE(flat, nullptr);
  EXPECT_EQ(flat->output_shape(), Shape({24}));
  absl::Status s = MakeLayerStatus(CreateReshape, "Reshape",
                                   {{"name", "r"}, {"target_shape", {5, 5}}},
                                   {{2, 6}});
  EXPECT_NE(s.message().find("argument 'target_shape'"), std::string::npos)
      << s;
}

}  // namespace
}  // namespace model
}  // namespace strata

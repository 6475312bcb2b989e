// Factories of the built-in layers, one family per source file:
//   layers_core.cc          Dense, Activation, Dropout, Flatten, Reshape
//   layers_conv.cc          Conv1D, Conv2D
//   layers_pooling.cc       Max/AveragePooling1D/2D, Global{Average,Max}Pooling1D/2D
//   layers_normalization.cc BatchNormalization, LayerNormalization
//   layers_merge.cc         Concatenate, Add, Multiply, Dot
//   layers_embedding.cc     Embedding (dense vocabulary)
//   layers_interaction.cc   DotInteraction, Cross (TensorFlow Recommenders)
// Each reads its Keras arguments from the ConfigReader (names and defaults
// as Keras's), calls reader->Finish(), and returns the unbuilt layer.
#ifndef STRATA_MODEL_LAYERS_H_
#define STRATA_MODEL_LAYERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/layer.h"
#include "model/layer_config.h"

namespace strata {
namespace model {

using LayerOr = absl::StatusOr<std::unique_ptr<Layer>>;

LayerOr CreateDense(ConfigReader* r);
LayerOr CreateActivation(ConfigReader* r);
LayerOr CreateDropout(ConfigReader* r);
LayerOr CreateFlatten(ConfigReader* r);
LayerOr CreateReshape(ConfigReader* r);

LayerOr CreateConv1D(ConfigReader* r);
LayerOr CreateConv2D(ConfigReader* r);

LayerOr CreateMaxPooling1D(ConfigReader* r);
LayerOr CreateMaxPooling2D(ConfigReader* r);
LayerOr CreateAveragePooling1D(ConfigReader* r);
LayerOr CreateAveragePooling2D(ConfigReader* r);
LayerOr CreateGlobalAveragePooling1D(ConfigReader* r);
LayerOr CreateGlobalAveragePooling2D(ConfigReader* r);
LayerOr CreateGlobalMaxPooling1D(ConfigReader* r);
LayerOr CreateGlobalMaxPooling2D(ConfigReader* r);

LayerOr CreateBatchNormalization(ConfigReader* r);
LayerOr CreateLayerNormalization(ConfigReader* r);

LayerOr CreateConcatenate(ConfigReader* r);
LayerOr CreateAdd(ConfigReader* r);
LayerOr CreateMultiply(ConfigReader* r);
LayerOr CreateDot(ConfigReader* r);

LayerOr CreateEmbedding(ConfigReader* r);

LayerOr CreateDotInteraction(ConfigReader* r);
LayerOr CreateCross(ConfigReader* r);

// The layer for Keras class `config.class_name` (aliases included:
// Convolution2D, MaxPool2D, GlobalAvgPool2D, ...), named config.name.
// Errors: INVALID_ARGUMENT naming the layer for an unknown class or an
// argument the class refuses; `path` prefixes the message.
LayerOr CreateLayer(const LayerConfig& config, const std::string& path);

// The supported class names, comma-separated, for messages.
std::string SupportedLayerNames();

}  // namespace model
}  // namespace strata

#endif  // STRATA_MODEL_LAYERS_H_

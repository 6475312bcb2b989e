// Keras's model config JSON (what model.to_json() writes) to and from a
// GraphSpec: Sequential and Functional models, in the layout of tf.keras
// 2.x and of Keras 3.
#ifndef STRATA_MODEL_KERAS_FORMAT_H_
#define STRATA_MODEL_KERAS_FORMAT_H_

#include <string>

#include "absl/status/statusor.h"
#include "model/layer_config.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace model {

// True when `value` looks like a Keras model config ({"class_name":
// "Sequential"|"Functional"|"Model", "config": {...}}).
bool IsKerasModelJson(const nlohmann::json& value);

// Parses a Keras model config. The input shape comes from an InputLayer
// (batch_input_shape or batch_shape, the batch dimension null), or the first
// layer's batch_input_shape / batch_shape / build_config. Functional
// inbound_nodes are tf.keras 2.x lists ([[name, node, tensor, kwargs], ...])
// or Keras 3 {"args", "kwargs"} objects holding __keras_tensor__ entries.
// Layer configs are kept as Keras wrote them; Graph::Build reads them.
// Errors: INVALID_ARGUMENT "<path>...: what" for a malformed config, an
// unknown model class, a nested model, an input with an unknown dimension.
absl::StatusOr<GraphSpec> ParseKerasModel(const nlohmann::json& value,
                                          const std::string& path);

// The Keras class of a short layer type ("conv2d" -> "Conv2D",
// "batch_normalization" -> "BatchNormalization"); empty when unknown.
std::string ClassOfShortType(const std::string& type);
// The short types, comma-separated, for messages.
std::string ShortTypeNames();

// Writes `spec` as a tf.keras 2.x model config (Sequential when
// spec.sequential, else Functional), which ParseKerasModel reads back.
nlohmann::json ToKerasJson(const GraphSpec& spec);

}  // namespace model
}  // namespace strata

#endif  // STRATA_MODEL_KERAS_FORMAT_H_

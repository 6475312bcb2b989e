// CreateLayer: Keras class names (and their aliases) to factories.
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/layers.h"

namespace strata {
namespace model {
namespace {

using Factory = LayerOr (*)(ConfigReader*);

struct Entry {
  const char* class_name;
  Factory factory;
};

// The classes, Keras's canonical names first, then aliases.
const Entry kEntries[] = {
    {"Dense", CreateDense},
    {"Activation", CreateActivation},
    {"Dropout", CreateDropout},
    {"Flatten", CreateFlatten},
    {"Reshape", CreateReshape},
    {"Conv1D", CreateConv1D},
    {"Conv2D", CreateConv2D},
    {"MaxPooling1D", CreateMaxPooling1D},
    {"MaxPooling2D", CreateMaxPooling2D},
    {"AveragePooling1D", CreateAveragePooling1D},
    {"AveragePooling2D", CreateAveragePooling2D},
    {"GlobalAveragePooling1D", CreateGlobalAveragePooling1D},
    {"GlobalAveragePooling2D", CreateGlobalAveragePooling2D},
    {"GlobalMaxPooling1D", CreateGlobalMaxPooling1D},
    {"GlobalMaxPooling2D", CreateGlobalMaxPooling2D},
    {"BatchNormalization", CreateBatchNormalization},
    {"LayerNormalization", CreateLayerNormalization},
    {"Concatenate", CreateConcatenate},
    {"Add", CreateAdd},
    {"Multiply", CreateMultiply},
    {"Dot", CreateDot},
    {"Embedding", CreateEmbedding},
    {"DotInteraction", CreateDotInteraction},
    {"Cross", CreateCross},
};

const std::map<std::string, std::string>& Aliases() {
  static const auto* aliases = new std::map<std::string, std::string>{
      {"Convolution1D", "Conv1D"},
      {"Convolution2D", "Conv2D"},
      {"MaxPool1D", "MaxPooling1D"},
      {"MaxPool2D", "MaxPooling2D"},
      {"AvgPool1D", "AveragePooling1D"},
      {"AvgPool2D", "AveragePooling2D"},
      {"GlobalAvgPool1D", "GlobalAveragePooling1D"},
      {"GlobalAvgPool2D", "GlobalAveragePooling2D"},
      {"GlobalMaxPool1D", "GlobalMaxPooling1D"},
      {"GlobalMaxPool2D", "GlobalMaxPooling2D"},
  };
  return *aliases;
}

}  // namespace

std::string SupportedLayerNames() {
  std::vector<std::string> names;
  for (const Entry& e : kEntries) names.push_back(e.class_name);
  return absl::StrJoin(names, ", ");
}

LayerOr CreateLayer(const LayerConfig& config, const std::string& path) {
  std::string cls = config.class_name;
  auto alias = Aliases().find(cls);
  if (alias != Aliases().end()) cls = alias->second;
  for (const Entry& e : kEntries) {
    if (cls != e.class_name) continue;
    LayerConfig canonical = config;
    canonical.class_name = cls;
    ConfigReader reader(canonical, path);
    LayerOr layer = e.factory(&reader);
    if (layer.ok()) (*layer)->set_name(config.name);
    return layer;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, path.empty() ? "" : ": ", "layer '", config.name, "': class '",
      config.class_name, "' is not supported (supported: ",
      SupportedLayerNames(), ")"));
}

}  // namespace model
}  // namespace strata

// Model specs for the model runtime's tests (CPU and GPU).
#ifndef STRATA_TESTS_MODEL_SPEC_UTIL_H_
#define STRATA_TESTS_MODEL_SPEC_UTIL_H_

#include <cstdint>

#include "job/job.h"

namespace strata {
namespace testing_util {

inline LayerSpec Dense(int64_t units, Activation activation,
                       bool use_bias = true) {
  LayerSpec layer;
  layer.type = LayerType::kDense;
  layer.units = units;
  layer.activation = activation;
  layer.use_bias = use_bias;
  return layer;
}

inline LayerSpec Dropout(double rate) {
  LayerSpec layer;
  layer.type = LayerType::kDropout;
  layer.rate = rate;
  return layer;
}

inline LayerSpec Flatten() {
  LayerSpec layer;
  layer.type = LayerType::kFlatten;
  return layer;
}

// The reference job's model: Dense(128, relu, input 784), Dense(10, softmax).
inline ModelSpec ReferenceModel() {
  ModelSpec spec;
  spec.input_shape = {784};
  spec.layers = {Dense(128, Activation::kRelu),
                 Dense(10, Activation::kSoftmax)};
  return spec;
}

}  // namespace testing_util
}  // namespace strata

#endif  // STRATA_TESTS_MODEL_SPEC_UTIL_H_

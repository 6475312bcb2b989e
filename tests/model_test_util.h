// Test helpers for the model runtime: build a layer from a Keras config,
// and check its Backward against central finite differences.
#ifndef STRATA_TESTS_MODEL_TEST_UTIL_H_
#define STRATA_TESTS_MODEL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/layer.h"
#include "model/layer_config.h"
#include "model/layers.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace model {
namespace testing {

// Creates the layer with `factory` from a Keras config and builds it.
template <typename Factory>
std::unique_ptr<Layer> MakeLayer(Factory factory, const std::string& cls,
                                 const nlohmann::json& config,
                                 const std::vector<Shape>& inputs) {
  LayerConfig lc;
  lc.class_name = cls;
  lc.name = config.value("name", "layer");
  lc.config = config;
  ConfigReader reader(lc, "");
  LayerOr layer = factory(&reader);
  EXPECT_TRUE(layer.ok()) << layer.status();
  if (!layer.ok()) return nullptr;
  (*layer)->set_name(lc.name);
  absl::Status built = (*layer)->Build(inputs);
  EXPECT_TRUE(built.ok()) << built;
  if (!built.ok()) return nullptr;
  return std::move(*layer);
}

// The status of creating and building (for refusal tests).
template <typename Factory>
absl::Status MakeLayerStatus(Factory factory, const std::string& cls,
                             const nlohmann::json& config,
                             const std::vector<Shape>& inputs) {
  LayerConfig lc;
  lc.class_name = cls;
  lc.name = config.value("name", "layer");
  lc.config = config;
  ConfigReader reader(lc, "");
  LayerOr layer = factory(&reader);
  if (!layer.ok()) return layer.status();
  (*layer)->set_name(lc.name);
  return (*layer)->Build(inputs);
}

// Built with STRATA_MODEL_FLOAT64 (model_layers_f64_test), the layers run
// in float64 and CheckGradients replaces the float tolerances below with
// these: a central difference's error is O(step^2) plus rounding of
// O(eps / step), 1e-11 to 1e-10 on these layers (float's tolerances above
// are 3e-3 and 2e-2).
constexpr bool kFloat64 = sizeof(Real) == sizeof(double);
constexpr double kFloat64Step = 1e-5;
constexpr double kFloat64Atol = 1e-8;
constexpr double kFloat64Rtol = 1e-7;

struct FiniteDifferenceOptions {
  int64_t batch = 3;
  uint64_t seed = 7;
  bool training = true;
  double input_scale = 1.0;   // inputs uniform in [-scale, scale]
  double weight_scale = 0.5;  // weights uniform in [-scale, scale]
  double step = 1e-2;         // central difference step
  double atol = 3e-3;
  double rtol = 2e-2;
  int max_checks = 48;        // coordinates checked per tensor
  // Integer inputs (Embedding ids): input i is filled with ids in
  // [0, int_inputs_max) and not differentiated.
  std::vector<bool> int_inputs;
  int64_t int_inputs_max = 0;
};

// Runs the layer forward on random inputs and weights, takes L = sum r * y
// for a random r (accumulated in double), and compares Backward's input
// and trainable-weight gradients with (L(v + h) - L(v - h)) / 2h at up to
// max_checks coordinates of every tensor.
inline void CheckGradients(const Layer& layer,
                           const FiniteDifferenceOptions& options = {}) {
  FiniteDifferenceOptions o = options;
  if (kFloat64) {
    o.step = kFloat64Step;
    o.atol = kFloat64Atol;
    o.rtol = kFloat64Rtol;
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<Real> uni(-1.0f, 1.0f);
  const int64_t b = o.batch;
  std::vector<std::vector<Real>> inputs;
  for (size_t i = 0; i < layer.input_shapes().size(); ++i) {
    std::vector<Real> v(
        static_cast<size_t>(b * NumElements(layer.input_shapes()[i])));
    const bool is_int = i < o.int_inputs.size() && o.int_inputs[i];
    for (Real& x : v) {
      x = is_int ? static_cast<Real>(rng() % static_cast<uint64_t>(
                                                  o.int_inputs_max))
                 : static_cast<Real>(o.input_scale) * uni(rng);
    }
    inputs.push_back(std::move(v));
  }
  std::vector<std::vector<Real>> weights;
  for (const WeightDef& w : layer.weights()) {
    std::vector<Real> v(static_cast<size_t>(NumElements(w.shape)));
    for (Real& x : v) x = static_cast<Real>(o.weight_scale) * uni(rng);
    if (!w.trainable && w.name.find("variance") != std::string::npos) {
      for (Real& x : v) x = std::fabs(x) + 0.5f;
    }
    weights.push_back(std::move(v));
  }
  const int64_t out_n = b * NumElements(layer.output_shape());
  std::vector<Real> r(static_cast<size_t>(out_n));
  for (Real& x : r) x = uni(rng);

  LayerScratch scratch;
  std::vector<Real> out(static_cast<size_t>(out_n));
  std::vector<std::vector<Real>> state(weights.size());
  auto forward = [&]() -> double {
    ForwardArgs a;
    a.batch = b;
    a.training = o.training;
    a.seed = 99;
    a.layer_index = 3;
    for (auto& v : inputs) a.inputs.push_back(v.data());
    for (auto& v : weights) a.weights.emplace_back(v.data(), v.size());
    for (size_t i = 0; i < weights.size(); ++i) {
      state[i].resize(weights[i].size());
      a.state_out.push_back(o.training && !layer.weights()[i].trainable
                                ? state[i].data()
                                : nullptr);
    }
    a.output = out.data();
    a.scratch = &scratch;
    layer.Forward(a);
    double l = 0;
    for (int64_t k = 0; k < out_n; ++k) l += double{r[k]} * out[k];
    return l;
  };
  forward();
  std::vector<std::vector<Real>> in_grads(inputs.size());
  std::vector<std::vector<Real>> w_grads(weights.size());
  BackwardArgs ba;
  ba.batch = b;
  ba.training = o.training;
  ba.seed = 99;
  ba.layer_index = 3;
  for (auto& v : inputs) ba.inputs.push_back(v.data());
  for (auto& v : weights) ba.weights.emplace_back(v.data(), v.size());
  ba.output = out.data();
  ba.output_grad = r.data();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool is_int = i < o.int_inputs.size() && o.int_inputs[i];
    in_grads[i].assign(inputs[i].size(), 12345.0f);
    ba.input_grads.push_back(is_int ? nullptr : in_grads[i].data());
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    w_grads[i].assign(weights[i].size(), 12345.0f);
    ba.weight_grads.push_back(layer.weights()[i].trainable ? w_grads[i].data()
                                                           : nullptr);
  }
  ba.scratch = &scratch;
  layer.Backward(ba);

  auto check = [&](std::vector<Real>* values, const std::vector<Real>& g,
                   const std::string& what) {
    const size_t n = values->size();
    const size_t stride = std::max<size_t>(1, n / o.max_checks);
    for (size_t k = 0; k < n; k += stride) {
      const Real saved = (*values)[k];
      (*values)[k] = saved + static_cast<Real>(o.step);
      const double up = forward();
      (*values)[k] = saved - static_cast<Real>(o.step);
      const double down = forward();
      (*values)[k] = saved;
      const double numeric = (up - down) / (2 * o.step);
      const double analytic = g[k];
      EXPECT_NEAR(analytic, numeric,
                  o.atol + o.rtol * std::max(std::fabs(numeric),
                                             std::fabs(analytic)))
          << layer.class_name() << " " << what << " element " << k;
    }
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i < o.int_inputs.size() && o.int_inputs[i]) continue;
    check(&inputs[i], in_grads[i], "input " + std::to_string(i));
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!layer.weights()[i].trainable) continue;
    check(&weights[i], w_grads[i], "weight " + layer.weights()[i].name);
  }
}

}  // namespace testing
}  // namespace model
}  // namespace strata

#endif  // STRATA_TESTS_MODEL_TEST_UTIL_H_

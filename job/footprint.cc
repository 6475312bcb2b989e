// ComputeModelFootprint and CheckJobFitsMemory: what a job's model needs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "job/job.h"
#include "model/graph.h"
#include "job/job_internal.h"

namespace strata {
namespace job_internal {

// Arithmetic on non-negative counts that sticks at INT64_MAX instead of
// overflowing, and remembers that it did.
class Saturating {
 public:
  int64_t Add(int64_t a, int64_t b) {
    int64_t r = 0;
    return __builtin_add_overflow(a, b, &r) ? Saturate() : r;
  }
  int64_t Mul(int64_t a, int64_t b) {
    int64_t r = 0;
    return __builtin_mul_overflow(a, b, &r) ? Saturate() : r;
  }
  bool saturated() const { return saturated_; }

 private:
  int64_t Saturate() {
    saturated_ = true;
    return std::numeric_limits<int64_t>::max();
  }
  bool saturated_ = false;
};

// "101770" or, from a million on, "3.2e9", "8.0e14".
std::string FormatCount(int64_t n) {
  if (n < 1000000) return absl::StrCat(n);
  const std::string s = absl::StrFormat("%.1e", static_cast<double>(n));
  const size_t e = s.find('e');
  int exponent = 0;
  if (e == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(s).substr(e + 1), &exponent)) {
    return s;
  }
  return absl::StrCat(s.substr(0, e), "e", exponent);
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B",   "KiB", "MiB", "GiB",
                                           "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 6) {
    v /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  if (std::floor(v) == v) return absl::StrFormat("%.0f %s", v, kUnits[unit]);
  return absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

std::string FootprintError(const JobSpec& job, const ModelFootprint& f) {
  const char* at_least = f.saturated ? "at least " : "";
  std::string cause = "job.model: the layers make";
  if (!f.largest_layer_name.empty()) {
    cause = absl::StrCat("job.model: layer ", f.largest_layer_name,
                         " is the largest; the layers make");
  } else if (f.largest_layer >= 0) {
    cause = absl::StrCat("job.model.layers[", f.largest_layer, "].units: ",
                         job.model.layers[f.largest_layer].units,
                         " units make");
  }
  std::string state = "values, gradients";
  if (f.slots > 0) {
    absl::StrAppend(&state, ", ", f.slots, " ",
                    OptimizerTypeName(job.optimizer.type),
                    f.slots == 1 ? " slot" : " slots");
  }
  return absl::StrCat(cause, " the model ", at_least,
                      FormatCount(f.parameters), " parameters, needing ",
                      at_least, FormatBytes(f.bytes), " (", state,
                      ", activations for batch ", job.batch_size, ")");
}

}  // namespace job_internal

using job_internal::FootprintError;
using job_internal::FormatBytes;
using job_internal::PathError;
using job_internal::Saturating;

absl::StatusOr<ModelFootprint> ComputeModelFootprint(
    const ModelSpec& model, const OptimizerConfig& optimizer,
    int64_t batch_size) {
  // The layers' part; the embedding tables live on the PS tasks (or in
  // local_train's process), bounded by their max_rows, not counted here.
  if (!model.embeddings.empty()) {
    return ComputeModelFootprint(DenseModelSpec(model), optimizer, batch_size);
  }
  absl::StatusOr<std::unique_ptr<Optimizer>> created =
      Optimizer::Create(optimizer);
  if (!created.ok()) {
    return PathError("job.optimizer", created.status().message());
  }
  ModelFootprint f;
  f.slots = static_cast<int>((*created)->SlotNames().size());
  Saturating sat;
  const int64_t batch = std::max<int64_t>(batch_size, 1);
  // Bytes per parameter: its value, gradient and slots, float32 each.
  const int64_t state_bytes = int64_t{4} * (2 + f.slots);
  if (!IsDenseChain(model)) {
    // A layer graph: its variables, its state, and per example the
    // activations, their gradients and the layers' scratch.
    absl::StatusOr<model::GraphSpec> spec = ModelGraphSpec(model);
    if (!spec.ok()) return spec.status();
    absl::StatusOr<model::Graph> graph =
        model::Graph::Build(*spec, 0, "job.model");
    if (!graph.ok()) return graph.status();
    int64_t largest = -1;
    for (int i = 0; i < graph->num_layers(); ++i) {
      int64_t n = 0;
      for (const model::WeightDef& w : graph->layer(i).weights()) {
        int64_t e = 1;
        for (int64_t d : w.shape) e = sat.Mul(e, d);
        n = sat.Add(n, e);
        if (w.trainable) {
          f.parameters = sat.Add(f.parameters, e);
        } else {
          f.activations = sat.Add(f.activations, e);
        }
      }
      // The layer's bytes: its weights (with gradients and slots) and a
      // batch of its outputs, their gradients and its scratch.
      const model::Layer& layer = graph->layer(i);
      const int64_t per_example = sat.Add(
          sat.Mul(2, [&] {
            int64_t e = 1;
            for (int64_t d : layer.output_shape()) e = sat.Mul(e, d);
            return e;
          }()),
          layer.ScratchPerExample());
      const int64_t bytes = sat.Add(sat.Mul(state_bytes, n),
                                    sat.Mul(4, sat.Mul(batch, per_example)));
      if (bytes > largest) {
        largest = bytes;
        f.largest_layer_name = absl::StrCat("'", graph->layer(i).name(),
                                            "' (", graph->layer(i).class_name(),
                                            ")");
      }
    }
    f.activations = sat.Add(
        f.activations, sat.Mul(batch, graph->ActivationFloatsPerExample()));
    f.bytes = sat.Add(sat.Mul(state_bytes, f.parameters),
                      sat.Mul(4, f.activations));
    f.saturated = sat.saturated();
    return f;
  }
  int64_t width = 1;
  for (int64_t d : model.input_shape) {
    width = sat.Mul(width, std::max<int64_t>(d, 0));
  }
  // Activation floats no dense layer owns yet: the input batch, and the
  // dropouts before the first dense layer.
  int64_t pending = sat.Mul(batch, width);
  f.activations = pending;
  std::vector<int64_t> layer_bytes(model.layers.size(), 0);
  int owner = -1;  // the last dense layer
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const LayerSpec& layer = model.layers[i];
    if (layer.type == LayerType::kDropout) {
      // Its mask, outputs and their gradients.
      const int64_t floats = sat.Mul(3, sat.Mul(batch, width));
      f.activations = sat.Add(f.activations, floats);
      if (owner >= 0) {
        layer_bytes[owner] = sat.Add(layer_bytes[owner], sat.Mul(4, floats));
      } else {
        pending = sat.Add(pending, floats);
      }
    } else if (layer.type == LayerType::kDense) {
      const int64_t units = std::max<int64_t>(layer.units, 0);
      const int64_t params =
          sat.Add(sat.Mul(width, units), layer.use_bias ? units : 0);
      // Its outputs and their gradients.
      const int64_t floats = sat.Mul(2, sat.Mul(batch, units));
      f.parameters = sat.Add(f.parameters, params);
      f.activations = sat.Add(f.activations, floats);
      layer_bytes[i] = sat.Add(sat.Mul(state_bytes, params),
                               sat.Mul(4, sat.Add(floats, pending)));
      pending = 0;
      owner = static_cast<int>(i);
      width = units;
    }  // flatten: examples are already flat
  }
  f.bytes = sat.Add(sat.Mul(state_bytes, f.parameters),
                    sat.Mul(4, f.activations));
  for (size_t i = 0; i < model.layers.size(); ++i) {
    if (model.layers[i].type != LayerType::kDense) continue;
    if (f.largest_layer < 0 || layer_bytes[i] > f.largest_layer_bytes) {
      f.largest_layer = static_cast<int>(i);
      f.largest_layer_bytes = layer_bytes[i];
    }
  }
  f.saturated = sat.saturated();
  return f;
}

absl::Status CheckJobFitsMemory(const JobSpec& job, int64_t memory_bytes) {
  if (memory_bytes <= 0) return absl::OkStatus();
  STRATA_ASSIGN_OR_RETURN(
      ModelFootprint f,
      ComputeModelFootprint(job.model, job.optimizer, job.batch_size));
  if (!f.saturated && f.bytes <= memory_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(FootprintError(job, f), "; this machine has ",
                   FormatBytes(memory_bytes)));
}

}  // namespace strata

// Sequential's weights, non-trainable state, optimizer state and learning
// rate: what Keras's get_weights / set_weights, saving and callbacks read
// and set on a compiled model.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "sdk/internal.h"
#include "sdk/strata.h"
#include "worker/model.h"

namespace strata::sdk {
namespace {

std::vector<std::string> NamesOf(const std::vector<VariableDef>& defs) {
  std::vector<std::string> names;
  for (const VariableDef& v : defs) names.push_back(v.name);
  return names;
}

std::vector<std::vector<int64_t>> ShapesOf(
    const std::vector<VariableDef>& defs) {
  std::vector<std::vector<int64_t>> shapes;
  for (const VariableDef& v : defs) shapes.push_back(v.shape);
  return shapes;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<float>>> Sequential::GetWeights()
    const {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "GetWeights"));
  return state_->params();
}

absl::Status Sequential::SetWeights(std::vector<std::vector<float>> weights) {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "SetWeights"));
  internal::ModelState& s = *state_;
  // Checked (and, without a cluster's or the replicas' copy, applied) by
  // the trainer.
  std::vector<std::vector<float>> checked = weights;
  absl::Status st = s.local_layers().SetParams(std::move(checked));
  if (!st.ok()) return absl::InvalidArgumentError(
      absl::StrCat("SetWeights: ", st.message()));
  if (s.cluster_params) s.cluster_params = weights;
  if (s.mirrored) s.mirrored->params = std::move(weights);
  s.weights_set = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Sequential::WeightNames() const {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "WeightNames"));
  return NamesOf(state_->model().variables());
}

absl::Status Sequential::SetLearningRate(double learning_rate) {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "SetLearningRate"));
  if (!std::isfinite(learning_rate) || learning_rate <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetLearningRate: learning_rate must be finite and > 0, got ",
        learning_rate));
  }
  state_->local_layers().SetLearningRate(learning_rate);
  state_->optimizer_json["learning_rate"] = learning_rate;
  return absl::OkStatus();
}

absl::StatusOr<OptimizerState> Sequential::GetOptimizerState() const {
  STRATA_RETURN_IF_ERROR(
      internal::RequireCompiled(*state_, "GetOptimizerState"));
  const internal::ModelState& s = *state_;
  if (s.cluster_params) {
    return absl::FailedPreconditionError(
        "GetOptimizerState: the model was trained on a cluster; its "
        "optimizer's slots stay there");
  }
  OptimizerState out;
  out.slot_names = s.local_layers().SlotNames();
  if (s.mirrored) {
    out.iterations = s.mirrored->iterations;
    out.slots = s.mirrored->slots;
  } else {
    out.iterations = s.local_layers().iterations();
    out.slots = s.local_layers().slots();
  }
  return out;
}

absl::Status Sequential::SetOptimizerState(const OptimizerState& state) {
  STRATA_RETURN_IF_ERROR(
      internal::RequireCompiled(*state_, "SetOptimizerState"));
  internal::ModelState& s = *state_;
  if (state.slot_names != s.local_layers().SlotNames()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetOptimizerState: slots [", absl::StrJoin(state.slot_names, ", "),
        "] are not the compiled optimizer's [",
        absl::StrJoin(s.local_layers().SlotNames(), ", "), "]"));
  }
  absl::Status st =
      s.local_layers().SetOptimizerState(state.iterations, state.slots);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetOptimizerState: ", st.message()));
  }
  if (s.mirrored) {
    s.mirrored->iterations = state.iterations;
    s.mirrored->slots = state.slots;
  }
  return absl::OkStatus();
}

double Sequential::learning_rate() const {
  return state_->compiled ? state_->local_layers().learning_rate() : 0.0;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> Sequential::WeightShapes()
    const {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "WeightShapes"));
  return ShapesOf(state_->model().variables());
}

absl::StatusOr<std::vector<std::string>> Sequential::StateNames() const {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "StateNames"));
  return NamesOf(state_->model().state_variables());
}

absl::StatusOr<std::vector<std::vector<int64_t>>> Sequential::StateShapes()
    const {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "StateShapes"));
  return ShapesOf(state_->model().state_variables());
}

absl::StatusOr<std::vector<std::vector<float>>> Sequential::GetState() const {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "GetState"));
  return state_->model().GetState(state_->local_layers().workspace());
}

absl::Status Sequential::SetState(std::vector<std::vector<float>> state) {
  STRATA_RETURN_IF_ERROR(internal::RequireCompiled(*state_, "SetState"));
  absl::Status st = state_->model().SetState(
      state_->local_layers().workspace(), std::move(state));
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("SetState: ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace strata::sdk

// LocalTrainer (worker/model.h): single-process training over a Model.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model.h"
#include "worker/model_internal.h"

namespace strata {

using model_internal::Mix64;

LocalTrainer::LocalTrainer(Model model, std::unique_ptr<Optimizer> optimizer,
                           uint64_t seed)
    : model_(std::move(model)), optimizer_(std::move(optimizer)), seed_(seed) {}

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(
    const ModelSpec& model_spec, const std::string& loss,
    const OptimizerConfig& optimizer_config, uint64_t seed) {
  STRATA_ASSIGN_OR_RETURN(Model model, Model::Build(model_spec, loss, seed));
  return Create(std::move(model), optimizer_config, seed);
}

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(
    Model model, const OptimizerConfig& optimizer_config, uint64_t seed) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                          Optimizer::Create(optimizer_config));
  std::unique_ptr<LocalTrainer> trainer(
      new LocalTrainer(std::move(model), std::move(optimizer), seed));
  STRATA_RETURN_IF_ERROR(trainer->model_.InitializeParams(&trainer->params_));
  const std::vector<std::string> slot_names = trainer->optimizer_->SlotNames();
  trainer->slots_.resize(trainer->params_.size());
  trainer->slot_ptrs_.resize(trainer->params_.size());
  for (size_t v = 0; v < trainer->params_.size(); ++v) {
    for (size_t k = 0; k < slot_names.size(); ++k) {
      trainer->slots_[v].emplace_back(
          trainer->params_[v].size(),
          static_cast<float>(trainer->optimizer_->SlotInitialValue(k)));
    }
    // The slot buffers are never resized, so these stay valid.
    for (std::vector<float>& slot : trainer->slots_[v]) {
      trainer->slot_ptrs_[v].push_back(slot.data());
    }
  }
  return trainer;
}

absl::StatusOr<std::unique_ptr<LocalTrainer>> LocalTrainer::Create(
    const JobSpec& job) {
  STRATA_ASSIGN_OR_RETURN(Model model, BuildModelForJob(job));
  return Create(std::move(model), job.optimizer, job.seed);
}

absl::StatusOr<StepStats> LocalTrainer::Step(const float* x, const int32_t* y,
                                             int64_t batch, int64_t step,
                                             float* input_grad) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step must be >= 0, got ", step));
  }
  const std::vector<absl::Span<const float>> views = Model::Views(params_);
  STRATA_ASSIGN_OR_RETURN(
      StepStats stats,
      model_.TrainStep(views, x, y, batch,
                       Mix64(seed_ ^ Mix64(static_cast<uint64_t>(step))),
                       &grads_, &workspace_, input_grad));
  for (size_t v = 0; v < params_.size(); ++v) {
    STRATA_RETURN_IF_ERROR(optimizer_->ApplyDense(
        DType::kFloat32, step, params_[v].data(), slot_ptrs_[v],
        grads_[v].data(), static_cast<int64_t>(params_[v].size())));
  }
  iterations_ = step + 1;
  return stats;
}

absl::StatusOr<StepStats> LocalTrainer::TrainEpoch(
    const Dataset& train, int64_t batch_size, uint64_t shuffle_seed, int epoch,
    const std::function<void(int64_t, const StepStats&)>& on_step) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be >= 1, got ", batch_size));
  }
  if (train.features != model_.num_features()) {
    return absl::InvalidArgumentError(
        absl::StrCat("training examples have ", train.features,
                     " features; the model takes ", model_.num_features()));
  }
  const std::vector<int64_t> perm =
      EpochPermutation(train.size, shuffle_seed, epoch);
  const int64_t steps = StepsPerEpoch(train.size, batch_size);
  double loss_sum = 0;
  double correct = 0;
  StepStats epoch_stats;
  for (int64_t i = 0; i < steps; ++i) {
    GatherBatch(train, perm, i, batch_size, &batch_x_, &batch_y_);
    const int64_t b = static_cast<int64_t>(batch_y_.size());
    STRATA_ASSIGN_OR_RETURN(
        StepStats stats,
        Step(batch_x_.data(), batch_y_.data(), b, iterations_));
    loss_sum += stats.loss * static_cast<double>(b);
    correct += stats.accuracy * static_cast<double>(b);
    epoch_stats.examples += b;
    if (on_step) {
      StepStats so_far;
      so_far.examples = epoch_stats.examples;
      so_far.loss = loss_sum / static_cast<double>(epoch_stats.examples);
      so_far.accuracy = correct / static_cast<double>(epoch_stats.examples);
      on_step(i + 1, so_far);
    }
  }
  if (epoch_stats.examples > 0) {
    epoch_stats.loss = loss_sum / static_cast<double>(epoch_stats.examples);
    epoch_stats.accuracy = correct / static_cast<double>(epoch_stats.examples);
  }
  return epoch_stats;
}

absl::Status LocalTrainer::SetOptimizerState(
    int64_t iterations,
    const std::vector<std::vector<std::vector<float>>>& slots) {
  if (iterations < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("iterations must be >= 0, got ", iterations));
  }
  const std::vector<VariableDef>& vars = model_.variables();
  const std::vector<std::string> names = optimizer_->SlotNames();
  if (slots.size() != slots_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the optimizer has slots for ", slots_.size(),
                     " variables, got ", slots.size()));
  }
  for (size_t v = 0; v < slots.size(); ++v) {
    if (slots[v].size() != names.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable '", vars[v].name, "' has ", names.size(),
          " slots, got ", slots[v].size()));
    }
    for (size_t k = 0; k < slots[v].size(); ++k) {
      if (slots[v][k].size() != slots_[v][k].size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "slot '", names[k], "' of variable '", vars[v].name, "' has ",
            slots_[v][k].size(), " values, got ", slots[v][k].size()));
      }
      for (float value : slots[v][k]) {
        if (!std::isfinite(value)) {
          return absl::InvalidArgumentError(
              absl::StrCat("slot '", names[k], "' of variable '",
                           vars[v].name, "' holds a non-finite value"));
        }
      }
    }
  }
  // Copied into the buffers: slot_ptrs_ point at them.
  for (size_t v = 0; v < slots.size(); ++v) {
    for (size_t k = 0; k < slots[v].size(); ++k) {
      std::copy(slots[v][k].begin(), slots[v][k].end(), slots_[v][k].begin());
    }
  }
  iterations_ = iterations;
  return absl::OkStatus();
}

absl::Status LocalTrainer::SetParams(std::vector<std::vector<float>> params) {
  const std::vector<VariableDef>& vars = model_.variables();
  if (params.size() != vars.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model has ", vars.size(), " weight arrays, got ", params.size()));
  }
  for (size_t i = 0; i < vars.size(); ++i) {
    const int64_t want = NumElements(vars[i].shape);
    if (static_cast<int64_t>(params[i].size()) != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "weight ", i, " ('", vars[i].name, "') has ", want,
          " values (shape ", ShapeString(vars[i].shape), "), got ",
          params[i].size()));
    }
    for (size_t j = 0; j < params[i].size(); ++j) {
      if (!std::isfinite(params[i][j])) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight ", i, " ('", vars[i].name, "') value ", j,
                         " is not finite (", params[i][j], ")"));
      }
    }
  }
  params_ = std::move(params);
  return absl::OkStatus();
}

absl::StatusOr<StepStats> LocalTrainer::Evaluate(const Dataset& data,
                                                 int64_t batch) {
  return model_.Evaluate(Model::Views(params_), data, batch, &workspace_);
}

}  // namespace strata

// MirroredStrategy: replicas of the model as threads of this process, their
// gradients all-reduced every step, in process (collective/in_process.h) or,
// on GPUs, through NCCL (collective/nccl.h), as worker/group_worker.cc does
// between the replicas of a mirrored worker.
#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/collective.h"
#include "collective/in_process.h"
#include "collective/nccl.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "kernels/optimizers.h"
#include "sdk/internal.h"
#include "sdk/strata.h"
#include "strategies/placement_policy.h"
#include "worker/dataset.h"
#include "job/job.h"
#include "worker/model.h"

namespace strata::sdk {
namespace {

// SplitMix64's finalizer, as worker/model.cc derives LocalTrainer's dropout
// seeds: replica 0 uses LocalTrainer's seed for each step, so one mirrored
// replica trains exactly as OneDeviceStrategy does.
// The replicas of one Fit. Replica 0 trains the model's persistent state
// (ModelState::mirrored) in place; the others train copies of it, kept
// identical by applying the same all-reduced gradients. Each replica is
// driven by one thread; its buffers are its own. With `nccl` (one rank per
// replica) the gradients are all-reduced through it, else in process.
class MirroredTrainer {
 public:
  MirroredTrainer(const Model& model, const ::strata::Optimizer& optimizer,
                  uint64_t seed, int num_replicas,
                  std::unique_ptr<collective::NcclGroup> nccl,
                  internal::ModelState::ReplicaState* state,
                  ModelWorkspace* state_home)
      : model_(model),
        state_home_(state_home),
        optimizer_(optimizer),
        seed_(seed),
        state_(state),
        nccl_(std::move(nccl)),
        transports_(nccl_ != nullptr
                        ? std::vector<std::unique_ptr<collective::Transport>>()
                        : collective::NewInProcessGroup(num_replicas)),
        replicas_(static_cast<size_t>(num_replicas)) {
    for (const VariableDef& v : model_.variables()) {
      offsets_.push_back(num_params_);
      sizes_.push_back(NumElements(v.shape));
      num_params_ += sizes_.back();
    }
    for (size_t r = 0; r < replicas_.size(); ++r) {
      Replica& rep = replicas_[r];
      if (r > 0) rep.own = *state_;
      rep.state = r == 0 ? state_ : &rep.own;
    }
    for (const VariableDef& v : model_.state_variables()) {
      num_state_ += NumElements(v.shape);
    }
    for (Replica& rep : replicas_) {
      rep.flat.assign(static_cast<size_t>(num_params_ + 2 + num_state_), 0.0f);
    }
  }

  // Every replica starts from the model's state (BatchNormalization's
  // moving statistics) where the trainer keeps it.
  absl::Status LoadState() {
    if (num_state_ == 0) return absl::OkStatus();
    STRATA_ASSIGN_OR_RETURN(std::vector<std::vector<float>> state,
                            model_.GetState(state_home_));
    for (Replica& rep : replicas_) {
      STRATA_RETURN_IF_ERROR(model_.SetState(&rep.workspace, state));
    }
    return absl::OkStatus();
  }

  // Replica 0's state (the replicas' averaged) back to the trainer's.
  absl::Status StoreState() {
    if (num_state_ == 0) return absl::OkStatus();
    STRATA_ASSIGN_OR_RETURN(std::vector<std::vector<float>> state,
                            model_.GetState(&replicas_[0].workspace));
    return model_.SetState(state_home_, std::move(state));
  }

  // One epoch over `train` in the order EpochPermutation(train.size,
  // shuffle_seed, epoch) gives, in global batches of `batch_size`; returns
  // the example-weighted mean loss and accuracy (as LocalTrainer).
  // Replica 0 calls `on_step` (when set) after each step.
  absl::StatusOr<StepStats> TrainEpoch(const ::strata::Dataset& train,
                                       int64_t batch_size,
                                       uint64_t shuffle_seed, int epoch,
                                       const internal::StepObserver& on_step) {
    on_step_ = &on_step;
    const std::vector<int64_t> perm =
        EpochPermutation(train.size, shuffle_seed, epoch);
    const int n = static_cast<int>(replicas_.size());
    std::vector<absl::Status> results(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 1; r < n; ++r) {
      threads.emplace_back([&, r] {
        results[r] = ReplicaEpoch(r, train, perm, batch_size);
      });
    }
    results[0] = ReplicaEpoch(0, train, perm, batch_size);
    for (std::thread& t : threads) t.join();
    // The first error that is not a peer's abort caused the others.
    for (const absl::Status& s : results) {
      if (!s.ok() && s.code() != absl::StatusCode::kAborted) return s;
    }
    for (const absl::Status& s : results) STRATA_RETURN_IF_ERROR(s);
    StepStats stats;
    stats.examples = epoch_examples_;
    if (epoch_examples_ > 0) {
      stats.loss = epoch_loss_ / static_cast<double>(epoch_examples_);
      stats.accuracy = epoch_correct_ / static_cast<double>(epoch_examples_);
    }
    return stats;
  }

 private:
  struct Replica {
    internal::ModelState::ReplicaState own;  // replicas > 0
    internal::ModelState::ReplicaState* state = nullptr;
    std::vector<std::vector<float>> grads;
    std::vector<float> flat;  // gradients, then loss and accuracy
    std::vector<float> x;
    std::vector<int32_t> y;
    ModelWorkspace workspace;
  };

  // Replica r's steps of one epoch. Every replica runs every step (an empty
  // share contributes zeros), so the all-reduces line up.
  absl::Status ReplicaEpoch(int r, const ::strata::Dataset& train,
                            const std::vector<int64_t>& perm,
                            int64_t batch_size) {
    Replica& rep = replicas_[static_cast<size_t>(r)];
    collective::Transport* transport =
        transports_.empty() ? nullptr : transports_[static_cast<size_t>(r)].get();
    const int n = static_cast<int>(replicas_.size());
    const int64_t steps = StepsPerEpoch(train.size, batch_size);
    if (r == 0) {
      epoch_loss_ = 0;
      epoch_correct_ = 0;
      epoch_examples_ = 0;
    }
    for (int64_t i = 0; i < steps; ++i) {
      const int64_t step = rep.state->iterations;
      const int64_t first = i * batch_size;
      const int64_t batch = std::min(batch_size, train.size - first);
      const auto [begin, end] = ReplicaRows(batch, r, n);
      const int64_t rows = end - begin;
      const int64_t f = train.features;
      rep.x.resize(static_cast<size_t>(rows * f));
      rep.y.resize(static_cast<size_t>(rows));
      for (int64_t k = 0; k < rows; ++k) {
        const int64_t e = perm[static_cast<size_t>(first + begin + k)];
        std::memcpy(rep.x.data() + k * f, train.x.data() + e * f,
                    static_cast<size_t>(f) * sizeof(float));
        rep.y[static_cast<size_t>(k)] = train.labels[static_cast<size_t>(e)];
      }
      StepStats stats{};
      if (rows > 0) {
        const uint64_t base = Mix64(seed_ ^ Mix64(static_cast<uint64_t>(step)));
        absl::StatusOr<StepStats> s = model_.TrainStep(
            Model::Views(rep.state->params), rep.x.data(), rep.y.data(), rows,
            r == 0 ? base : Mix64(base ^ static_cast<uint64_t>(r)),
            &rep.grads, &rep.workspace);
        if (!s.ok()) return Leave(transport, s.status());
        stats = *s;
      } else {
        rep.grads.resize(sizes_.size());
        for (size_t v = 0; v < sizes_.size(); ++v) {
          rep.grads[v].assign(static_cast<size_t>(sizes_[v]), 0.0f);
        }
      }
      // Each replica's mean weighted by its share of the batch: the sum over
      // the replicas is the global batch's mean.
      const float share = static_cast<float>(rows) / static_cast<float>(batch);
      float* flat = rep.flat.data();
      for (size_t v = 0; v < sizes_.size(); ++v) {
        const float* g = rep.grads[v].data();
        float* dst = flat + offsets_[v];
        for (int64_t k = 0; k < sizes_[v]; ++k) dst[k] = g[k] * share;
      }
      flat[num_params_] = static_cast<float>(stats.loss) * share;
      flat[num_params_ + 1] = static_cast<float>(stats.accuracy) * share;
      if (num_state_ > 0) {
        // The moving statistics, share-weighted: averaged across replicas
        // every step, as tf.distribute's MirroredStrategy averages them.
        absl::StatusOr<std::vector<std::vector<float>>> state =
            model_.GetState(&rep.workspace);
        if (!state.ok()) return Leave(transport, state.status());
        float* dst = flat + num_params_ + 2;
        for (const std::vector<float>& v : *state) {
          for (float x : v) *dst++ = x * share;
        }
      }
      const int64_t reduced = num_params_ + 2 + num_state_;
      // On failure the group is aborted, so every replica's wait ends.
      if (nccl_ != nullptr) {
        STRATA_RETURN_IF_ERROR(nccl_->AllReduce(r, DType::kFloat32, flat,
                                                reduced,
                                                collective::NcclReduce::kSum));
      } else {
        STRATA_RETURN_IF_ERROR(collective::AllReduceSum(
            transport, DType::kFloat32, flat, reduced,
            absl::StrCat("step", step), options_));
      }
      if (num_state_ > 0) {
        std::vector<std::vector<float>> state;
        const float* src = flat + num_params_ + 2;
        for (const VariableDef& def : model_.state_variables()) {
          const int64_t k = NumElements(def.shape);
          state.emplace_back(src, src + k);
          src += k;
        }
        absl::Status set = model_.SetState(&rep.workspace, std::move(state));
        if (!set.ok()) return Leave(transport, set);
      }
      for (size_t v = 0; v < sizes_.size(); ++v) {
        std::vector<void*> slots;
        for (std::vector<float>& s : rep.state->slots[v]) {
          slots.push_back(s.data());
        }
        absl::Status applied = optimizer_.ApplyDense(
            DType::kFloat32, step, rep.state->params[v].data(), slots,
            flat + offsets_[v], sizes_[v]);
        if (!applied.ok()) return Leave(transport, applied);
      }
      rep.state->iterations = step + 1;
      if (r == 0) {
        epoch_loss_ += static_cast<double>(flat[num_params_]) *
                       static_cast<double>(batch);
        epoch_correct_ += static_cast<double>(flat[num_params_ + 1]) *
                          static_cast<double>(batch);
        epoch_examples_ += batch;
        if (*on_step_) {
          StepStats so_far;
          so_far.examples = epoch_examples_;
          so_far.loss = epoch_loss_ / static_cast<double>(epoch_examples_);
          so_far.accuracy =
              epoch_correct_ / static_cast<double>(epoch_examples_);
          (*on_step_)(i + 1, so_far);
        }
      }
    }
    return absl::OkStatus();
  }

  // Aborts the group (the other replicas' all-reduce fails at once) and
  // returns `status`.
  absl::Status Leave(collective::Transport* transport, absl::Status status) {
    const absl::Status reason =
        absl::AbortedError(absl::StrCat("a replica failed: ", status.message()));
    if (transport != nullptr) transport->Abort(reason);
    if (nccl_ != nullptr) nccl_->Abort(reason);
    return status;
  }

  const Model& model_;
  ModelWorkspace* const state_home_;
  const ::strata::Optimizer& optimizer_;
  const uint64_t seed_;
  internal::ModelState::ReplicaState* const state_;
  const std::unique_ptr<collective::NcclGroup> nccl_;  // null: in process
  std::vector<std::unique_ptr<collective::Transport>> transports_;
  std::vector<Replica> replicas_;
  std::vector<int64_t> offsets_;
  std::vector<int64_t> sizes_;
  int64_t num_params_ = 0;
  int64_t num_state_ = 0;  // floats of the model's non-trainable state
  collective::CollectiveOptions options_;
  // Replica 0's sums over the current epoch, and whom it tells of a step.
  const internal::StepObserver* on_step_ = nullptr;
  double epoch_loss_ = 0;
  double epoch_correct_ = 0;
  int64_t epoch_examples_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MirroredStrategy>> MirroredStrategy::Create(
    int num_replicas) {
  if (num_replicas < 1 || num_replicas > kMaxReplicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("MirroredStrategy: num_replicas must be in [1, ",
                     kMaxReplicas, "], got ", num_replicas));
  }
  return std::unique_ptr<MirroredStrategy>(new MirroredStrategy(num_replicas));
}

absl::StatusOr<std::unique_ptr<MirroredStrategy>>
MirroredStrategy::CreateOnDevices(const std::vector<std::string>& devices) {
  if (devices.empty()) {
    return absl::InvalidArgumentError(
        "MirroredStrategy::CreateOnDevices: no device given");
  }
  if (devices.size() > static_cast<size_t>(kMaxReplicas)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MirroredStrategy::CreateOnDevices: ", devices.size(),
        " devices, at most ", kMaxReplicas));
  }
  std::vector<int> gpus;
  std::set<int> seen;
  for (size_t i = 0; i < devices.size(); ++i) {
    const std::string path = absl::StrCat("devices[", i, "]");
    STRATA_ASSIGN_OR_RETURN(const int gpu,
                            ::strata::ParseDeviceName(devices[i], path));
    if (gpu < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MirroredStrategy::CreateOnDevices: ", path, " is \"", devices[i],
          "\"; list GPUs (\"cuda:N\"), or use MirroredStrategy::Create(n) "
          "for replicas on the CPU"));
    }
    if (!seen.insert(gpu).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MirroredStrategy::CreateOnDevices: cuda:", gpu,
          " is listed twice (one replica per GPU)"));
    }
    gpus.push_back(gpu);
  }
  absl::StatusOr<int> visible = collective::NcclVisibleDevices();
  if (!visible.ok()) {
    return absl::Status(
        visible.status().code(),
        absl::StrCat("MirroredStrategy on GPUs: ", visible.status().message()));
  }
  for (int gpu : gpus) {
    if (gpu >= *visible) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MirroredStrategy on GPUs: cuda:", gpu,
          " was asked for, but this machine has ", *visible, " visible GPU",
          *visible == 1 ? "" : "s"));
    }
  }
  const int n = static_cast<int>(gpus.size());
  return std::unique_ptr<MirroredStrategy>(
      new MirroredStrategy(n, std::move(gpus)));
}

absl::StatusOr<std::unique_ptr<MirroredStrategy>>
MirroredStrategy::CreateOnAllGpus() {
  absl::StatusOr<std::vector<int>> gpus = collective::LocalGpus(0, -1);
  if (!gpus.ok()) {
    return absl::Status(
        gpus.status().code(),
        absl::StrCat("MirroredStrategy on GPUs: ", gpus.status().message()));
  }
  if (gpus->size() > static_cast<size_t>(kMaxReplicas)) {
    gpus->resize(static_cast<size_t>(kMaxReplicas));
  }
  const int n = static_cast<int>(gpus->size());
  return std::unique_ptr<MirroredStrategy>(
      new MirroredStrategy(n, *std::move(gpus)));
}

std::unique_ptr<Strategy> MirroredStrategy::Clone() const {
  return std::unique_ptr<Strategy>(new MirroredStrategy(*this));
}

absl::StatusOr<History> MirroredStrategy::Fit(internal::ModelState& m,
                                               const Dataset& train,
                                               const FitOptions& options)
    const {
  STRATA_ASSIGN_OR_RETURN(
      internal::LocalFit fit,
      internal::PrepareLocalFit(
          m, train, options,
          {{"type", name()}, {"replicas", num_replicas_}}));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<::strata::Optimizer> optimizer,
                          ::strata::Optimizer::Create(fit.job.optimizer));
  if (!m.mirrored.has_value()) {
    // The first Fit since Compile starts from the compiled weights.
    // The trainer's optimizer state too (its initial values, or a loaded
    // model's): the same optimizer, so the same slots.
    internal::ModelState::ReplicaState state;
    state.params = m.trainer->params();
    state.iterations = m.trainer->iterations();
    state.slots = m.trainer->slots();
    m.mirrored = std::move(state);
  }
  std::unique_ptr<collective::NcclGroup> nccl;
  if (!gpus_.empty()) {
    STRATA_ASSIGN_OR_RETURN(nccl, collective::NcclGroup::Create(gpus_));
  }
  MirroredTrainer trainer(m.model(), *optimizer, fit.job.seed, num_replicas_,
                          std::move(nccl), &*m.mirrored,
                          m.local_layers().workspace());
  STRATA_RETURN_IF_ERROR(trainer.LoadState());
  return internal::RunLocalEpochs(
      m, fit, options,
      [&](int epoch,
          const internal::StepObserver& on_step) -> absl::StatusOr<StepStats> {
        STRATA_ASSIGN_OR_RETURN(
            StepStats stats,
            trainer.TrainEpoch(*fit.train, fit.job.batch_size,
                               fit.job.shuffle_seed, epoch, on_step));
        // Evaluate (the trainer's workspace) sees the averaged statistics.
        STRATA_RETURN_IF_ERROR(trainer.StoreState());
        return stats;
      });
}

}  // namespace strata::sdk

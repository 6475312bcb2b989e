// The GPU backend of Model, over kernels/cuda/dense_kernels.h (compiled by
// the host compiler; the CUDA code is in that library).
#include "worker/gpu_model.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cuda/dense_kernels.h"

namespace strata {

// One thread's device state for the models it runs on one device.
class GpuWorkspace {
 public:
  std::unique_ptr<GpuStream> stream;
  DeviceMemory params;  // plan.total_floats
  DeviceMemory grads;   // plan.total_floats
  DeviceMemory x;       // batch x features
  DeviceMemory labels;  // batch int32
  std::vector<DeviceMemory> outputs;    // per stage, batch x width
  std::vector<const float*> output_ptrs;  // per stage (may alias the input)
  std::vector<DeviceMemory> masks;      // per dropout stage
  std::vector<DeviceMemory> gradients;  // per stage, batch x width
  DeviceMemory example_loss;            // batch doubles
  DeviceMemory example_correct;         // batch int32
  DeviceMemory sums;                    // 2 doubles: loss sum, correct
};

void GpuWorkspaceDeleter::operator()(GpuWorkspace* workspace) const {
  if (workspace == nullptr) return;
  // Free on the workspace's device (the buffers go before the stream).
  if (workspace->stream != nullptr) (void)workspace->stream->Activate();
  delete workspace;
}

namespace {

GpuActivation ToGpu(Activation activation) {
  switch (activation) {
    case Activation::kRelu:
      return GpuActivation::kRelu;
    case Activation::kSigmoid:
      return GpuActivation::kSigmoid;
    case Activation::kTanh:
      return GpuActivation::kTanh;
    case Activation::kSoftmax:
      return GpuActivation::kSoftmax;
    case Activation::kLinear:
      break;
  }
  return GpuActivation::kLinear;
}

GpuLoss ToGpu(GpuModelPlan::Loss loss) {
  switch (loss) {
    case GpuModelPlan::Loss::kBinaryCrossEntropy:
      return GpuLoss::kBinaryCrossEntropy;
    case GpuModelPlan::Loss::kMse:
      return GpuLoss::kMse;
    case GpuModelPlan::Loss::kCrossEntropy:
      break;
  }
  return GpuLoss::kCrossEntropy;
}

size_t Floats(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }

// The workspace for `plan`'s device, created (or re-created for another
// device) as needed, its device made current, and buffers sized for
// batches of up to `batch`.
absl::StatusOr<GpuWorkspace*> Prepare(const GpuModelPlan& plan, int64_t batch,
                                      GpuWorkspacePtr* slot) {
  if (*slot == nullptr || (*slot)->stream->device() != plan.device) {
    slot->reset();
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<GpuStream> stream,
                            GpuStream::Create(plan.device));
    GpuWorkspacePtr fresh(new GpuWorkspace());
    fresh->stream = std::move(stream);
    *slot = std::move(fresh);
  }
  GpuWorkspace* ws = slot->get();
  STRATA_RETURN_IF_ERROR(ws->stream->Activate());
  const size_t n = plan.stages.size();
  ws->outputs.resize(n);
  ws->output_ptrs.assign(n, nullptr);
  ws->masks.resize(n);
  ws->gradients.resize(n);
  STRATA_RETURN_IF_ERROR(ws->params.Reserve(Floats(plan.total_floats)));
  STRATA_RETURN_IF_ERROR(ws->x.Reserve(Floats(batch * plan.num_features)));
  STRATA_RETURN_IF_ERROR(
      ws->labels.Reserve(static_cast<size_t>(batch) * sizeof(int32_t)));
  STRATA_RETURN_IF_ERROR(
      ws->example_loss.Reserve(static_cast<size_t>(batch) * sizeof(double)));
  STRATA_RETURN_IF_ERROR(ws->example_correct.Reserve(
      static_cast<size_t>(batch) * sizeof(int32_t)));
  STRATA_RETURN_IF_ERROR(ws->sums.Reserve(2 * sizeof(double)));
  for (size_t s = 0; s < n; ++s) {
    const GpuModelPlan::Stage& st = plan.stages[s];
    if (st.type == LayerType::kDense || st.rate > 0) {
      STRATA_RETURN_IF_ERROR(ws->outputs[s].Reserve(Floats(batch * st.out)));
    }
    if (st.type == LayerType::kDropout && st.rate > 0) {
      STRATA_RETURN_IF_ERROR(ws->masks[s].Reserve(Floats(batch * st.out)));
    }
  }
  return ws;
}

absl::Status UploadParams(const GpuModelPlan& plan,
                          const std::vector<absl::Span<const float>>& params,
                          GpuWorkspace* ws) {
  for (size_t v = 0; v < params.size(); ++v) {
    STRATA_RETURN_IF_ERROR(CopyToDevice(
        *ws->stream, ws->params.floats() + plan.variable_offsets[v],
        params[v].data(), Floats(plan.variable_sizes[v])));
  }
  return absl::OkStatus();
}

const float* Param(const GpuModelPlan& plan, const GpuWorkspace& ws, int v) {
  return ws.params.floats() + plan.variable_offsets[v];
}

// The layers on the device from ws->x; the output is ws->output_ptrs.back().
absl::Status Forward(const GpuModelPlan& plan, int64_t batch, bool training,
                     uint64_t dropout_seed, GpuWorkspace* ws) {
  const GpuStream& stream = *ws->stream;
  const float* in = ws->x.floats();
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const GpuModelPlan::Stage& st = plan.stages[s];
    if (st.type == LayerType::kDense) {
      float* z = ws->outputs[s].floats();
      STRATA_RETURN_IF_ERROR(GpuGemm(stream, false, false, batch, st.out,
                                     st.in, in, Param(plan, *ws, st.kernel),
                                     0.0f, z));
      if (st.bias >= 0) {
        STRATA_RETURN_IF_ERROR(
            GpuBiasAdd(stream, z, Param(plan, *ws, st.bias), batch, st.out));
      }
      STRATA_RETURN_IF_ERROR(GpuActivationForward(
          stream, ToGpu(st.activation), z, batch, st.out));
      in = z;
    } else if (training && st.rate > 0) {  // dropout
      const int64_t n = batch * st.out;
      float* mask = ws->masks[s].floats();
      STRATA_RETURN_IF_ERROR(GpuDropoutMask(stream, dropout_seed,
                                            st.layer_index, st.rate, mask, n));
      float* out = ws->outputs[s].floats();
      STRATA_RETURN_IF_ERROR(GpuMultiply(stream, in, mask, out, n));
      in = out;
    }
    // An inactive dropout passes its input through.
    ws->output_ptrs[s] = in;
  }
  return absl::OkStatus();
}

absl::Status UploadBatch(const float* x, const int32_t* y, int64_t batch,
                         int64_t features, GpuWorkspace* ws) {
  STRATA_RETURN_IF_ERROR(
      CopyToDevice(*ws->stream, ws->x.get(), x, Floats(batch * features)));
  if (y != nullptr) {
    STRATA_RETURN_IF_ERROR(
        CopyToDevice(*ws->stream, ws->labels.get(), y,
                     static_cast<size_t>(batch) * sizeof(int32_t)));
  }
  return absl::OkStatus();
}

}  // namespace

bool GpuBackendBuilt() { return true; }

absl::Status GpuCheckDevice(int device) { return CudaCheckDevice(device); }

absl::StatusOr<StepStats> GpuTrainStep(
    const GpuModelPlan& plan, const std::vector<absl::Span<const float>>& params,
    const float* x, const int32_t* y, int64_t batch, uint64_t dropout_seed,
    std::vector<std::vector<float>>* grads, GpuWorkspacePtr* workspace) {
  STRATA_ASSIGN_OR_RETURN(GpuWorkspace * ws, Prepare(plan, batch, workspace));
  const GpuStream& stream = *ws->stream;
  STRATA_RETURN_IF_ERROR(ws->grads.Reserve(Floats(plan.total_floats)));
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const int64_t width = plan.stages[s].out;
    STRATA_RETURN_IF_ERROR(ws->gradients[s].Reserve(Floats(batch * width)));
  }
  STRATA_RETURN_IF_ERROR(UploadParams(plan, params, ws));
  STRATA_RETURN_IF_ERROR(UploadBatch(x, y, batch, plan.num_features, ws));
  STRATA_RETURN_IF_ERROR(Forward(plan, batch, /*training=*/true, dropout_seed,
                                 ws));

  const int num_stages = static_cast<int>(plan.stages.size());
  STRATA_RETURN_IF_ERROR(ZeroOnDevice(stream, ws->sums.get(),
                                      2 * sizeof(double)));
  STRATA_RETURN_IF_ERROR(GpuLossForward(
      stream, ToGpu(plan.loss), ws->output_ptrs.back(), ws->labels.ints(),
      batch, plan.num_outputs, batch, ws->gradients[num_stages - 1].floats(),
      ws->example_loss.doubles(), ws->example_correct.ints(),
      ws->sums.doubles()));

  for (int s = num_stages - 1; s >= plan.first_trainable_stage; --s) {
    const GpuModelPlan::Stage& st = plan.stages[s];
    float* g = ws->gradients[s].floats();
    // The gradient w.r.t. this stage's input is stage s - 1's output
    // gradient (sized there for batch x st.in).
    float* below =
        s > plan.first_trainable_stage ? ws->gradients[s - 1].floats() : nullptr;
    if (st.type == LayerType::kDense) {
      const float* in = s == 0 ? ws->x.floats() : ws->output_ptrs[s - 1];
      // The output layer's cross-entropy gradient is already w.r.t. logits.
      const bool fused = s == num_stages - 1 &&
                         plan.loss != GpuModelPlan::Loss::kMse;
      if (!fused) {
        STRATA_RETURN_IF_ERROR(GpuActivationBackward(
            stream, ToGpu(st.activation), ws->output_ptrs[s], g, batch,
            st.out));
      }
      float* dw = ws->grads.floats() + plan.variable_offsets[st.kernel];
      STRATA_RETURN_IF_ERROR(
          GpuGemm(stream, true, false, st.in, st.out, batch, in, g, 0.0f, dw));
      if (st.bias >= 0) {
        float* db = ws->grads.floats() + plan.variable_offsets[st.bias];
        STRATA_RETURN_IF_ERROR(GpuBiasGrad(stream, g, batch, st.out, db));
      }
      if (below != nullptr) {
        STRATA_RETURN_IF_ERROR(GpuGemm(stream, false, true, batch, st.in,
                                       st.out, g, Param(plan, *ws, st.kernel),
                                       0.0f, below));
      }
    } else if (below != nullptr) {  // dropout
      const int64_t n = batch * st.out;
      if (st.rate > 0) {
        STRATA_RETURN_IF_ERROR(
            GpuMultiply(stream, g, ws->masks[s].floats(), below, n));
      } else {
        STRATA_RETURN_IF_ERROR(CopyOnDevice(stream, below, g, Floats(n)));
      }
    }
  }

  for (size_t v = 0; v < grads->size(); ++v) {
    STRATA_RETURN_IF_ERROR(CopyToHost(
        stream, (*grads)[v].data(),
        ws->grads.floats() + plan.variable_offsets[v],
        Floats(plan.variable_sizes[v])));
  }
  double sums[2] = {0, 0};
  STRATA_RETURN_IF_ERROR(
      CopyToHost(stream, sums, ws->sums.get(), sizeof(sums)));
  STRATA_RETURN_IF_ERROR(stream.Synchronize());
  StepStats stats;
  stats.examples = batch;
  stats.loss = sums[0] / static_cast<double>(batch);
  stats.accuracy = sums[1] / static_cast<double>(batch);
  return stats;
}

absl::Status GpuEvaluate(const GpuModelPlan& plan,
                         const std::vector<absl::Span<const float>>& params,
                         const Dataset& data, int64_t batch, double* loss_sum,
                         int64_t* correct, GpuWorkspacePtr* workspace) {
  if (data.size == 0) return absl::OkStatus();
  const int64_t most = std::min(batch, data.size);
  STRATA_ASSIGN_OR_RETURN(GpuWorkspace * ws, Prepare(plan, most, workspace));
  const GpuStream& stream = *ws->stream;
  STRATA_RETURN_IF_ERROR(UploadParams(plan, params, ws));
  STRATA_RETURN_IF_ERROR(ZeroOnDevice(stream, ws->sums.get(),
                                      2 * sizeof(double)));
  for (int64_t start = 0; start < data.size; start += batch) {
    const int64_t b = std::min(batch, data.size - start);
    STRATA_RETURN_IF_ERROR(UploadBatch(data.x.data() + start * data.features,
                                       data.labels.data() + start, b,
                                       plan.num_features, ws));
    STRATA_RETURN_IF_ERROR(Forward(plan, b, /*training=*/false, 0, ws));
    STRATA_RETURN_IF_ERROR(GpuLossForward(
        stream, ToGpu(plan.loss), ws->output_ptrs.back(), ws->labels.ints(),
        b, plan.num_outputs, b, nullptr, ws->example_loss.doubles(),
        ws->example_correct.ints(), ws->sums.doubles()));
  }
  double sums[2] = {0, 0};
  STRATA_RETURN_IF_ERROR(
      CopyToHost(stream, sums, ws->sums.get(), sizeof(sums)));
  STRATA_RETURN_IF_ERROR(stream.Synchronize());
  *loss_sum += sums[0];
  *correct += static_cast<int64_t>(sums[1]);
  return absl::OkStatus();
}

absl::Status GpuPredict(const GpuModelPlan& plan,
                        const std::vector<absl::Span<const float>>& params,
                        const float* x, int64_t batch, std::vector<float>* out,
                        GpuWorkspacePtr* workspace) {
  STRATA_ASSIGN_OR_RETURN(GpuWorkspace * ws, Prepare(plan, batch, workspace));
  STRATA_RETURN_IF_ERROR(UploadParams(plan, params, ws));
  STRATA_RETURN_IF_ERROR(UploadBatch(x, nullptr, batch, plan.num_features, ws));
  STRATA_RETURN_IF_ERROR(Forward(plan, batch, /*training=*/false, 0, ws));
  out->resize(static_cast<size_t>(batch * plan.num_outputs));
  STRATA_RETURN_IF_ERROR(CopyToHost(*ws->stream, out->data(),
                                    ws->output_ptrs.back(),
                                    Floats(batch * plan.num_outputs)));
  return ws->stream->Synchronize();
}

}  // namespace strata

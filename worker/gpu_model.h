// The GPU backend of Model (worker/model.h): the same Sequential MLP's
// forward, loss and backward on a CUDA device, through cuBLAS and the
// kernels of kernels/cuda/dense_kernels.h. Parameters come from the host
// and gradients go back to it on every call (the PS and the collectives
// work on host buffers).
//
// Plain C++: no CUDA header. gpu_model.cc implements it where the build has
// CUDA (target strata_cuda_dense), gpu_model_nocuda.cc otherwise (every
// entry point then fails with FAILED_PRECONDITION, "this build has no CUDA
// support ..."). Model is the only intended caller: it validates the
// arguments (params, batch, labels) before calling in.
#ifndef STRATA_WORKER_GPU_MODEL_H_
#define STRATA_WORKER_GPU_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/dataset.h"
#include "job/job.h"
#include "worker/model.h"

namespace strata {

// What the GPU backend needs of a built Model (Model::Build fills it).
struct GpuModelPlan {
  enum class Loss { kCrossEntropy, kBinaryCrossEntropy, kMse };
  struct Stage {
    LayerType type = LayerType::kDense;  // kDense or kDropout
    int64_t in = 0;
    int64_t out = 0;
    Activation activation = Activation::kLinear;
    int kernel = -1;  // variable index
    int bias = -1;    // variable index, -1 without bias
    double rate = 0;  // dropout
    uint64_t layer_index = 0;
  };
  int device = 0;  // CUDA device index
  std::vector<Stage> stages;
  Loss loss = Loss::kCrossEntropy;
  int64_t num_features = 0;
  int64_t num_outputs = 0;
  int first_trainable_stage = 0;
  // Per variable: its element count and its offset (in floats) in the one
  // device buffer that holds all parameters (and the one for gradients).
  std::vector<int64_t> variable_sizes;
  std::vector<int64_t> variable_offsets;
  int64_t total_floats = 0;
};

// Whether this build has the CUDA backend.
bool GpuBackendBuilt();

// OK when CUDA device `device` can be used. Errors: FAILED_PRECONDITION
// with the reason ("no usable CUDA device: cudaErrorNoDevice: ...", "no
// CUDA device 3: 1 device(s) visible (0 to 0)", "this build has no CUDA
// support (...)").
absl::Status GpuCheckDevice(int device);

// Model::TrainStep on the device. `grads` is already sized to the
// variables. *workspace is created on first use (a stream, a cuBLAS handle
// and device buffers) and reused after; it must be used by one thread at a
// time. Errors: FAILED_PRECONDITION / RESOURCE_EXHAUSTED / INTERNAL from
// CUDA or cuBLAS, naming the call, file and line.
absl::StatusOr<StepStats> GpuTrainStep(
    const GpuModelPlan& plan, const std::vector<absl::Span<const float>>& params,
    const float* x, const int32_t* y, int64_t batch, uint64_t dropout_seed,
    std::vector<std::vector<float>>* grads, GpuWorkspacePtr* workspace);

// Adds the loss sum and the correct count over all of `data` (batches of
// `batch`, no dropout) to *loss_sum and *correct. Labels already checked.
absl::Status GpuEvaluate(const GpuModelPlan& plan,
                         const std::vector<absl::Span<const float>>& params,
                         const Dataset& data, int64_t batch, double* loss_sum,
                         int64_t* correct, GpuWorkspacePtr* workspace);

// The outputs (batch x num_outputs) for x, without dropout, into *out.
absl::Status GpuPredict(const GpuModelPlan& plan,
                        const std::vector<absl::Span<const float>>& params,
                        const float* x, int64_t batch, std::vector<float>* out,
                        GpuWorkspacePtr* workspace);

}  // namespace strata

#endif  // STRATA_WORKER_GPU_MODEL_H_

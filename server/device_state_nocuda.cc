// server/device_state.h in a build without CUDA: the host device only.
#include "absl/strings/str_cat.h"
#include "server/device_state.h"

namespace strata {
namespace {

absl::Status NoCuda(const PsDevice& device) {
  return absl::FailedPreconditionError(absl::StrCat(
      "strata-ps was built without CUDA (configure with "
      "-DSTRATA_WITH_CUDA=ON where nvcc is found); --device ",
      device.Name(), " cannot be served"));
}

}  // namespace

bool PsBuiltWithCuda() { return false; }

absl::StatusOr<std::string> CheckPsDevice(const PsDevice& device) {
  if (!device.is_cuda()) return device.Name();
  return NoCuda(device);
}

absl::StatusOr<std::unique_ptr<VariableDevice>> NewVariableDevice(
    const PsDevice& device, const OptimizerConfig& /*optimizer*/,
    DType /*dtype*/, int64_t /*num_elements*/, int64_t /*row_width*/) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(
        "NewVariableDevice: the host device keeps variables in host memory");
  }
  return NoCuda(device);
}

}  // namespace strata

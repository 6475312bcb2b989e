// The parts of collective/nccl.h shared by the CUDA and the stub builds.
#include <cstddef>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/nccl.h"
#include "common/status_macros.h"

namespace strata {
namespace collective {

absl::Status ValidateNcclDevices(const std::vector<int>& devices) {
  if (devices.empty()) {
    return absl::InvalidArgumentError("NCCL group: no device given");
  }
  std::set<int> seen;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL group: device ", i, " is ", devices[i],
                       "; CUDA ordinals are >= 0"));
    }
    if (!seen.insert(devices[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL group: cuda:", devices[i],
                       " is listed twice (one rank per GPU)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> LocalGpus(int first, int count) {
  if (first < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("first GPU must be >= 0, got ", first));
  }
  if (count == 0) {
    return absl::InvalidArgumentError("asked for 0 GPUs");
  }
  STRATA_ASSIGN_OR_RETURN(const int visible, NcclVisibleDevices());
  if (first >= visible) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda:", first, " was asked for, but this machine has ",
                     visible, " visible GPU", visible == 1 ? "" : "s",
                     " (cuda:0 to cuda:", visible - 1, ")"));
  }
  const int available = visible - first;
  if (count > available) {
    return absl::FailedPreconditionError(absl::StrCat(
        count, " GPUs were asked for from cuda:", first, ", but only ",
        available, " GPU", available == 1 ? " is" : "s are",
        " visible from there (", visible, " in all)"));
  }
  const int n = count < 0 ? available : count;
  std::vector<int> gpus;
  for (int i = 0; i < n; ++i) gpus.push_back(first + i);
  return gpus;
}

}  // namespace collective
}  // namespace strata

// The parts of server/device_state.h that do not depend on the build's CUDA
// support.
#include "server/device_state.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata {

std::string PsDevice::Name() const {
  return is_cuda() ? absl::StrCat("cuda:", cuda_index) : "cpu";
}

absl::StatusOr<PsDevice> ParsePsDevice(absl::string_view text,
                                       absl::string_view what) {
  PsDevice device;
  if (text == "cpu") return device;
  if (text == "cuda") {
    device.cuda_index = 0;
    return device;
  }
  if (absl::StartsWith(text, "cuda:")) {
    const absl::string_view index = text.substr(5);
    const bool digits =
        !index.empty() && index.size() <= 4 &&
        std::all_of(index.begin(), index.end(),
                    [](char c) { return c >= '0' && c <= '9'; });
    int n = 0;
    if (digits && absl::SimpleAtoi(index, &n)) {
      device.cuda_index = n;
      return device;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": '", text,
                   "' is not one of cpu, cuda, cuda:N (N a GPU index, 0 to "
                   "9999)"));
}

}  // namespace strata

// Fuzzes the TF_CONFIG parser (ParseTfConfig) and the address splitter
// (SplitHostPort) with the input as the TF_CONFIG string / address.
// Invariants: a parsed config prints (TfConfigToJson) to JSON that parses
// back to the same config, and its own task's address (when listed) splits;
// a split address joins (JoinHostPort) to a string that splits back to the
// same host and port.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "common/tf_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  absl::string_view text(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<TfConfig> config = ParseTfConfig(text);
  FUZZ_TRACE("tf_config: %s", config.status().ToString().c_str());
  if (config.ok()) {
    const std::string printed = TfConfigToJson(*config);
    absl::StatusOr<TfConfig> again = ParseTfConfig(printed);
    FUZZ_CHECK(again.ok(), "printed config does not parse: " + printed + ": " +
                               again.status().ToString());
    FUZZ_CHECK(*again == *config, "round trip changed the config: " + printed);
    const std::string own = TaskAddress(*config);
    if (!own.empty()) {
      FUZZ_CHECK(SplitHostPort(own).ok(), "own address " + own);
    }
  }

  absl::StatusOr<std::pair<std::string, int>> split = SplitHostPort(text);
  if (split.ok()) {
    const std::string joined = JoinHostPort(split->first, split->second);
    absl::StatusOr<std::pair<std::string, int>> again = SplitHostPort(joined);
    FUZZ_CHECK(again.ok() && *again == *split,
               "JoinHostPort/SplitHostPort round trip: " + joined);
  }
  return 0;
}

// Silences protobuf's log output (e.g. "invalid UTF-8" on every malformed
// string field), which would otherwise dominate a fuzz run's time and log.
#ifndef STRATA_TESTS_FUZZ_QUIET_PROTOBUF_H_
#define STRATA_TESTS_FUZZ_QUIET_PROTOBUF_H_

#include "google/protobuf/stubs/logging.h"

namespace strata {
namespace fuzz {

inline void QuietProtobuf() {
  static const bool done = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)done;
}

}  // namespace fuzz
}  // namespace strata

#endif  // STRATA_TESTS_FUZZ_QUIET_PROTOBUF_H_

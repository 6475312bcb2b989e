// PushTag: the identity of a push for exactly-once application, and its
// conversion to the wire message. A plain value type.
#ifndef STRATA_CLIENT_PUSH_TAG_H_
#define STRATA_CLIENT_PUSH_TAG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "strata/v1/parameter_server.pb.h"

namespace strata {

// Identity of a push for exactly-once application. The client fills in the
// attempt number on retries.
struct PushTag {
  std::string job;
  int64_t worker = 0;
  int64_t step = 0;
  // SYNC variables trained by a group: its id and size (0: none).
  int64_t group = 0;
  int32_t group_size = 0;
  // Per pushed variable, in the call's order: the version its gradient was
  // computed from (VariableSlot.base_version; the server counts the
  // staleness and may scale the learning rate by it); empty, or -1 for a
  // variable: not given.
  std::vector<int64_t> base_versions;
};

// The wire form of `tag`, with attempt 0.
v1::PushTag ToProto(const PushTag& tag);

}  // namespace strata

#endif  // STRATA_CLIENT_PUSH_TAG_H_

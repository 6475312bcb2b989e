// PushTag: the identity of one push call (common/push_id.h's PushId) and
// the base versions of its variables, and its conversion to the wire
// message. A plain value type.
#ifndef STRATA_CLIENT_PUSH_TAG_H_
#define STRATA_CLIENT_PUSH_TAG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/push_id.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

// Written as PushTag{job, worker, step[, group, group_size]}; the client
// fills in the attempt number on retries.
struct PushTag : PushId {
  PushTag() = default;
  PushTag(std::string job_, int64_t worker_, int64_t step_,
          int64_t group_ = 0, int32_t group_size_ = 0) {
    job = std::move(job_);
    worker = worker_;
    step = step_;
    group = group_;
    group_size = group_size_;
  }
  // Per pushed variable, in the call's order: the version its gradient was
  // computed from (VariableSlot.base_version; the server counts the
  // staleness and may scale the learning rate by it); empty, or -1 for a
  // variable: not given.
  std::vector<int64_t> base_versions;
};

// The wire form of `tag` (proto/push_id_codec.h).
v1::PushTag ToProto(const PushTag& tag);

}  // namespace strata

#endif  // STRATA_CLIENT_PUSH_TAG_H_

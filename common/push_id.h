// The identity of a push, one definition for the client and the server:
// PushId is who pushed which step (job, worker, step; a SYNC group's id and
// size; the client's retry attempt). The client's PushTag
// (client/push_tag.h) adds the per-variable base versions of one call; the
// core's PushMeta adds what a variable or table judges one push by. The
// wire form (v1::PushTag) is converted in proto/push_id_codec.h. Values.
#ifndef STRATA_COMMON_PUSH_ID_H_
#define STRATA_COMMON_PUSH_ID_H_

#include <cstdint>
#include <string>
#include <utility>

namespace strata {

struct PushId {
  std::string job;
  int64_t worker = 0;
  int64_t step = 0;
  // SYNC variables trained by a group: its id and size (0: none).
  int64_t group = 0;
  int32_t group_size = 0;
  // 0 for the first try; the client counts its retries of one push.
  int64_t attempt = 0;
};

// A push as a variable or a table takes it.
struct PushMeta : PushId {
  PushMeta() = default;
  PushMeta(std::string job_, int64_t worker_, int64_t step_,
           int64_t attempt_ = 0) {
    job = std::move(job_);
    worker = worker_;
    step = step_;
    attempt = attempt_;
  }
  // False for a push that carried no tag: it is applied every time it
  // arrives (no exactly-once detection, nothing remembered), and is refused
  // by SYNC and STALENESS variables, which need the worker and step.
  bool tagged = true;
  // A dense push's base version (VariableSlot.base_version): the version
  // of the variable its gradient was computed from; -1: not given.
  int64_t base_version = -1;
};

}  // namespace strata

#endif  // STRATA_COMMON_PUSH_ID_H_

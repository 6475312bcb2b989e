// Waits, without holding a thread, until every variable of a pull is ready:
// at least a version, and within the staleness bound of a clock.
#ifndef STRATA_SERVER_READY_WAIT_H_
#define STRATA_SERVER_READY_WAIT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "server/deadline_timer.h"
#include "server/variable.h"

namespace strata {

// One wait of one call; not thread-safe. Start it once; `done` runs once,
// possibly on another thread (a push's, the timer's) before Start returns.
// The owner must outlive that call; the timer must outlive the wait.
class ReadyWait {
 public:
  // (status, the variable it is about: "" when OK).
  using Done = std::function<void(const absl::Status&, const std::string&)>;

  // Runs `done` with OK once every variable satisfies (min_version, clock);
  // or with DEADLINE_EXCEEDED naming what it waited for, a little before
  // the caller's deadline (so that the caller hears why rather than a bare
  // deadline) or after `max_wait` (the server's maximum); or with a
  // variable's error (ABORTED by a restore, UNAVAILABLE at shutdown).
  void Start(DeadlineTimer* timer, absl::Duration max_wait,
             const grpc::CallbackServerContext* ctx,
             std::vector<std::shared_ptr<Variable>> variables,
             int64_t min_version, int64_t clock, Done done);

 private:
  // Waits on the first variable that is not ready; checks all again when it
  // becomes ready.
  void Next();

  DeadlineTimer* timer_ = nullptr;
  std::vector<std::shared_ptr<Variable>> waiting_;
  int64_t min_version_ = 0;
  int64_t clock_ = 0;
  absl::Time deadline_;
  Done done_;
};

}  // namespace strata

#endif  // STRATA_SERVER_READY_WAIT_H_

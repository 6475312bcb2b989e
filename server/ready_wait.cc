#include "server/ready_wait.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata {

void ReadyWait::Start(DeadlineTimer* timer, absl::Duration max_wait,
                      const grpc::CallbackServerContext* ctx,
                      std::vector<std::shared_ptr<Variable>> variables,
                      int64_t min_version, int64_t clock, Done done) {
  timer_ = timer;
  waiting_ = std::move(variables);
  min_version_ = min_version;
  clock_ = clock;
  done_ = std::move(done);
  const absl::Time now = absl::Now();
  deadline_ = now + max_wait;
  const absl::Time caller = absl::FromChrono(ctx->deadline());
  if (caller < deadline_) {
    deadline_ = caller - std::min(absl::Milliseconds(100), (caller - now) / 5);
  }
  Next();
}

void ReadyWait::Next() {
  for (const auto& v : waiting_) {
    if (v->PullReady(min_version_, clock_)) continue;
    if (absl::Now() >= deadline_) {
      done_(absl::DeadlineExceededError(
                absl::StrCat("pull timed out waiting: ",
                             v->WaitDescription(min_version_, clock_))),
            v->name());
      return;
    }
    // The waiter may run (and finish the owner) on another thread before
    // WaitForPull returns: nothing below may touch `this`.
    std::shared_ptr<Variable> waiting = v;
    DeadlineTimer* timer = timer_;
    const absl::Time deadline = deadline_;
    const int64_t min_version = min_version_;
    const int64_t clock = clock_;
    const std::string name = v->name();
    int64_t id = waiting->WaitForPull(
        min_version, clock,
        [this, name](absl::Status s) { s.ok() ? Next() : done_(s, name); });
    if (id != 0) {
      timer->Schedule(deadline, [waiting, id, min_version, clock]() {
        waiting->ExpireWaiter(
            id, absl::DeadlineExceededError(absl::StrCat(
                    "pull timed out waiting: ",
                    waiting->WaitDescription(min_version, clock))));
      });
    }
    return;
  }
  done_(absl::OkStatus(), "");
}

}  // namespace strata

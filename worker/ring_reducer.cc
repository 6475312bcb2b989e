#include "worker/ring_reducer.h"

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "worker/transport_reducer.h"

namespace strata {
namespace {

class RingReducer final : public TransportReducer {
 public:
  RingReducer(std::unique_ptr<collective::Transport> transport,
              const collective::CollectiveOptions& options, int64_t group,
              std::function<bool()> end_group)
      : TransportReducer(MakeTransports(std::move(transport)), options),
        group_(group),
        end_group_(std::move(end_group)) {
    watcher_ = std::thread([this] { Watch(); });
  }

  ~RingReducer() override {
    done_.Notify();
    watcher_.join();
  }

 private:
  static std::vector<std::unique_ptr<collective::Transport>> MakeTransports(
      std::unique_ptr<collective::Transport> transport) {
    std::vector<std::unique_ptr<collective::Transport>> transports;
    transports.push_back(std::move(transport));
    return transports;
  }

  void Watch() {
    while (!done_.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
      if (end_group_()) {
        Abort(absl::AbortedError(absl::StrCat(
            "group ", group_, " replaced by a newer group")));
        return;
      }
    }
  }

  const int64_t group_;
  const std::function<bool()> end_group_;
  absl::Notification done_;
  std::thread watcher_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GradientReducer>> OpenRingReducer(
    collective::WorkerServer* server, const v1::GroupAssignment& assignment,
    const collective::CollectiveOptions& options,
    std::function<bool()> end_group) {
  std::vector<std::string> peers;
  for (const v1::GroupMember& m : assignment.members()) {
    peers.push_back(m.address());
  }
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<collective::Transport> transport,
      server->OpenGroup(assignment.group(), assignment.rank(), peers, options));
  return std::unique_ptr<GradientReducer>(new RingReducer(
      std::move(transport), options, assignment.group(), std::move(end_group)));
}

}  // namespace strata

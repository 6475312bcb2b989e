// The per-process mailbox of a WorkerServer (collective/worker_service.h):
// routes deliveries and aborts to the open group, keeps (bounded) those for
// groups not opened yet, refuses those for older groups. Internal to the
// gRPC collectives.
//
// Thread-safe. Shared by the server and its service; it holds the open group
// weakly (the transport owns it) and never calls a group under its lock.
#ifndef STRATA_COLLECTIVE_MAILBOX_H_
#define STRATA_COLLECTIVE_MAILBOX_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collective/collective.h"
#include "collective/collective_message.h"
#include "collective/grpc_group.h"
#include "collective/worker_service.h"
#include "common/logging.h"
#include "grpcpp/completion_queue.h"

namespace strata {
namespace collective {
namespace internal {

// Routes a WorkerServer's incoming messages and aborts to its groups.
class Mailbox : public std::enable_shared_from_this<Mailbox> {
 public:
  Mailbox(const WorkerServerOptions& options, Logger* logger);

  // Hands `msg` to its group, or keeps it for a group not opened yet.
  // Errors: UNAVAILABLE after Shutdown; ABORTED for an older or closed
  // group; RESOURCE_EXHAUSTED beyond max_early_bytes; the group's Deliver
  // errors.
  absl::Status Deliver(DecodedMessage msg);

  // Aborts group `group_id` (or keeps the abort until it opens, within
  // max_early_bytes; best effort). Ignored for older groups.
  void AbortGroup(int64_t group_id, int from_rank, const std::string& reason);

  // Opens group `group_id`, aborting the previous one and handing it the
  // messages and abort kept for it. `links` and `cq` must outlive the
  // group's Close(). Errors: FAILED_PRECONDITION after Shutdown or for a
  // group not newer than the newest opened here.
  absl::StatusOr<std::shared_ptr<GrpcGroup>> Open(
      int64_t group_id, int rank, std::vector<std::string> peers,
      const CollectiveOptions& options, const PeerLinks* links,
      grpc::CompletionQueue* cq);

  // Called by a closing group.
  void Forget(int64_t group_id, const GrpcGroup* group);

  // Refuses further deliveries and opens, drops what was kept, and aborts
  // the open group (UNAVAILABLE, naming `address`; peers told).
  void Shutdown(const std::string& address);

 private:
  struct Early {
    std::vector<DecodedMessage> messages;
    int64_t bytes = 0;
    bool aborted = false;
    int abort_rank = -1;
    std::string abort_reason;
  };

  const WorkerServerOptions options_;
  Logger* const logger_;
  absl::Mutex mu_;
  std::optional<int64_t> newest_ ABSL_GUARDED_BY(mu_);
  std::weak_ptr<GrpcGroup> current_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Early> early_ ABSL_GUARDED_BY(mu_);
  int64_t early_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace internal
}  // namespace collective
}  // namespace strata

#endif  // STRATA_COLLECTIVE_MAILBOX_H_

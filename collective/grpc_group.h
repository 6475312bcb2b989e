// One collective group opened on a WorkerServer (collective/worker_service.h):
// the receive mailbox of this process's rank and the asynchronous Deliver
// senders to its peers, with the channels (PeerLinks) and the completion
// queue thread (Poller) they use. Internal to the gRPC collectives.
//
// GrpcGroup is thread-safe and shared (the transport, the server's Mailbox
// and in-flight calls hold it). PeerLinks and Poller are owned by the
// transport and destroyed on its thread after the group closed.
#ifndef STRATA_COLLECTIVE_GRPC_GROUP_H_
#define STRATA_COLLECTIVE_GRPC_GROUP_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collective/collective.h"
#include "collective/collective_message.h"
#include "collective/worker_service.h"
#include "common/logging.h"
#include "common/tensor.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/async_unary_call.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"
#include "rpc/tls.h"
#include "strata/v1/worker_service.grpc.pb.h"

namespace strata {
namespace collective {
namespace internal {

class Mailbox;

// The channels and stubs of one group to its peers ([peer][channel]).
// Owned by the transport and destroyed on its thread, never on a gRPC
// callback thread: destroying a channel from inside one of its own callbacks
// shuts its callback completion queue down under the running callback (seen
// as "assertion failed: prior > 0" in grpc_cq_internal_unref).
struct PeerLinks {
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> generic;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs;

  PeerLinks(const std::vector<std::string>& peers, int channels_per_peer,
            const ClientSecurity& security);
};

// One opened group on this process: the receive mailbox of its rank, and the
// asynchronous senders to its peers. Shared by the transport, the server's
// mailbox (which routes deliveries and aborts to it) and in-flight calls.
// Thread-safe.
//
// `links` belongs to the transport and outlives every use: a call or abort
// notice is counted in flight (under mu_, while the group is not closed)
// before it touches the links, and Close() waits until none is in flight.
class GrpcGroup : public std::enable_shared_from_this<GrpcGroup> {
 public:
  GrpcGroup(int64_t group, int rank, std::vector<std::string> peers,
            const CollectiveOptions& options,
            const WorkerServerOptions& server_options, const PeerLinks* links,
            grpc::CompletionQueue* cq, std::weak_ptr<Mailbox> mailbox,
            Logger* logger);

  int64_t group() const { return group_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(peers_.size()); }

  // Transport::Send, Recv, RecvReduce and Flush of this rank. RecvReduce
  // adds from the received slices straight into `inout`.
  absl::Status Send(int peer, const std::string& key,
                    absl::Span<const char> data);
  absl::Status Recv(int peer, const std::string& key, absl::Span<char> out,
                    absl::Time deadline);
  absl::Status RecvReduce(int peer, const std::string& key, DType dtype,
                          absl::Span<char> inout, absl::Time deadline);
  absl::Status Flush(absl::Time deadline);

  // Aborts the group with "aborted by rank `by_rank`: `reason`"; tells the
  // peers when `tell_peers`. Only the first call has an effect.
  void Abort(int by_rank, const std::string& reason, bool tell_peers);

  // A message for this group from the server.
  absl::Status Deliver(DecodedMessage msg);

  // Ends the group here: cancels what is still in flight, waits for the
  // calls and abort notices to end, and leaves the server's mailbox.
  void Close();

  // An RPC this group started. Its completion comes out of the transport's
  // completion queue, whose thread calls OnRpcDone.
  struct Rpc {
    virtual ~Rpc() = default;
    GrpcGroup* group = nullptr;
    grpc::ClientContext ctx;
    grpc::Status status;
  };
  void OnRpcDone(Rpc* rpc);

 private:
  struct Call : Rpc {
    int peer = 0;
    int channel = 0;
    absl::Time deadline;  // of the send (options' timeout)
    // 1 for the one retry of a send whose first attempt found no
    // connection (first_status: that attempt's).
    int attempt = 0;
    grpc::Status first_status;
    std::string key;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
    std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> reader;
  };
  struct Notice : Rpc {
    v1::AbortGroupRequest request;
    v1::AbortGroupAck response;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::AbortGroupAck>> reader;
  };

  absl::Status Aborted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::AbortedError(abort_message_);
  }
  // What this rank's operations return once the group failed: its own
  // delivery failure when that caused the abort (e.g. UNAVAILABLE), ABORTED
  // with the reason otherwise. (Peers are always answered ABORTED.)
  absl::Status Failure() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!send_error_.ok()) return send_error_;
    return Aborted();
  }

  // Waits for message `key` from `peer` until `deadline` and takes it out
  // of the arrivals, checking that it has `bytes` bytes (a message of
  // another size is consumed all the same). Errors: as Transport::Recv.
  absl::Status Take(int peer, const std::string& key, size_t bytes,
                    absl::Time deadline, DecodedMessage* msg)
      ABSL_LOCKS_EXCLUDED(mu_);

  bool QueuesEmpty() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Moves queued calls for `peer` into `start` while the window allows.
  void PopStartable(int peer, std::vector<std::shared_ptr<Call>>* start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void StartCall(const std::shared_ptr<Call>& call);
  void OnCallDone(std::shared_ptr<Call> call);
  void StartNotice(const std::shared_ptr<Notice>& notice, int peer);

  const int64_t group_;
  const int rank_;
  const std::vector<std::string> peers_;
  const CollectiveOptions options_;
  const int64_t max_message_bytes_;
  const int max_in_flight_;
  const absl::Duration notice_timeout_;
  const PeerLinks* const links_;
  grpc::CompletionQueue* const cq_;
  const std::weak_ptr<Mailbox> mailbox_;
  Logger* const logger_;
  const std::shared_ptr<SliceCounter> counter_;

  absl::Mutex mu_;
  // Signalled on arrivals, call completions, abort and notice completions.
  absl::CondVar cv_;
  std::map<std::pair<int, std::string>, DecodedMessage> arrived_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::deque<std::shared_ptr<Call>>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<int> in_flight_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> next_channel_ ABSL_GUARDED_BY(mu_);
  int64_t total_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Started calls and abort notices, by their completion tag.
  std::map<const Rpc*, std::shared_ptr<Call>> live_ ABSL_GUARDED_BY(mu_);
  std::map<const Rpc*, std::shared_ptr<Notice>> notices_ ABSL_GUARDED_BY(mu_);
  absl::Status send_error_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::string abort_message_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// Drives the completion queue of one transport's RPCs on its own thread, so
// that completions never run on (and channels are never destroyed from)
// gRPC's callback threads. Destroyed after the group closed.
class Poller {
 public:
  Poller();
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  grpc::CompletionQueue* cq() { return &cq_; }

 private:
  void Loop();

  grpc::CompletionQueue cq_;
  std::thread thread_;
};

}  // namespace internal
}  // namespace collective
}  // namespace strata

#endif  // STRATA_COLLECTIVE_GRPC_GROUP_H_

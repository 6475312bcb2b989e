// The collectives over gRPC: every worker process runs a WorkerServer
// (service strata.v1.WorkerService, proto/strata/v1/worker_service.proto),
// and OpenGroup gives it a Transport to the other ranks' servers.
//
// Data plane (docs/ARCHITECTURE.md, "Collectives"): a Send becomes one
// Deliver call whose request is a hand-written protobuf header plus a slice
// that aliases the sender's memory (no user-space copy on send); calls run
// asynchronously, several in flight per peer. The receiving server keeps the
// received slices by reference in its mailbox, keyed by (group, from_rank,
// key), and Recv copies them once, straight into the destination.
#ifndef STRATA_COLLECTIVE_WORKER_SERVICE_H_
#define STRATA_COLLECTIVE_WORKER_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collective/collective.h"
#include "common/logging.h"
#include "grpcpp/server.h"
#include "rpc/tls.h"
#include "strata/v1/worker_service.grpc.pb.h"

namespace strata {
namespace collective {

namespace internal {
class Mailbox;
}  // namespace internal

struct WorkerServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 picks a free port
  // Largest message the server accepts (a Deliver carries one pack, a
  // GetState request is small). OpenGroup refuses packs that do not fit.
  int64_t max_message_bytes = 256 << 20;
  // Bound on the bytes of messages kept for groups not opened here yet;
  // beyond it Deliver answers RESOURCE_EXHAUSTED (and the sender's group
  // aborts).
  int64_t max_early_bytes = 256 << 20;
  // Deliver calls in flight per peer; further sends queue behind them.
  int max_sends_in_flight = 4;
  // TCP connections per peer, used round-robin by a group's sends.
  int channels_per_peer = 1;
  // Deadline of the best-effort AbortGroup calls that tell peers of an abort.
  absl::Duration abort_notice_timeout = absl::Seconds(2);
  // TLS of the listening port (plaintext when not enabled; with client_auth
  // only peers holding a certificate of the CA get in), and how this
  // server's groups dial their peers.
  TlsOptions tls;
  ClientSecurity peer_security;
};

using WorkerServiceBase = v1::WorkerService::WithRawCallbackMethod_Deliver<
    v1::WorkerService::WithCallbackMethod_AbortGroup<
        v1::WorkerService::WithCallbackMethod_GetState<
            v1::WorkerService::Service>>>;

// The gRPC adapter: validates, hands messages and aborts to the mailbox, and
// answers GetState from the state provider. Thread-safe.
class WorkerServiceImpl final : public WorkerServiceBase {
 public:
  using StateProvider =
      std::function<absl::StatusOr<v1::WorkerState>(const v1::GetStateRequest&)>;

  WorkerServiceImpl(std::shared_ptr<internal::Mailbox> mailbox,
                    Logger* logger);
  ~WorkerServiceImpl() override;

  void SetStateProvider(StateProvider provider);

  grpc::ServerUnaryReactor* Deliver(grpc::CallbackServerContext* ctx,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* AbortGroup(grpc::CallbackServerContext* ctx,
                                       const v1::AbortGroupRequest* request,
                                       v1::AbortGroupAck* response) override;
  grpc::ServerUnaryReactor* GetState(grpc::CallbackServerContext* ctx,
                                     const v1::GetStateRequest* request,
                                     v1::WorkerState* response) override;

 private:
  const std::shared_ptr<internal::Mailbox> mailbox_;
  Logger* const logger_;
  absl::Mutex mu_;
  StateProvider provider_ ABSL_GUARDED_BY(mu_);
};

// A worker's collective endpoint: the WorkerService on a gRPC server (plus
// the standard grpc.health.v1 service), and the groups opened on it.
// Thread-safe.
class WorkerServer {
 public:
  // Builds and starts the server. Errors: INVALID_ARGUMENT for bad options
  // (port outside [0, 65535], non-positive limits); UNAVAILABLE when the
  // address cannot be bound (naming it). `logger` may be null.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(
      const WorkerServerOptions& options, Logger* logger);
  // Shutdown(5 s).
  ~WorkerServer();

  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  int port() const { return port_; }
  // "host:port".
  std::string address() const;

  using StateProvider = WorkerServiceImpl::StateProvider;
  // Answers GetState; until set, GetState fails FAILED_PRECONDITION
  // "no state yet". The provider runs on a gRPC thread and must be
  // thread-safe; its error status is returned to the caller as is.
  void SetStateProvider(StateProvider provider);

  // A transport for `group`: this process is `rank`; peers[i] is rank i's
  // WorkerServer address (peers[rank] is this server's). Opening a group
  // aborts the older group opened here (its waits get ABORTED, peers are
  // told), and messages for groups older than the newest opened here are
  // refused with ABORTED; messages (and aborts) for a group not yet opened
  // are kept, within max_early_bytes, until it opens. The transport may
  // outlive the server (it is aborted by Shutdown). Destroying it closes the
  // group here: later messages for it are refused with ABORTED.
  // Errors: INVALID_ARGUMENT for an empty peer list, a rank outside it, a
  // malformed address, pack_bytes <= 0 or too large for max_message_bytes,
  // timeout <= 0; FAILED_PRECONDITION for a group not newer than one already
  // opened here, or after Shutdown.
  absl::StatusOr<std::unique_ptr<Transport>> OpenGroup(
      int64_t group, int rank, std::vector<std::string> peers,
      const CollectiveOptions& options);

  // Aborts the open group (UNAVAILABLE "shutting down", peers told), stops
  // accepting calls and lets in-flight ones finish, cancelling those still
  // running after `grace`. Idempotent.
  void Shutdown(absl::Duration grace);

 private:
  WorkerServer() = default;

  WorkerServerOptions options_;
  Logger* logger_ = nullptr;
  int port_ = 0;
  std::shared_ptr<internal::Mailbox> mailbox_;
  std::unique_ptr<WorkerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

// Calls GetState on the WorkerServer at `address` (one attempt, not waiting
// for the connection: UNAVAILABLE when the peer is down). Errors: the
// callee's status; INVALID_ARGUMENT for an empty address or timeout <= 0;
// DEADLINE_EXCEEDED after `timeout`.
absl::StatusOr<v1::WorkerState> FetchState(const std::string& address,
                                           const v1::GetStateRequest& request,
                                           absl::Duration timeout,
                                           const ClientSecurity& security = {});

}  // namespace collective
}  // namespace strata

#endif  // STRATA_COLLECTIVE_WORKER_SERVICE_H_

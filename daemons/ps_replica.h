// PsReplica: one replica of a replicated PS task (a job's ps.replication
// 2; strata-ps --replica). Every replica serves ReplicationService on its
// replication address; only the primary listens on its serving address.
//
// The role is decided at the coordinator: a replica registers as the task
// exclusively (RegisterRequest.exclusive). The first to do so is the
// primary; the other asks it to attach it as its backup (AttachBackup),
// receives the state transfer and then every change. When the primary's
// stream ends (the primary died), the backup registers as the task in the
// primary's place (`replaces`), keeping the state (no restore), and starts
// serving; clients, whose target lists both serving addresses, reconnect
// to it. A primary that finds itself replaced (fenced off) runs on_lost.
// A replica whose backup state is unusable (it could not apply an entry,
// or it was fenced off) drops it and joins again.
#ifndef STRATA_DAEMONS_PS_REPLICA_H_
#define STRATA_DAEMONS_PS_REPLICA_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "common/logging.h"
#include "grpcpp/server.h"
#include "rpc/tls.h"
#include "server/ps_server.h"
#include "server/replication.h"

namespace strata {

struct PsReplicaOptions {
  int task_index = 0;
  // This replica's place in replication_addresses.
  int replica = 0;
  // host:port of every replica's ReplicationService, in replica order.
  std::vector<std::string> replication_addresses;
  // Where this replica's ReplicationService listens: empty, its entry of
  // replication_addresses; else this host with that entry's port.
  std::string listen_host;
  // The task's address as clients know it: every replica's serving
  // address, comma-separated ("P0,P1"), the same for all replicas.
  std::string advertise;
  // TLS of the replication port, and how replicas reach each other.
  TlsOptions tls;
  ClientSecurity security;
  absl::Duration ack_timeout = absl::Seconds(5);
  // How often a backup asks the coordinator whether its primary's lease
  // expired while its stream stays open (a hung primary), and then takes
  // the task over.
  absl::Duration hang_check = absl::Seconds(1);
  // Runs when this primary lost the task to its backup (default: log and
  // exit the process with code 3, so that it is restarted as a backup).
  std::function<void()> on_lost;
};

// Thread-safe.
class PsReplica {
 public:
  // Starts the replication service and the role loop. `server` was started
  // with defer_serving; the coordinator client and both must outlive this.
  // Errors: UNAVAILABLE when the replication address cannot be bound;
  // INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<PsReplica>> Start(
      PsServer* server, Coordinator* coordinator,
      PsReplicaOptions options, Logger* logger);
  ~PsReplica();

  // Stops the role loop, the log and the replication service; a primary
  // deregisters. Idempotent.
  void Stop();

  v1::ReplicaStatusResponse Status() const;
  // Blocks until this replica is the primary (true) or `timeout` passes.
  bool WaitUntilPrimary(absl::Duration timeout) const;
  // Blocks until this replica is a backup whose primary's stream is open.
  bool WaitUntilBackup(absl::Duration timeout) const;

 private:
  PsReplica(PsServer* server, Coordinator* coordinator,
            PsReplicaOptions options, Logger* logger);
  void Run();
  // Asks the other replicas to attach this one (as `incarnation`).
  absl::Status AskToAttach(const std::string& incarnation);
  // Takes the primary's role with `agent` registered.
  absl::Status BecomePrimary(std::unique_ptr<MembershipAgent> agent,
                             const std::string& incarnation, bool promoted);
  void Lost();
  bool Sleep(absl::Duration d);

  PsServer* const server_;
  Coordinator* const coordinator_;
  const PsReplicaOptions options_;
  Logger* const logger_;
  std::unique_ptr<ReplicationServiceImpl> service_;
  std::unique_ptr<grpc::Server> grpc_server_;

  mutable absl::Mutex mu_;
  v1::ReplicaStatusResponse::Role role_ ABSL_GUARDED_BY(mu_) =
      v1::ReplicaStatusResponse::STARTING;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::string incarnation_ ABSL_GUARDED_BY(mu_);
  int64_t promotions_ ABSL_GUARDED_BY(mu_) = 0;
  // The primary's stream while a backup.
  bool stream_open_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_failed_ ABSL_GUARDED_BY(mu_) = false;
  std::string stream_primary_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ReplicationLog> log_;
  std::unique_ptr<MembershipAgent> agent_;
  std::thread thread_;
};

}  // namespace strata

#endif  // STRATA_DAEMONS_PS_REPLICA_H_

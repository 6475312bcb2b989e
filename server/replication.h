// PS replication (a job's ps.replication 2): primary-backup replication of
// one PS task's variables.
//
// The primary's store appends every change, under the lock that orders it,
// to a ReplicationLog, which streams the entries in that order to the
// backup (ReplicationService.Replicate); the backup applies them to its own
// store with the same code (ApplyReplicationEntry), so both hold the same
// values, versions, exactly-once windows and SYNC sums, and acknowledges. A
// push or assignment is acknowledged to its client only after the backup
// has it. A backup that joins gets a state transfer first: RESET, then an
// INSTALL of every variable, taken under each variable's lock while
// training goes on.
//
// When the backup is lost (its stream fails, or it acknowledges nothing
// for ack_timeout), the primary fences it off at the coordinator before it
// acknowledges anything more (HeartbeatRequest.fence_incarnation), then
// goes on alone; when the coordinator answers that the backup took the
// task over first, the primary is lost: it acknowledges nothing more
// (Wait: UNAVAILABLE) and on_lost runs (strata-ps exits).
#ifndef STRATA_SERVER_REPLICATION_H_
#define STRATA_SERVER_REPLICATION_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "rpc/tls.h"
#include "server/replication_sink.h"
#include "server/variable_store.h"
#include "strata/v1/replication.grpc.pb.h"

namespace strata {

struct ReplicationLogOptions {
  int task_index = 0;
  // The primary's registered incarnation (sent in the first frame).
  std::string incarnation;
  // How the primary reaches its backup.
  ClientSecurity security;
  // A backup that acknowledges nothing for this long is dropped.
  absl::Duration ack_timeout = absl::Seconds(5);
  // Payload bytes per frame (entries are not split).
  size_t frame_bytes = size_t{4} << 20;
  // Fences `backup` off at the coordinator (MembershipAgent::Fence). OK:
  // fenced; NOT_FOUND or ALREADY_EXISTS: the backup took the task over;
  // other errors are retried.
  std::function<absl::Status(const std::string& backup)> fence;
  // The task was lost to the backup (runs once, on the log's thread).
  std::function<void()> on_lost;
  // How a fence retry waits (tests inject one); null: real time.
  std::function<void(absl::Duration)> sleep;
};

// Thread-safe. The store must outlive it.
class ReplicationLog final : public ReplicationSink {
 public:
  ReplicationLog(VariableStore* store, Logger* logger,
                 ReplicationLogOptions options);
  ~ReplicationLog() override;

  // A backup at `address` (its replication address), which would register
  // as `backup_incarnation`, joins: the state transfer is appended and the
  // stream to it opened. Errors: FAILED_PRECONDITION while another backup
  // is attached (or being fenced off) or the task is lost; those of the
  // state transfer (CUDA slot reads).
  absl::Status Attach(const std::string& address,
                      const std::string& backup_incarnation);
  // Stops the stream (a backup, if any, sees it end). Idempotent.
  void Stop();

  // ReplicationSink.
  bool active() const override;
  uint64_t Append(v1::ReplicationEntry entry) override;
  uint64_t Tail() const override;
  absl::Status Wait(uint64_t ticket) override;

  // A backup attached and acknowledging.
  bool has_backup() const;
  // The newest entry's position; the newest the backup applied.
  uint64_t position() const;
  uint64_t acknowledged() const;
  // Backups dropped so far.
  int64_t backups_dropped() const;

 private:
  enum class State { kAlone, kAttached, kFencing, kLost };
  // One attachment: streams entries to the backup until it fails or the
  // log stops, then fences the backup off.
  void Session(uint64_t session, std::string address,
               std::string backup_incarnation);
  void Fence(uint64_t session, const std::string& backup_incarnation);

  VariableStore* const store_;
  Logger* const logger_;
  const ReplicationLogOptions options_;

  std::atomic<bool> active_{false};
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kAlone;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t session_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Every entry up to acked_ is in the backup's store; every one up to
  // released_ needs no backup (it was dropped and fenced off).
  uint64_t acked_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t released_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::ReplicationEntry> queue_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* stream_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// Applies one of its primary's entries to a backup's store. Entries for a
// variable the store lacks are skipped (during a state transfer, the
// variable's INSTALL follows and holds their effect). Errors: those of the
// store or variable (the backup then leaves the stream).
absl::Status ApplyReplicationEntry(VariableStore* store,
                                   const v1::ReplicationEntry& entry);

// What the replication service asks of the process that serves it.
struct ReplicaHooks {
  // Whether this replica takes a primary's stream now (it is a backup).
  std::function<bool()> is_backup;
  // A primary's stream opened / ended; `failed`: this replica could not
  // apply an entry (its store is not the primary's any more).
  std::function<void(const std::string& primary_incarnation)> stream_opened;
  std::function<void(const std::string& primary_incarnation, bool failed)>
      stream_closed;
  // AttachBackup, answered by a primary; FAILED_PRECONDITION otherwise.
  std::function<absl::StatusOr<std::string>(
      const v1::AttachBackupRequest& request)>
      attach;
  std::function<v1::ReplicaStatusResponse()> status;
};

// The synchronous gRPC service every replica serves on its replication
// address (each stream holds one server thread).
class ReplicationServiceImpl final : public v1::ReplicationService::Service {
 public:
  ReplicationServiceImpl(VariableStore* store, ReplicaHooks hooks,
                         Logger* logger);
  grpc::Status Replicate(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::ReplicationAck, v1::ReplicationFrame>*
          stream) override;
  grpc::Status AttachBackup(grpc::ServerContext* ctx,
                            const v1::AttachBackupRequest* req,
                            v1::AttachBackupResponse* resp) override;
  grpc::Status ReplicaStatus(grpc::ServerContext* ctx,
                             const v1::ReplicaStatusRequest* req,
                             v1::ReplicaStatusResponse* resp) override;

 private:
  VariableStore* const store_;
  const ReplicaHooks hooks_;
  Logger* const logger_;
};

}  // namespace strata

#endif  // STRATA_SERVER_REPLICATION_H_

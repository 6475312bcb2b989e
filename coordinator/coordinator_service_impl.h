// gRPC adapter over CoordinatorState: validates nothing the core does not,
// calls it and maps the status. Also runs the coordinator's background work:
// lease checks, the PS checkpoint/restore calls the core asks for, and the
// group commit that makes ReportWork durable before it is answered.
#ifndef STRATA_COORDINATOR_COORDINATOR_SERVICE_IMPL_H_
#define STRATA_COORDINATOR_COORDINATOR_SERVICE_IMPL_H_

#include <atomic>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/auth.h"
#include "coordinator/coordinator_state.h"
#include "coordinator/ps_checkpointer.h"
#include "strata/v1/coordinator.grpc.pb.h"

namespace strata {

struct CoordinatorServiceOptions {
  // Period of lease checks and of polling for due PS actions.
  absl::Duration tick = absl::Milliseconds(20);
  // Shortest time between two writes of the state file.
  absl::Duration persist_interval = absl::Milliseconds(50);
  // When set, every call must carry a valid bearer token (else
  // UNAUTHENTICATED); SubmitJob needs the coordinator or admin role (else
  // PERMISSION_DENIED), the other methods any role. Null: no
  // authentication.
  std::shared_ptr<const CredentialStore> credentials;
};

// Thread-safe. The state, checkpointer, logger and metrics registry must
// outlive it. Starts its threads in the constructor; PrepareShutdown (or
// the destructor) stops them.
class CoordinatorServiceImpl final
    : public v1::CoordinatorService::CallbackService {
 public:
  // `checkpointer` may be null: checkpoints and restores then fail (logged).
  CoordinatorServiceImpl(CoordinatorState* state, PsCheckpointer* checkpointer,
                         Logger* logger, MetricsRegistry* metrics,
                         CoordinatorServiceOptions options = {});
  ~CoordinatorServiceImpl() override;

  CoordinatorServiceImpl(const CoordinatorServiceImpl&) = delete;
  CoordinatorServiceImpl& operator=(const CoordinatorServiceImpl&) = delete;

  // Before the server shuts down: ends every WatchCluster stream and
  // Barrier wait with UNAVAILABLE, stops the background threads (waiting
  // for a PS call in progress) and writes the state. Idempotent.
  void PrepareShutdown();

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const v1::RegisterRequest* req,
                                     v1::RegisterResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override;
  grpc::ServerUnaryReactor* Deregister(grpc::CallbackServerContext* ctx,
                                       const v1::DeregisterRequest* req,
                                       v1::DeregisterResponse* resp) override;
  grpc::ServerWriteReactor<v1::ClusterState>* WatchCluster(
      grpc::CallbackServerContext* ctx,
      const v1::WatchClusterRequest* req) override;
  grpc::ServerUnaryReactor* GetClusterSpec(
      grpc::CallbackServerContext* ctx, const v1::GetClusterSpecRequest* req,
      v1::GetClusterSpecResponse* resp) override;
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const v1::GetJobRequest* req,
                                   v1::JobStatus* resp) override;
  grpc::ServerUnaryReactor* GetWork(grpc::CallbackServerContext* ctx,
                                    const v1::GetWorkRequest* req,
                                    v1::WorkItem* resp) override;
  grpc::ServerUnaryReactor* ReportWork(grpc::CallbackServerContext* ctx,
                                       const v1::ReportWorkRequest* req,
                                       v1::ReportWorkResponse* resp) override;
  grpc::ServerUnaryReactor* ReportWorkBatch(
      grpc::CallbackServerContext* ctx, const v1::ReportWorkBatchRequest* req,
      v1::ReportWorkBatchResponse* resp) override;
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx,
                                    const v1::BarrierRequest* req,
                                    v1::BarrierResponse* resp) override;
  grpc::ServerUnaryReactor* JoinGroup(grpc::CallbackServerContext* ctx,
                                      const v1::JoinGroupRequest* req,
                                      v1::GroupAssignment* resp) override;

 private:
  class WatchReactor;
  class BarrierReactor;
  struct WatchEntry {
    int pins = 0;       // callers using the reactor outside watch_mu_
    bool done = false;  // OnDone ran; deleted when unpinned
  };
  using DurableDone = std::function<void(absl::Status)>;

  void Record(const char* method, const absl::Status& status,
              absl::Duration elapsed);
  // OK when the server runs without credentials or the call's token is
  // valid and holds `needed`; UNAUTHENTICATED or PERMISSION_DENIED.
  absl::Status Authorize(const grpc::CallbackServerContext* ctx, Role needed,
                         const char* method) const;
  grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx,
                                        const char* method, absl::Time start,
                                        const absl::Status& status);
  void FinishReactor(grpc::ServerUnaryReactor* reactor, const char* method,
                     absl::Time start, const absl::Status& status);

  // Runs `done` with the outcome of a state write that covers every change
  // made so far (on the persist thread; inline after shutdown).
  void EnqueueDurable(DurableDone done);

  // Calls `fn` on every live watch reactor without holding watch_mu_.
  void ForEachWatch(const std::function<void(WatchReactor*)>& fn);
  void UnpinWatches(const std::vector<WatchReactor*>& reactors);
  // From WatchReactor::OnDone; deletes it once unpinned.
  void WatchDone(WatchReactor* reactor);

  void LeaseLoop();
  void PsActionLoop();
  void PersistLoop();
  // Waits up to `timeout` for stop; true when stopping.
  bool WaitForStop(absl::Duration timeout);

  CoordinatorState* const state_;
  PsCheckpointer* const checkpointer_;
  Logger* const logger_;
  MetricsRegistry* const metrics_;
  const CoordinatorServiceOptions options_;
  int64_t watcher_id_ = 0;
  std::atomic<int64_t> next_ticket_{1};

  absl::Mutex watch_mu_;
  bool shutting_down_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::map<WatchReactor*, WatchEntry> watches_ ABSL_GUARDED_BY(watch_mu_);

  absl::Mutex thread_mu_;
  bool stop_ ABSL_GUARDED_BY(thread_mu_) = false;

  absl::Mutex persist_mu_;
  bool persist_stop_ ABSL_GUARDED_BY(persist_mu_) = false;
  std::vector<DurableDone> persist_queue_ ABSL_GUARDED_BY(persist_mu_);

  // Started last, joined in PrepareShutdown.
  std::thread lease_thread_;
  std::thread ps_thread_;
  std::thread persist_thread_;
  std::atomic<bool> threads_stopped_{false};
};

}  // namespace strata

#endif  // STRATA_COORDINATOR_COORDINATOR_SERVICE_IMPL_H_

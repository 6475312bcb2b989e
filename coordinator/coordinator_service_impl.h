// gRPC adapter over CoordinatorState: authorizes, validates the shape of
// batched calls, calls the state and maps the status. Streams (WatchCluster)
// and barrier waits are reactors here; the background work (lease checks,
// PS calls, the group commit that makes a report durable before it is
// answered) is CoordinatorDriver's.
#ifndef STRATA_COORDINATOR_COORDINATOR_SERVICE_IMPL_H_
#define STRATA_COORDINATOR_COORDINATOR_SERVICE_IMPL_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "coordinator/coordinator_driver.h"
#include "coordinator/coordinator_state.h"
#include "rpc/auth.h"
#include "strata/v1/coordinator.grpc.pb.h"

namespace strata {

struct CoordinatorServiceOptions {
  // The driver's periods (CoordinatorServer passes them to its
  // CoordinatorDriver): lease checks and PS-action polling, and the
  // shortest time between two writes of the state file.
  absl::Duration tick = absl::Milliseconds(20);
  absl::Duration persist_interval = absl::Milliseconds(50);
  // When set, every call must carry a valid bearer token (else
  // UNAUTHENTICATED); SubmitJob needs the coordinator or admin role (else
  // PERMISSION_DENIED), the other methods any role. Null: no
  // authentication.
  std::shared_ptr<const CredentialStore> credentials;
  // An elected coordinator (strata-coordinator --etcd-endpoints): its epoch,
  // sent to every caller as the initial metadata kCoordinatorEpochHeader
  // (clients refuse answers from an epoch below one they have seen), and
  // whether it still leads, asked before each call (a call to one that no
  // longer does is refused with UNAVAILABLE). 0 and null: not elected.
  int64_t leader_epoch = 0;
  std::function<bool()> leading;
};

// Thread-safe. The state, driver, logger and metrics registry must outlive
// it. Starts no threads.
class CoordinatorServiceImpl final
    : public v1::CoordinatorService::CallbackService {
 public:
  // `driver` makes reports durable (EnqueueDurable).
  CoordinatorServiceImpl(CoordinatorState* state, CoordinatorDriver* driver,
                         Logger* logger, MetricsRegistry* metrics,
                         CoordinatorServiceOptions options = {});
  ~CoordinatorServiceImpl() override;

  CoordinatorServiceImpl(const CoordinatorServiceImpl&) = delete;
  CoordinatorServiceImpl& operator=(const CoordinatorServiceImpl&) = delete;

  // Before the server shuts down: ends every WatchCluster stream and
  // Barrier wait with UNAVAILABLE, and refuses new ones. Idempotent.
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

  void Record(const char* method, const absl::Status& status,
              absl::Duration elapsed);
  // OK when the server runs without credentials or the call's token is
  // valid and holds `needed`; UNAUTHENTICATED or PERMISSION_DENIED.
  // An elected coordinator first checks that it still leads and sends its
  // epoch (CoordinatorServiceOptions::leader_epoch).
  absl::Status Authorize(grpc::CallbackServerContext* ctx, Role needed,
                         const char* method) const;
  // A unary call: authorizes it for `needed`, then `handle()` fills the
  // response and returns the outcome; records, logs and finishes the call.
  template <typename Handle>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx,
                                  const char* method, Role needed,
                                  Handle handle);
  grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx,
                                        const char* method, absl::Time start,
                                        const absl::Status& status);
  void FinishReactor(grpc::ServerUnaryReactor* reactor, const char* method,
                     absl::Time start, const absl::Status& status);
  // What a report call did.
  struct ReportOutcome {
    absl::Status status;
    // An evaluation was reported or the job ended: answered once written.
    bool milestone = false;
    // Reports were applied: written later, the answer does not wait.
    bool applied = false;
  };
  // A report call: authorizes it, runs `handle()`, and finishes the call
  // (durably for a milestone when the state is persistent).
  template <typename Handle>
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                   const char* method, Handle handle);

  // Calls `fn` on every live watch reactor without holding watch_mu_.
  void ForEachWatch(const std::function<void(WatchReactor*)>& fn);
  void UnpinWatches(const std::vector<WatchReactor*>& reactors);
  // From WatchReactor::OnDone; deletes it once unpinned.
  void WatchDone(WatchReactor* reactor);

  CoordinatorState* const state_;
  CoordinatorDriver* const driver_;
  Logger* const logger_;
  MetricsRegistry* const metrics_;
  const CoordinatorServiceOptions options_;
  int64_t watcher_id_ = 0;
  std::atomic<int64_t> next_ticket_{1};

  absl::Mutex watch_mu_;
  bool shutting_down_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::map<WatchReactor*, WatchEntry> watches_ ABSL_GUARDED_BY(watch_mu_);
};

}  // namespace strata

#endif  // STRATA_COORDINATOR_COORDINATOR_SERVICE_IMPL_H_

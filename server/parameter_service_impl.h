// gRPC adapter over ParameterStore: validates requests, calls the store and
// maps statuses. Push, Assign and Pull are raw (ByteBuffer) methods so that
// tensor bytes are written straight into place on receive and sent from the
// variable's snapshot without a copy. The methods are defined by concern:
// parameter_service_impl.cc (lifecycle and unary calls),
// parameter_service_streams.cc (Push, Assign, Pull and their batched
// forms), parameter_service_lane.cc (Lane: push and pull frames on one
// persistent stream), parameter_service_shared.cc (same-host shared
// memory).
#ifndef STRATA_SERVER_PARAMETER_SERVICE_IMPL_H_
#define STRATA_SERVER_PARAMETER_SERVICE_IMPL_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/buffer_pool.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/thread_pool.h"
#include "rpc/auth.h"
#include "server/deadline_timer.h"
#include "server/parameter_store.h"
#include "server/shared_doorbell.h"
#include "server/shared_regions.h"
#include "strata/v1/parameter_server.grpc.pb.h"

namespace strata {

using ParameterServiceBase =
    v1::ParameterService::WithCallbackMethod_CreateTable<
    v1::ParameterService::WithCallbackMethod_LookupRows<
    v1::ParameterService::WithCallbackMethod_PushTableRows<
    v1::ParameterService::WithCallbackMethod_TableStats<
    v1::ParameterService::WithCallbackMethod_RestoreTables<
    v1::ParameterService::WithRawCallbackMethod_Lane<
    v1::ParameterService::WithCallbackMethod_AttachSharedRegion<
    v1::ParameterService::WithCallbackMethod_DetachSharedRegion<
    v1::ParameterService::WithCallbackMethod_ExchangeShared<
    v1::ParameterService::WithCallbackMethod_MirrorVariables<
    v1::ParameterService::WithCallbackMethod_ServeSharedRegion<
    v1::ParameterService::WithCallbackMethod_CreateVariable<
        v1::ParameterService::WithRawCallbackMethod_Pull<
            v1::ParameterService::WithRawCallbackMethod_Push<
                v1::ParameterService::WithRawCallbackMethod_Assign<
                    v1::ParameterService::WithCallbackMethod_Save<
                        v1::ParameterService::WithCallbackMethod_Restore<
                        v1::ParameterService::WithCallbackMethod_DeleteCheckpoints<
                            v1::ParameterService::WithCallbackMethod_ListVariables<
                                v1::ParameterService::WithCallbackMethod_Stats<
                                    v1::ParameterService::
                                        WithRawCallbackMethod_PullVariables<
                                            v1::ParameterService::
                                                WithRawCallbackMethod_PushVariables<
                                                    v1::ParameterService::
                                                        Service>>>>>>>>>>>>>>>>>>>>>>;

struct ParameterServiceOptions {
  // Payload bytes per streamed chunk.
  size_t chunk_bytes = 1 << 20;
  // Longest a pull waits for a version or the staleness bound when the
  // caller set no earlier deadline.
  absl::Duration max_pull_wait = absl::Seconds(60);
  // Receive buffers kept for reuse (bytes).
  size_t buffer_pool_bytes = size_t{512} << 20;
  // A Lane push that arrives in several chunks, while no other such push
  // is in progress, has its optimizer steps run as the chunks arrive, on
  // staged copies (StagedDense) published once the push is whole; false:
  // the steps run once it is whole.
  bool chunked_apply = true;
  // When set, every call must carry a valid bearer token (else
  // UNAUTHENTICATED) whose role allows the method (else PERMISSION_DENIED):
  // worker: Pull, Push, PullVariables, PushVariables, ListVariables, Stats;
  // coordinator: also CreateVariable, Assign, Save, Restore,
  // DeleteCheckpoints; admin: all.
  // A variable belongs to the job that created (or restored) it; a caller
  // of another job gets PERMISSION_DENIED for it and does not see it in
  // ListVariables (admins reach every job). Save and Restore by a
  // coordinator resolve the path under "<job>/" and are refused while the
  // server holds another job's variables. Null: no authentication.
  std::shared_ptr<const CredentialStore> credentials;
  // Same-host shared-memory regions (AttachSharedRegion).
  SharedRegionOptions shared_regions;
  // Serve Lane streams; false answers them UNIMPLEMENTED, as a server
  // without the method does (clients fall back to PushVariables and
  // PullVariables).
  bool serve_lanes = true;
};

class ServiceCall;

// Thread-safe; the store, logger and metrics registry must outlive it. Save
// and Restore run on a thread of their own, one at a time, so that their
// file I/O holds no gRPC thread.
class ParameterServiceImpl final : public ParameterServiceBase {
 public:
  ParameterServiceImpl(ParameterStore* store, Logger* logger,
                       MetricsRegistry* metrics,
                       ParameterServiceOptions options = {});
  ~ParameterServiceImpl() override;

  // Fails waiting pulls and stops the deadline timer (before shutdown).
  void PrepareShutdown();

  // The incarnation this process registered with (SaveRequest.incarnation:
  // a Save naming another is refused). Empty (standalone): any.
  void set_incarnation(const std::string& incarnation);

  grpc::ServerUnaryReactor* CreateVariable(
      grpc::CallbackServerContext* ctx, const v1::CreateVariableRequest* req,
      v1::CreateVariableResponse* resp) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Pull(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Push(
      grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Assign(
      grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Save(grpc::CallbackServerContext* ctx,
                                 const v1::SaveRequest* req,
                                 v1::SaveResponse* resp) override;
  grpc::ServerUnaryReactor* Restore(grpc::CallbackServerContext* ctx,
                                    const v1::RestoreRequest* req,
                                    v1::RestoreResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteCheckpoints(
      grpc::CallbackServerContext* ctx, const v1::DeleteCheckpointsRequest* req,
      v1::DeleteCheckpointsResponse* resp) override;
  grpc::ServerUnaryReactor* ListVariables(
      grpc::CallbackServerContext* ctx, const v1::ListVariablesRequest* req,
      v1::ListVariablesResponse* resp) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx,
                                  const v1::StatsRequest* req,
                                  v1::StatsResponse* resp) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* PullVariables(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* PushVariables(
      grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* AttachSharedRegion(
      grpc::CallbackServerContext* ctx,
      const v1::AttachSharedRegionRequest* req,
      v1::AttachSharedRegionResponse* resp) override;
  grpc::ServerUnaryReactor* DetachSharedRegion(
      grpc::CallbackServerContext* ctx,
      const v1::DetachSharedRegionRequest* req,
      v1::DetachSharedRegionResponse* resp) override;
  grpc::ServerUnaryReactor* ExchangeShared(
      grpc::CallbackServerContext* ctx, const v1::SharedExchangeRequest* req,
      v1::SharedExchangeResponse* resp) override;
  grpc::ServerUnaryReactor* MirrorVariables(
      grpc::CallbackServerContext* ctx, const v1::MirrorVariablesRequest* req,
      v1::MirrorVariablesResponse* resp) override;
  grpc::ServerUnaryReactor* ServeSharedRegion(
      grpc::CallbackServerContext* ctx,
      const v1::ServeSharedRegionRequest* req,
      v1::ServeSharedRegionResponse* resp) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Lane(
      grpc::CallbackServerContext* ctx) override;

  // Dynamic embedding tables (server/table_store.h): CreateTable and
  // RestoreTables need the coordinator role, the others the worker's.
  grpc::ServerUnaryReactor* CreateTable(grpc::CallbackServerContext* ctx,
                                        const v1::CreateTableRequest* req,
                                        v1::CreateTableResponse* resp) override;
  grpc::ServerUnaryReactor* LookupRows(grpc::CallbackServerContext* ctx,
                                       const v1::LookupRowsRequest* req,
                                       v1::LookupRowsResponse* resp) override;
  grpc::ServerUnaryReactor* PushTableRows(
      grpc::CallbackServerContext* ctx, const v1::PushTableRowsRequest* req,
      v1::PushTableRowsResponse* resp) override;
  grpc::ServerUnaryReactor* TableStats(grpc::CallbackServerContext* ctx,
                                       const v1::TableStatsRequest* req,
                                       v1::TableStatsResponse* resp) override;
  grpc::ServerUnaryReactor* RestoreTables(
      grpc::CallbackServerContext* ctx, const v1::RestoreTablesRequest* req,
      v1::RestoreTablesResponse* resp) override;

  // An open Lane stream, registered while open so that PrepareShutdown can
  // end the ones waiting for a frame (they would hold the drain).
  class OpenLane {
   public:
    virtual ~OpenLane() = default;
    // Ends the stream if it waits for its next frame (thread-safe).
    virtual void EndIfIdle() = 0;
  };
  // False after PrepareShutdown (the lane is refused).
  bool AddLane(OpenLane* lane);
  void RemoveLane(OpenLane* lane);
  // Whether PrepareShutdown began.
  bool LanesClosed();

  ParameterStore* store() { return store_; }
  Logger* logger() { return logger_; }
  MetricsRegistry* metrics() { return metrics_; }
  DeadlineTimer* timer() { return &timer_; }
  BufferPool* buffers() { return buffers_.get(); }
  // Lane push frames of several chunks in progress, from their first
  // payload chunk to their reply (the chunked apply stages a push only when
  // it is the only one: with several, the cores have work enough and a
  // staged copy only adds to it).
  std::atomic<int>* frames_in_progress() { return &frames_in_progress_; }
  SharedRegionTable* shared_regions() { return &shared_regions_; }
  const ParameterServiceOptions& options() const { return options_; }

 private:
  absl::Mutex incarnation_mu_;
  std::string incarnation_ ABSL_GUARDED_BY(incarnation_mu_);
  // Where a unary call's work runs.
  enum class RunOn { kCallbackThread, kCheckpointThread };
  using UnaryBody = std::function<absl::Status(const ServiceCall&)>;
  // Runs a unary call: authorizes it for `needed`, runs `body` (on this
  // thread, or later on the checkpoint thread) and finishes the call with
  // its status, recorded once.
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx,
                                  const char* method, Role needed,
                                  RunOn where, UnaryBody body);
  // ServeSharedRegion's work: checks the request and starts the region's
  // doorbell thread (replacing one serving it already).
  absl::Status ServeDoorbell(const v1::ServeSharedRegionRequest& req,
                             const ServiceCall& call,
                             v1::ServeSharedRegionResponse* resp);

  // Exposes table `name`'s counters (TableInfo) as metrics labelled
  // table=NAME, read from the store at each scrape (idempotent).
  void RegisterTableMetrics(const std::string& name)
      ABSL_LOCKS_EXCLUDED(table_metrics_mu_);
  // Every table of the store (after a Restore brought tables back).
  void RegisterAllTableMetrics();

  // Fencing of elected coordinators: OK for epoch 0 (not elected) and for
  // an epoch at least the highest seen so far (which it raises);
  // FAILED_PRECONDITION naming both epochs for a deposed coordinator's.
  // Kept per job (the caller's; "" without credentials): jobs' elected
  // coordinators have epochs of unrelated scales.
  absl::Status AdmitCoordinatorEpoch(int64_t epoch, const ServiceCall& call,
                                     const char* method)
      ABSL_LOCKS_EXCLUDED(epochs_mu_);

  ParameterStore* const store_;
  Logger* const logger_;
  MetricsRegistry* const metrics_;
  const ParameterServiceOptions options_;
  DeadlineTimer timer_;
  // Receive buffers for Push and Assign payloads.
  std::shared_ptr<BufferPool> buffers_;
  std::atomic<int> frames_in_progress_{0};
  SharedRegionTable shared_regions_;
  // Tables whose metrics are registered (removed in the destructor).
  absl::Mutex table_metrics_mu_;
  std::set<std::string> table_metrics_ ABSL_GUARDED_BY(table_metrics_mu_);
  // The highest coordinator epoch a Save, Restore or DeleteCheckpoints
  // carried, per job.
  absl::Mutex epochs_mu_;
  std::map<std::string, int64_t> coordinator_epochs_
      ABSL_GUARDED_BY(epochs_mu_);
  // Removes the doorbells whose thread ended (their region was dropped),
  // for the caller to destroy outside the lock.
  std::vector<std::unique_ptr<DoorbellServer>> TakeFinishedDoorbellsLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(doorbells_mu_);
  absl::Mutex lanes_mu_;
  std::set<OpenLane*> open_lanes_ ABSL_GUARDED_BY(lanes_mu_);
  bool lanes_closed_ ABSL_GUARDED_BY(lanes_mu_) = false;
  // Doorbells of served regions, by region id.
  absl::Mutex doorbells_mu_;
  std::map<uint64_t, std::unique_ptr<DoorbellServer>> doorbells_
      ABSL_GUARDED_BY(doorbells_mu_);
  // Runs Save and Restore (one thread; last member: destroyed first, while
  // everything its tasks use is alive).
  std::unique_ptr<ThreadPool> checkpoint_thread_;
};

}  // namespace strata

#endif  // STRATA_SERVER_PARAMETER_SERVICE_IMPL_H_

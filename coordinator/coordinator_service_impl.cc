#include "coordinator/coordinator_service_impl.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/metadata_keys.h"
#include "common/status_macros.h"
#include "rpc/grpc_status.h"

namespace strata {
namespace {

// The limits and the one-task rule of a ReportWorkBatchRequest.
absl::Status ValidateReportBatch(const v1::ReportWorkBatchRequest& req) {
  if (req.max_items() < 0 || req.max_items() > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_items: must be in [0, 64], got ", req.max_items()));
  }
  if (req.reports_size() > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reports: at most 1024 per call, got ", req.reports_size()));
  }
  if (req.holding_size() > 1024 || req.holding_evaluations_size() > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "holding, holding_evaluations: at most 1024 each, got ",
        req.holding_size(), " and ", req.holding_evaluations_size()));
  }
  for (int i = 0; i < req.reports_size(); ++i) {
    const v1::ReportWorkRequest& r = req.reports(i);
    if (r.task().role() != req.task().role() ||
        r.task().index() != req.task().index() ||
        r.incarnation() != req.incarnation()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reports[", i, "]: is for ", r.task().role(), ":", r.task().index(),
          " (incarnation '", r.incarnation(), "'), not the caller ",
          req.task().role(), ":", req.task().index(), " (incarnation '",
          req.incarnation(), "')"));
    }
  }
  return absl::OkStatus();
}

const char* const kGauges[] = {
    "strata_coordinator_generation", "strata_coordinator_members_alive",
    "strata_coordinator_steps_completed", "strata_coordinator_lost_steps",
    "strata_coordinator_checkpoints_saved",
    "strata_coordinator_checkpoints_failed",
    "strata_coordinator_checkpoint_failures_in_a_row"};

}  // namespace

// Streams the cluster state: the current one, then the latest after each
// generation change (changes that arrive while a write is in flight are
// coalesced into one message). Ends on cancel, a broken stream, or
// PrepareShutdown. Never calls gRPC while holding mu_, since gRPC may run
// reactions inline.
class CoordinatorServiceImpl::WatchReactor final
    : public grpc::ServerWriteReactor<v1::ClusterState> {
 public:
  explicit WatchReactor(CoordinatorServiceImpl* service)
      : service_(service), start_(absl::Now()) {}

  // A new state may be there: write it unless a write is in flight.
  void Notify() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (finish_requested_) return;
      if (writing_) {
        dirty_ = true;
        return;
      }
      if (!PrepareLocked()) return;
      writing_ = true;
    }
    StartWrite(&message_);
  }

  // Ends the stream with `status` (after the write in flight, if any).
  void End(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (finish_requested_) return;
      finish_requested_ = true;
      final_status_ = status;
      if (writing_) return;  // OnWriteDone finishes
    }
    Finish(status);
  }

  void OnWriteDone(bool ok) override {
    bool write = false;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok && !finish_requested_) {
        finish_requested_ = true;
        final_status_ =
            grpc::Status(grpc::StatusCode::CANCELLED, "watch stream broken");
      }
      if (finish_requested_) {
        finish = true;
        status = final_status_;
      } else if (dirty_) {
        dirty_ = false;
        if (PrepareLocked()) {
          writing_ = true;
          write = true;
        }
      }
    }
    if (finish) {
      Finish(status);
    } else if (write) {
      StartWrite(&message_);
    }
  }

  void OnCancel() override {
    End(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    service_->Record("WatchCluster", absl::OkStatus(), absl::Now() - start_);
    service_->WatchDone(this);  // may delete this
  }

 private:
  // Loads the state into message_; false when nothing new to send.
  bool PrepareLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::ClusterState state = service_->state_->GetClusterState();
    if (sent_any_ && state.generation() <= last_sent_) return false;
    message_ = std::move(state);
    last_sent_ = message_.generation();
    sent_any_ = true;
    return true;
  }

  CoordinatorServiceImpl* const service_;
  const absl::Time start_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
  int64_t last_sent_ ABSL_GUARDED_BY(mu_) = 0;
  // Written only while no write is in flight.
  v1::ClusterState message_;
};

// Waits in a barrier until it is released, cancelled or aborted.
class CoordinatorServiceImpl::BarrierReactor final
    : public grpc::ServerUnaryReactor {
 public:
  BarrierReactor(CoordinatorServiceImpl* service, int64_t ticket)
      : service_(service), ticket_(ticket), start_(absl::Now()) {}

  void Complete(const absl::Status& status) {
    service_->Record("Barrier", status, absl::Now() - start_);
    Finish(ToGrpcStatus(status));
  }

  void OnCancel() override {
    // When the wait is no longer there, its callback finishes the call.
    if (service_->state_->CancelBarrierWait(ticket_)) {
      Complete(absl::CancelledError("barrier wait cancelled"));
    }
  }

  void OnDone() override { delete this; }

  int64_t ticket() const { return ticket_; }

 private:
  CoordinatorServiceImpl* const service_;
  const int64_t ticket_;
  const absl::Time start_;
};

CoordinatorServiceImpl::CoordinatorServiceImpl(
    CoordinatorState* state, CoordinatorDriver* driver, Logger* logger,
    MetricsRegistry* metrics, CoordinatorServiceOptions options)
    : state_(state),
      driver_(driver),
      logger_(logger),
      metrics_(metrics),
      options_(options) {
  watcher_id_ = state_->AddWatcher(
      [this](int64_t) { ForEachWatch([](WatchReactor* r) { r->Notify(); }); });
  metrics_->SetGaugeFunction(
      "strata_coordinator_generation", "Cluster generation", {},
      [state] { return static_cast<double>(state->generation()); });
  metrics_->SetGaugeFunction("strata_coordinator_members_alive",
                             "Members whose lease is valid", {}, [state] {
                               int alive = 0;
                               const v1::ClusterState cluster =
                                   state->GetClusterState();
                               for (const v1::Member& m : cluster.members()) {
                                 alive += m.state() == v1::Member::ALIVE;
                               }
                               return static_cast<double>(alive);
                             });
  metrics_->SetGaugeFunction(
      "strata_coordinator_steps_completed", "Steps of the job reported done",
      {}, [state] {
        return static_cast<double>(state->GetJob().steps_completed());
      });
  metrics_->SetGaugeFunction(
      "strata_coordinator_lost_steps",
      "Steps applied then lost to a PS restore", {},
      [state] { return static_cast<double>(state->GetJob().lost_steps()); });
  metrics_->SetGaugeFunction(
      "strata_coordinator_checkpoints_saved",
      "Checkpoint attempts of the job that every PS task saved", {},
      [state] {
        return static_cast<double>(state->GetJob().checkpoints_saved());
      });
  metrics_->SetGaugeFunction(
      "strata_coordinator_checkpoints_failed",
      "Checkpoint attempts of the job that failed", {}, [state] {
        return static_cast<double>(state->GetJob().checkpoints_failed());
      });
  metrics_->SetGaugeFunction(
      "strata_coordinator_checkpoint_failures_in_a_row",
      "Checkpoint attempts that failed since the last one saved", {},
      [state] {
        return static_cast<double>(
            state->GetJob().checkpoint_failures_in_a_row());
      });
}

CoordinatorServiceImpl::~CoordinatorServiceImpl() {
  PrepareShutdown();
  state_->RemoveWatcher(watcher_id_);
  for (const char* name : kGauges) metrics_->RemoveGaugeFunction(name, {});
}

void CoordinatorServiceImpl::PrepareShutdown() {
  {
    absl::MutexLock lock(&watch_mu_);
    shutting_down_ = true;
  }
  const grpc::Status unavailable(grpc::StatusCode::UNAVAILABLE,
                                 "coordinator is shutting down");
  ForEachWatch([&unavailable](WatchReactor* r) { r->End(unavailable); });
  state_->CancelAllBarriers(
      absl::UnavailableError("coordinator is shutting down"));
}

// ---------------------------------------------------------------------------
// Watch bookkeeping.

void CoordinatorServiceImpl::ForEachWatch(
    const std::function<void(WatchReactor*)>& fn) {
  std::vector<WatchReactor*> pinned;
  {
    absl::MutexLock lock(&watch_mu_);
    for (auto& [reactor, entry] : watches_) {
      if (entry.done) continue;
      ++entry.pins;
      pinned.push_back(reactor);
    }
  }
  for (WatchReactor* r : pinned) fn(r);
  UnpinWatches(pinned);
}

void CoordinatorServiceImpl::UnpinWatches(
    const std::vector<WatchReactor*>& reactors) {
  std::vector<WatchReactor*> dead;
  {
    absl::MutexLock lock(&watch_mu_);
    for (WatchReactor* r : reactors) {
      auto it = watches_.find(r);
      if (--it->second.pins == 0 && it->second.done) {
        watches_.erase(it);
        dead.push_back(r);
      }
    }
  }
  for (WatchReactor* r : dead) delete r;
}

void CoordinatorServiceImpl::WatchDone(WatchReactor* reactor) {
  bool dead = true;
  {
    absl::MutexLock lock(&watch_mu_);
    auto it = watches_.find(reactor);
    if (it != watches_.end()) {
      it->second.done = true;
      dead = it->second.pins == 0;
      if (dead) watches_.erase(it);
    }
  }
  if (dead) delete reactor;
}

// ---------------------------------------------------------------------------
// Accounting.

void CoordinatorServiceImpl::Record(const char* method,
                                    const absl::Status& status,
                                    absl::Duration elapsed) {
  metrics_
      ->GetCounter("strata_coordinator_rpcs_total", "RPCs handled",
                   {{"method", method},
                    {"code", absl::StatusCodeToString(status.code())}})
      ->Increment();
  metrics_
      ->GetHistogram("strata_coordinator_rpc_latency_seconds", "RPC latency",
                     {{"method", method}},
                     {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                      0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10})
      ->Observe(absl::ToDoubleSeconds(elapsed));
}

void CoordinatorServiceImpl::FinishReactor(grpc::ServerUnaryReactor* reactor,
                                           const char* method, absl::Time start,
                                           const absl::Status& status) {
  Record(method, status, absl::Now() - start);
  if (!status.ok()) {
    // NOT_FOUND is the routine "re-register" answer.
    logger_->Log(status.code() == absl::StatusCode::kNotFound
                     ? LogLevel::kInfo
                     : LogLevel::kWarning,
                 "rpc_error",
                 {{"method", method},
                  {"code", absl::StatusCodeToString(status.code())},
                  {"message", std::string(status.message())}});
  }
  reactor->Finish(ToGrpcStatus(status));
}

absl::Status CoordinatorServiceImpl::Authorize(
    grpc::CallbackServerContext* ctx, Role needed, const char* method) const {
  if (options_.leader_epoch > 0) {
    // In both: an answer that is only an error may carry no initial
    // metadata of its own.
    ctx->AddInitialMetadata(kCoordinatorEpochHeader,
                            absl::StrCat(options_.leader_epoch));
    ctx->AddTrailingMetadata(kCoordinatorEpochHeader,
                             absl::StrCat(options_.leader_epoch));
    if (options_.leading && !options_.leading()) {
      return absl::UnavailableError(absl::StrCat(
          "this coordinator (epoch ", options_.leader_epoch,
          ") no longer leads; ask the others"));
    }
  }
  if (options_.credentials == nullptr) return absl::OkStatus();
  absl::StatusOr<Caller> caller =
      options_.credentials->Authenticate(ctx->client_metadata());
  if (!caller.ok()) return caller.status();
  return RequireRole(*caller, needed, method);
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::FinishUnary(
    grpc::CallbackServerContext* ctx, const char* method, absl::Time start,
    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  FinishReactor(reactor, method, start, status);
  return reactor;
}

template <typename Handle>
grpc::ServerUnaryReactor* CoordinatorServiceImpl::Unary(
    grpc::CallbackServerContext* ctx, const char* method, Role needed,
    Handle handle) {
  const absl::Time start = absl::Now();
  absl::Status status = Authorize(ctx, needed, method);
  if (status.ok()) status = handle();
  return FinishUnary(ctx, method, start, status);
}

template <typename Handle>
grpc::ServerUnaryReactor* CoordinatorServiceImpl::Report(
    grpc::CallbackServerContext* ctx, const char* method, Handle handle) {
  const absl::Time start = absl::Now();
  if (absl::Status auth = Authorize(ctx, Role::kWorker, method); !auth.ok()) {
    return FinishUnary(ctx, method, start, auth);
  }
  const ReportOutcome outcome = handle();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const bool write = outcome.status.ok() && state_->persistent();
  if (write && outcome.milestone) {
    driver_->EnqueueDurable(
        [this, reactor, method, start](absl::Status written) {
          FinishReactor(reactor, method, start, written);
        });
    return reactor;
  }
  if (write && outcome.applied) {
    // Written by the persist thread, batched with other changes. The answer
    // does not wait for the disk: a report lost to a crash only re-runs its
    // step, and the PS tasks apply a re-run step's push at most once.
    driver_->EnqueueDurable([](absl::Status) {});
  }
  FinishReactor(reactor, method, start, outcome.status);
  return reactor;
}

// ---------------------------------------------------------------------------
// Methods.

grpc::ServerUnaryReactor* CoordinatorServiceImpl::Register(
    grpc::CallbackServerContext* ctx, const v1::RegisterRequest* req,
    v1::RegisterResponse* resp) {
  return Unary(ctx, "Register", Role::kWorker, [&]() -> absl::Status {
    STRATA_ASSIGN_OR_RETURN(
        int64_t generation,
        state_->Register(req->task(), req->address(), req->incarnation(),
                         req->exclusive(), req->replaces(),
                         req->only_if_failed()));
    resp->set_generation(generation);
    resp->set_lease_ms(absl::ToInt64Milliseconds(state_->options().lease));
    resp->set_heartbeat_ms(
        absl::ToInt64Milliseconds(state_->options().heartbeat_interval));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::Heartbeat(
    grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* req,
    v1::HeartbeatResponse* resp) {
  return Unary(ctx, "Heartbeat", Role::kWorker, [&]() -> absl::Status {
    STRATA_ASSIGN_OR_RETURN(int64_t generation,
                            state_->Heartbeat(req->task(), req->incarnation(),
                                              req->fence_incarnation()));
    resp->set_generation(generation);
    resp->set_group(state_->NewestGroup());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::Deregister(
    grpc::CallbackServerContext* ctx, const v1::DeregisterRequest* req,
    v1::DeregisterResponse* resp) {
  return Unary(ctx, "Deregister", Role::kWorker, [&] {
    return state_->Deregister(req->task(), req->incarnation());
  });
}

grpc::ServerWriteReactor<v1::ClusterState>*
CoordinatorServiceImpl::WatchCluster(grpc::CallbackServerContext* ctx,
                                     const v1::WatchClusterRequest* req) {
  auto* reactor = new WatchReactor(this);
  if (absl::Status auth = Authorize(ctx, Role::kWorker, "WatchCluster");
      !auth.ok()) {
    reactor->End(ToGrpcStatus(auth));
    return reactor;
  }
  bool shutting_down = false;
  {
    absl::MutexLock lock(&watch_mu_);
    shutting_down = shutting_down_;
    // Pinned until the first Notify below has run.
    if (!shutting_down) watches_[reactor] = WatchEntry{1, false};
  }
  if (shutting_down) {
    reactor->End(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "coordinator is shutting down"));
    return reactor;
  }
  reactor->Notify();
  UnpinWatches({reactor});
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::GetClusterSpec(
    grpc::CallbackServerContext* ctx, const v1::GetClusterSpecRequest* req,
    v1::GetClusterSpecResponse* resp) {
  return Unary(ctx, "GetClusterSpec", Role::kWorker, [&] {
    resp->set_tf_config(state_->GetClusterSpec());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::SubmitJob(
    grpc::CallbackServerContext* ctx, const v1::SubmitJobRequest* req,
    v1::SubmitJobResponse* resp) {
  return Unary(ctx, "SubmitJob", Role::kCoordinator, [&]() -> absl::Status {
    STRATA_ASSIGN_OR_RETURN(
        std::string id,
        state_->SubmitJob(req->job_json(), req->train_examples()));
    resp->set_job_id(std::move(id));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::GetJob(
    grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
    v1::JobStatus* resp) {
  return Unary(ctx, "GetJob", Role::kWorker, [&] {
    *resp = state_->GetJob();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::GetWork(
    grpc::CallbackServerContext* ctx, const v1::GetWorkRequest* req,
    v1::WorkItem* resp) {
  return Unary(ctx, "GetWork", Role::kWorker, [&]() -> absl::Status {
    STRATA_ASSIGN_OR_RETURN(*resp,
                            state_->GetWork(req->task(), req->incarnation()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::JoinGroup(
    grpc::CallbackServerContext* ctx, const v1::JoinGroupRequest* req,
    v1::GroupAssignment* resp) {
  return Unary(ctx, "JoinGroup", Role::kWorker, [&]() -> absl::Status {
    STRATA_ASSIGN_OR_RETURN(*resp, state_->JoinGroup(*req));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::ReportWork(
    grpc::CallbackServerContext* ctx, const v1::ReportWorkRequest* req,
    v1::ReportWorkResponse* resp) {
  return Report(ctx, "ReportWork", [&] {
    ReportOutcome out;
    const v1::JobStatus::State before = state_->JobState();
    out.status = state_->ApplyReport(*req);
    // Reports that end an epoch's evaluation or the job are durable on
    // return; plain step reports are batched.
    out.milestone = req->item().kind() == v1::WorkItem::EVALUATE ||
                    state_->JobState() != before;
    out.applied = true;
    if (out.status.ok()) resp->set_group(state_->NewestGroup());
    if (out.status.ok() && req->want_next()) {
      absl::StatusOr<v1::WorkItem> next =
          state_->GetWork(req->task(), req->incarnation());
      if (next.ok()) {
        *resp->mutable_next() = *std::move(next);
      } else {
        out.status = next.status();
      }
    }
    return out;
  });
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::ReportWorkBatch(
    grpc::CallbackServerContext* ctx, const v1::ReportWorkBatchRequest* req,
    v1::ReportWorkBatchResponse* resp) {
  return Report(ctx, "ReportWorkBatch", [&] {
    ReportOutcome out;
    out.status = ValidateReportBatch(*req);
    const v1::JobStatus::State before = state_->JobState();
    for (const v1::ReportWorkRequest& report : req->reports()) {
      if (!out.status.ok()) break;
      out.status = state_->ApplyReport(report);
      out.milestone |= report.item().kind() == v1::WorkItem::EVALUATE;
    }
    // Durable as ReportWork: evaluations and the job's end before the
    // answer, plain step reports batched.
    out.milestone |= state_->JobState() != before;
    out.applied = req->reports_size() > 0;
    if (out.status.ok()) {
      out.status =
          state_
              ->ReleaseUnheld(req->task(), req->incarnation(),
                              std::vector<int64_t>(req->holding().begin(),
                                                   req->holding().end()),
                              std::vector<int64_t>(
                                  req->holding_evaluations().begin(),
                                  req->holding_evaluations().end()))
              .status();
    }
    if (out.status.ok()) resp->set_group(state_->NewestGroup());
    for (int i = 0; out.status.ok() && i < req->max_items(); ++i) {
      absl::StatusOr<v1::WorkItem> next =
          state_->GetWork(req->task(), req->incarnation());
      if (!next.ok()) {
        out.status = next.status();
        break;
      }
      const bool train = next->kind() == v1::WorkItem::TRAIN;
      *resp->add_items() = *std::move(next);
      if (!train) break;
    }
    return out;
  });
}

grpc::ServerUnaryReactor* CoordinatorServiceImpl::Barrier(
    grpc::CallbackServerContext* ctx, const v1::BarrierRequest* req,
    v1::BarrierResponse* resp) {
  auto* reactor = new BarrierReactor(this, next_ticket_.fetch_add(1));
  if (absl::Status auth = Authorize(ctx, Role::kWorker, "Barrier");
      !auth.ok()) {
    reactor->Complete(auth);
    return reactor;
  }
  bool shutting_down = false;
  {
    absl::MutexLock lock(&watch_mu_);
    shutting_down = shutting_down_;
  }
  if (shutting_down) {
    reactor->Complete(absl::UnavailableError("coordinator is shutting down"));
    return reactor;
  }
  // The callback may run (and finish the call) before this returns.
  absl::Status status = state_->ArriveAtBarrier(
      req->name(), req->task(), req->count(), reactor->ticket(),
      [reactor](absl::Status s) { reactor->Complete(s); });
  if (!status.ok()) reactor->Complete(status);
  return reactor;
}

}  // namespace strata

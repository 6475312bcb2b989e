#include "server/parameter_service_impl.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "common/status_macros.h"
#include "rpc/grpc_status.h"
#include "server/parameter_service_call.h"

namespace strata {

namespace {

// The per-table series (TableInfo's counters), labelled table=NAME.
struct TableMetric {
  const char* name;
  const char* help;
  bool counter;
  int64_t (*field)(const v1::TableInfo&);
};

const std::vector<TableMetric>& TableMetrics() {
  static const auto* const metrics = new std::vector<TableMetric>{
      {"strata_ps_table_rows", "Live rows of a dynamic table on this server",
       false, [](const v1::TableInfo& t) { return t.rows(); }},
      {"strata_ps_table_bytes",
       "Bytes of a dynamic table's rows and slots on this server", false,
       [](const v1::TableInfo& t) { return t.bytes(); }},
      {"strata_ps_table_lookups_total", "Row lookups of a dynamic table",
       true, [](const v1::TableInfo& t) { return t.lookups(); }},
      {"strata_ps_table_admissions_total",
       "Ids admitted to a trained row (seen min_count times)", true,
       [](const v1::TableInfo& t) { return t.admissions(); }},
      {"strata_ps_table_evictions_total",
       "Rows evicted for the table's capacity", true,
       [](const v1::TableInfo& t) { return t.evictions(); }},
      {"strata_ps_table_expirations_total",
       "Rows dropped by the table's time to live", true,
       [](const v1::TableInfo& t) { return t.expirations(); }},
      {"strata_ps_table_updates_total", "Row updates applied", true,
       [](const v1::TableInfo& t) { return t.updates(); }},
      {"strata_ps_table_gradients_dropped_total",
       "Gradient rows dropped (ids not admitted yet)", true,
       [](const v1::TableInfo& t) { return t.gradients_dropped(); }},
      {"strata_ps_table_pushes_duplicate_total",
       "Row pushes acknowledged as duplicates (applied once)", true,
       [](const v1::TableInfo& t) { return t.pushes_duplicate(); }},
  };
  return *metrics;
}

}  // namespace

ParameterServiceImpl::ParameterServiceImpl(ParameterStore* store,
                                           Logger* logger,
                                           MetricsRegistry* metrics,
                                           ParameterServiceOptions options)
    : store_(store),
      logger_(logger),
      metrics_(metrics),
      options_(std::move(options)),
      buffers_(BufferPool::Create(options_.buffer_pool_bytes)),
      shared_regions_(options_.shared_regions),
      checkpoint_thread_(std::make_unique<ThreadPool>(1)) {
  metrics_->SetGaugeFunction(
      "strata_ps_variables", "Variables held by this server", {},
      [store] { return static_cast<double>(store->Stats().num_variables); });
  metrics_->SetGaugeFunction(
      "strata_ps_variable_bytes", "Bytes of variable values on this server",
      {}, [store] { return static_cast<double>(store->Stats().variable_bytes); });
  metrics_->SetGaugeFunction(
      "strata_ps_pushes_applied", "Pushes taken (not duplicates)", {},
      [store] { return static_cast<double>(store->Stats().pushes_applied); });
  metrics_->SetGaugeFunction(
      "strata_ps_pushes_duplicate", "Pushes acknowledged as already applied",
      {},
      [store] { return static_cast<double>(store->Stats().pushes_duplicate); });
  metrics_->SetGaugeFunction(
      "strata_ps_pushes_with_base_version", "Dense pushes applied that named the "
      "version their gradient was computed from", {},
      [store] {
        return static_cast<double>(store->Stats().pushes_with_base_version);
      });
  metrics_->SetGaugeFunction(
      "strata_ps_staleness_sum", "Sum of those pushes' staleness (updates "
      "applied since that version)", {},
      [store] { return static_cast<double>(store->Stats().staleness_sum); });
  metrics_->SetGaugeFunction(
      "strata_ps_staleness_max", "The largest staleness of a push", {},
      [store] { return static_cast<double>(store->Stats().staleness_max); });
  metrics_->SetGaugeFunction(
      "strata_ps_pushes_staged", "Lane pushes whose optimizer step ran chunk "
      "by chunk on a staged copy while the payload arrived", {},
      [store] { return static_cast<double>(store->Stats().pushes_staged); });
  metrics_->SetGaugeFunction(
      "strata_ps_staged_discarded", "Staged copies dropped because another "
      "update reached the variable first (the push was applied again)", {},
      [store] { return static_cast<double>(store->Stats().staged_discarded); });
}

ParameterServiceImpl::~ParameterServiceImpl() {
  // Runs the checkpoint calls still queued and joins their thread.
  checkpoint_thread_.reset();
  PrepareShutdown();
  for (const char* name :
       {"strata_ps_variables", "strata_ps_variable_bytes",
        "strata_ps_pushes_applied", "strata_ps_pushes_duplicate",
        "strata_ps_pushes_with_base_version", "strata_ps_staleness_sum",
        "strata_ps_staleness_max", "strata_ps_pushes_staged",
        "strata_ps_staged_discarded"}) {
    metrics_->RemoveGaugeFunction(name, {});
  }
  absl::MutexLock lock(&table_metrics_mu_);
  for (const std::string& table : table_metrics_) {
    for (const TableMetric& m : TableMetrics()) {
      metrics_->RemoveGaugeFunction(m.name, {{"table", table}});
    }
  }
}

void ParameterServiceImpl::RegisterTableMetrics(const std::string& table) {
  absl::MutexLock lock(&table_metrics_mu_);
  if (!table_metrics_.insert(table).second) return;
  for (const TableMetric& m : TableMetrics()) {
    auto read = [this, table, field = m.field]() -> double {
      absl::StatusOr<std::vector<v1::TableInfo>> stats =
          store_->tables()->Stats(table);
      if (!stats.ok() || stats->empty()) return 0;
      return static_cast<double>(field(stats->front()));
    };
    if (m.counter) {
      metrics_->SetCounterFunction(m.name, m.help, {{"table", table}}, read);
    } else {
      metrics_->SetGaugeFunction(m.name, m.help, {{"table", table}}, read);
    }
  }
}

void ParameterServiceImpl::RegisterAllTableMetrics() {
  absl::StatusOr<std::vector<v1::TableInfo>> stats =
      store_->tables()->Stats("");
  if (!stats.ok()) return;
  for (const v1::TableInfo& info : *stats) {
    RegisterTableMetrics(info.spec().name());
  }
}

void ParameterServiceImpl::PrepareShutdown() {
  std::map<uint64_t, std::unique_ptr<DoorbellServer>> doorbells;
  {
    absl::MutexLock lock(&doorbells_mu_);
    doorbells.swap(doorbells_);
  }
  doorbells.clear();  // stops and joins their threads
  {
    // Lanes waiting for their next frame would hold the drain to its end.
    absl::MutexLock lock(&lanes_mu_);
    lanes_closed_ = true;
    for (OpenLane* lane : open_lanes_) lane->EndIfIdle();
  }
  store_->CancelWaiters(
      absl::UnavailableError("parameter server is shutting down"));
  timer_.Stop();
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Unary(
    grpc::CallbackServerContext* ctx, const char* method, Role needed,
    RunOn where, UnaryBody body) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ServiceCall call(this, method);
  absl::Status status = call.Authorize(ctx, needed);
  if (status.ok() && where == RunOn::kCheckpointThread) {
    // Finishes the call from there: the request and response live until
    // then.
    checkpoint_thread_->Schedule(
        [reactor, call, body = std::move(body)]() mutable {
          absl::Status s = body(call);
          call.End(s);
          reactor->Finish(ToGrpcStatus(s));
        });
    return reactor;
  }
  if (status.ok()) status = body(call);
  call.End(status);
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::CreateVariable(
    grpc::CallbackServerContext* ctx, const v1::CreateVariableRequest* req,
    v1::CreateVariableResponse* resp) {
  return Unary(
      ctx, "CreateVariable", Role::kCoordinator, RunOn::kCallbackThread,
      [&](const ServiceCall& call) -> absl::Status {
        const v1::VariableSpec& spec = req->spec();
        STRATA_ASSIGN_OR_RETURN(bool created,
                                store_->Create(spec, call.caller()));
        resp->set_created(created);
        if (created) {
          logger_->Log(LogLevel::kInfo, "variable_created",
                       {{"variable", spec.name()},
                        {"dtype", static_cast<int>(spec.dtype())},
                        {"shape", std::vector<int64_t>(spec.shape().begin(),
                                                       spec.shape().end())},
                        {"optimizer", spec.optimizer().type()}});
        }
        return absl::OkStatus();
      });
}

absl::Status ParameterServiceImpl::AdmitCoordinatorEpoch(
    int64_t epoch, const ServiceCall& call, const char* method) {
  if (epoch <= 0) return absl::OkStatus();
  const std::string job = call.caller().has_value() ? call.caller()->job : "";
  int64_t seen = 0;
  {
    absl::MutexLock lock(&epochs_mu_);
    int64_t& highest = coordinator_epochs_[job];
    seen = highest;
    if (epoch >= highest) {
      highest = epoch;
      return absl::OkStatus();
    }
  }
  logger_->Log(LogLevel::kWarning, "coordinator_fenced",
               {{"method", method},
                {"job", job},
                {"epoch", epoch},
                {"leader_epoch", seen}});
  return absl::FailedPreconditionError(absl::StrCat(
      method, " refused: it comes from coordinator epoch ", epoch,
      ", and the coordinator of epoch ", seen,
      " has led since (a deposed coordinator is fenced off)"));
}

void ParameterServiceImpl::set_incarnation(const std::string& incarnation) {
  absl::MutexLock lock(&incarnation_mu_);
  incarnation_ = incarnation;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Save(
    grpc::CallbackServerContext* ctx, const v1::SaveRequest* req,
    v1::SaveResponse* resp) {
  return Unary(
      ctx, "Save", Role::kCoordinator, RunOn::kCheckpointThread,
      [this, req, resp](const ServiceCall& call) -> absl::Status {
        STRATA_RETURN_IF_ERROR(
            AdmitCoordinatorEpoch(req->coordinator_epoch(), call, "Save"));
        {
          absl::MutexLock lock(&incarnation_mu_);
          if (!req->incarnation().empty() && !incarnation_.empty() &&
              req->incarnation() != incarnation_) {
            return absl::FailedPreconditionError(absl::StrCat(
                "Save for incarnation \"", req->incarnation(),
                "\" reached incarnation \"", incarnation_,
                "\" (this process restarted and has not registered yet)"));
          }
        }
        STRATA_ASSIGN_OR_RETURN(
            std::string path,
            ScopedCheckpointPath(*store_, call.caller(), req->path(), "save"));
        STRATA_ASSIGN_OR_RETURN(SaveResult saved,
                                store_->Save(path, call.caller()));
        resp->set_path(saved.path);
        resp->set_num_variables(saved.num_variables);
        resp->set_bytes(saved.bytes);
        logger_->Log(LogLevel::kInfo, "checkpoint_saved",
                     {{"path", saved.path},
                      {"variables", saved.num_variables},
                      {"bytes", saved.bytes}});
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Restore(
    grpc::CallbackServerContext* ctx, const v1::RestoreRequest* req,
    v1::RestoreResponse* resp) {
  return Unary(
      ctx, "Restore", Role::kCoordinator, RunOn::kCheckpointThread,
      [this, req, resp](const ServiceCall& call) -> absl::Status {
        STRATA_RETURN_IF_ERROR(
            AdmitCoordinatorEpoch(req->coordinator_epoch(), call, "Restore"));
        STRATA_ASSIGN_OR_RETURN(
            std::string path, ScopedCheckpointPath(*store_, call.caller(),
                                                   req->path(), "restore"));
        // The restored variables replace every variable; who owns them is
        // the store's rule.
        STRATA_ASSIGN_OR_RETURN(int64_t restored,
                                store_->Restore(path, call.caller()));
        resp->set_num_variables(restored);
        RegisterAllTableMetrics();
        logger_->Log(LogLevel::kInfo, "checkpoint_restored",
                     {{"path", req->path()}, {"variables", restored}});
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::DeleteCheckpoints(
    grpc::CallbackServerContext* ctx, const v1::DeleteCheckpointsRequest* req,
    v1::DeleteCheckpointsResponse* resp) {
  return Unary(
      ctx, "DeleteCheckpoints", Role::kCoordinator, RunOn::kCheckpointThread,
      [this, req, resp](const ServiceCall& call) -> absl::Status {
        STRATA_RETURN_IF_ERROR(AdmitCoordinatorEpoch(
            req->coordinator_epoch(), call, "DeleteCheckpoints"));
        // Every path is checked before any is deleted.
        std::vector<std::string> paths;
        for (const std::string& p : req->paths()) {
          STRATA_ASSIGN_OR_RETURN(
              std::string scoped,
              ScopedCheckpointPath(*store_, call.caller(), p, "delete"));
          STRATA_ASSIGN_OR_RETURN(std::string resolved,
                                  store_->ResolveCheckpointPath(scoped));
          paths.push_back(std::move(resolved));
        }
        int64_t deleted = 0;
        for (const std::string& path : paths) {
          STRATA_ASSIGN_OR_RETURN(bool removed, DeleteCheckpoint(path));
          deleted += removed ? 1 : 0;
        }
        resp->set_deleted(deleted);
        logger_->Log(LogLevel::kInfo, "checkpoints_deleted",
                     {{"requested", static_cast<int64_t>(paths.size())},
                      {"deleted", deleted}});
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::ListVariables(
    grpc::CallbackServerContext* ctx, const v1::ListVariablesRequest* req,
    v1::ListVariablesResponse* resp) {
  return Unary(ctx, "ListVariables", Role::kWorker, RunOn::kCallbackThread,
               [&](const ServiceCall& call) -> absl::Status {
                 for (const auto& v : store_->List()) {
                   // Another job's variables are not listed.
                   if (!store_->CheckOwner(call.caller(), v->name()).ok()) {
                     continue;
                   }
                   v1::VariableInfo* info = resp->add_variables();
                   *info->mutable_spec() = v->spec();
                   info->set_version(v->version());
                   info->set_iterations(v->iterations());
                 }
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Stats(
    grpc::CallbackServerContext* ctx, const v1::StatsRequest* req,
    v1::StatsResponse* resp) {
  return Unary(ctx, "Stats", Role::kWorker, RunOn::kCallbackThread,
               [&](const ServiceCall&) -> absl::Status {
                 StoreStats s = store_->Stats();
                 resp->set_num_variables(s.num_variables);
                 resp->set_variable_bytes(s.variable_bytes);
                 resp->set_pushes_applied(s.pushes_applied);
                 resp->set_pushes_duplicate(s.pushes_duplicate);
                 resp->set_pulls(s.pulls);
                 resp->set_bytes_pushed(s.bytes_pushed);
                 resp->set_bytes_pulled(s.bytes_pulled);
                 resp->set_sync_steps_applied(s.sync_steps_applied);
                 resp->set_pushes_with_base_version(
                     s.pushes_with_base_version);
                 resp->set_staleness_sum(s.staleness_sum);
                 resp->set_staleness_max(s.staleness_max);
                 resp->set_pushes_staged(s.pushes_staged);
                 resp->set_staged_discarded(s.staged_discarded);
                 return absl::OkStatus();
               });
}

bool ParameterServiceImpl::AddLane(OpenLane* lane) {
  absl::MutexLock lock(&lanes_mu_);
  if (lanes_closed_) return false;
  open_lanes_.insert(lane);
  return true;
}

bool ParameterServiceImpl::LanesClosed() {
  absl::MutexLock lock(&lanes_mu_);
  return lanes_closed_;
}

void ParameterServiceImpl::RemoveLane(OpenLane* lane) {
  absl::MutexLock lock(&lanes_mu_);
  open_lanes_.erase(lane);
}

}  // namespace strata

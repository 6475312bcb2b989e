// ParameterServiceImpl's dynamic-table calls: CreateTable, LookupRows,
// PushTableRows, TableStats and RestoreTables over the store's TableStore.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/exactly_once.h"
#include "server/parameter_service_call.h"
#include "server/parameter_service_impl.h"
#include "server/table_store.h"

namespace strata {

grpc::ServerUnaryReactor* ParameterServiceImpl::CreateTable(
    grpc::CallbackServerContext* ctx, const v1::CreateTableRequest* req,
    v1::CreateTableResponse* resp) {
  return Unary(ctx, "CreateTable", Role::kCoordinator, RunOn::kCallbackThread,
               [&](const ServiceCall&) -> absl::Status {
                 STRATA_ASSIGN_OR_RETURN(
                     bool created, store_->tables()->Create(req->spec()));
                 resp->set_created(created);
                 if (created) {
                   logger_->Log(LogLevel::kInfo, "table_created",
                                {{"table", req->spec().name()},
                                 {"dim", req->spec().dim()},
                                 {"shard", req->spec().shard()},
                                 {"num_shards", req->spec().num_shards()}});
                 }
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::LookupRows(
    grpc::CallbackServerContext* ctx, const v1::LookupRowsRequest* req,
    v1::LookupRowsResponse* resp) {
  return Unary(ctx, "LookupRows", Role::kWorker, RunOn::kCallbackThread,
               [&](const ServiceCall&) -> absl::Status {
                 std::vector<float> rows;
                 STRATA_RETURN_IF_ERROR(store_->tables()->Lookup(
                     req->table(), req->ids(), req->train(), &rows));
                 resp->set_dim(req->ids().empty()
                                   ? 0
                                   : static_cast<int64_t>(rows.size()) /
                                         req->ids_size());
                 resp->set_values(rows.data(), rows.size() * sizeof(float));
                 store_->RecordPull(static_cast<int64_t>(resp->values().size()));
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::PushTableRows(
    grpc::CallbackServerContext* ctx, const v1::PushTableRowsRequest* req,
    v1::PushTableRowsResponse* resp) {
  return Unary(
      ctx, "PushTableRows", Role::kWorker, RunOn::kCallbackThread,
      [&](const ServiceCall&) -> absl::Status {
        const std::string& bytes = req->gradients();
        if (bytes.size() % sizeof(float) != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "table '", req->table(), "': gradients hold ", bytes.size(),
              " bytes, not a whole number of float32 values"));
        }
        std::vector<float> grads(bytes.size() / sizeof(float));
        if (!bytes.empty()) std::memcpy(grads.data(), bytes.data(), bytes.size());
        STRATA_ASSIGN_OR_RETURN(
            TablePushOutcome outcome,
            store_->tables()->Push(req->table(),
                                   PushMetaFromTag(req->has_tag(), req->tag()),
                                   req->ids(), grads));
        resp->set_duplicate(outcome.duplicate);
        resp->set_rows_applied(outcome.rows_applied);
        resp->set_rows_dropped(outcome.rows_dropped);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::TableStats(
    grpc::CallbackServerContext* ctx, const v1::TableStatsRequest* req,
    v1::TableStatsResponse* resp) {
  return Unary(ctx, "TableStats", Role::kWorker, RunOn::kCallbackThread,
               [&](const ServiceCall&) -> absl::Status {
                 STRATA_ASSIGN_OR_RETURN(std::vector<v1::TableInfo> tables,
                                         store_->tables()->Stats(req->table()));
                 for (v1::TableInfo& t : tables) {
                   *resp->add_tables() = std::move(t);
                 }
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::RestoreTables(
    grpc::CallbackServerContext* ctx, const v1::RestoreTablesRequest* req,
    v1::RestoreTablesResponse* resp) {
  return Unary(
      ctx, "RestoreTables", Role::kCoordinator, RunOn::kCheckpointThread,
      [this, req, resp](const ServiceCall& call) -> absl::Status {
        std::vector<std::string> paths;
        for (const std::string& p : req->paths()) {
          STRATA_ASSIGN_OR_RETURN(
              std::string scoped,
              ScopedCheckpointPath(*store_, call.caller(), p, "restore"));
          paths.push_back(std::move(scoped));
        }
        STRATA_ASSIGN_OR_RETURN(int64_t rows,
                                store_->RestoreTables(paths, call.caller()));
        resp->set_rows(rows);
        logger_->Log(LogLevel::kInfo, "tables_restored",
                     {{"paths", static_cast<int64_t>(paths.size())},
                      {"rows", rows}});
        return absl::OkStatus();
      });
}

}  // namespace strata

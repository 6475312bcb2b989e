// ParameterServiceImpl's dynamic-table calls: CreateTable, LookupRows,
// PushTableRows, TableStats and RestoreTables over the store's TableStore.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/exactly_once.h"
#include "common/status_macros.h"
#include "proto/push_id_codec.h"
#include "server/parameter_service_call.h"
#include "server/parameter_service_impl.h"
#include "tables/table_store.h"

namespace strata {

grpc::ServerUnaryReactor* ParameterServiceImpl::CreateTable(
    grpc::CallbackServerContext* ctx, const v1::CreateTableRequest* req,
    v1::CreateTableResponse* resp) {
  return Unary(ctx, "CreateTable", Role::kCoordinator, RunOn::kCallbackThread,
               [&](const ServiceCall& call) -> absl::Status {
                 STRATA_ASSIGN_OR_RETURN(
                     bool created,
                     store_->CreateTable(req->spec(), call.caller()));
                 resp->set_created(created);
                 RegisterTableMetrics(req->spec().name());
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
               [&](const ServiceCall& call) -> absl::Status {
                 std::vector<float> rows;
                 // Every table is the caller's job's before any is read.
                 if (req->tables_size() == 0) {
                   STRATA_RETURN_IF_ERROR(
                       store_->CheckTableOwner(call.caller(), req->table()));
                 }
                 for (const v1::TableRows& part : req->tables()) {
                   STRATA_RETURN_IF_ERROR(
                       store_->CheckTableOwner(call.caller(), part.table()));
                 }
                 if (req->tables_size() == 0) {
                   STRATA_RETURN_IF_ERROR(store_->tables()->Lookup(
                       req->table(), req->ids(), req->train(), &rows));
                   resp->set_dim(req->ids().empty()
                                     ? 0
                                     : static_cast<int64_t>(rows.size()) /
                                           req->ids_size());
                   resp->set_values(rows.data(), rows.size() * sizeof(float));
                 } else {
                   std::string* values = resp->mutable_values();
                   for (const v1::TableRows& part : req->tables()) {
                     STRATA_RETURN_IF_ERROR(store_->tables()->Lookup(
                         part.table(), part.ids(), req->train(), &rows));
                     resp->add_dims(part.ids().empty()
                                        ? 0
                                        : static_cast<int64_t>(rows.size()) /
                                              part.ids_size());
                     values->append(reinterpret_cast<const char*>(rows.data()),
                                    rows.size() * sizeof(float));
                   }
                 }
                 store_->RecordPull(static_cast<int64_t>(resp->values().size()));
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::PushTableRows(
    grpc::CallbackServerContext* ctx, const v1::PushTableRowsRequest* req,
    v1::PushTableRowsResponse* resp) {
  return Unary(
      ctx, "PushTableRows", Role::kWorker, RunOn::kCallbackThread,
      [&](const ServiceCall& call) -> absl::Status {
        const PushMeta meta = PushMetaFromTag(req->has_tag(), req->tag());
        // The parts: this request's own, or its `tables`.
        std::vector<const std::string*> names;
        std::vector<absl::Span<const int64_t>> ids;
        std::vector<std::vector<float>> grads;
        auto add = [&](const std::string& table,
                       const google::protobuf::RepeatedField<int64_t>& part_ids,
                       const std::string& bytes) -> absl::Status {
          if (bytes.size() % sizeof(float) != 0) {
            return absl::InvalidArgumentError(absl::StrCat(
                "table '", table, "': gradients hold ", bytes.size(),
                " bytes, not a whole number of float32 values"));
          }
          names.push_back(&table);
          ids.emplace_back(part_ids.data(), part_ids.size());
          grads.emplace_back(bytes.size() / sizeof(float));
          if (!bytes.empty()) {
            std::memcpy(grads.back().data(), bytes.data(), bytes.size());
          }
          return absl::OkStatus();
        };
        if (req->tables_size() == 0) {
          STRATA_RETURN_IF_ERROR(add(req->table(), req->ids(), req->gradients()));
        } else {
          for (const v1::TableRows& part : req->tables()) {
            STRATA_RETURN_IF_ERROR(
                add(part.table(), part.ids(), part.gradients()));
          }
        }
        // Every part checked (its job, then the push) before any is
        // applied.
        for (size_t i = 0; i < names.size(); ++i) {
          STRATA_RETURN_IF_ERROR(
              store_->CheckTableOwner(call.caller(), *names[i]));
          STRATA_RETURN_IF_ERROR(
              store_->tables()->CheckPush(*names[i], meta, ids[i], grads[i]));
        }
        bool duplicate = !names.empty();
        for (size_t i = 0; i < names.size(); ++i) {
          STRATA_ASSIGN_OR_RETURN(
              TablePushOutcome outcome,
              store_->tables()->Push(*names[i], meta, ids[i], grads[i]));
          duplicate = duplicate && outcome.duplicate;
          resp->set_rows_applied(resp->rows_applied() + outcome.rows_applied);
          resp->set_rows_dropped(resp->rows_dropped() + outcome.rows_dropped);
        }
        resp->set_duplicate(duplicate);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::TableStats(
    grpc::CallbackServerContext* ctx, const v1::TableStatsRequest* req,
    v1::TableStatsResponse* resp) {
  return Unary(ctx, "TableStats", Role::kWorker, RunOn::kCallbackThread,
               [&](const ServiceCall& call) -> absl::Status {
                 if (!req->table().empty()) {
                   STRATA_RETURN_IF_ERROR(
                       store_->CheckTableOwner(call.caller(), req->table()));
                 }
                 STRATA_ASSIGN_OR_RETURN(std::vector<v1::TableInfo> tables,
                                         store_->tables()->Stats(req->table()));
                 // All tables: those the caller's job may see.
                 for (v1::TableInfo& t : tables) {
                   if (!store_->TableVisibleTo(call.caller(), t.spec().name())) {
                     continue;
                   }
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

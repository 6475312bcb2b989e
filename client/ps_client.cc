// PsClient: connection set-up and the unary calls (variables, checkpoints,
// stats, same-host shared regions). The streamed pushes and pulls are in
// ps_client_push_pull.cc.
#include "client/ps_client.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/ps_client_streams.h"
#include "client/push_tag.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "proto/chunk_codec.h"
#include "rpc/grpc_status.h"

namespace strata {
namespace {

RetryPolicy RetryPolicyOf(const PsClientOptions& options) {
  RetryPolicy policy;
  policy.max_attempts = options.max_attempts;
  policy.initial_backoff = options.initial_backoff;
  policy.max_backoff = options.max_backoff;
  return policy;
}

}  // namespace

std::unique_ptr<PsClient> PsClient::Connect(const std::string& target,
                                            const PsClientOptions& given) {
  PsClientOptions options = given;
  if (IsReplicaSetTarget(target)) {
    // A replicated task: calls retry through a primary's failover (its
    // backup registers and starts listening within about a second).
    options.max_attempts = std::max(options.max_attempts, 20);
    options.max_backoff = std::min(options.max_backoff, absl::Seconds(1));
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  const int n = std::max(1, options.num_channels);
  for (int i = 0; i < n; ++i) {
    grpc::ChannelArguments args;
    // Distinct arguments plus a local subchannel pool give each channel its
    // own TCP connection.
    args.SetInt("strata.channel_index", i);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(8 << 20);
    ApplyDataPlaneChannelArgs(&args);
    channels.push_back(CreateChannel(target, options.security, args));
  }
  return FromChannels(std::move(channels), options, target);
}

std::unique_ptr<PsClient> PsClient::FromChannels(
    std::vector<std::shared_ptr<grpc::Channel>> channels,
    const PsClientOptions& options, const std::string& target) {
  return std::unique_ptr<PsClient>(
      new PsClient(std::move(channels), options, target));
}

PsClient::PsClient(std::vector<std::shared_ptr<grpc::Channel>> channels,
                   const PsClientOptions& options, std::string target)
    : options_(options),
      target_(std::move(target)),
      retrier_(RetryPolicyOf(options), options.sleep),
      feedback_(options.gradient_encoding == GradientEncoding::kNone
                    ? nullptr
                    : std::make_unique<ErrorFeedback>(
                          options.gradient_encoding)) {
  for (auto& ch : channels) {
    Conn c;
    c.channel = ch;
    c.stub = v1::ParameterService::NewStub(ch);
    c.generic = std::make_unique<grpc::GenericStub>(ch);
    conns_.push_back(std::move(c));
  }
}

PsClient::~PsClient() = default;

PsClient::Conn& PsClient::Next() {
  return conns_[next_.fetch_add(1, std::memory_order_relaxed) % conns_.size()];
}

template <typename Request, typename Response>
absl::StatusOr<Response> PsClient::Unary(
    grpc::Status (v1::ParameterService::Stub::*method)(
        grpc::ClientContext*, const Request&, Response*),
    const Request& request) {
  return retrier_.Run([&](int) -> absl::StatusOr<Response> {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, options_.deadline);
    Response resp;
    grpc::Status s = (Next().stub.get()->*method)(&ctx, request, &resp);
    if (!s.ok()) return FromGrpcStatus(s);
    return resp;
  });
}

absl::StatusOr<bool> PsClient::CreateVariable(const v1::VariableSpec& spec) {
  v1::CreateVariableRequest req;
  *req.mutable_spec() = spec;
  absl::StatusOr<v1::CreateVariableResponse> resp =
      Unary(&v1::ParameterService::Stub::CreateVariable, req);
  if (!resp.ok()) return resp.status();
  return resp->created();
}

absl::StatusOr<v1::SaveResponse> PsClient::Save(
    const std::string& path, int64_t coordinator_epoch,
    const std::string& incarnation) {
  v1::SaveRequest req;
  req.set_path(path);
  req.set_coordinator_epoch(coordinator_epoch);
  req.set_incarnation(incarnation);
  return Unary(&v1::ParameterService::Stub::Save, req);
}

absl::StatusOr<v1::RestoreResponse> PsClient::Restore(
    const std::string& path, int64_t coordinator_epoch) {
  v1::RestoreRequest req;
  req.set_path(path);
  req.set_coordinator_epoch(coordinator_epoch);
  return Unary(&v1::ParameterService::Stub::Restore, req);
}

absl::StatusOr<int64_t> PsClient::DeleteCheckpoints(
    const std::vector<std::string>& paths, int64_t coordinator_epoch) {
  v1::DeleteCheckpointsRequest req;
  for (const std::string& p : paths) req.add_paths(p);
  req.set_coordinator_epoch(coordinator_epoch);
  STRATA_ASSIGN_OR_RETURN(
      v1::DeleteCheckpointsResponse resp,
      Unary(&v1::ParameterService::Stub::DeleteCheckpoints, req));
  return resp.deleted();
}

absl::StatusOr<v1::ListVariablesResponse> PsClient::ListVariables() {
  return Unary(&v1::ParameterService::Stub::ListVariables,
               v1::ListVariablesRequest());
}

absl::StatusOr<v1::StatsResponse> PsClient::Stats() {
  return Unary(&v1::ParameterService::Stub::Stats, v1::StatsRequest());
}

absl::StatusOr<bool> PsClient::CreateTable(const v1::TableSpec& spec) {
  v1::CreateTableRequest req;
  *req.mutable_spec() = spec;
  STRATA_ASSIGN_OR_RETURN(v1::CreateTableResponse resp,
                          Unary(&v1::ParameterService::Stub::CreateTable, req));
  return resp.created();
}

absl::Status PsClient::LookupRows(const std::string& table,
                                  absl::Span<const int64_t> ids, bool train,
                                  absl::Span<float> dst) {
  if (ids.empty()) return absl::OkStatus();
  if (dst.size() % ids.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LookupRows('", table, "'): ", dst.size(),
        " floats are not whole rows for ", ids.size(), " ids"));
  }
  const size_t dim = dst.size() / ids.size();
  const size_t per_call =
      std::max<size_t>(1, kMaxTableCallBytes / (dim * sizeof(float)));
  for (size_t first = 0; first < ids.size(); first += per_call) {
    const size_t n = std::min(per_call, ids.size() - first);
    v1::LookupRowsRequest req;
    req.set_table(table);
    req.set_train(train);
    req.mutable_ids()->Add(ids.begin() + first, ids.begin() + first + n);
    STRATA_ASSIGN_OR_RETURN(
        v1::LookupRowsResponse resp,
        Unary(&v1::ParameterService::Stub::LookupRows, req));
    if (static_cast<size_t>(resp.dim()) != dim ||
        resp.values().size() != n * dim * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LookupRows('", table, "'): the table's rows have ", resp.dim(),
          " floats; the destination holds ", dim, " per id"));
    }
    std::memcpy(dst.data() + first * dim, resp.values().data(),
                resp.values().size());
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::PushTableRowsResponse> PsClient::PushTableRows(
    const std::string& table, absl::Span<const int64_t> ids,
    absl::Span<const float> gradients, const std::optional<PushTag>& tag) {
  const size_t bytes =
      gradients.size() * sizeof(float) + ids.size() * sizeof(int64_t);
  if (bytes > kMaxTableCallBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PushTableRows('", table, "'): ", bytes, " bytes of ids and "
        "gradients exceed one call's ", kMaxTableCallBytes,
        "; push fewer ids per call (each call is one tagged push)"));
  }
  v1::PushTableRowsRequest req;
  req.set_table(table);
  if (tag.has_value()) *req.mutable_tag() = ToProto(*tag);
  req.mutable_ids()->Add(ids.begin(), ids.end());
  req.set_gradients(gradients.data(), gradients.size() * sizeof(float));
  return Unary(&v1::ParameterService::Stub::PushTableRows, req);
}

absl::Status PsClient::LookupTables(
    const std::vector<std::string>& tables,
    const std::vector<absl::Span<const int64_t>>& ids, bool train,
    const std::vector<absl::Span<float>>& dsts) {
  size_t bytes = 0;
  for (const auto& d : dsts) bytes += d.size() * sizeof(float);
  if (bytes > kMaxTableCallBytes || tables.size() == 1) {
    for (size_t t = 0; t < tables.size(); ++t) {
      STRATA_RETURN_IF_ERROR(LookupRows(tables[t], ids[t], train, dsts[t]));
    }
    return absl::OkStatus();
  }
  v1::LookupRowsRequest req;
  req.set_train(train);
  for (size_t t = 0; t < tables.size(); ++t) {
    v1::TableRows* part = req.add_tables();
    part->set_table(tables[t]);
    part->mutable_ids()->Add(ids[t].begin(), ids[t].end());
  }
  STRATA_ASSIGN_OR_RETURN(v1::LookupRowsResponse resp,
                          Unary(&v1::ParameterService::Stub::LookupRows, req));
  if (resp.values().size() != bytes ||
      resp.dims_size() != static_cast<int>(tables.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LookupTables: the server answered ", resp.values().size(),
        " bytes for ", tables.size(), " tables; the destinations hold ",
        bytes));
  }
  size_t offset = 0;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (!ids[t].empty() &&
        static_cast<size_t>(resp.dims(static_cast<int>(t))) * ids[t].size() !=
            dsts[t].size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LookupTables('", tables[t], "'): rows of ",
          resp.dims(static_cast<int>(t)), " floats do not fill ",
          dsts[t].size(), " for ", ids[t].size(), " ids"));
    }
    std::memcpy(dsts[t].data(), resp.values().data() + offset,
                dsts[t].size() * sizeof(float));
    offset += dsts[t].size() * sizeof(float);
  }
  return absl::OkStatus();
}

absl::Status PsClient::PushTables(
    const std::vector<std::string>& tables,
    const std::vector<absl::Span<const int64_t>>& ids,
    const std::vector<absl::Span<const float>>& gradients,
    const std::optional<PushTag>& tag) {
  size_t bytes = 0;
  for (size_t t = 0; t < tables.size(); ++t) {
    bytes += gradients[t].size() * sizeof(float) + ids[t].size() * 8;
  }
  if (bytes > kMaxTableCallBytes || tables.size() == 1) {
    for (size_t t = 0; t < tables.size(); ++t) {
      STRATA_RETURN_IF_ERROR(
          PushTableRows(tables[t], ids[t], gradients[t], tag).status());
    }
    return absl::OkStatus();
  }
  v1::PushTableRowsRequest req;
  if (tag.has_value()) *req.mutable_tag() = ToProto(*tag);
  for (size_t t = 0; t < tables.size(); ++t) {
    v1::TableRows* part = req.add_tables();
    part->set_table(tables[t]);
    part->mutable_ids()->Add(ids[t].begin(), ids[t].end());
    part->set_gradients(gradients[t].data(),
                        gradients[t].size() * sizeof(float));
  }
  return Unary(&v1::ParameterService::Stub::PushTableRows, req).status();
}

absl::StatusOr<v1::TableStatsResponse> PsClient::TableStats(
    const std::string& table) {
  v1::TableStatsRequest req;
  req.set_table(table);
  return Unary(&v1::ParameterService::Stub::TableStats, req);
}

absl::StatusOr<int64_t> PsClient::RestoreTables(
    const std::vector<std::string>& paths) {
  v1::RestoreTablesRequest req;
  for (const std::string& p : paths) req.add_paths(p);
  STRATA_ASSIGN_OR_RETURN(
      v1::RestoreTablesResponse resp,
      Unary(&v1::ParameterService::Stub::RestoreTables, req));
  return resp.rows();
}

absl::StatusOr<uint64_t> PsClient::AttachSharedRegion(
    const SharedRegion& region, int64_t* server_pid) {
  v1::AttachSharedRegionRequest req;
  req.set_pid(static_cast<int64_t>(::getpid()));
  req.set_fd(region.fd());
  req.set_bytes(static_cast<int64_t>(region.size()));
  req.set_nonce(region.nonce());
  absl::StatusOr<v1::AttachSharedRegionResponse> resp =
      Unary(&v1::ParameterService::Stub::AttachSharedRegion, req);
  if (!resp.ok()) return resp.status();
  if (server_pid != nullptr) *server_pid = resp->server_pid();
  return resp->region();
}

absl::Status PsClient::DetachSharedRegion(uint64_t id) {
  v1::DetachSharedRegionRequest req;
  req.set_region(id);
  return Unary(&v1::ParameterService::Stub::DetachSharedRegion, req).status();
}

absl::StatusOr<v1::SharedExchangeResponse> PsClient::ExchangeShared(
    v1::SharedExchangeRequest request) {
  return retrier_.Run(
      [&](int attempt) -> absl::StatusOr<v1::SharedExchangeResponse> {
        // A retried push carries a new attempt id (see UploadTagged).
        if (request.push().variables_size() > 0) {
          request.mutable_push()->mutable_tag()->set_attempt(attempt - 1);
        }
        grpc::ClientContext ctx;
        SetDeadline(&ctx, options_.deadline);
        v1::SharedExchangeResponse resp;
        grpc::Status s = Next().stub->ExchangeShared(&ctx, request, &resp);
        if (!s.ok()) return FromGrpcStatus(s);
        return resp;
      });
}

absl::StatusOr<int64_t> PsClient::ServeSharedRegion(uint64_t id,
                                                    uint64_t control_offset,
                                                    uint32_t message_bytes) {
  v1::ServeSharedRegionRequest req;
  req.set_region(id);
  req.set_control_offset(control_offset);
  req.set_message_bytes(message_bytes);
  absl::StatusOr<v1::ServeSharedRegionResponse> resp =
      Unary(&v1::ParameterService::Stub::ServeSharedRegion, req);
  if (!resp.ok()) return resp.status();
  return resp->server_pid();
}

absl::Status PsClient::MirrorVariables(uint64_t id,
                                      const std::vector<std::string>& names,
                                      const std::vector<size_t>& offsets) {
  v1::MirrorVariablesRequest req;
  req.set_region(id);
  for (const auto& n : names) req.add_names(n);
  for (size_t o : offsets) req.add_offsets(o);
  return Unary(&v1::ParameterService::Stub::MirrorVariables, req).status();
}

bool PsClient::TargetIsLoopback() const {
  absl::string_view t = target_;
  if (absl::StartsWith(t, "unix:")) return true;
  if (absl::StartsWith(t, "ipv4:") || absl::StartsWith(t, "ipv6:") ||
      absl::StartsWith(t, "dns:")) {
    t = t.substr(t.find(':') + 1);
    while (absl::StartsWith(t, "/")) t.remove_prefix(1);
  }
  return absl::StartsWith(t, "127.") || absl::StartsWith(t, "[::1]") ||
         absl::StartsWith(t, "localhost:") || t == "localhost";
}

}  // namespace strata

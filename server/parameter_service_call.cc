#include "server/parameter_service_call.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "server/parameter_service_impl.h"

namespace strata {

ServiceCall::ServiceCall(ParameterServiceImpl* service, const char* method)
    : service_(service), method_(method), start_(absl::Now()) {}

absl::Status ServiceCall::Authorize(const grpc::CallbackServerContext* ctx,
                                    Role needed) {
  const CredentialStore* credentials = service_->options().credentials.get();
  if (credentials == nullptr) return absl::OkStatus();
  STRATA_ASSIGN_OR_RETURN(Caller caller,
                          credentials->Authenticate(ctx->client_metadata()));
  STRATA_RETURN_IF_ERROR(RequireRole(caller, needed, method_));
  caller_ = std::move(caller);
  return absl::OkStatus();
}

bool ServiceCall::Record(const absl::Status& status, int64_t bytes_in,
                         int64_t bytes_out) {
  if (ended_) return false;
  ended_ = true;
  MetricsRegistry* metrics = service_->metrics();
  const std::map<std::string, std::string> labels = {
      {"method", method_}, {"code", absl::StatusCodeToString(status.code())}};
  metrics->GetCounter("strata_ps_rpcs_total", "RPCs handled", labels)
      ->Increment();
  metrics
      ->GetHistogram("strata_ps_rpc_latency_seconds", "RPC latency",
                     {{"method", method_}},
                     {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                      0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10})
      ->Observe(absl::ToDoubleSeconds(absl::Now() - start_));
  if (bytes_in > 0) {
    metrics
        ->GetCounter("strata_ps_bytes_received_total",
                     "Tensor bytes received", {{"method", method_}})
        ->Increment(static_cast<double>(bytes_in));
  }
  if (bytes_out > 0) {
    metrics
        ->GetCounter("strata_ps_bytes_sent_total", "Tensor bytes sent",
                     {{"method", method_}})
        ->Increment(static_cast<double>(bytes_out));
  }
  return true;
}

bool ServiceCall::End(const absl::Status& status, const std::string& variable,
                      int64_t bytes_in, int64_t bytes_out) {
  if (!Record(status, bytes_in, bytes_out)) return false;
  if (status.ok()) return true;
  const std::string code = absl::StatusCodeToString(status.code());
  const std::string message(status.message());
  if (transport_ != nullptr) {
    service_->logger()->Log(LogLevel::kWarning, "rpc_error",
                            {{"method", method_},
                             {"transport", transport_},
                             {"variable", variable},
                             {"code", code},
                             {"message", message}});
  } else {
    service_->logger()->Log(LogLevel::kWarning, "rpc_error",
                            {{"method", method_},
                             {"variable", variable},
                             {"code", code},
                             {"message", message}});
  }
  return true;
}

bool ServiceCall::End(const absl::Status& status) {
  if (!Record(status, 0, 0)) return false;
  if (!status.ok()) {
    service_->logger()->Log(
        LogLevel::kWarning, "rpc_error",
        {{"method", method_},
         {"code", absl::StatusCodeToString(status.code())},
         {"message", std::string(status.message())}});
  }
  return true;
}

absl::StatusOr<std::string> ScopedCheckpointPath(
    const ParameterStore& store, const std::optional<Caller>& caller,
    const std::string& path, const char* what) {
  STRATA_RETURN_IF_ERROR(store.CheckCheckpointAccess(caller, what));
  if (!caller.has_value() || caller->Has(Role::kAdmin)) return path;
  if (path.empty() || path[0] == '/') {
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint path '", path,
        "': a job's coordinator may only use relative paths (its job's "
        "directory under --checkpoint-dir)"));
  }
  return absl::StrCat(caller->job, "/", path);
}

}  // namespace strata

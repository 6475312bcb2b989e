#include "coordinator/coordinator_server.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tf_config.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

namespace strata {
namespace {

constexpr const char* kServiceName = "strata.v1.CoordinatorService";

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorServerOptions& options, Logger* logger) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", options.port, " is outside [0, 65535]"));
  }
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->options_ = options;
  s->logger_ = logger;
  s->metrics_ = std::make_unique<MetricsRegistry>();
  auto state = CoordinatorState::Create(options.coordinator, logger);
  if (!state.ok()) return state.status();
  s->state_ = *std::move(state);
  s->checkpointer_ = options.checkpointer;
  if (s->checkpointer_ == nullptr) {
    CoordinatorState* raw = s->state_.get();
    PsClientCheckpointerOptions checkpointer_options;
    checkpointer_options.security = options.ps_security;
    s->checkpointer_ = std::make_shared<PsClientCheckpointer>(
        [raw] { return raw->PsTargets(); }, checkpointer_options);
  }
  s->service_ = std::make_unique<CoordinatorServiceImpl>(
      s->state_.get(), s->checkpointer_.get(), logger, s->metrics_.get(),
      options.service);

  auto credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = JoinHostPort(options.host, options.port);
  builder.AddListeningPort(address, *credentials, &s->port_);
  builder.RegisterService(s->service_.get());
  // Two coordinators on one port would split the cluster's brain: a port
  // in use is an error, not shared (gRPC sets SO_REUSEPORT by default).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (options.configure_builder) options.configure_builder(builder);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    s->server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  if (auto* health = s->server_->GetHealthCheckService()) {
    health->SetServingStatus(kServiceName, true);
    health->SetServingStatus(true);
  }
  if (options.metrics_port >= 0) {
    auto http = MetricsHttpServer::Start(options.host, options.metrics_port,
                                         s->metrics_.get());
    if (!http.ok()) {
      s->Shutdown(absl::ZeroDuration());
      return http.status();
    }
    s->http_ = *std::move(http);
  }
  return s;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(absl::Seconds(5)); }

int CoordinatorServer::metrics_port() const {
  return http_ ? http_->port() : -1;
}

std::string CoordinatorServer::address() const {
  return JoinHostPort(options_.host, port_);
}

void CoordinatorServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (server_) {
    if (auto* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(kServiceName, false);
      health->SetServingStatus(false);
    }
  }
  // Streams and barrier waits end first so that they do not hold the drain.
  if (service_) service_->PrepareShutdown();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(grace));
    server_->Wait();
  }
  if (http_) http_->Stop();
  if (state_) {
    absl::Status s = state_->Flush();
    if (!s.ok()) {
      logger_->Error("state_write_failed", {{"error", s.ToString()}});
    }
  }
}

}  // namespace strata

#include "server/ps_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/tf_config.h"
#include "server/device_state.h"
#include "proto/chunk_codec.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"

namespace strata {

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(
    const PsServerOptions& options, Logger* logger) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", options.port, " is outside [0, 65535]"));
  }
  absl::StatusOr<std::string> device = CheckPsDevice(options.device);
  if (!device.ok()) {
    return absl::Status(device.status().code(),
                        absl::StrCat("device ", options.device.Name(), ": ",
                                     device.status().message()));
  }
  std::unique_ptr<PsServer> s(new PsServer());
  s->options_ = options;
  s->device_description_ = *device;
  s->logger_ = logger;
  s->metrics_ = std::make_unique<MetricsRegistry>();
  VariableStoreOptions store_options;
  store_options.checkpoint_dir = options.checkpoint_dir;
  store_options.max_variable_bytes = options.max_variable_bytes;
  store_options.device = options.device;
  s->store_ = std::make_unique<VariableStore>(store_options);
  s->service_ = std::make_unique<ParameterServiceImpl>(
      s->store_.get(), logger, s->metrics_.get(), options.service);

  auto credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = JoinHostPort(options.host, options.port);
  builder.AddListeningPort(address, *credentials, &s->port_);
  builder.RegisterService(s->service_.get());
  for (const auto& [name, value] : DataPlaneChannelArgs()) {
    builder.AddChannelArgument(name, value);
  }
  if (options.configure_builder) options.configure_builder(builder);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address));
  }
  if (auto* health = s->server_->GetHealthCheckService()) {
    health->SetServingStatus("strata.v1.ParameterService", true);
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

PsServer::~PsServer() { Shutdown(absl::Seconds(5)); }

int PsServer::metrics_port() const { return http_ ? http_->port() : -1; }

std::string PsServer::address() const {
  return JoinHostPort(options_.host, port_);
}

void PsServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (server_) {
    if (auto* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(false);
    }
    // Waiting pulls are failed first so that they do not hold the drain.
    service_->PrepareShutdown();
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(grace));
    server_->Wait();
  }
  if (http_) http_->Stop();
}

}  // namespace strata

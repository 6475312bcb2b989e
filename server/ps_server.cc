#include "server/ps_server.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "common/status_macros.h"
#include "common/tf_config.h"
#include "grpcpp/server_builder.h"
#include "proto/chunk_codec.h"
#include "server/device_state.h"

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
  if (!options.checkpoint_dir.empty()) {
    // Saves a killed predecessor left half-written.
    absl::StatusOr<int> swept =
        SweepCheckpointTemporaries(options.checkpoint_dir);
    if (!swept.ok()) {
      logger->Log(LogLevel::kWarning, "checkpoint_sweep_failed",
                  {{"dir", options.checkpoint_dir},
                   {"error", swept.status().ToString()}});
    } else if (*swept > 0) {
      logger->Log(LogLevel::kInfo, "checkpoint_temporaries_removed",
                  {{"dir", options.checkpoint_dir}, {"removed", *swept}});
    }
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
  if (!options.defer_serving) STRATA_RETURN_IF_ERROR(s->StartServing());
  return s;
}

absl::Status PsServer::StartServing() {
  if (daemon_ != nullptr) return absl::OkStatus();
  const PsServerOptions& options = options_;
  absl::StatusOr<DaemonServerOptions> listening =
      ListeningOptions(options.host, options.port, options.tls);
  if (!listening.ok()) return listening.status();
  DaemonServerOptions serving = *std::move(listening);
  serving.services = {service_.get()};
  serving.health_services = {"strata.v1.ParameterService"};
  serving.configure_builder = [&options](grpc::ServerBuilder& builder) {
    for (const auto& [name, value] : DataPlaneChannelArgs()) {
      builder.AddChannelArgument(name, value);
    }
    if (options.defer_serving) {
      // A replica's clients ping every second to notice a hung primary.
      builder.AddChannelArgument(
          GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
      builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
      builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    }
    if (options.configure_builder) options.configure_builder(builder);
  };
  serving.metrics_port = options.metrics_port;
  serving.metrics = metrics_.get();
  auto started = DaemonServer::Start(std::move(serving));
  if (!started.ok()) return started.status();
  daemon_ = *std::move(started);
  return absl::OkStatus();
}

PsServer::~PsServer() { Shutdown(absl::Seconds(5)); }

void PsServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (daemon_) {
    daemon_->SetServing(false);
    // Waiting pulls are failed first so that they do not hold the drain.
    service_->PrepareShutdown();
    daemon_->Shutdown(grace);
    daemon_->StopMetrics();
  }
}

}  // namespace strata

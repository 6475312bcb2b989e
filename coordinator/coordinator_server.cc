#include "coordinator/coordinator_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tf_config.h"

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
  if (s->checkpointer_ == nullptr && options.checkpointer_factory) {
    CoordinatorState* raw = s->state_.get();
    CoordinatorServerOptions::CheckpointerContext context;
    context.targets = [raw] { return raw->PsTargets(); };
    context.coordinator_epoch = options.service.leader_epoch;
    context.leading = options.service.leading;
    s->checkpointer_ = options.checkpointer_factory(context);
  }
  if (s->checkpointer_ == nullptr) {
    s->checkpointer_ = std::make_shared<NoPsCheckpointer>();
  }
  CoordinatorDriverOptions driver_options;
  driver_options.tick = options.service.tick;
  driver_options.persist_interval = options.service.persist_interval;
  s->driver_ = std::make_unique<CoordinatorDriver>(
      s->state_.get(), s->checkpointer_.get(), logger, driver_options);
  s->service_ = std::make_unique<CoordinatorServiceImpl>(
      s->state_.get(), s->driver_.get(), logger, s->metrics_.get(),
      options.service);

  absl::StatusOr<DaemonServerOptions> listening =
      ListeningOptions(options.host, options.port, options.tls);
  if (!listening.ok()) return listening.status();
  DaemonServerOptions serving = *std::move(listening);
  serving.services = {s->service_.get()};
  serving.health_services = {kServiceName};
  serving.configure_builder = [&options](grpc::ServerBuilder& builder) {
    // Two coordinators on one port would split the cluster's brain: a port
    // in use is an error, not shared (gRPC sets SO_REUSEPORT by default).
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    if (options.configure_builder) options.configure_builder(builder);
  };
  serving.metrics_port = options.metrics_port;
  serving.metrics = s->metrics_.get();
  auto started = DaemonServer::Start(std::move(serving));
  if (!started.ok()) return started.status();
  s->daemon_ = *std::move(started);
  return s;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(absl::Seconds(5)); }

void CoordinatorServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (daemon_) daemon_->SetServing(false);
  // Streams and barrier waits end first so that they do not hold the drain;
  // then the background work stops and the state is written.
  if (service_) service_->PrepareShutdown();
  if (driver_) driver_->Stop();
  if (daemon_) {
    daemon_->Shutdown(grace);
    daemon_->StopMetrics();
  }
  if (state_) {
    absl::Status s = state_->Flush();
    if (!s.ok()) {
      logger_->Error("state_write_failed", {{"error", s.ToString()}});
    }
  }
}

}  // namespace strata

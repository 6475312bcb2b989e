#include "collective/worker_service.h"

#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collective/collective_message.h"
#include "collective/grpc_group.h"
#include "collective/mailbox.h"
#include "common/status_macros.h"
#include "common/tf_config.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "proto/chunk_codec.h"
#include "rpc/grpc_status.h"

namespace strata {
namespace collective {
namespace internal {
namespace {

// The Transport handed out by OpenGroup: a handle on its group, and the
// owner of the group's channels.
class GrpcTransport final : public Transport {
 public:
  GrpcTransport(std::shared_ptr<GrpcGroup> group,
                std::unique_ptr<PeerLinks> links,
                std::unique_ptr<Poller> poller)
      : group_(std::move(group)),
        links_(std::move(links)),
        poller_(std::move(poller)) {}
  ~GrpcTransport() override {
    group_->Close();
    // Here, on the caller's thread, after every call ended.
    poller_.reset();
    links_.reset();
  }

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  absl::Status Send(int peer, const std::string& key,
                    absl::Span<const char> data) override {
    return group_->Send(peer, key, data);
  }
  absl::Status Recv(int peer, const std::string& key, absl::Span<char> out,
                    absl::Time deadline) override {
    return group_->Recv(peer, key, out, deadline);
  }
  absl::Status RecvReduce(int peer, const std::string& key, DType dtype,
                          absl::Span<char> inout,
                          absl::Time deadline) override {
    return group_->RecvReduce(peer, key, dtype, inout, deadline);
  }
  absl::Status Flush(absl::Time deadline) override {
    return group_->Flush(deadline);
  }
  void Abort(const absl::Status& reason) override {
    group_->Abort(group_->rank(), reason.ToString(), /*tell_peers=*/true);
  }

 private:
  const std::shared_ptr<GrpcGroup> group_;
  std::unique_ptr<PeerLinks> links_;
  std::unique_ptr<Poller> poller_;
};

}  // namespace
}  // namespace internal

// ---------------------------------------------------------------------------
// WorkerServiceImpl

WorkerServiceImpl::WorkerServiceImpl(
    std::shared_ptr<internal::Mailbox> mailbox, Logger* logger)
    : mailbox_(std::move(mailbox)), logger_(logger) {}

WorkerServiceImpl::~WorkerServiceImpl() = default;

void WorkerServiceImpl::SetStateProvider(StateProvider provider) {
  absl::MutexLock lock(&mu_);
  provider_ = std::move(provider);
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Deliver(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  internal::DecodedMessage msg;
  absl::Status s = internal::DecodeMessage(*request, &msg);
  if (!s.ok() && logger_ != nullptr) {
    logger_->Warning("collective_bad_message",
                     {{"peer", ctx->peer()}, {"error", s.ToString()}});
  }
  if (s.ok()) s = mailbox_->Deliver(std::move(msg));
  if (s.ok()) {
    grpc::Slice empty;
    *response = grpc::ByteBuffer(&empty, 1);
  }
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::AbortGroup(
    grpc::CallbackServerContext* ctx, const v1::AbortGroupRequest* request,
    v1::AbortGroupAck* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  mailbox_->AbortGroup(request->group(), request->from_rank(),
                       request->reason());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::GetState(
    grpc::CallbackServerContext* ctx, const v1::GetStateRequest* request,
    v1::WorkerState* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  StateProvider provider;
  {
    absl::MutexLock lock(&mu_);
    provider = provider_;
  }
  absl::Status s;
  if (!provider) {
    s = absl::FailedPreconditionError("no state yet");
  } else {
    absl::StatusOr<v1::WorkerState> state = provider(*request);
    if (state.ok()) {
      *response = *std::move(state);
    } else {
      s = state.status();
    }
  }
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

// ---------------------------------------------------------------------------
// WorkerServer

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const WorkerServerOptions& options, Logger* logger) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", options.port, " is outside [0, 65535]"));
  }
  if (options.max_message_bytes <= internal::kHeaderAllowance ||
      options.max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes ", options.max_message_bytes, " is outside (",
        internal::kHeaderAllowance, ", ", std::numeric_limits<int>::max(),
        "]"));
  }
  if (options.max_early_bytes < 0 || options.max_sends_in_flight < 1 ||
      options.channels_per_peer < 1 ||
      options.abort_notice_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "max_early_bytes must be >= 0, max_sends_in_flight and "
        "channels_per_peer >= 1, abort_notice_timeout > 0");
  }
  std::unique_ptr<WorkerServer> s(new WorkerServer());
  s->options_ = options;
  s->logger_ = logger;
  s->mailbox_ = std::make_shared<internal::Mailbox>(options, logger);
  s->service_ = std::make_unique<WorkerServiceImpl>(s->mailbox_, logger);

  auto credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = JoinHostPort(options.host, options.port);
  builder.AddListeningPort(address, *credentials, &s->port_);
  builder.RegisterService(s->service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  // A second process on the same port would receive half of the group's
  // messages: refuse to share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (const auto& [name, value] : DataPlaneChannelArgs()) {
    builder.AddChannelArgument(name, value);
  }
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  if (auto* health = s->server_->GetHealthCheckService()) {
    health->SetServingStatus("strata.v1.WorkerService", true);
    health->SetServingStatus(true);
  }
  if (logger != nullptr) {
    logger->Info("worker_server_listening", {{"address", s->address()}});
  }
  return s;
}

WorkerServer::~WorkerServer() { Shutdown(absl::Seconds(5)); }

std::string WorkerServer::address() const {
  return JoinHostPort(options_.host, port_);
}

void WorkerServer::SetStateProvider(StateProvider provider) {
  service_->SetStateProvider(std::move(provider));
}

absl::StatusOr<std::unique_ptr<Transport>> WorkerServer::OpenGroup(
    int64_t group, int rank, std::vector<std::string> peers,
    const CollectiveOptions& options) {
  if (peers.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group, ": empty peer list"));
  }
  if (rank < 0 || rank >= static_cast<int>(peers.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", group, ": rank ", rank, " outside [0, ", peers.size(), ")"));
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    absl::StatusOr<std::pair<std::string, int>> hp = SplitHostPort(peers[i]);
    if (!hp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", group, ": peer ", i, ": ", hp.status().message()));
    }
  }
  if (options.pack_bytes <= 0 ||
      options.pack_bytes + internal::kHeaderAllowance >
          options_.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", group, ": pack_bytes ", options.pack_bytes,
        " must be positive and fit in max_message_bytes ",
        options_.max_message_bytes));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group, ": timeout must be positive"));
  }
  auto links = std::make_unique<internal::PeerLinks>(
      peers, options_.channels_per_peer, options_.peer_security);
  auto poller = std::make_unique<internal::Poller>();
  STRATA_ASSIGN_OR_RETURN(
      std::shared_ptr<internal::GrpcGroup> g,
      mailbox_->Open(group, rank, std::move(peers), options, links.get(),
                     poller->cq()));
  return std::unique_ptr<Transport>(std::make_unique<internal::GrpcTransport>(
      std::move(g), std::move(links), std::move(poller)));
}

void WorkerServer::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  mailbox_->Shutdown(address());
  if (server_) {
    if (auto* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(false);
    }
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(grace));
    server_->Wait();
  }
}

absl::StatusOr<v1::WorkerState> FetchState(const std::string& address,
                                           const v1::GetStateRequest& request,
                                           absl::Duration timeout,
                                           const ClientSecurity& security) {
  if (address.empty()) {
    return absl::InvalidArgumentError("fetch state: empty address");
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("fetch state: timeout must be positive");
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A worker's whole state in one message.
  args.SetMaxReceiveMessageSize(-1);
  ApplyDataPlaneChannelArgs(&args);
  auto channel = CreateChannel(address, security, args);
  auto stub = v1::WorkerService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(false);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::WorkerState state;
  grpc::Status s = stub->GetState(&ctx, request, &state);
  if (!s.ok()) {
    const absl::Status status = FromGrpcStatus(s);
    return absl::Status(status.code(),
                        absl::StrCat("GetState from ", address, ": ",
                                     status.message()));
  }
  return state;
}

}  // namespace collective
}  // namespace strata

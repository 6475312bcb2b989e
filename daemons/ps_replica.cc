#include "daemons/ps_replica.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/server_builder.h"
#include "rpc/grpc_status.h"

namespace strata {

using ReplicaRole = v1::ReplicaStatusResponse;

absl::StatusOr<std::unique_ptr<PsReplica>> PsReplica::Start(
    PsServer* server, Coordinator* coordinator, PsReplicaOptions options,
    Logger* logger) {
  const int n = static_cast<int>(options.replication_addresses.size());
  if (n < 2 || options.replica < 0 || options.replica >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replica ", options.replica, " of ", n,
        " replication addresses: need at least 2 and the replica among them"));
  }
  if (coordinator == nullptr) {
    return absl::InvalidArgumentError(
        "a replicated ps task needs a coordinator (--coordinator)");
  }
  std::unique_ptr<PsReplica> r(
      new PsReplica(server, coordinator, std::move(options), logger));
  ReplicaHooks hooks;
  PsReplica* self = r.get();
  hooks.is_backup = [self] {
    absl::MutexLock lock(&self->mu_);
    return self->role_ == ReplicaRole::BACKUP;
  };
  hooks.stream_opened = [self](const std::string& primary) {
    absl::MutexLock lock(&self->mu_);
    self->stream_open_ = true;
    self->stream_primary_ = primary;
  };
  hooks.stream_closed = [self](const std::string& primary, bool failed) {
    absl::MutexLock lock(&self->mu_);
    if (primary != self->stream_primary_) return;
    self->stream_closed_ = true;
    self->stream_failed_ = failed;
  };
  hooks.attach = [self](const v1::AttachBackupRequest& req)
      -> absl::StatusOr<std::string> {
    ReplicationLog* log = nullptr;
    std::string incarnation;
    {
      absl::MutexLock lock(&self->mu_);
      if (self->role_ != ReplicaRole::PRIMARY || self->log_ == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "replica ", self->options_.replica, " of ps task ",
            self->options_.task_index, " is not the primary"));
      }
      log = self->log_.get();
      incarnation = self->incarnation_;
    }
    absl::Status s = log->Attach(req.address(), req.incarnation());
    if (!s.ok()) return s;
    return incarnation;
  };
  hooks.status = [self] { return self->Status(); };
  r->service_ = std::make_unique<ReplicationServiceImpl>(
      server->store(), std::move(hooks), logger);
  auto credentials = MakeServerCredentials(r->options_.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  std::string address = r->options_.replication_addresses[r->options_.replica];
  if (!r->options_.listen_host.empty()) {
    const size_t colon = address.rfind(':');
    const std::string& host = r->options_.listen_host;
    address = absl::StrCat(
        host.find(':') != std::string::npos ? absl::StrCat("[", host, "]")
                                            : host,
        colon == std::string::npos ? std::string()
                                   : address.substr(colon));
  }
  builder.AddListeningPort(address, *credentials);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.RegisterService(r->service_.get());
  r->grpc_server_ = builder.BuildAndStart();
  if (r->grpc_server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on replication address ", address));
  }
  r->thread_ = std::thread([self] { self->Run(); });
  return r;
}

PsReplica::PsReplica(PsServer* server, Coordinator* coordinator,
                     PsReplicaOptions options, Logger* logger)
    : server_(server),
      coordinator_(coordinator),
      options_(std::move(options)),
      logger_(logger) {}

PsReplica::~PsReplica() { Stop(); }

void PsReplica::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (thread_.joinable()) thread_.join();
  if (log_ != nullptr) log_->Stop();
  if (agent_ != nullptr) agent_->Stop();
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(1));
  }
}

v1::ReplicaStatusResponse PsReplica::Status() const {
  v1::ReplicaStatusResponse out;
  absl::MutexLock lock(&mu_);
  out.set_role(role_);
  out.set_incarnation(incarnation_);
  out.set_promotions(promotions_);
  if (log_ != nullptr) {
    out.set_has_backup(log_->has_backup());
    out.set_log_position(log_->position());
  }
  return out;
}

bool PsReplica::WaitUntilPrimary(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto primary = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) -> bool {
    return role_ == ReplicaRole::PRIMARY;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&primary), timeout);
}

bool PsReplica::WaitUntilBackup(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto backup = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) -> bool {
    return role_ == ReplicaRole::BACKUP && stream_open_ && !stream_closed_;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&backup), timeout);
}

bool PsReplica::Sleep(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto stopped = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) -> bool { return stopped_; };
  return !mu_.AwaitWithTimeout(absl::Condition(&stopped), d);
}

absl::Status PsReplica::AskToAttach(const std::string& incarnation) {
  absl::Status last = absl::UnavailableError("no other replica");
  for (int i = 0; i < static_cast<int>(options_.replication_addresses.size());
       ++i) {
    if (i == options_.replica) continue;
    auto channel = CreateChannel(options_.replication_addresses[i],
                                 options_.security);
    auto stub = v1::ReplicationService::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(2));
    v1::AttachBackupRequest req;
    req.set_task_index(options_.task_index);
    req.set_address(options_.replication_addresses[options_.replica]);
    req.set_incarnation(incarnation);
    v1::AttachBackupResponse resp;
    last = FromGrpcStatus(stub->AttachBackup(&ctx, req, &resp));
    if (last.ok()) return last;
  }
  return last;
}

void PsReplica::Run() {
  v1::TaskId task;
  task.set_role("ps");
  task.set_index(options_.task_index);
  std::string incarnation = NewIncarnation();
  std::string replaces;
  int refusals = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
      role_ = ReplicaRole::STARTING;
    }
    auto agent = std::make_unique<MembershipAgent>(
        coordinator_, task, options_.advertise, incarnation, logger_);
    agent->SetExclusive(replaces, [this] { Lost(); });
    absl::Status claimed = agent->Start();
    if (claimed.ok()) {
      absl::Status s =
          BecomePrimary(std::move(agent), incarnation, !replaces.empty());
      if (!s.ok()) {
        logger_->Error("serving_failed", {{"error", s.ToString()}});
        std::_Exit(1);
      }
      return;
    }
    if (!replaces.empty()) {
      logger_->Warning("takeover_refused", {{"replaces", replaces},
                                            {"error", claimed.ToString()}});
      // Not the primary's successor: what it holds is dropped.
      server_->store()->Clear();
    }
    replaces.clear();
    if (!absl::IsAlreadyExists(claimed)) {
      logger_->Warning("claim_failed", {{"error", claimed.ToString()}});
      if (!Sleep(absl::Milliseconds(200))) return;
      continue;
    }
    // Another replica holds the task: join it as its backup, as the
    // incarnation this one would take over with.
    incarnation = NewIncarnation();
    {
      absl::MutexLock lock(&mu_);
      role_ = ReplicaRole::BACKUP;
      stream_open_ = stream_closed_ = stream_failed_ = false;
      stream_primary_.clear();
    }
    absl::Status attached = AskToAttach(incarnation);
    if (!attached.ok()) {
      if (++refusals == 1 || refusals % 25 == 0) {
        logger_->Info("attach_refused", {{"error", attached.ToString()},
                                         {"holder", std::string(
                                                        claimed.message())}});
      }
      if (!Sleep(absl::Milliseconds(200))) return;
      continue;
    }
    refusals = 0;
    bool failed = false;
    std::string primary;
    {
      absl::MutexLock lock(&mu_);
      auto opened = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) -> bool {
        return stopped_ || stream_open_;
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(&opened),
                                absl::Seconds(10))) {
        continue;
      }
      primary = stream_primary_;
      logger_->Info("backup", {{"primary", primary},
                               {"incarnation", incarnation}});
    }
    // Until the stream ends, check every second whether the primary hangs
    // (its lease expired while its stream stays open).
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        auto closed = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) -> bool {
          return stopped_ || stream_closed_;
        };
        if (mu_.AwaitWithTimeout(absl::Condition(&closed),
                                 options_.hang_check)) {
          if (stopped_) return;
          role_ = ReplicaRole::STARTING;
          failed = stream_failed_;
          // The primary's stream ended: take the task over from it.
          if (!failed) replaces = stream_primary_;
          break;
        }
      }
      auto claim = std::make_unique<MembershipAgent>(
          coordinator_, task, options_.advertise, incarnation, logger_);
      claim->SetExclusive(primary, [this] { Lost(); },
                          /*only_if_failed=*/true);
      if (claim->Start().ok()) {
        // Its stream may stay open: the service refuses its frames now.
        {
          absl::MutexLock lock(&mu_);
          role_ = ReplicaRole::STARTING;
        }
        logger_->Warning("primary_hangs", {{"primary", primary}});
        absl::Status s = BecomePrimary(std::move(claim), incarnation, true);
        if (!s.ok()) {
          logger_->Error("serving_failed", {{"error", s.ToString()}});
          std::_Exit(1);
        }
        return;
      }
    }
    if (failed) {
      // This replica's state is not the primary's: drop it, join again.
      server_->store()->Clear();
      continue;
    }
    logger_->Warning("primary_lost", {{"primary", replaces}});
  }
}

absl::Status PsReplica::BecomePrimary(std::unique_ptr<MembershipAgent> agent,
                                      const std::string& incarnation,
                                      bool promoted) {
  ReplicationLogOptions log_options;
  log_options.task_index = options_.task_index;
  log_options.incarnation = incarnation;
  log_options.security = options_.security;
  log_options.ack_timeout = options_.ack_timeout;
  MembershipAgent* a = agent.get();
  log_options.fence = [a](const std::string& backup) {
    return a->Fence(backup);
  };
  log_options.on_lost = [this] { Lost(); };
  {
    absl::MutexLock lock(&mu_);
    log_ = std::make_unique<ReplicationLog>(server_->store(), logger_,
                                            std::move(log_options));
    server_->store()->set_replication(log_.get());
    agent_ = std::move(agent);
    incarnation_ = incarnation;
  }
  server_->set_incarnation(incarnation);
  absl::Status s;
  for (int attempt = 0; attempt < 50; ++attempt) {
    s = server_->StartServing();
    if (s.ok()) break;
    if (!Sleep(absl::Milliseconds(100))) return absl::OkStatus();
  }
  if (!s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    role_ = ReplicaRole::PRIMARY;
    if (promoted) ++promotions_;
  }
  logger_->Warning(promoted ? "promoted" : "primary",
                   {{"address", server_->address()},
                    {"incarnation", incarnation},
                    {"task", options_.task_index}});
  return absl::OkStatus();
}

void PsReplica::Lost() {
  {
    absl::MutexLock lock(&mu_);
    role_ = ReplicaRole::STARTING;
  }
  if (options_.on_lost) {
    options_.on_lost();
    return;
  }
  logger_->Error("task_lost",
                 {{"task", options_.task_index},
                  {"action", "exiting (restarted, this replica joins as the "
                             "backup)"}});
  std::_Exit(3);
}

}  // namespace strata

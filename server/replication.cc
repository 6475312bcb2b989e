#include "server/replication.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/exactly_once.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "proto/chunk_codec.h"
#include "rpc/grpc_status.h"
#include "server/replication_codec.h"

namespace strata {

ReplicationLog::ReplicationLog(VariableStore* store, Logger* logger,
                               ReplicationLogOptions options)
    : store_(store), logger_(logger), options_(std::move(options)) {}

ReplicationLog::~ReplicationLog() { Stop(); }

void ReplicationLog::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

bool ReplicationLog::active() const { return active_.load(); }

uint64_t ReplicationLog::Append(v1::ReplicationEntry entry) {
  absl::MutexLock lock(&mu_);
  switch (state_) {
    case State::kAlone:
      return 0;
    case State::kAttached:
      entry.set_seq(++last_seq_);
      queue_.push_back(std::move(entry));
      return last_seq_;
    case State::kFencing:
    case State::kLost:
      // Not sent; acknowledged once the fencing decides.
      return ++last_seq_;
  }
  return 0;
}

uint64_t ReplicationLog::Tail() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kAlone && released_ >= last_seq_ ? 0 : last_seq_;
}

absl::Status ReplicationLog::Wait(uint64_t ticket) {
  if (ticket == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) -> bool {
    return acked_ >= ticket || released_ >= ticket || state_ == State::kLost ||
           stopping_;
  };
  mu_.Await(absl::Condition(&done));
  if (acked_ >= ticket || released_ >= ticket) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "ps task ", options_.task_index,
      state_ == State::kLost
          ? " was taken over by its backup; retry (the client reaches the "
            "new primary)"
          : " is shutting down"));
}

bool ReplicationLog::has_backup() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kAttached;
}

uint64_t ReplicationLog::position() const {
  absl::MutexLock lock(&mu_);
  return last_seq_;
}

uint64_t ReplicationLog::acknowledged() const {
  absl::MutexLock lock(&mu_);
  return acked_;
}

int64_t ReplicationLog::backups_dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

absl::Status ReplicationLog::Attach(const std::string& address,
                                    const std::string& backup_incarnation) {
  uint64_t session = 0;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || state_ == State::kLost) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ps task ", options_.task_index, " is no longer the primary"));
    }
    if (state_ != State::kAlone) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ps task ", options_.task_index, " already has a backup (",
          state_ == State::kFencing ? "being dropped" : "attached", ")"));
    }
    state_ = State::kAttached;
    active_ = true;
    session = ++session_;
    queue_.clear();
    // What the backup held before is dropped; the state transfer follows.
    v1::ReplicationEntry reset;
    reset.set_kind(v1::ReplicationEntry::RESET);
    reset.set_seq(++last_seq_);
    queue_.push_back(std::move(reset));
    sent_ = acked_ = last_seq_ - 1;
    last_progress_ = absl::Now();
  }
  // The previous session's thread has ended its fencing (state was kAlone).
  if (thread_.joinable()) thread_.join();
  thread_ = std::thread([this, session, address, backup_incarnation] {
    Session(session, address, backup_incarnation);
  });
  absl::Status transfer = store_->AppendState();
  logger_->Info("backup_attached", {{"backup", address},
                                    {"backup_incarnation", backup_incarnation},
                                    {"transfer", transfer.ToString()}});
  return transfer;
}

void ReplicationLog::Session(uint64_t session, std::string address,
                             std::string backup_incarnation) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  ApplyDataPlaneChannelArgs(&args);
  auto channel = CreateChannel(address, options_.security, args);
  auto stub = v1::ReplicationService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(false);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stream_ctx_ = &ctx;
  }
  auto stream = stub->Replicate(&ctx);
  std::string error;
  std::thread reader([&] {
    v1::ReplicationAck ack;
    while (stream->Read(&ack)) {
      absl::MutexLock lock(&mu_);
      if (!ack.error().empty()) {
        error = ack.error();
        ctx.TryCancel();
        return;
      }
      if (ack.applied() > acked_) {
        acked_ = ack.applied();
        last_progress_ = absl::Now();
      }
    }
    absl::MutexLock lock(&mu_);
    if (error.empty()) error = "the backup's stream ended";
  });
  bool writer_done = false;
  // Drops a backup that acknowledges nothing for ack_timeout (also while a
  // write is blocked on it).
  std::thread watchdog([&] {
    absl::MutexLock lock(&mu_);
    auto over = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) -> bool {
      return stopping_ || writer_done || !error.empty();
    };
    while (!mu_.AwaitWithTimeout(absl::Condition(&over),
                                 options_.ack_timeout / 4)) {
      if (acked_ < sent_ &&
          absl::Now() - last_progress_ > options_.ack_timeout) {
        error = absl::StrCat("the backup acknowledged nothing for ",
                             absl::FormatDuration(options_.ack_timeout));
        ctx.TryCancel();
        return;
      }
    }
  });
  bool first = true;
  while (true) {
    v1::ReplicationFrame frame;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) -> bool {
        return stopping_ || !error.empty() || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_ || !error.empty()) break;
      size_t bytes = 0;
      while (!queue_.empty() &&
             (frame.entries_size() == 0 || bytes < options_.frame_bytes)) {
        bytes += queue_.front().data().size() + 64;
        *frame.add_entries() = std::move(queue_.front());
        queue_.pop_front();
      }
      if (frame.entries_size() > 0) {
        if (sent_ == acked_) last_progress_ = absl::Now();
        sent_ = frame.entries(frame.entries_size() - 1).seq();
      }
    }
    if (first) {
      frame.set_primary_incarnation(options_.incarnation);
      frame.set_task_index(options_.task_index);
      first = false;
    }
    if (!stream->Write(frame)) {
      absl::MutexLock lock(&mu_);
      if (error.empty()) error = "writing to the backup failed";
      break;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    writer_done = true;
  }
  ctx.TryCancel();
  watchdog.join();
  reader.join();
  (void)stream->Finish();
  {
    absl::MutexLock lock(&mu_);
    stream_ctx_ = nullptr;
    if (session != session_ || state_ != State::kAttached) return;
    if (stopping_) {
      state_ = State::kAlone;
      active_ = false;
      released_ = last_seq_;
      return;
    }
    // Nothing is acknowledged until the backup is fenced off.
    state_ = State::kFencing;
    queue_.clear();
    ++dropped_;
  }
  logger_->Warning("backup_lost", {{"backup", address},
                                   {"backup_incarnation", backup_incarnation},
                                   {"reason", error}});
  Fence(session, backup_incarnation);
}

void ReplicationLog::Fence(uint64_t session,
                           const std::string& backup_incarnation) {
  const std::function<void(absl::Duration)> sleep =
      options_.sleep ? options_.sleep
                     : [](absl::Duration d) { absl::SleepFor(d); };
  for (int attempt = 1;; ++attempt) {
    absl::Status s = options_.fence ? options_.fence(backup_incarnation)
                                    : absl::OkStatus();
    if (s.ok()) {
      absl::MutexLock lock(&mu_);
      state_ = State::kAlone;
      active_ = false;
      released_ = last_seq_;
      logger_->Info("backup_fenced", {{"backup_incarnation",
                                       backup_incarnation},
                                      {"released", released_}});
      return;
    }
    if (absl::IsNotFound(s) || absl::IsAlreadyExists(s)) {
      {
        absl::MutexLock lock(&mu_);
        state_ = State::kLost;
      }
      logger_->Error("task_lost", {{"reason", s.ToString()}});
      if (options_.on_lost) options_.on_lost();
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        state_ = State::kLost;
        return;
      }
    }
    if (attempt == 1 || attempt % 50 == 0) {
      logger_->Warning("backup_fence_retry", {{"error", s.ToString()},
                                              {"attempt", attempt}});
    }
    sleep(absl::Milliseconds(100));
  }
}

// ---------------------------------------------------------------------------
// Backup side.

absl::Status ApplyReplicationEntry(VariableStore* store,
                                   const v1::ReplicationEntry& e) {
  using Entry = v1::ReplicationEntry;
  switch (e.kind()) {
    case Entry::RESET:
      store->Clear();
      return absl::OkStatus();
    case Entry::CREATE: {
      std::optional<Caller> caller;
      if (!e.owner().empty()) caller = Caller{e.owner(), Role::kCoordinator};
      return store->Create(e.spec(), caller).status();
    }
    case Entry::INSTALL: {
      STRATA_ASSIGN_OR_RETURN(
          std::shared_ptr<Variable> v,
          Variable::FromReplica(e, store->options().max_variable_bytes,
                                store->options().device));
      store->Install(std::move(v), e.owner());
      return absl::OkStatus();
    }
    default:
      break;
  }
  absl::StatusOr<std::shared_ptr<Variable>> v = store->Get(e.variable());
  if (absl::IsNotFound(v.status())) return absl::OkStatus();
  if (!v.ok()) return v.status();
  const PushMeta meta = PushMetaFromEntry(e);
  switch (e.kind()) {
    case Entry::PUSH_DENSE: {
      // With delay compensation the backup applies the gradient its
      // primary corrected, so that the two stay equal to the bit.
      ReplicatedCorrection correction;
      if (e.delay_compensated()) {
        if (e.compensated().size() != e.data().size()) {
          return absl::DataLossError(absl::StrCat(
              "replicated push to variable '", e.variable(), "' has a ",
              e.compensated().size(), "-byte compensated gradient for a ",
              e.data().size(), "-byte gradient"));
        }
        correction.compensated = e.compensated().data();
      }
      // The entry comes off the wire: its size and tag are checked as the
      // primary checked its push (the values were, there).
      if (e.data().size() != (*v)->byte_size()) {
        return absl::DataLossError(absl::StrCat(
            "replicated push to variable '", e.variable(), "' has ",
            e.data().size(), " bytes, the variable ", (*v)->byte_size()));
      }
      STRATA_RETURN_IF_ERROR((*v)->CheckPushMeta(meta));
      absl::StatusOr<PushOutcome> outcome = (*v)->PushCheckedDense(
          meta, e.data().data(), /*staged=*/nullptr, &correction);
      // Counted as on the primary (bytes: the float32 gradient's), so that
      // a promoted backup's statistics, the staleness among them, cover
      // the pushes from before it took over.
      if (outcome.ok()) {
        store->RecordPush(*outcome, static_cast<int64_t>(e.data().size()));
      }
      return outcome.status();
    }
    case Entry::PUSH_ROWS:
      return (*v)->PushRows(meta, e.ids(), e.data().data(), e.data().size())
          .status();
    case Entry::ASSIGN:
      return (*v)->Assign(e.data().data(), e.data().size()).status();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("replication entry ", e.seq(), ": unknown kind ",
                       static_cast<int>(e.kind())));
  }
}

ReplicationServiceImpl::ReplicationServiceImpl(VariableStore* store,
                                               ReplicaHooks hooks,
                                               Logger* logger)
    : store_(store), hooks_(std::move(hooks)), logger_(logger) {}

grpc::Status ReplicationServiceImpl::Replicate(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::ReplicationAck, v1::ReplicationFrame>*
        stream) {
  if (!hooks_.is_backup()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this replica is not a backup now");
  }
  v1::ReplicationFrame frame;
  std::string primary;
  bool opened = false;
  bool failed = false;
  grpc::Status result = grpc::Status::OK;
  while (stream->Read(&frame)) {
    if (!hooks_.is_backup()) {
      // This replica took the task over from a primary that hung.
      result = grpc::Status(grpc::StatusCode::ABORTED,
                            "this replica took the task over");
      break;
    }
    if (!opened) {
      primary = frame.primary_incarnation();
      hooks_.stream_opened(primary);
      opened = true;
    }
    v1::ReplicationAck ack;
    for (const v1::ReplicationEntry& e : frame.entries()) {
      absl::Status s = ApplyReplicationEntry(store_, e);
      if (!s.ok()) {
        failed = true;
        ack.set_error(absl::StrCat("entry ", e.seq(), " (",
                                   v1::ReplicationEntry::Kind_Name(e.kind()),
                                   " ", e.variable(), "): ", s.ToString()));
        logger_->Error("replication_apply_failed", {{"error", ack.error()}});
        break;
      }
      ack.set_applied(e.seq());
    }
    if (!stream->Write(ack) || failed) break;
  }
  if (failed) {
    result = grpc::Status(grpc::StatusCode::DATA_LOSS,
                          "the backup could not apply an entry");
  }
  (void)ctx;
  if (opened) hooks_.stream_closed(primary, failed);
  return result;
}

grpc::Status ReplicationServiceImpl::AttachBackup(
    grpc::ServerContext*, const v1::AttachBackupRequest* req,
    v1::AttachBackupResponse* resp) {
  absl::StatusOr<std::string> primary = hooks_.attach(*req);
  if (!primary.ok()) return ToGrpcStatus(primary.status());
  resp->set_primary_incarnation(*primary);
  return grpc::Status::OK;
}

grpc::Status ReplicationServiceImpl::ReplicaStatus(
    grpc::ServerContext*, const v1::ReplicaStatusRequest*,
    v1::ReplicaStatusResponse* resp) {
  *resp = hooks_.status();
  return grpc::Status::OK;
}

}  // namespace strata

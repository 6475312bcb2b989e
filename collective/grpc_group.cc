#include "collective/grpc_group.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "collective/collective.h"
#include "collective/mailbox.h"
#include "common/status_macros.h"
#include "proto/chunk_codec.h"
#include "rpc/grpc_status.h"

namespace strata {
namespace collective {
namespace internal {
namespace {

constexpr char kDeliverMethod[] = "/strata.v1.WorkerService/Deliver";

// How long the retry of a send that found no connection waits for one.
constexpr absl::Duration kConnectRetry = absl::Seconds(2);

std::chrono::system_clock::time_point ToChrono(absl::Time t) {
  return absl::ToChronoTime(t);
}

}  // namespace

PeerLinks::PeerLinks(const std::vector<std::string>& peers,
                     int channels_per_peer, const ClientSecurity& security) {
  const int channels = std::max(1, channels_per_peer);
  for (const std::string& peer : peers) {
    std::vector<std::unique_ptr<grpc::GenericStub>> per_peer;
    for (int c = 0; c < channels; ++c) {
      grpc::ChannelArguments args;
      // Each channel its own TCP connection, fresh for each group (a
      // previous group's connection to a dead peer may sit in backoff).
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("strata.collective_channel", c);
      // No transparent retries: a retry would re-read the sender's buffer
      // after the collective may have moved on.
      args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
      args.SetMaxReceiveMessageSize(4 << 20);
      ApplyDataPlaneChannelArgs(&args);
      auto channel = CreateChannel(peer, security, args);
      if (c == 0) stubs.push_back(v1::WorkerService::NewStub(channel));
      per_peer.push_back(std::make_unique<grpc::GenericStub>(channel));
    }
    generic.push_back(std::move(per_peer));
  }
}

GrpcGroup::GrpcGroup(int64_t group, int rank, std::vector<std::string> peers,
                     const CollectiveOptions& options,
                     const WorkerServerOptions& server_options,
                     const PeerLinks* links, grpc::CompletionQueue* cq,
                     std::weak_ptr<Mailbox> mailbox, Logger* logger)
    : group_(group),
      rank_(rank),
      peers_(std::move(peers)),
      options_(options),
      max_message_bytes_(server_options.max_message_bytes),
      max_in_flight_(std::max(1, server_options.max_sends_in_flight)),
      notice_timeout_(server_options.abort_notice_timeout),
      links_(links),
      cq_(cq),
      mailbox_(std::move(mailbox)),
      logger_(logger),
      counter_(std::make_shared<SliceCounter>()),
      queue_(peers_.size()),
      in_flight_(peers_.size(), 0),
      next_channel_(peers_.size(), 0) {}

absl::Status GrpcGroup::Send(int peer, const std::string& key,
                             absl::Span<const char> data) {
  if (peer < 0 || peer >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "send '", key, "': peer ", peer, " outside [0, ", size(), ")"));
  }
  if (key.empty()) {
    return absl::InvalidArgumentError("send: empty key");
  }
  const int64_t bytes = static_cast<int64_t>(data.size() + key.size());
  if (bytes + kHeaderAllowance > max_message_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "send '", key, "': ", data.size(),
        " bytes do not fit in a message (max_message_bytes ",
        max_message_bytes_, ")"));
  }
  auto call = std::make_shared<Call>();
  call->group = this;
  call->peer = peer;
  call->key = key;
  call->ctx.set_wait_for_ready(false);
  call->deadline = absl::Now() + options_.timeout;
  call->ctx.set_deadline(ToChrono(call->deadline));
  call->request = EncodeMessage(group_, rank_, key, data, counter_);
  std::vector<std::shared_ptr<Call>> start;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (!send_error_.ok() || aborted_) {
      status = Failure();
    } else {
      call->channel = next_channel_[peer]++ % links_->generic[peer].size();
      queue_[peer].push_back(call);
      PopStartable(peer, &start);
    }
  }
  for (auto& c : start) StartCall(c);
  return status;
}

absl::Status GrpcGroup::Take(int peer, const std::string& key, size_t bytes,
                             absl::Time deadline, DecodedMessage* msg) {
  const std::pair<int, std::string> id(peer, key);
  {
    absl::MutexLock lock(&mu_);
    for (;;) {
      if (aborted_) return Failure();
      auto it = arrived_.find(id);
      if (it != arrived_.end()) {
        *msg = std::move(it->second);
        arrived_.erase(it);
        break;
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "rank ", rank_, " of group ", group_, " waiting for '", key,
            "' from rank ", peer, " (", peers_[peer],
            "): deadline exceeded"));
      }
      cv_.WaitWithDeadline(&mu_, deadline);
    }
  }
  if (msg->data_size != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recv '", key, "' from rank ", peer, ": message has ", msg->data_size,
        " bytes, the destination ", bytes));
  }
  return absl::OkStatus();
}

absl::Status GrpcGroup::Recv(int peer, const std::string& key,
                             absl::Span<char> out, absl::Time deadline) {
  if (peer < 0 || peer >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recv '", key, "': peer ", peer, " outside [0, ", size(), ")"));
  }
  DecodedMessage msg;
  STRATA_RETURN_IF_ERROR(Take(peer, key, out.size(), deadline, &msg));
  msg.CopyDataTo(out.data());
  return absl::OkStatus();
}

absl::Status GrpcGroup::RecvReduce(int peer, const std::string& key,
                                   DType dtype, absl::Span<char> inout,
                                   absl::Time deadline) {
  // The same checks, in the same order, as Transport::RecvReduce's default.
  STRATA_RETURN_IF_ERROR(CheckRecvReduceArgs(key, dtype, inout.size()));
  if (peer < 0 || peer >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recv '", key, "': peer ", peer, " outside [0, ", size(), ")"));
  }
  DecodedMessage msg;
  STRATA_RETURN_IF_ERROR(Take(peer, key, inout.size(), deadline, &msg));
  // The message's slices keep the received memory until `msg` goes.
  msg.AddDataTo(dtype, inout.data());
  return absl::OkStatus();
}

absl::Status GrpcGroup::Flush(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    for (;;) {
      if (total_in_flight_ == 0 && QueuesEmpty()) break;
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "flush of rank ", rank_, " of group ", group_, ": ",
            total_in_flight_, " message(s) still in flight"));
      }
      cv_.WaitWithDeadline(&mu_, deadline);
    }
  }
  if (!counter_->WaitZero(deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "flush of rank ", rank_, " of group ", group_,
        ": gRPC still holds sent buffers"));
  }
  absl::MutexLock lock(&mu_);
  if (!send_error_.ok() || aborted_) return Failure();
  return absl::OkStatus();
}

void GrpcGroup::Abort(int by_rank, const std::string& reason, bool tell_peers) {
  std::vector<std::shared_ptr<Call>> dropped;
  std::vector<std::shared_ptr<Call>> cancel;
  std::vector<std::pair<int, std::shared_ptr<Notice>>> notices;
  std::map<std::pair<int, std::string>, DecodedMessage> unread;
  std::string message;
  {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_message_ = absl::StrCat("group ", group_, " aborted by rank ",
                                  by_rank, ": ", reason);
    message = abort_message_;
    for (auto& q : queue_) {
      for (auto& c : q) dropped.push_back(std::move(c));
      q.clear();
    }
    for (const auto& [tag, call] : live_) cancel.push_back(call);
    unread.swap(arrived_);
    if (tell_peers && !closed_) {
      // Counted in flight before they touch the links (see class comment).
      for (int p = 0; p < size(); ++p) {
        if (p == rank_) continue;
        auto notice = std::make_shared<Notice>();
        notice->group = this;
        notice->request.set_group(group_);
        notice->request.set_from_rank(rank_);
        notice->request.set_reason(reason);
        notice->ctx.set_wait_for_ready(false);
        notice->ctx.set_deadline(ToChrono(absl::Now() + notice_timeout_));
        notices_.emplace(notice.get(), notice);
        notices.emplace_back(p, std::move(notice));
      }
    }
    cv_.SignalAll();
  }
  if (logger_ != nullptr) {
    logger_->Warning("collective_group_aborted",
                     {{"group", group_}, {"rank", rank_},
                      {"reason", message}});
  }
  dropped.clear();  // releases their slices (outside the lock)
  for (auto& c : cancel) c->ctx.TryCancel();
  for (auto& [peer, notice] : notices) StartNotice(notice, peer);
}

absl::Status GrpcGroup::Deliver(DecodedMessage msg) {
  if (msg.from_rank < 0 || msg.from_rank >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("message '", msg.key, "' for group ", group_,
                     " from rank ", msg.from_rank, ", outside [0, ", size(),
                     ")"));
  }
  std::pair<int, std::string> id(msg.from_rank, msg.key);
  absl::MutexLock lock(&mu_);
  if (aborted_) return Aborted();
  if (closed_) {
    return absl::AbortedError(
        absl::StrCat("group ", group_, " is closed on rank ", rank_));
  }
  auto [it, inserted] = arrived_.try_emplace(std::move(id), std::move(msg));
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("message '", it->first.second, "' from rank ",
                     it->first.first, " is already waiting in group ",
                     group_));
  }
  cv_.SignalAll();
  return absl::OkStatus();
}

void GrpcGroup::Close() {
  std::vector<std::shared_ptr<Call>> dropped;
  std::vector<std::shared_ptr<Call>> cancel;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    for (auto& q : queue_) {
      for (auto& c : q) dropped.push_back(std::move(c));
      q.clear();
    }
    for (const auto& [tag, call] : live_) cancel.push_back(call);
    arrived_.clear();
  }
  dropped.clear();
  for (auto& c : cancel) c->ctx.TryCancel();
  {
    absl::MutexLock lock(&mu_);
    // Cancelled calls end promptly; notices within their own deadline.
    while (total_in_flight_ > 0 || !notices_.empty()) cv_.Wait(&mu_);
  }
  counter_->WaitZero(absl::Now() + absl::Seconds(10));
  if (auto mailbox = mailbox_.lock()) mailbox->Forget(group_, this);
}

void GrpcGroup::OnRpcDone(Rpc* rpc) {
  std::shared_ptr<Call> call;
  std::shared_ptr<Notice> notice;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = live_.find(rpc); it != live_.end()) {
      call = std::move(it->second);
      live_.erase(it);
    } else if (auto n = notices_.find(rpc); n != notices_.end()) {
      notice = std::move(n->second);
      notices_.erase(n);
      cv_.SignalAll();
    }
  }
  if (call != nullptr) OnCallDone(std::move(call));
}

bool GrpcGroup::QueuesEmpty() const {
  for (const auto& q : queue_) {
    if (!q.empty()) return false;
  }
  return true;
}

void GrpcGroup::PopStartable(int peer,
                             std::vector<std::shared_ptr<Call>>* start) {
  auto& q = queue_[peer];
  while (in_flight_[peer] < max_in_flight_ && !q.empty()) {
    ++in_flight_[peer];
    ++total_in_flight_;
    live_.emplace(q.front().get(), q.front());
    start->push_back(std::move(q.front()));
    q.pop_front();
  }
}

void GrpcGroup::StartCall(const std::shared_ptr<Call>& call) {
  call->reader = links_->generic[call->peer][call->channel]->PrepareUnaryCall(
      &call->ctx, kDeliverMethod, call->request, cq_);
  call->reader->StartCall();
  call->reader->Finish(&call->response, &call->status,
                       static_cast<Rpc*>(call.get()));
}

void GrpcGroup::OnCallDone(std::shared_ptr<Call> call) {
  // A send that found no connection (UNAVAILABLE: a connect that failed,
  // which a loaded machine can give even for a live peer) is made once
  // more, waiting up to kConnectRetry for the channel to connect; it takes
  // the first attempt's place in flight. A peer that is gone fails it
  // again, so the group aborts at most kConnectRetry later.
  if (call->status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      call->attempt == 0) {
    std::shared_ptr<Call> retry;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      if (!aborted_ && !closed_ && send_error_.ok() && now < call->deadline) {
        retry = std::make_shared<Call>();
        retry->group = this;
        retry->peer = call->peer;
        retry->channel = call->channel;
        retry->deadline = call->deadline;
        retry->attempt = 1;
        retry->first_status = call->status;
        retry->key = call->key;
        retry->request = call->request;
        retry->ctx.set_wait_for_ready(true);
        retry->ctx.set_deadline(
            ToChrono(std::min(call->deadline, now + kConnectRetry)));
        live_.emplace(retry.get(), retry);
      }
    }
    if (retry != nullptr) {
      call.reset();
      StartCall(retry);
      return;
    }
  }
  call->request.Clear();  // gRPC is done with the payload
  std::vector<std::shared_ptr<Call>> start;
  absl::Status error;
  bool abort_now = false;
  {
    absl::MutexLock lock(&mu_);
    --in_flight_[call->peer];
    --total_in_flight_;
    // The retry of a send whose first attempt did reach the peer (the
    // connection broke before the answer) finds the message there.
    const bool delivered_before =
        call->attempt > 0 &&
        call->status.error_code() == grpc::StatusCode::ALREADY_EXISTS;
    if (!call->status.ok() && !delivered_before) {
      // A retry that failed too reports the first attempt's status.
      const absl::Status s = FromGrpcStatus(
          call->attempt > 0 ? call->first_status : call->status);
      const std::string again =
          call->attempt > 0
              ? absl::StrCat(" (retried, waiting for a connection: ",
                             FromGrpcStatus(call->status).message(), ")")
              : std::string();
      error = absl::Status(
          s.code(), absl::StrCat("deliver '", call->key, "' to rank ",
                                 call->peer, " (", peers_[call->peer],
                                 "): ", s.message(), again));
      // Failures after an abort or close are their consequence
      // (cancellations).
      if (!aborted_ && !closed_ && send_error_.ok()) send_error_ = error;
      abort_now = !aborted_ && !closed_;
    } else if (!aborted_) {
      PopStartable(call->peer, &start);
    }
    cv_.SignalAll();
  }
  call.reset();  // outside the lock
  if (abort_now) Abort(rank_, error.ToString(), /*tell_peers=*/true);
  for (auto& c : start) StartCall(c);
}

void GrpcGroup::StartNotice(const std::shared_ptr<Notice>& notice, int peer) {
  notice->reader = links_->stubs[peer]->PrepareAsyncAbortGroup(
      &notice->ctx, notice->request, cq_);
  notice->reader->StartCall();
  notice->reader->Finish(&notice->response, &notice->status,
                         static_cast<Rpc*>(notice.get()));
}

Poller::Poller() : thread_([this] { Loop(); }) {}

Poller::~Poller() {
  cq_.Shutdown();
  thread_.join();
}

void Poller::Loop() {
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) {
    auto* rpc = static_cast<GrpcGroup::Rpc*>(tag);
    rpc->group->OnRpcDone(rpc);
  }
}

}  // namespace internal
}  // namespace collective
}  // namespace strata

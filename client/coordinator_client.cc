#include "client/coordinator_client.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "grpcpp/create_channel.h"
#include "rpc/grpc_status.h"

namespace strata {
namespace {

void SetDeadline(grpc::ClientContext* ctx, absl::Duration deadline) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(deadline));
}

}  // namespace

std::string NewIncarnation() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd());
  return absl::StrFormat("%016x", gen());
}

std::unique_ptr<CoordinatorClient> CoordinatorClient::Connect(
    const std::string& target, absl::Duration retry_for,
    const ClientSecurity& security, absl::Duration call_deadline) {
  return std::unique_ptr<CoordinatorClient>(
      new CoordinatorClient(target, retry_for, security, call_deadline));
}

CoordinatorClient::CoordinatorClient(std::string target,
                                     absl::Duration retry_for,
                                     const ClientSecurity& security,
                                     absl::Duration call_deadline)
    : target_(std::move(target)),
      retry_for_(retry_for),
      call_deadline_(call_deadline) {
  grpc::ChannelArguments args;
  // Reconnect quickly after a coordinator restart: a failed connection
  // makes the channel resolve its target again before it reconnects, and
  // gRPC's default spaces resolutions 30 s apart (a restarted coordinator
  // went unheard for 5-10 s); the coordinator is on the cluster's network,
  // so a connection attempt every 250 ms while it is down costs nothing.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 100);
  for (absl::string_view one :
       absl::StrSplit(target_, ',', absl::SkipWhitespace())) {
    channels_.push_back(CreateChannel(
        std::string(absl::StripAsciiWhitespace(one)), security, args));
  }
  if (channels_.empty()) {
    // An empty target fails every call as the channel does.
    channels_.push_back(CreateChannel(target_, security, args));
  }
  for (const auto& channel : channels_) {
    stubs_.push_back(v1::CoordinatorService::NewStub(channel));
  }
  if (stubs_.size() > 1) {
    call_deadline_ = std::min(call_deadline_, kReplicaCallDeadline);
  }
}

template <typename Fn>
absl::Status CoordinatorClient::Once(Fn fn, bool repeatable) {
  const size_t index = current_.load() % stubs_.size();
  grpc::ClientContext ctx;
  SetDeadline(&ctx, call_deadline_);
  absl::Status s = FromGrpcStatus(fn(&ctx, stubs_[index].get()));
  if (s.code() == absl::StatusCode::kUnavailable) {
    // A channel whose connection failed waits, idle, for a call to ask for
    // a new one, and calls that fail fast do not always ask (a restarted
    // coordinator went unnoticed for 5-10 s): ask now, so that it
    // reconnects within its backoff (100-250 ms) of the coordinator
    // listening again.
    channels_[index]->GetState(/*try_to_connect=*/true);
  }
  if (repeatable && s.code() == absl::StatusCode::kCancelled) {
    // This client never cancels its calls: the server went away mid-call
    // (a restart, or a standby handing its port to the leader it became).
    s = absl::UnavailableError(absl::StrCat(
        "the coordinator went away during the call (", s.message(), ")"));
  }
  // The epoch comes with the initial metadata, with an answer or an error.
  // (or, for an answer that is only an error, with the trailing one).
  absl::string_view text;
  for (const auto* metadata :
       {&ctx.GetServerInitialMetadata(), &ctx.GetServerTrailingMetadata()}) {
    auto it = metadata->find(kCoordinatorEpochHeader);
    if (it != metadata->end()) {
      text = absl::string_view(it->second.data(), it->second.size());
      break;
    }
  }
  int64_t epoch = 0;
  if (!text.empty() && absl::SimpleAtoi(text, &epoch)) {
    int64_t seen = epoch_.load();
    while (epoch > seen && !epoch_.compare_exchange_weak(seen, epoch)) {
    }
    if (epoch < seen) {
      s = absl::UnavailableError(absl::StrCat(
          "coordinator ", index, " answered as epoch ", epoch,
          ", deposed by epoch ", seen, "; its answer is discarded"));
    }
  }
  // A replica that is down, a standby, or one that does not answer in
  // time (paused): the next attempt goes to the next one.
  if ((s.code() == absl::StatusCode::kUnavailable ||
       (repeatable && s.code() == absl::StatusCode::kDeadlineExceeded)) &&
      stubs_.size() > 1) {
    size_t expected = index;
    current_.compare_exchange_strong(expected, (index + 1) % stubs_.size());
  }
  return s;
}

template <typename Fn>
absl::Status CoordinatorClient::Call(Fn fn, bool repeatable) {
  const absl::Time give_up = absl::Now() + retry_for_;
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    // Every coordinator is tried once before pausing.
    absl::Status s;
    for (size_t i = 0; i < stubs_.size(); ++i) {
      s = Once(fn, repeatable);
      // With replicas, one that did not answer in time is passed over too
      // when the call may be repeated (reports are idempotent, and a step
      // leased twice goes back to the queue; SubmitJob is not).
      const bool next =
          s.code() == absl::StatusCode::kUnavailable ||
          (repeatable && s.code() == absl::StatusCode::kDeadlineExceeded &&
           stubs_.size() > 1);
      if (!next) return s;
    }
    if (absl::Now() >= give_up) return s;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, kMaxRetryPause);
  }
}

absl::StatusOr<v1::RegisterResponse> CoordinatorClient::Register(
    const v1::RegisterRequest& r) {
  v1::RegisterResponse resp;
  absl::Status s = Call(
      [&](grpc::ClientContext* ctx, v1::CoordinatorService::Stub* stub) { return stub->Register(ctx, r, &resp); });
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> CoordinatorClient::Heartbeat(
    const v1::HeartbeatRequest& r) {
  // No retry loop: the agent's next beat is the retry (at the next
  // coordinator after UNAVAILABLE).
  v1::HeartbeatResponse resp;
  absl::Status s =
      Once([&](grpc::ClientContext* ctx, v1::CoordinatorService::Stub* stub) {
        return stub->Heartbeat(ctx, r, &resp);
      });
  if (!s.ok()) return s;
  return resp;
}

absl::Status CoordinatorClient::Deregister(const v1::DeregisterRequest& r) {
  v1::DeregisterResponse resp;
  return Once([&](grpc::ClientContext* ctx,
                  v1::CoordinatorService::Stub* stub) {
    return stub->Deregister(ctx, r, &resp);
  });
}

absl::StatusOr<v1::GetClusterSpecResponse> CoordinatorClient::GetClusterSpec() {
  v1::GetClusterSpecResponse resp;
  absl::Status s = Call([&](grpc::ClientContext* ctx, v1::CoordinatorService::Stub* stub) {
    return stub->GetClusterSpec(ctx, v1::GetClusterSpecRequest(), &resp);
  });
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::SubmitJobResponse> CoordinatorClient::SubmitJob(
    const v1::SubmitJobRequest& r) {
  v1::SubmitJobResponse resp;
  // Not repeated after a deadline: the job may have started.
  absl::Status s = Call(
      [&](grpc::ClientContext* ctx, v1::CoordinatorService::Stub* stub) {
        return stub->SubmitJob(ctx, r, &resp);
      },
      /*repeatable=*/false);
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::JobStatus> CoordinatorClient::GetJob() {
  v1::JobStatus resp;
  absl::Status s = Call([&](grpc::ClientContext* ctx, v1::CoordinatorService::Stub* stub) {
    return stub->GetJob(ctx, v1::GetJobRequest(), &resp);
  });
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::WorkItem> CoordinatorClient::GetWork(
    const v1::GetWorkRequest& r) {
  v1::WorkItem resp;
  absl::Status s = Call(
      [&](grpc::ClientContext* ctx, v1::CoordinatorService::Stub* stub) { return stub->GetWork(ctx, r, &resp); });
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::ReportWorkResponse> CoordinatorClient::ReportWork(
    const v1::ReportWorkRequest& r) {
  v1::ReportWorkResponse resp;
  absl::Status s = Call(
      [&](grpc::ClientContext* ctx, v1::CoordinatorService::Stub* stub) { return stub->ReportWork(ctx, r, &resp); });
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::ReportWorkBatchResponse> CoordinatorClient::ReportWorkBatch(
    const v1::ReportWorkBatchRequest& r) {
  v1::ReportWorkBatchResponse resp;
  absl::Status s = Call([&](grpc::ClientContext* ctx, v1::CoordinatorService::Stub* stub) {
    return stub->ReportWorkBatch(ctx, r, &resp);
  });
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::GroupAssignment> CoordinatorClient::JoinGroup(
    const v1::JoinGroupRequest& r) {
  v1::GroupAssignment resp;
  absl::Status s = Call(
      [&](grpc::ClientContext* ctx, v1::CoordinatorService::Stub* stub) { return stub->JoinGroup(ctx, r, &resp); });
  if (!s.ok()) return s;
  return resp;
}

MembershipAgent::MembershipAgent(Coordinator* client, v1::TaskId task,
                                 std::string address, std::string incarnation,
                                 Logger* logger)
    : client_(client),
      task_(std::move(task)),
      address_(std::move(address)),
      incarnation_(std::move(incarnation)),
      logger_(logger) {}

MembershipAgent::~MembershipAgent() { Stop(); }

absl::Status MembershipAgent::RegisterOnce() {
  v1::RegisterRequest req;
  *req.mutable_task() = task_;
  req.set_address(address_);
  req.set_incarnation(incarnation_);
  req.set_exclusive(exclusive_);
  req.set_replaces(replaces_);
  req.set_only_if_failed(only_if_failed_);
  auto resp = client_->Register(req);
  if (!resp.ok()) return resp.status();
  generation_ = resp->generation();
  if (resp->heartbeat_ms() > 0) heartbeat_ms_ = resp->heartbeat_ms();
  logger_->Log(LogLevel::kInfo, "registered",
               {{"coordinator", client_->target()},
                {"generation", resp->generation()},
                {"incarnation", incarnation_}});
  return absl::OkStatus();
}

void MembershipAgent::SetExclusive(std::string replaces,
                                   std::function<void()> on_lost,
                                   bool only_if_failed) {
  exclusive_ = true;
  replaces_ = std::move(replaces);
  only_if_failed_ = only_if_failed;
  on_lost_ = std::move(on_lost);
}

absl::Status MembershipAgent::Fence(const std::string& backup) {
  v1::HeartbeatRequest req;
  *req.mutable_task() = task_;
  req.set_incarnation(incarnation_);
  req.set_fence_incarnation(backup);
  auto resp = client_->Heartbeat(req);
  if (!resp.ok()) return resp.status();
  generation_ = resp->generation();
  return absl::OkStatus();
}

absl::Status MembershipAgent::Start() {
  absl::Status s = RegisterOnce();
  if (!s.ok()) return s;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void MembershipAgent::Loop() {
  // After a beat that did not arrive (the coordinator down or restarting),
  // the next comes sooner: 100 ms, doubling up to kMaxRetryPause, so that
  // a restarted coordinator hears from us soon after it listens.
  absl::Duration wait = absl::Milliseconds(heartbeat_ms_.load());
  bool missed_before = false;
  while (!stop_.WaitForNotificationWithTimeout(wait)) {
    const absl::Duration interval = absl::Milliseconds(heartbeat_ms_.load());
    v1::HeartbeatRequest req;
    *req.mutable_task() = task_;
    req.set_incarnation(incarnation_);
    auto resp = client_->Heartbeat(req);
    if (resp.ok()) {
      generation_ = resp->generation();
      group_ = resp->group();
      wait = interval;
      missed_before = false;
      continue;
    }
    const bool missed =
        resp.status().code() == absl::StatusCode::kUnavailable ||
        resp.status().code() == absl::StatusCode::kDeadlineExceeded;
    wait = missed ? std::min({interval, kMaxRetryPause,
                              missed_before ? wait * 2
                                            : absl::Milliseconds(100)})
                  : interval;
    missed_before = missed;
    if (resp.status().code() == absl::StatusCode::kNotFound) {
      // The coordinator restarted or declared us failed: join again.
      logger_->Log(LogLevel::kWarning, "reregistering",
                   {{"reason", std::string(resp.status().message())}});
      absl::Status s = RegisterOnce();
      if (absl::IsAlreadyExists(s) && exclusive_) {
        // Another replica holds the task now.
        logger_->Log(LogLevel::kWarning, "replaced",
                     {{"reason", std::string(s.message())}});
        if (on_lost_) on_lost_();
        return;
      }
      if (!s.ok()) {
        logger_->Log(LogLevel::kWarning, "register_failed",
                     {{"error", s.ToString()}});
      }
    }
    // UNAVAILABLE and others: the next beat retries.
  }
}

void MembershipAgent::Stop() {
  if (!thread_.joinable()) return;
  stop_.Notify();
  thread_.join();
  v1::DeregisterRequest req;
  *req.mutable_task() = task_;
  req.set_incarnation(incarnation_);
  (void)client_->Deregister(req);
}

}  // namespace strata

#include "server/parameter_service_impl.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "proto/chunk_codec.h"
#include "server/requests.h"
#include "server/shared_exchange.h"
#include "server/shared_regions.h"

namespace strata {
namespace {

std::string CodeName(absl::StatusCode code) {
  return absl::StatusCodeToString(code);
}

// Shared by Push and Assign: receives a TensorChunk stream into one buffer.
// Subclasses validate the header (allocating the payload) and consume the
// completed payload.
class ChunkedReceiveReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  ChunkedReceiveReactor(ParameterServiceImpl* service, const char* method,
                        grpc::ByteBuffer* response)
      : service_(service),
        method_(method),
        response_(response),
        start_(absl::Now()) {}

  void Begin() { StartRead(&message_); }
  // Fails the call before reading (authentication, role).
  void Reject(const absl::Status& status) { Complete(status); }
  void set_caller(std::optional<Caller> caller) { caller_ = std::move(caller); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (!header_seen_) {
        Complete(absl::InvalidArgumentError(
            absl::StrCat(method_, ": the stream ended before a header chunk")));
        return;
      }
      if (received_ != payload_bytes_) {
        Complete(absl::InvalidArgumentError(absl::StrCat(
            method_, " of variable '", name_, "': the stream ended after ",
            received_, " of ", payload_bytes_, " payload bytes")));
        return;
      }
      std::string response;
      absl::Status s = OnPayload(payload_ ? payload_->data() : nullptr,
                                 payload_bytes_, &response);
      if (s.ok()) *response_ = StringToByteBuffer(std::move(response));
      Complete(s);
      return;
    }
    absl::Status s = Consume();
    if (!s.ok()) {
      Complete(s);
      return;
    }
    message_.Clear();
    StartRead(&message_);
  }

  void OnDone() override { delete this; }

 protected:
  // Parses and validates the header; sets name_ and payload_bytes_.
  virtual absl::Status OnHeader(const std::string& header) = 0;
  // Consumes the complete payload; fills the serialized response.
  virtual absl::Status OnPayload(const char* data, size_t size,
                                 std::string* response) = 0;

  ParameterServiceImpl* const service_;
  const char* const method_;
  std::optional<Caller> caller_;
  std::string name_;
  uint64_t payload_bytes_ = 0;

 private:
  absl::Status Consume() {
    DecodedChunk chunk;
    STRATA_RETURN_IF_ERROR(DecodeChunk(message_, &chunk));
    if (!header_seen_) {
      if (!chunk.has_header) {
        return absl::InvalidArgumentError(
            absl::StrCat(method_, ": the first chunk carries no header"));
      }
      header_seen_ = true;
      STRATA_RETURN_IF_ERROR(OnHeader(chunk.header));
      if (payload_bytes_ > service_->store()->options().max_variable_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            method_, " of variable '", name_, "': payload of ", payload_bytes_,
            " bytes is above the server limit of ",
            service_->store()->options().max_variable_bytes));
      }
      payload_ = service_->buffers()->Acquire(payload_bytes_);
    } else if (chunk.has_header) {
      return absl::InvalidArgumentError(absl::StrCat(
          method_, " of variable '", name_, "': header repeated in a chunk"));
    }
    if (chunk.data_size == 0) return absl::OkStatus();
    if (static_cast<uint64_t>(chunk.offset) != received_) {
      return absl::InvalidArgumentError(absl::StrCat(
          method_, " of variable '", name_, "': chunk at offset ",
          chunk.offset, ", expected ", received_));
    }
    if (received_ + chunk.data_size > payload_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat(
          method_, " of variable '", name_, "': chunks carry more than the ",
          payload_bytes_, " payload bytes the header announced"));
    }
    chunk.CopyDataTo(payload_->data() + received_);
    received_ += chunk.data_size;
    return absl::OkStatus();
  }

  void Complete(const absl::Status& status) {
    if (finished_) return;
    finished_ = true;
    service_->Record(method_, status, absl::Now() - start_,
                     static_cast<int64_t>(received_), 0);
    if (!status.ok()) {
      service_->logger()->Log(LogLevel::kWarning, "rpc_error",
                              {{"method", method_},
                               {"variable", name_},
                               {"code", CodeName(status.code())},
                               {"message", std::string(status.message())}});
    }
    payload_.reset();
    Finish(ToGrpcStatus(status));
  }

  grpc::ByteBuffer* const response_;
  const absl::Time start_;
  grpc::ByteBuffer message_;
  bool header_seen_ = false;
  bool finished_ = false;
  uint64_t received_ = 0;
  std::shared_ptr<Buffer> payload_;
};

class PushReactor final : public ChunkedReceiveReactor {
 public:
  PushReactor(ParameterServiceImpl* service, grpc::ByteBuffer* response)
      : ChunkedReceiveReactor(service, "Push", response) {}

 private:
  absl::Status OnHeader(const std::string& bytes) override {
    if (!header_.ParseFromString(bytes)) {
      return absl::InvalidArgumentError("Push: the header is not a PushHeader");
    }
    name_ = header_.name();
    STRATA_RETURN_IF_ERROR(service_->CheckOwner(caller_, name_));
    STRATA_ASSIGN_OR_RETURN(variable_, service_->store()->Get(name_));
    STRATA_ASSIGN_OR_RETURN(payload_bytes_,
                            ValidatePushHeader(header_, *variable_));
    return absl::OkStatus();
  }

  absl::Status OnPayload(const char* data, size_t size,
                         std::string* response) override {
    STRATA_ASSIGN_OR_RETURN(PushOutcome outcome,
                            ApplyPush(header_, variable_.get(), data, size));
    service_->store()->RecordPush(outcome, static_cast<int64_t>(size));
    v1::PushResponse resp;
    resp.set_version(outcome.version);
    resp.set_duplicate(outcome.duplicate);
    resp.set_applied(outcome.applied);
    *response = resp.SerializeAsString();
    if (outcome.duplicate) {
      service_->logger()->Log(LogLevel::kInfo, "push_duplicate",
                              {{"variable", name_},
                               {"job", header_.tag().job()},
                               {"worker", header_.tag().worker()},
                               {"step", header_.tag().step()},
                               {"attempt", header_.tag().attempt()}});
    }
    return absl::OkStatus();
  }

  v1::PushHeader header_;
  std::shared_ptr<Variable> variable_;
};

class AssignReactor final : public ChunkedReceiveReactor {
 public:
  AssignReactor(ParameterServiceImpl* service, grpc::ByteBuffer* response)
      : ChunkedReceiveReactor(service, "Assign", response) {}

 private:
  absl::Status OnHeader(const std::string& bytes) override {
    if (!header_.ParseFromString(bytes)) {
      return absl::InvalidArgumentError(
          "Assign: the header is not an AssignHeader");
    }
    name_ = header_.name();
    STRATA_RETURN_IF_ERROR(service_->CheckOwner(caller_, name_));
    STRATA_ASSIGN_OR_RETURN(variable_, service_->store()->Get(name_));
    STRATA_ASSIGN_OR_RETURN(payload_bytes_,
                            ValidateAssignHeader(header_, *variable_));
    return absl::OkStatus();
  }

  absl::Status OnPayload(const char* data, size_t size,
                         std::string* response) override {
    STRATA_ASSIGN_OR_RETURN(int64_t version, variable_->Assign(data, size));
    v1::AssignResponse resp;
    resp.set_version(version);
    *response = resp.SerializeAsString();
    return absl::OkStatus();
  }

  v1::AssignHeader header_;
  std::shared_ptr<Variable> variable_;
};

// Waits, without holding a thread, until every variable satisfies
// (min_version, clock), then runs `done` with OK; or runs it with
// DEADLINE_EXCEEDED naming what it waited for a little before the caller's
// deadline (so that the caller hears why rather than a bare deadline), or
// after the server's maximum wait (options().max_pull_wait). `done` runs
// once, possibly on another thread before Start returns; the owner must
// outlive that call.
class ReadyWait {
 public:
  using Done = std::function<void(const absl::Status&, const std::string&)>;

  void Start(ParameterServiceImpl* service,
             const grpc::CallbackServerContext* ctx,
             std::vector<std::shared_ptr<Variable>> variables,
             int64_t min_version, int64_t clock, Done done) {
    service_ = service;
    waiting_ = std::move(variables);
    min_version_ = min_version;
    clock_ = clock;
    done_ = std::move(done);
    const absl::Time now = absl::Now();
    deadline_ = now + service->options().max_pull_wait;
    const absl::Time caller = absl::FromChrono(ctx->deadline());
    if (caller < deadline_) {
      deadline_ = caller - std::min(absl::Milliseconds(100), (caller - now) / 5);
    }
    Next();
  }

 private:
  // Waits on the first variable that is not ready; checks all again when it
  // becomes ready.
  void Next() {
    for (const auto& v : waiting_) {
      if (v->PullReady(min_version_, clock_)) continue;
      if (absl::Now() >= deadline_) {
        done_(absl::DeadlineExceededError(
                  absl::StrCat("pull timed out waiting: ",
                               v->WaitDescription(min_version_, clock_))),
              v->name());
        return;
      }
      // The waiter may run (and finish the owner) on another thread before
      // WaitForPull returns: nothing below may touch `this`.
      std::shared_ptr<Variable> waiting = v;
      DeadlineTimer* timer = service_->timer();
      const absl::Time deadline = deadline_;
      const int64_t min_version = min_version_;
      const int64_t clock = clock_;
      const std::string name = v->name();
      int64_t id = waiting->WaitForPull(
          min_version, clock, [this, name](absl::Status s) {
            s.ok() ? Next() : done_(s, name);
          });
      if (id != 0) {
        timer->Schedule(deadline, [waiting, id, min_version, clock]() {
          waiting->ExpireWaiter(
              id, absl::DeadlineExceededError(absl::StrCat(
                      "pull timed out waiting: ",
                      waiting->WaitDescription(min_version, clock))));
        });
      }
      return;
    }
    done_(absl::OkStatus(), "");
  }

  ParameterServiceImpl* service_ = nullptr;
  std::vector<std::shared_ptr<Variable>> waiting_;
  int64_t min_version_ = 0;
  int64_t clock_ = 0;
  absl::Time deadline_;
  Done done_;
};

// Server side of Pull and PullVariables: waits until the variables are
// ready (version, staleness bound), then streams snapshot buffers in chunks
// that alias them (no chunk spans two buffers), the header in the first.
class SnapshotStreamReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  SnapshotStreamReactor(ParameterServiceImpl* service,
                        grpc::CallbackServerContext* ctx, const char* method)
      : service_(service), ctx_(ctx), method_(method), start_(absl::Now()) {}

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "pull write failed"));
      return;
    }
    WriteNext();
  }

  void OnDone() override { delete this; }

  // Fails the call before it starts (authentication, role).
  void Reject(const absl::Status& status) { Fail(status, ""); }
  void set_caller(std::optional<Caller> caller) { caller_ = std::move(caller); }

 protected:
  // Called once every variable passed to WaitUntilReady is ready.
  virtual void OnReady() = 0;

  // Calls OnReady() when every variable satisfies (min_version, clock), or
  // fails as ReadyWait says.
  void WaitUntilReady(std::vector<std::shared_ptr<Variable>> variables,
                      int64_t min_version, int64_t clock) {
    wait_.Start(service_, ctx_, std::move(variables), min_version, clock,
                [this](const absl::Status& s, const std::string& name) {
                  s.ok() ? OnReady() : Fail(s, name);
                });
  }

  // Streams `buffers` (their bytes concatenated) after `header`.
  void Stream(std::string header,
              std::vector<std::shared_ptr<const Buffer>> buffers) {
    header_ = std::move(header);
    buffers_ = std::move(buffers);
    total_ = 0;
    for (const auto& b : buffers_) total_ += b->size();
    service_->store()->RecordPull(static_cast<int64_t>(total_));
    WriteNext();
  }

  void Fail(const absl::Status& s, const std::string& variable) {
    service_->Record(method_, s, absl::Now() - start_, 0, 0);
    service_->logger()->Log(LogLevel::kWarning, "rpc_error",
                            {{"method", method_},
                             {"variable", variable},
                             {"code", CodeName(s.code())},
                             {"message", std::string(s.message())}});
    Done(s);
  }

  ParameterServiceImpl* const service_;
  std::optional<Caller> caller_;

 private:
  void WriteNext() {
    const size_t chunk = service_->options().chunk_bytes;
    while (index_ < buffers_.size() && pos_ >= buffers_[index_]->size()) {
      ++index_;
      pos_ = 0;
    }
    if (sent_any_ && index_ >= buffers_.size()) {
      Done(absl::OkStatus());
      return;
    }
    if (index_ >= buffers_.size()) {
      // An empty payload: the header alone.
      message_ = EncodeChunk(header_, 0, nullptr, 0, nullptr);
    } else {
      const auto& buffer = buffers_[index_];
      const size_t n = std::min(chunk, buffer->size() - pos_);
      message_ = EncodeChunk(sent_any_ ? absl::string_view() : header_,
                             static_cast<int64_t>(offset_),
                             buffer->data() + pos_, n, buffer);
      pos_ += n;
      offset_ += n;
    }
    sent_any_ = true;
    if (offset_ >= total_) {
      service_->Record(method_, absl::OkStatus(), absl::Now() - start_, 0,
                       static_cast<int64_t>(total_));
      finished_ = true;
      StartWriteAndFinish(&message_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      StartWrite(&message_);
    }
  }

  void Done(const absl::Status& s) {
    if (finished_) return;
    finished_ = true;
    Finish(ToGrpcStatus(s));
  }

  grpc::CallbackServerContext* const ctx_;
  const char* const method_;
  const absl::Time start_;
  ReadyWait wait_;
  std::string header_;
  std::vector<std::shared_ptr<const Buffer>> buffers_;
  grpc::ByteBuffer message_;
  size_t total_ = 0;
  size_t index_ = 0;
  size_t pos_ = 0;
  size_t offset_ = 0;
  bool sent_any_ = false;
  bool finished_ = false;
};

class PullReactor final : public SnapshotStreamReactor {
 public:
  PullReactor(ParameterServiceImpl* service, grpc::CallbackServerContext* ctx)
      : SnapshotStreamReactor(service, ctx, "Pull") {}

  void Begin(const grpc::ByteBuffer& request) {
    if (!request_.ParseFromString(ByteBufferToString(request))) {
      Fail(absl::InvalidArgumentError("Pull: request is not a PullRequest"),
           "");
      return;
    }
    if (absl::Status s = service_->CheckOwner(caller_, request_.name());
        !s.ok()) {
      Fail(s, request_.name());
      return;
    }
    auto variable = service_->store()->Get(request_.name());
    if (!variable.ok()) {
      Fail(variable.status(), request_.name());
      return;
    }
    variable_ = *std::move(variable);
    if (absl::Status s = ValidatePullRequest(request_); !s.ok()) {
      Fail(s, request_.name());
      return;
    }
    WaitUntilReady({variable_}, request_.min_version(), request_.clock());
  }

 private:
  void OnReady() override {
    absl::StatusOr<VariableSnapshot> snap = ReadPull(
        request_, *variable_, service_->store()->options().max_variable_bytes);
    if (!snap.ok()) {
      Fail(snap.status(), request_.name());
      return;
    }
    Stream(MakePullHeader(*snap).SerializeAsString(), {snap->value});
  }

  v1::PullRequest request_;
  std::shared_ptr<Variable> variable_;
};

// PullVariables: several variables in one stream, each a consistent
// snapshot; waits (like Pull) until every variable is ready.
class PullVariablesReactor final : public SnapshotStreamReactor {
 public:
  PullVariablesReactor(ParameterServiceImpl* service,
                       grpc::CallbackServerContext* ctx)
      : SnapshotStreamReactor(service, ctx, "PullVariables") {}

  void Begin(const grpc::ByteBuffer& request) {
    if (!request_.ParseFromString(ByteBufferToString(request))) {
      Fail(absl::InvalidArgumentError(
               "PullVariables: request is not a PullVariablesRequest"),
           "");
      return;
    }
    if (absl::Status s = ValidatePullVariablesRequest(request_); !s.ok()) {
      Fail(s, "");
      return;
    }
    for (const std::string& name : request_.names()) {
      if (absl::Status s = service_->CheckOwner(caller_, name); !s.ok()) {
        Fail(s, name);
        return;
      }
      auto v = service_->store()->Get(name);
      if (!v.ok()) {
        Fail(v.status(), name);
        return;
      }
      variables_.push_back(*std::move(v));
    }
    WaitUntilReady(variables_, request_.min_version(), request_.clock());
  }

 private:
  void OnReady() override {
    std::vector<std::shared_ptr<const Buffer>> buffers;
    v1::PullVariablesHeader header =
        MakePullVariablesPayload(variables_, &buffers);
    Stream(header.SerializeAsString(), std::move(buffers));
  }

  v1::PullVariablesRequest request_;
  std::vector<std::shared_ptr<Variable>> variables_;
};

// PushVariables: dense gradients for several variables in one stream. Every
// variable is checked (existence, dtype, shape, NaN/Inf) before any update.
class PushVariablesReactor final : public ChunkedReceiveReactor {
 public:
  PushVariablesReactor(ParameterServiceImpl* service,
                       grpc::ByteBuffer* response)
      : ChunkedReceiveReactor(service, "PushVariables", response) {}

 private:
  absl::Status OnHeader(const std::string& bytes) override {
    if (!header_.ParseFromString(bytes)) {
      return absl::InvalidArgumentError(
          "PushVariables: the header is not a PushVariablesHeader");
    }
    // The first variable names the call in logs, even when it is unknown.
    if (!header_.variables().empty()) name_ = header_.variables(0).name();
    for (const auto& v : header_.variables()) {
      STRATA_RETURN_IF_ERROR(service_->CheckOwner(caller_, v.name()));
    }
    STRATA_ASSIGN_OR_RETURN(
        variables_, ValidatePushVariablesHeader(header_, *service_->store(),
                                                &payload_bytes_));
    return absl::OkStatus();
  }

  absl::Status OnPayload(const char* data, size_t size,
                         std::string* response) override {
    STRATA_ASSIGN_OR_RETURN(
        v1::PushVariablesResponse resp,
        ApplyPushVariables(header_, variables_, data, size, service_->store()));
    *response = resp.SerializeAsString();
    return absl::OkStatus();
  }

  v1::PushVariablesHeader header_;
  std::vector<std::shared_ptr<Variable>> variables_;
};

// ExchangeShared over gRPC (see SharedExchange); a pull waits like
// PullVariables.
class ExchangeReactor final : public grpc::ServerUnaryReactor {
 public:
  ExchangeReactor(ParameterServiceImpl* service,
                  grpc::CallbackServerContext* ctx,
                  const v1::SharedExchangeRequest* request,
                  v1::SharedExchangeResponse* response)
      : service_(service),
        ctx_(ctx),
        request_(request),
        response_(response),
        start_(absl::Now()),
        exchange_(service->store(), service->buffers(),
                  [this](const std::string& name) {
                    return service_->CheckOwner(caller_, name);
                  }) {}

  void Begin(std::optional<Caller> caller) {
    caller_ = std::move(caller);
    const std::string job = caller_.has_value() && !caller_->Has(Role::kAdmin)
                                ? caller_->job
                                : std::string();
    absl::StatusOr<std::shared_ptr<MappedRegion>> region =
        service_->shared_regions()->Get(request_->region(), job, start_);
    absl::Status s = region.status();
    if (s.ok()) s = exchange_.Prepare(*request_, *std::move(region));
    if (s.ok()) s = exchange_.ApplyPush(response_);
    if (!s.ok()) {
      Complete(s, exchange_.variable());
      return;
    }
    if (exchange_.pull().empty()) {
      Complete(absl::OkStatus(), "");
      return;
    }
    wait_.Start(service_, ctx_, exchange_.pull(),
                request_->pull().min_version(), request_->pull().clock(),
                [this](const absl::Status& s, const std::string& name) {
                  if (s.ok()) exchange_.WritePull(response_);
                  Complete(s, name);
                });
  }

  void Reject(const absl::Status& status) { Complete(status, ""); }
  void OnDone() override { delete this; }

 private:
  void Complete(const absl::Status& status, const std::string& variable) {
    if (finished_) return;
    finished_ = true;
    service_->Record(
        "ExchangeShared", status, absl::Now() - start_,
        status.ok() ? static_cast<int64_t>(exchange_.push_bytes()) : 0,
        status.ok() ? static_cast<int64_t>(exchange_.pull_bytes()) : 0);
    if (!status.ok()) {
      service_->logger()->Log(LogLevel::kWarning, "rpc_error",
                              {{"method", "ExchangeShared"},
                               {"variable", variable},
                               {"code", CodeName(status.code())},
                               {"message", std::string(status.message())}});
    }
    Finish(ToGrpcStatus(status));
  }

  ParameterServiceImpl* const service_;
  grpc::CallbackServerContext* const ctx_;
  const v1::SharedExchangeRequest* const request_;
  v1::SharedExchangeResponse* const response_;
  const absl::Time start_;
  std::optional<Caller> caller_;
  SharedExchange exchange_;
  ReadyWait wait_;
  bool finished_ = false;
};

// Finishes a unary call with `status`, recording it.
grpc::ServerUnaryReactor* FinishUnary(ParameterServiceImpl* service,
                                      grpc::CallbackServerContext* ctx,
                                      const char* method, absl::Time start,
                                      const absl::Status& status) {
  service->Record(method, status, absl::Now() - start, 0, 0);
  if (!status.ok()) {
    service->logger()->Log(LogLevel::kWarning, "rpc_error",
                           {{"method", method},
                            {"code", CodeName(status.code())},
                            {"message", std::string(status.message())}});
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

ParameterServiceImpl::ParameterServiceImpl(VariableStore* store,
                                           Logger* logger,
                                           MetricsRegistry* metrics,
                                           ParameterServiceOptions options)
    : store_(store),
      logger_(logger),
      metrics_(metrics),
      options_(std::move(options)),
      buffers_(BufferPool::Create(options_.buffer_pool_bytes)),
      shared_regions_(options_.shared_regions) {
  metrics_->SetGaugeFunction(
      "strata_ps_variables", "Variables held by this server", {},
      [store] { return static_cast<double>(store->Stats().num_variables); });
  metrics_->SetGaugeFunction(
      "strata_ps_variable_bytes", "Bytes of variable values on this server",
      {}, [store] { return static_cast<double>(store->Stats().variable_bytes); });
  metrics_->SetGaugeFunction(
      "strata_ps_pushes_applied", "Pushes taken (not duplicates)", {},
      [store] { return static_cast<double>(store->Stats().pushes_applied); });
  metrics_->SetGaugeFunction(
      "strata_ps_pushes_duplicate", "Pushes acknowledged as already applied",
      {},
      [store] { return static_cast<double>(store->Stats().pushes_duplicate); });
}

ParameterServiceImpl::~ParameterServiceImpl() {
  PrepareShutdown();
  for (const char* name :
       {"strata_ps_variables", "strata_ps_variable_bytes",
        "strata_ps_pushes_applied", "strata_ps_pushes_duplicate"}) {
    metrics_->RemoveGaugeFunction(name, {});
  }
}

void ParameterServiceImpl::PrepareShutdown() {
  std::map<uint64_t, std::unique_ptr<DoorbellServer>> doorbells;
  {
    absl::MutexLock lock(&doorbells_mu_);
    doorbells.swap(doorbells_);
  }
  doorbells.clear();  // stops and joins their threads
  store_->CancelWaiters(
      absl::UnavailableError("parameter server is shutting down"));
  timer_.Stop();
}

void ParameterServiceImpl::Record(const char* method,
                                  const absl::Status& status,
                                  absl::Duration elapsed, int64_t bytes_in,
                                  int64_t bytes_out) {
  std::map<std::string, std::string> labels = {
      {"method", method}, {"code", CodeName(status.code())}};
  metrics_->GetCounter("strata_ps_rpcs_total", "RPCs handled", labels)
      ->Increment();
  metrics_
      ->GetHistogram("strata_ps_rpc_latency_seconds", "RPC latency",
                     {{"method", method}},
                     {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                      0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10})
      ->Observe(absl::ToDoubleSeconds(elapsed));
  if (bytes_in > 0) {
    metrics_
        ->GetCounter("strata_ps_bytes_received_total",
                     "Tensor bytes received", {{"method", method}})
        ->Increment(static_cast<double>(bytes_in));
  }
  if (bytes_out > 0) {
    metrics_
        ->GetCounter("strata_ps_bytes_sent_total", "Tensor bytes sent",
                     {{"method", method}})
        ->Increment(static_cast<double>(bytes_out));
  }
}

absl::StatusOr<std::optional<Caller>> ParameterServiceImpl::Authorize(
    const grpc::CallbackServerContext* ctx, Role needed, const char* method) {
  if (options_.credentials == nullptr) return std::optional<Caller>();
  STRATA_ASSIGN_OR_RETURN(Caller caller,
                          options_.credentials->Authenticate(
                              ctx->client_metadata()));
  STRATA_RETURN_IF_ERROR(RequireRole(caller, needed, method));
  return std::optional<Caller>(std::move(caller));
}

namespace {

// PERMISSION_DENIED unless `caller` may reach a variable owned by `owner`.
absl::Status CheckOwnerOf(const std::optional<Caller>& caller,
                          const std::string& name,
                          const absl::flat_hash_map<std::string, std::string>&
                              owners) {
  if (!caller.has_value() || caller->Has(Role::kAdmin)) return absl::OkStatus();
  auto it = owners.find(name);
  if (it == owners.end() || it->second == caller->job) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "variable '", name, "' belongs to another job than '", caller->job,
      "'"));
}

// The checkpoint path a caller's Save/Restore uses: a job's coordinator
// works under "<job>/" of the checkpoint directory.
absl::StatusOr<std::string> ScopedCheckpointPath(
    const std::optional<Caller>& caller, const std::string& path) {
  if (!caller.has_value() || caller->Has(Role::kAdmin)) return path;
  if (path.empty() || path[0] == '/') {
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint path '", path,
        "': a job's coordinator may only use relative paths (its job's "
        "directory under --checkpoint-dir)"));
  }
  return absl::StrCat(caller->job, "/", path);
}

}  // namespace

absl::Status ParameterServiceImpl::CheckOwner(
    const std::optional<Caller>& caller, const std::string& name) const {
  if (!caller.has_value() || caller->Has(Role::kAdmin)) return absl::OkStatus();
  absl::MutexLock lock(&owners_mu_);
  return CheckOwnerOf(caller, name, owners_);
}

template <typename T, typename Fn>
absl::StatusOr<T> ParameterServiceImpl::ScopedSaveRestore(
    const std::optional<Caller>& caller, const std::string& path,
    const char* what, Fn fn) {
  if (caller.has_value() && !caller->Has(Role::kAdmin)) {
    for (const auto& v : store_->List()) {
      auto it = owners_.find(v->name());
      if (it == owners_.end() || it->second != caller->job) {
        return absl::PermissionDeniedError(absl::StrCat(
            "this server holds variables of another job than '", caller->job,
            "': only an admin credential may ", what, " its checkpoints"));
      }
    }
  }
  STRATA_ASSIGN_OR_RETURN(std::string scoped,
                          ScopedCheckpointPath(caller, path));
  return fn(scoped);
}

grpc::ServerUnaryReactor* ParameterServiceImpl::CreateVariable(
    grpc::CallbackServerContext* ctx, const v1::CreateVariableRequest* req,
    v1::CreateVariableResponse* resp) {
  absl::Time start = absl::Now();
  auto caller = Authorize(ctx, Role::kCoordinator, "CreateVariable");
  if (!caller.ok()) {
    return FinishUnary(this, ctx, "CreateVariable", start, caller.status());
  }
  absl::StatusOr<bool> created;
  if (caller->has_value()) {
    absl::MutexLock lock(&owners_mu_);
    absl::Status owned = CheckOwnerOf(*caller, req->spec().name(), owners_);
    if (!owned.ok()) {
      return FinishUnary(this, ctx, "CreateVariable", start, owned);
    }
    created = store_->Create(req->spec());
    if (created.ok()) owners_.emplace(req->spec().name(), (*caller)->job);
  } else {
    created = store_->Create(req->spec());
  }
  if (created.ok()) {
    resp->set_created(*created);
    if (*created) {
      logger_->Log(LogLevel::kInfo, "variable_created",
                   {{"variable", req->spec().name()},
                    {"dtype", static_cast<int>(req->spec().dtype())},
                    {"shape", std::vector<int64_t>(req->spec().shape().begin(),
                                                   req->spec().shape().end())},
                    {"optimizer", req->spec().optimizer().type()}});
    }
  }
  return FinishUnary(this, ctx, "CreateVariable", start, created.status());
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ParameterServiceImpl::Pull(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) {
  auto* reactor = new PullReactor(this, ctx);
  auto caller = Authorize(ctx, Role::kWorker, "Pull");
  if (!caller.ok()) {
    reactor->Reject(caller.status());
    return reactor;
  }
  reactor->set_caller(*std::move(caller));
  reactor->Begin(*req);
  return reactor;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterServiceImpl::Push(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  auto* reactor = new PushReactor(this, resp);
  auto caller = Authorize(ctx, Role::kWorker, "Push");
  if (!caller.ok()) {
    reactor->Reject(caller.status());
    return reactor;
  }
  reactor->set_caller(*std::move(caller));
  reactor->Begin();
  return reactor;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterServiceImpl::Assign(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  auto* reactor = new AssignReactor(this, resp);
  auto caller = Authorize(ctx, Role::kCoordinator, "Assign");
  if (!caller.ok()) {
    reactor->Reject(caller.status());
    return reactor;
  }
  reactor->set_caller(*std::move(caller));
  reactor->Begin();
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ParameterServiceImpl::PullVariables(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) {
  auto* reactor = new PullVariablesReactor(this, ctx);
  auto caller = Authorize(ctx, Role::kWorker, "PullVariables");
  if (!caller.ok()) {
    reactor->Reject(caller.status());
    return reactor;
  }
  reactor->set_caller(*std::move(caller));
  reactor->Begin(*req);
  return reactor;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterServiceImpl::PushVariables(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  auto* reactor = new PushVariablesReactor(this, resp);
  auto caller = Authorize(ctx, Role::kWorker, "PushVariables");
  if (!caller.ok()) {
    reactor->Reject(caller.status());
    return reactor;
  }
  reactor->set_caller(*std::move(caller));
  reactor->Begin();
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Save(
    grpc::CallbackServerContext* ctx, const v1::SaveRequest* req,
    v1::SaveResponse* resp) {
  absl::Time start = absl::Now();
  auto caller = Authorize(ctx, Role::kCoordinator, "Save");
  if (!caller.ok()) return FinishUnary(this, ctx, "Save", start, caller.status());
  absl::StatusOr<SaveResult> saved;
  if (caller->has_value()) {
    absl::MutexLock lock(&owners_mu_);
    saved = ScopedSaveRestore<SaveResult>(
        *caller, req->path(), "save",
        [this](const std::string& path) { return store_->Save(path); });
  } else {
    saved = store_->Save(req->path());
  }
  if (saved.ok()) {
    resp->set_path(saved->path);
    resp->set_num_variables(saved->num_variables);
    resp->set_bytes(saved->bytes);
    logger_->Log(LogLevel::kInfo, "checkpoint_saved",
                 {{"path", saved->path},
                  {"variables", saved->num_variables},
                  {"bytes", saved->bytes}});
  }
  return FinishUnary(this, ctx, "Save", start, saved.status());
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Restore(
    grpc::CallbackServerContext* ctx, const v1::RestoreRequest* req,
    v1::RestoreResponse* resp) {
  absl::Time start = absl::Now();
  auto caller = Authorize(ctx, Role::kCoordinator, "Restore");
  if (!caller.ok()) {
    return FinishUnary(this, ctx, "Restore", start, caller.status());
  }
  absl::StatusOr<int64_t> restored;
  if (caller->has_value()) {
    absl::MutexLock lock(&owners_mu_);
    restored = ScopedSaveRestore<int64_t>(
        *caller, req->path(), "restore",
        [this](const std::string& path) { return store_->Restore(path); });
    if (restored.ok()) {
      // The restored variables replace every variable: they belong to the
      // restoring job (an admin's restore keeps known owners).
      absl::flat_hash_map<std::string, std::string> owners;
      for (const auto& v : store_->List()) {
        auto it = owners_.find(v->name());
        owners[v->name()] =
            ((*caller)->Has(Role::kAdmin) && it != owners_.end())
                ? it->second
                : (*caller)->job;
      }
      owners_ = std::move(owners);
    }
  } else {
    restored = store_->Restore(req->path());
  }
  if (restored.ok()) {
    resp->set_num_variables(*restored);
    logger_->Log(LogLevel::kInfo, "checkpoint_restored",
                 {{"path", req->path()}, {"variables", *restored}});
  }
  return FinishUnary(this, ctx, "Restore", start, restored.status());
}

grpc::ServerUnaryReactor* ParameterServiceImpl::ListVariables(
    grpc::CallbackServerContext* ctx, const v1::ListVariablesRequest* req,
    v1::ListVariablesResponse* resp) {
  absl::Time start = absl::Now();
  auto caller = Authorize(ctx, Role::kWorker, "ListVariables");
  if (!caller.ok()) {
    return FinishUnary(this, ctx, "ListVariables", start, caller.status());
  }
  for (const auto& v : store_->List()) {
    // Another job's variables are not listed.
    if (!CheckOwner(*caller, v->name()).ok()) continue;
    v1::VariableInfo* info = resp->add_variables();
    *info->mutable_spec() = v->spec();
    info->set_version(v->version());
    info->set_iterations(v->iterations());
  }
  return FinishUnary(this, ctx, "ListVariables", start, absl::OkStatus());
}

grpc::ServerUnaryReactor* ParameterServiceImpl::Stats(
    grpc::CallbackServerContext* ctx, const v1::StatsRequest* req,
    v1::StatsResponse* resp) {
  absl::Time start = absl::Now();
  auto caller = Authorize(ctx, Role::kWorker, "Stats");
  if (!caller.ok()) return FinishUnary(this, ctx, "Stats", start, caller.status());
  StoreStats s = store_->Stats();
  resp->set_num_variables(s.num_variables);
  resp->set_variable_bytes(s.variable_bytes);
  resp->set_pushes_applied(s.pushes_applied);
  resp->set_pushes_duplicate(s.pushes_duplicate);
  resp->set_pulls(s.pulls);
  resp->set_bytes_pushed(s.bytes_pushed);
  resp->set_bytes_pulled(s.bytes_pulled);
  resp->set_sync_steps_applied(s.sync_steps_applied);
  return FinishUnary(this, ctx, "Stats", start, absl::OkStatus());
}

namespace {

// The job whose shared regions a caller may use ("" for any: no
// credentials, or an admin).
std::string RegionJob(const std::optional<Caller>& caller) {
  return caller.has_value() && !caller->Has(Role::kAdmin) ? caller->job
                                                          : std::string();
}

}  // namespace

std::vector<std::unique_ptr<DoorbellServer>>
ParameterServiceImpl::TakeFinishedDoorbellsLocked() {
  std::vector<std::unique_ptr<DoorbellServer>> finished;
  for (auto it = doorbells_.begin(); it != doorbells_.end();) {
    if (it->second->finished()) {
      finished.push_back(std::move(it->second));
      it = doorbells_.erase(it);
    } else {
      ++it;
    }
  }
  return finished;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::AttachSharedRegion(
    grpc::CallbackServerContext* ctx,
    const v1::AttachSharedRegionRequest* req,
    v1::AttachSharedRegionResponse* resp) {
  absl::Time start = absl::Now();
  auto caller = Authorize(ctx, Role::kWorker, "AttachSharedRegion");
  if (!caller.ok()) {
    return FinishUnary(this, ctx, "AttachSharedRegion", start,
                       caller.status());
  }
  // The region belongs to the caller's job, an admin's included.
  absl::StatusOr<uint64_t> id = shared_regions_.Attach(
      ctx->peer(), req->pid(), req->fd(), static_cast<uint64_t>(req->bytes()),
      req->nonce(), caller->has_value() ? (*caller)->job : std::string(),
      start);
  if (id.ok()) {
    resp->set_region(*id);
    resp->set_server_pid(static_cast<int64_t>(::getpid()));
  }
  return FinishUnary(this, ctx, "AttachSharedRegion", start, id.status());
}

grpc::ServerUnaryReactor* ParameterServiceImpl::DetachSharedRegion(
    grpc::CallbackServerContext* ctx,
    const v1::DetachSharedRegionRequest* req,
    v1::DetachSharedRegionResponse* /*resp*/) {
  absl::Time start = absl::Now();
  auto caller = Authorize(ctx, Role::kWorker, "DetachSharedRegion");
  if (!caller.ok()) {
    return FinishUnary(this, ctx, "DetachSharedRegion", start,
                       caller.status());
  }
  absl::Status detached =
      shared_regions_.Detach(req->region(), RegionJob(*caller));
  std::unique_ptr<DoorbellServer> doorbell;
  std::vector<std::unique_ptr<DoorbellServer>> finished;
  {
    absl::MutexLock lock(&doorbells_mu_);
    finished = TakeFinishedDoorbellsLocked();
    auto it = doorbells_.find(req->region());
    if (detached.ok() && it != doorbells_.end()) {
      doorbell = std::move(it->second);
      doorbells_.erase(it);
    }
  }
  doorbell.reset();  // joins its thread outside the lock
  finished.clear();
  return FinishUnary(this, ctx, "DetachSharedRegion", start, detached);
}

grpc::ServerUnaryReactor* ParameterServiceImpl::ExchangeShared(
    grpc::CallbackServerContext* ctx, const v1::SharedExchangeRequest* req,
    v1::SharedExchangeResponse* resp) {
  auto* reactor = new ExchangeReactor(this, ctx, req, resp);
  auto caller = Authorize(ctx, Role::kWorker, "ExchangeShared");
  if (!caller.ok()) {
    reactor->Reject(caller.status());
    return reactor;
  }
  reactor->Begin(*std::move(caller));
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServiceImpl::MirrorVariables(
    grpc::CallbackServerContext* ctx, const v1::MirrorVariablesRequest* req,
    v1::MirrorVariablesResponse* /*resp*/) {
  const absl::Time start = absl::Now();
  auto caller = Authorize(ctx, Role::kWorker, "MirrorVariables");
  if (!caller.ok()) {
    return FinishUnary(this, ctx, "MirrorVariables", start, caller.status());
  }
  absl::Status status = [&]() -> absl::Status {
    if (req->names_size() != req->offsets_size() || req->names_size() > 4096) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MirrorVariables: ", req->names_size(), " names and ",
          req->offsets_size(), " offsets (equal counts, at most 4096)"));
    }
    STRATA_ASSIGN_OR_RETURN(
        std::shared_ptr<MappedRegion> region,
        shared_regions_.Get(req->region(), RegionJob(*caller), start));
    std::vector<std::shared_ptr<Variable>> variables;
    for (int i = 0; i < req->names_size(); ++i) {
      STRATA_RETURN_IF_ERROR(CheckOwner(*caller, req->names(i)));
      STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Variable> v,
                              store_->Get(req->names(i)));
      STRATA_RETURN_IF_ERROR(v->CheckMirror(*region, req->offsets(i)));
      variables.push_back(std::move(v));
    }
    for (size_t i = 0; i < variables.size(); ++i) {
      STRATA_RETURN_IF_ERROR(
          variables[i]->AddMirror(region, req->offsets(static_cast<int>(i))));
    }
    return absl::OkStatus();
  }();
  return FinishUnary(this, ctx, "MirrorVariables", start, status);
}

grpc::ServerUnaryReactor* ParameterServiceImpl::ServeSharedRegion(
    grpc::CallbackServerContext* ctx, const v1::ServeSharedRegionRequest* req,
    v1::ServeSharedRegionResponse* resp) {
  const absl::Time start = absl::Now();
  auto caller = Authorize(ctx, Role::kWorker, "ServeSharedRegion");
  if (!caller.ok()) {
    return FinishUnary(this, ctx, "ServeSharedRegion", start, caller.status());
  }
  const std::string job = RegionJob(*caller);
  absl::Status status = [&]() -> absl::Status {
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<MappedRegion> region,
                            shared_regions_.Get(req->region(), job, start));
    if (req->control_offset() % 64 != 0 || req->message_bytes() < 256 ||
        req->message_bytes() > (1u << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ServeSharedRegion: control_offset ", req->control_offset(),
          " must be a multiple of 64 and message_bytes ",
          req->message_bytes(), " in [256, 1048576]"));
    }
    STRATA_RETURN_IF_ERROR(region->CheckRange(
        req->control_offset(),
        kDoorbellControlBytes + 2 * uint64_t{req->message_bytes()},
        "ServeSharedRegion"));
    const uint64_t id = req->region();
    const std::optional<Caller> who = *caller;
    auto handle = [this, id, job, who, region](
                      const v1::SharedExchangeRequest& request,
                      v1::SharedExchangeResponse* response) -> absl::Status {
      const absl::Time begin = absl::Now();
      SharedExchange exchange(
          store_, buffers_.get(),
          [this, &who](const std::string& name) {
            return CheckOwner(who, name);
          });
      absl::Status s = request.pull().min_version() != 0 ||
                               request.pull().clock() != 0
                           ? absl::InvalidArgumentError(
                                 "doorbell: a pull that waits for a version "
                                 "or a clock goes through the ExchangeShared "
                                 "call")
                           : absl::OkStatus();
      // Marks the region used; fails once it was detached or dropped.
      if (s.ok()) s = shared_regions_.Get(id, job, begin).status();
      if (s.ok()) s = exchange.Prepare(request, region);
      if (s.ok()) s = exchange.ApplyPush(response);
      if (s.ok()) exchange.WritePull(response);
      Record("ExchangeShared", s, absl::Now() - begin,
             s.ok() ? static_cast<int64_t>(exchange.push_bytes()) : 0,
             s.ok() ? static_cast<int64_t>(exchange.pull_bytes()) : 0);
      if (!s.ok()) {
        logger_->Log(LogLevel::kWarning, "rpc_error",
                     {{"method", "ExchangeShared"},
                      {"transport", "doorbell"},
                      {"variable", exchange.variable()},
                      {"code", CodeName(s.code())},
                      {"message", std::string(s.message())}});
      }
      return s;
    };
    auto alive = [this, id] { return shared_regions_.Contains(id); };
    // A doorbell served again: the old thread stops (and closes the word)
    // before the new one opens it; threads are joined outside the lock.
    std::unique_ptr<DoorbellServer> replaced;
    std::vector<std::unique_ptr<DoorbellServer>> finished;
    {
      absl::MutexLock lock(&doorbells_mu_);
      finished = TakeFinishedDoorbellsLocked();
      auto it = doorbells_.find(id);
      if (it != doorbells_.end()) {
        replaced = std::move(it->second);
        doorbells_.erase(it);
      }
    }
    replaced.reset();
    finished.clear();
    {
      absl::MutexLock lock(&doorbells_mu_);
      if (static_cast<int>(doorbells_.size()) >=
          options_.shared_regions.max_doorbells) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "ServeSharedRegion: the server serves ", doorbells_.size(),
            " regions (limit ", options_.shared_regions.max_doorbells, ")"));
      }
      doorbells_[id] = std::make_unique<DoorbellServer>(
          region, req->control_offset(), req->message_bytes(),
          std::move(handle), std::move(alive));
    }
    resp->set_server_pid(static_cast<int64_t>(::getpid()));
    return absl::OkStatus();
  }();
  return FinishUnary(this, ctx, "ServeSharedRegion", start, status);
}

}  // namespace strata

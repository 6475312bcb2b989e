// ParameterServiceImpl's streamed calls: Push, Assign and PushVariables
// receive a TensorChunk stream into one buffer; Pull and PullVariables wait
// until their variables are ready and stream snapshots.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "proto/chunk_codec.h"
#include "rpc/grpc_status.h"
#include "server/parameter_service_call.h"
#include "server/parameter_service_impl.h"
#include "server/push_session.h"
#include "server/ready_wait.h"
#include "server/requests.h"

namespace strata {
namespace {

// Variable `name` for the call's caller. Errors: PERMISSION_DENIED (another
// job's variable), NOT_FOUND.
absl::StatusOr<std::shared_ptr<Variable>> GetOwned(
    ParameterServiceImpl* service, const ServiceCall& call,
    const std::string& name) {
  STRATA_RETURN_IF_ERROR(service->store()->CheckOwner(call.caller(), name));
  return service->store()->Get(name);
}

// Shared by Push, Assign and PushVariables: receives a TensorChunk stream
// into one buffer. Subclasses validate the header (allocating the payload)
// and consume the completed payload.
class ChunkedReceiveReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  ChunkedReceiveReactor(ParameterServiceImpl* service, const char* method,
                        grpc::ByteBuffer* response)
      : service_(service), call_(service, method), response_(response) {}

  ServiceCall& call() { return call_; }
  void Begin() { StartRead(&message_); }
  // Fails the call before reading (authentication, role).
  void Reject(const absl::Status& status) { Complete(status); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (!header_seen_) {
        Complete(absl::InvalidArgumentError(absl::StrCat(
            call_.method(), ": the stream ended before a header chunk")));
        return;
      }
      if (received_ != payload_bytes_) {
        Complete(absl::InvalidArgumentError(absl::StrCat(
            call_.method(), " of variable '", name_,
            "': the stream ended after ", received_, " of ", payload_bytes_,
            " payload bytes")));
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

  // Sets name_ and variable_ (a single-variable call).
  absl::Status SetVariable(const std::string& name) {
    name_ = name;
    STRATA_ASSIGN_OR_RETURN(variable_, GetOwned(service_, call_, name));
    return absl::OkStatus();
  }

  ParameterServiceImpl* const service_;
  ServiceCall call_;
  std::string name_;
  std::shared_ptr<Variable> variable_;
  uint64_t payload_bytes_ = 0;

 private:
  absl::Status Consume() {
    DecodedChunk chunk;
    STRATA_RETURN_IF_ERROR(DecodeChunk(message_, &chunk));
    const char* method = call_.method();
    if (!header_seen_) {
      if (!chunk.has_header) {
        return absl::InvalidArgumentError(
            absl::StrCat(method, ": the first chunk carries no header"));
      }
      header_seen_ = true;
      STRATA_RETURN_IF_ERROR(OnHeader(chunk.header));
      const uint64_t limit = service_->store()->max_variable_bytes();
      if (payload_bytes_ > limit) {
        return absl::ResourceExhaustedError(absl::StrCat(
            method, " of variable '", name_, "': payload of ", payload_bytes_,
            " bytes is above the server limit of ", limit));
      }
      payload_ = service_->buffers()->Acquire(payload_bytes_);
    } else if (chunk.has_header) {
      return absl::InvalidArgumentError(absl::StrCat(
          method, " of variable '", name_, "': header repeated in a chunk"));
    }
    if (chunk.data_size == 0) return absl::OkStatus();
    if (static_cast<uint64_t>(chunk.offset) != received_) {
      return absl::InvalidArgumentError(
          absl::StrCat(method, " of variable '", name_, "': chunk at offset ",
                       chunk.offset, ", expected ", received_));
    }
    if (received_ + chunk.data_size > payload_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat(
          method, " of variable '", name_, "': chunks carry more than the ",
          payload_bytes_, " payload bytes the header announced"));
    }
    chunk.CopyDataTo(payload_->data() + received_);
    received_ += chunk.data_size;
    return absl::OkStatus();
  }

  void Complete(const absl::Status& status) {
    if (!call_.End(status, name_, static_cast<int64_t>(received_), 0)) return;
    payload_.reset();
    Finish(ToGrpcStatus(status));
  }

  grpc::ByteBuffer* const response_;
  grpc::ByteBuffer message_;
  bool header_seen_ = false;
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
    STRATA_RETURN_IF_ERROR(SetVariable(header_.name()));
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
    STRATA_RETURN_IF_ERROR(SetVariable(header_.name()));
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
};

// PushVariables: dense gradients for several variables in one stream, taken
// by the core's PushSession once the payload is whole.
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
    STRATA_ASSIGN_OR_RETURN(push_,
                            service_->store()->StartPush(header_, call_.caller()));
    payload_bytes_ = push_->payload_bytes();
    return absl::OkStatus();
  }

  absl::Status OnPayload(const char* data, size_t /*size*/,
                         std::string* response) override {
    push_->Attach(data);
    STRATA_ASSIGN_OR_RETURN(v1::PushVariablesResponse resp, push_->Finish());
    *response = resp.SerializeAsString();
    return absl::OkStatus();
  }

  v1::PushVariablesHeader header_;
  std::unique_ptr<PushSession> push_;
};

// Server side of Pull and PullVariables: waits until the variables are
// ready (version, staleness bound), then streams snapshot buffers in chunks
// that alias them (no chunk spans two buffers), the header in the first.
class SnapshotStreamReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  SnapshotStreamReactor(ParameterServiceImpl* service,
                        grpc::CallbackServerContext* ctx, const char* method)
      : service_(service), call_(service, method), ctx_(ctx) {}

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "pull write failed"));
      return;
    }
    WriteNext();
  }

  void OnDone() override { delete this; }

  ServiceCall& call() { return call_; }
  // Fails the call before it starts (authentication, role).
  void Reject(const absl::Status& status) { Fail(status, ""); }

 protected:
  // Called once every variable passed to WaitUntilReady is ready.
  virtual void OnReady() = 0;

  // Calls OnReady() when every variable satisfies (min_version, clock), or
  // fails as ReadyWait says.
  void WaitUntilReady(std::vector<std::shared_ptr<Variable>> variables,
                      int64_t min_version, int64_t clock) {
    wait_.Start(service_->timer(), service_->options().max_pull_wait, ctx_,
                std::move(variables), min_version, clock,
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

  // Fails the call before streaming, about `variable`.
  void Fail(const absl::Status& s, const std::string& variable) {
    if (call_.End(s, variable)) Finish(ToGrpcStatus(s));
  }

  ParameterServiceImpl* const service_;
  ServiceCall call_;

 private:
  void WriteNext() {
    const size_t chunk = service_->options().chunk_bytes;
    while (index_ < buffers_.size() && pos_ >= buffers_[index_]->size()) {
      ++index_;
      pos_ = 0;
    }
    if (sent_any_ && index_ >= buffers_.size()) {
      if (call_.End(absl::OkStatus(), "", 0, static_cast<int64_t>(total_))) {
        Finish(grpc::Status::OK);
      }
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
      call_.End(absl::OkStatus(), "", 0, static_cast<int64_t>(total_));
      StartWriteAndFinish(&message_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      StartWrite(&message_);
    }
  }

  grpc::CallbackServerContext* const ctx_;
  ReadyWait wait_;
  std::string header_;
  std::vector<std::shared_ptr<const Buffer>> buffers_;
  grpc::ByteBuffer message_;
  size_t total_ = 0;
  size_t index_ = 0;
  size_t pos_ = 0;
  size_t offset_ = 0;
  bool sent_any_ = false;
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
    auto variable = GetOwned(service_, call_, request_.name());
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
        request_, *variable_, service_->store()->max_variable_bytes());
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
      auto v = GetOwned(service_, call_, name);
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

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* ParameterServiceImpl::Pull(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) {
  return StartAuthorized(new PullReactor(this, ctx), ctx, Role::kWorker, *req);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterServiceImpl::Push(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  return StartAuthorized(new PushReactor(this, resp), ctx, Role::kWorker);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterServiceImpl::Assign(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  return StartAuthorized(new AssignReactor(this, resp), ctx,
                         Role::kCoordinator);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ParameterServiceImpl::PullVariables(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req) {
  return StartAuthorized(new PullVariablesReactor(this, ctx), ctx,
                         Role::kWorker, *req);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterServiceImpl::PushVariables(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* resp) {
  return StartAuthorized(new PushVariablesReactor(this, resp), ctx,
                         Role::kWorker);
}

}  // namespace strata

// ParameterServiceImpl::Lane: one persistent stream of frames (see
// LaneRequest in parameter_server.proto). A frame is read whole (its push
// payload written in place into a pooled buffer, each chunk decoded and
// checked for NaN/Inf as it arrives, while the next is on its way),
// applied as PushVariables once the last chunk is in,
// then its pull waits and is streamed as PullVariables, and the reply is
// written before the next frame is read: one operation is outstanding at a
// time, so the reactor's state needs no lock.
#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
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

class LaneReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public ParameterServiceImpl::OpenLane {
 public:
  LaneReactor(ParameterServiceImpl* service, grpc::CallbackServerContext* ctx)
      : service_(service), ctx_(ctx), stream_call_(service, "LaneStream") {}

  ServiceCall& call() { return stream_call_; }

  void Begin() {
    if (!service_->options().serve_lanes) {
      // As a server without the method answers.
      End(absl::UnimplementedError("Lane: this server does not serve lanes"));
      return;
    }
    if (!service_->AddLane(this)) {
      End(absl::UnavailableError("parameter server is shutting down"));
      return;
    }
    registered_ = true;
    ReadFrame();
  }

  void EndIfIdle() override {
    // The pending read then completes as failed, on a callback thread.
    if (idle_.load()) {
      closing_.store(true);
      ctx_->TryCancel();
    }
  }
  void Reject(const absl::Status& status) { End(status); }

  void OnReadDone(bool ok) override {
    idle_.store(false);
    if (!ok) {
      // The client closed its side (or the call was cancelled).
      if (closing_.load()) {
        End(absl::UnavailableError("parameter server is shutting down"));
      } else if (frame_.has_value()) {
        End(absl::InvalidArgumentError(absl::StrCat(
            "Lane: the stream ended inside frame ", frame_->request.id(),
            " after ", frame_->received, " of ", frame_->payload_bytes,
            " payload bytes")));
      } else {
        End(absl::OkStatus());
      }
      return;
    }
    absl::Status s = Consume();
    if (!s.ok()) {
      if (frame_.has_value()) frame_->call.End(s, frame_->name);
      End(s);
      return;
    }
    if (frame_.has_value() && frame_->received == frame_->payload_bytes) {
      Process();
      return;
    }
    message_.Clear();
    StartRead(&message_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      if (frame_.has_value()) {
        frame_->call.End(absl::CancelledError("Lane: reply write failed"),
                         frame_->name);
      }
      End(absl::CancelledError("Lane: reply write failed"));
      return;
    }
    WriteNext();
  }

  void OnDone() override {
    if (registered_) service_->RemoveLane(this);
    delete this;
  }

 private:
  // Reads the first chunk of the next frame.
  void ReadFrame() {
    message_.Clear();
    idle_.store(true);
    StartRead(&message_);
    // A shutdown that began before idle_ was set did not see it.
    if (service_->LanesClosed()) EndIfIdle();
  }

  // One frame, from its header to its reply.
  struct Frame {
    explicit Frame(ParameterServiceImpl* service) : call(service, "Lane") {}
    ServiceCall call;
    v1::LaneRequest request;
    std::string name;  // the first variable, for error lines
    uint64_t payload_bytes = 0;
    uint64_t received = 0;
    // Set once the frame is known to fail: its payload is skipped.
    absl::Status error;
    std::shared_ptr<Buffer> payload;
    std::vector<std::shared_ptr<Variable>> pulled;
    // The push, decoded and checked as far as received; null without one,
    // or once it failed. Refers to `request` and `payload`.
    std::unique_ptr<PushSession> push;
    // A push frame of several chunks is counted in the service's
    // frames_in_progress() from the first chunk of its payload until the
    // frame ends (its pull and reply included).
    struct InProgress {
      InProgress() = default;
      InProgress(const InProgress&) = delete;
      InProgress& operator=(const InProgress&) = delete;
      std::atomic<int>* count = nullptr;
      void Start(std::atomic<int>* c) {
        count = c;
        count->fetch_add(1);
      }
      void Stop() {
        if (count != nullptr) count->fetch_sub(1);
        count = nullptr;
      }
      ~InProgress() { Stop(); }
    } in_progress;
    v1::LaneReply reply;
    absl::Status status;  // the frame's, once known
    std::unique_ptr<ReadyWait> wait;
    // The reply's chunks.
    std::string header;
    std::vector<std::shared_ptr<const Buffer>> buffers;
    size_t total = 0;
    size_t index = 0;
    size_t pos = 0;
    size_t offset = 0;
    bool sent_header = false;
  };

  absl::Status Consume() {
    DecodedChunk chunk;
    STRATA_RETURN_IF_ERROR(DecodeChunk(message_, &chunk));
    if (!frame_.has_value()) {
      if (!chunk.has_header) {
        return absl::InvalidArgumentError(
            "Lane: a frame's first chunk carries no header");
      }
      STRATA_RETURN_IF_ERROR(StartFrame(chunk.header));
    } else if (chunk.has_header) {
      return absl::InvalidArgumentError(
          absl::StrCat("Lane: frame ", frame_->request.id(),
                       " has a header repeated in a chunk"));
    }
    if (chunk.data_size == 0) return absl::OkStatus();
    Frame& f = *frame_;
    if (static_cast<uint64_t>(chunk.offset) != f.received) {
      return absl::InvalidArgumentError(
          absl::StrCat("Lane: frame ", f.request.id(), ": chunk at offset ",
                       chunk.offset, ", expected ", f.received));
    }
    if (f.received + chunk.data_size > f.payload_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Lane: frame ", f.request.id(), ": chunks carry more than the ",
          f.payload_bytes, " payload bytes the header announced"));
    }
    if (f.payload != nullptr) chunk.CopyDataTo(f.payload->data() + f.received);
    f.received += chunk.data_size;
    if (f.push != nullptr) {
      // A frame that comes in several chunks, while no other such frame is
      // in progress, has its optimizer steps run as they arrive, on staged
      // copies published once it is whole (decided at its first chunk).
      if (f.received == chunk.data_size && f.received < f.payload_bytes) {
        f.in_progress.Start(service_->frames_in_progress());
        if (service_->options().chunked_apply &&
            service_->frames_in_progress()->load() == 1) {
          // A copy no larger than the pool keeps: a variable near the
          // memory the server has is not doubled.
          f.push->Stage(service_->buffers(),
                        service_->options().buffer_pool_bytes);
        }
      }
      if (absl::Status bad = f.push->Receive(f.received); !bad.ok()) {
        // The frame fails; the rest of its payload is read and dropped.
        f.error = bad;
        f.push.reset();
        f.payload.reset();
      }
    }
    return absl::OkStatus();
  }

  // Parses a frame's header and checks its push as PushVariables does. A
  // push the server refuses fails the frame, not the lane: its payload is
  // read and dropped.
  absl::Status StartFrame(const std::string& bytes) {
    frame_.emplace(service_);
    Frame& f = *frame_;
    f.call.set_caller(stream_call_.caller());
    if (!f.request.ParseFromString(bytes)) {
      return absl::InvalidArgumentError(
          "Lane: a frame's header is not a LaneRequest");
    }
    const v1::PushVariablesHeader& push = f.request.push();
    if (push.payload_bytes() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Lane: frame ", f.request.id(), " announces ", push.payload_bytes(),
          " payload bytes"));
    }
    f.payload_bytes = static_cast<uint64_t>(push.payload_bytes());
    if (!push.variables().empty()) {
      f.name = push.variables(0).name();
    } else if (!f.request.pull().names().empty()) {
      f.name = f.request.pull().names(0);
    }
    if (push.variables().empty()) {
      if (f.payload_bytes != 0) {
        f.error = absl::InvalidArgumentError(absl::StrCat(
            "Lane: frame ", f.request.id(), " carries ", f.payload_bytes,
            " payload bytes and pushes no variable"));
      }
      return absl::OkStatus();
    }
    absl::StatusOr<std::unique_ptr<PushSession>> started =
        service_->store()->StartPush(push, f.call.caller());
    if (!started.ok()) {
      f.error = started.status();
      return absl::OkStatus();
    }
    f.push = *std::move(started);
    f.payload = service_->buffers()->Acquire(f.payload_bytes);
    f.push->Attach(f.payload->data());
    return absl::OkStatus();
  }

  // The whole frame is in: push, then pull (after waiting), then reply.
  void Process() {
    Frame& f = *frame_;
    if (!f.error.ok()) {
      Reply(f.error);
      return;
    }
    if (f.push != nullptr) {
      absl::StatusOr<v1::PushVariablesResponse> pushed = f.push->Finish();
      f.push.reset();
      f.payload.reset();
      if (!pushed.ok()) {
        Reply(pushed.status());
        return;
      }
      *f.reply.mutable_push() = *std::move(pushed);
    }
    const v1::PullVariablesRequest& pull = f.request.pull();
    if (pull.names().empty()) {
      Reply(absl::OkStatus());
      return;
    }
    if (absl::Status s = ValidatePullVariablesRequest(pull); !s.ok()) {
      Reply(s);
      return;
    }
    for (const std::string& name : pull.names()) {
      absl::Status s = service_->store()->CheckOwner(f.call.caller(), name);
      absl::StatusOr<std::shared_ptr<Variable>> v =
          s.ok() ? service_->store()->Get(name)
                 : absl::StatusOr<std::shared_ptr<Variable>>(s);
      if (!v.ok()) {
        f.name = name;
        Reply(v.status());
        return;
      }
      f.pulled.push_back(*std::move(v));
    }
    f.wait = std::make_unique<ReadyWait>();
    // `done` may run on a push's or the timer's thread; nothing else of
    // this reactor runs meanwhile (no read or write is outstanding).
    f.wait->Start(service_->timer(), service_->options().max_pull_wait, ctx_,
                  f.pulled, pull.min_version(), pull.clock(),
                  [this](const absl::Status& s, const std::string& name) {
                    if (!s.ok()) {
                      frame_->name = name;
                      Reply(s);
                      return;
                    }
                    *frame_->reply.mutable_pull() = MakePullVariablesPayload(
                        frame_->pulled, &frame_->buffers);
                    Reply(absl::OkStatus());
                  });
  }

  // Writes the frame's reply (and on success the pulled values).
  void Reply(const absl::Status& status) {
    Frame& f = *frame_;
    f.reply.set_id(f.request.id());
    if (!status.ok()) {
      f.reply.Clear();
      f.reply.set_id(f.request.id());
      f.reply.set_code(static_cast<int>(status.code()));
      f.reply.set_message(std::string(status.message()));
      f.buffers.clear();
    }
    f.status = status;
    f.header = f.reply.SerializeAsString();
    f.total = 0;
    for (const auto& b : f.buffers) f.total += b->size();
    if (f.total > 0) service_->store()->RecordPull(static_cast<int64_t>(f.total));
    WriteNext();
  }

  void WriteNext() {
    Frame& f = *frame_;
    const size_t chunk = service_->options().chunk_bytes;
    while (f.index < f.buffers.size() && f.pos >= f.buffers[f.index]->size()) {
      ++f.index;
      f.pos = 0;
    }
    if (f.sent_header && f.index >= f.buffers.size()) {
      // The reply is out: read the next frame.
      frame_.reset();
      ReadFrame();
      return;
    }
    if (f.index >= f.buffers.size()) {
      out_ = EncodeChunk(f.header, 0, nullptr, 0, nullptr);
    } else {
      const auto& buffer = f.buffers[f.index];
      const size_t n = std::min(chunk, buffer->size() - f.pos);
      out_ = EncodeChunk(f.sent_header ? absl::string_view() : f.header,
                         static_cast<int64_t>(f.offset),
                         buffer->data() + f.pos, n, buffer);
      f.pos += n;
      f.offset += n;
    }
    f.sent_header = true;
    if (f.offset >= f.total) {
      // The reply's last chunk: the frame is accounted before its client
      // can see the answer.
      f.call.End(f.status, f.name, static_cast<int64_t>(f.received),
                 static_cast<int64_t>(f.total));
    }
    StartWrite(&out_);
  }

  // Ends the stream with `status`, once.
  void End(const absl::Status& status) {
    if (!stream_call_.End(status)) return;
    frame_.reset();
    Finish(ToGrpcStatus(status));
  }

  ParameterServiceImpl* const service_;
  grpc::CallbackServerContext* const ctx_;
  ServiceCall stream_call_;
  grpc::ByteBuffer message_;
  grpc::ByteBuffer out_;
  std::optional<Frame> frame_;
  bool registered_ = false;
  // Waiting for a frame's first chunk (EndIfIdle may end the stream).
  std::atomic<bool> idle_{false};
  std::atomic<bool> closing_{false};
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
ParameterServiceImpl::Lane(grpc::CallbackServerContext* ctx) {
  return StartAuthorized(new LaneReactor(this, ctx), ctx, Role::kWorker);
}

}  // namespace strata

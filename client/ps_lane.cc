#include "client/ps_lane.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/completion_queue.h"
#include "proto/chunk_codec.h"
#include "rpc/grpc_status.h"

namespace strata {
namespace {

constexpr char kLaneMethod[] = "/strata.v1.ParameterService/Lane";

void* const kOpTag = reinterpret_cast<void*>(1);
void* const kFinishTag = reinterpret_cast<void*>(2);

std::chrono::system_clock::time_point ToChrono(absl::Time t) {
  return absl::ToChronoTime(t);
}

}  // namespace

struct StreamLane::Stream {
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> rw;
  bool pending = false;  // an operation's tag is still to come

  // Waits for the pending operation without a deadline (after a cancel
  // it completes promptly), then collects the status and drains the queue.
  grpc::Status Close() {
    void* tag = nullptr;
    bool ok = false;
    while (pending && cq.Next(&tag, &ok)) {
      if (tag == kOpTag) pending = false;
    }
    grpc::Status status;
    if (rw != nullptr) {
      rw->Finish(&status, kFinishTag);
      while (cq.Next(&tag, &ok)) {
        if (tag == kFinishTag) break;
      }
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  }
};

StreamLane::StreamLane(std::shared_ptr<grpc::Channel> channel,
                       size_t chunk_bytes)
    : channel_(std::move(channel)),
      chunk_bytes_(std::max<size_t>(chunk_bytes, 1)),
      stub_(channel_) {}

StreamLane::~StreamLane() {
  if (stream_ != nullptr) {
    stream_->ctx.TryCancel();
    stream_->Close();
  }
}

bool StreamLane::Await(absl::Time deadline, bool* timed_out) {
  *timed_out = false;
  void* tag = nullptr;
  bool ok = false;
  switch (stream_->cq.AsyncNext(&tag, &ok, ToChrono(deadline))) {
    case grpc::CompletionQueue::GOT_EVENT:
      stream_->pending = false;
      failed_ = !ok;
      return ok;
    case grpc::CompletionQueue::TIMEOUT:
      *timed_out = true;
      return false;
    case grpc::CompletionQueue::SHUTDOWN:
      break;
  }
  stream_->pending = false;
  return false;
}

absl::Status StreamLane::Break(absl::string_view what, bool timed_out) {
  // A failed read or write means the call is over: its status is the
  // server's (or the connection's). Otherwise (no answer in time, or an
  // answer this end cannot use) the call is cancelled.
  if (timed_out || !failed_) stream_->ctx.TryCancel();
  failed_ = false;
  const grpc::Status status = stream_->Close();
  stream_.reset();
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("lane: no answer to ", what, " in time"));
  }
  // The server's status when it ended the stream; a connection that broke
  // (or a stream the server closed cleanly mid-frame) is UNAVAILABLE.
  if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
    return FromGrpcStatus(status);
  }
  return absl::UnavailableError(
      absl::StrCat("lane: the stream broke during ", what));
}

absl::Status StreamLane::Open(absl::Time deadline) {
  stream_ = std::make_unique<Stream>();
  stream_->rw = stub_.PrepareCall(&stream_->ctx, kLaneMethod, &stream_->cq);
  if (stream_->rw == nullptr) {
    stream_.reset();
    return absl::UnavailableError("lane: cannot start a stream");
  }
  stream_->rw->StartCall(kOpTag);
  stream_->pending = true;
  bool timed_out = false;
  if (!Await(deadline, &timed_out)) return Break("the stream's start", timed_out);
  return absl::OkStatus();
}

absl::Status StreamLane::Write(grpc::ByteBuffer* message, absl::Time deadline,
                               absl::string_view what) {
  stream_->rw->Write(*message, kOpTag);
  stream_->pending = true;
  bool timed_out = false;
  if (!Await(deadline, &timed_out)) return Break(what, timed_out);
  return absl::OkStatus();
}

absl::Status StreamLane::Read(grpc::ByteBuffer* message, absl::Time deadline,
                              absl::string_view what) {
  stream_->rw->Read(message, kOpTag);
  stream_->pending = true;
  bool timed_out = false;
  if (!Await(deadline, &timed_out)) return Break(what, timed_out);
  return absl::OkStatus();
}

absl::StatusOr<v1::LaneReply> StreamLane::Exchange(
    v1::LaneRequest request, absl::Span<const absl::string_view> payload,
    const std::vector<void*>& dsts, const std::vector<size_t>& sizes,
    absl::Duration timeout) {
  if (dsts.size() != sizes.size()) {
    return absl::InvalidArgumentError(
        "lane: destinations and sizes differ in count");
  }
  const absl::Time deadline = absl::Now() + timeout;
  if (stream_ == nullptr) STRATA_RETURN_IF_ERROR(Open(deadline));
  const uint64_t id = next_id_++;
  request.set_id(id);
  const std::string what = absl::StrCat("frame ", id);

  // The frame: the header in the first chunk, the payload segments in
  // chunks of at most chunk_bytes_ that alias the caller's memory (it
  // outlives the frame: the reply comes after the server read them all).
  const std::string header = request.SerializeAsString();
  grpc::ByteBuffer message;
  bool header_sent = false;
  int64_t offset = 0;
  for (absl::string_view segment : payload) {
    for (size_t pos = 0; pos < segment.size();) {
      const size_t n = std::min(chunk_bytes_, segment.size() - pos);
      message = EncodeChunk(header_sent ? absl::string_view() : header, offset,
                            segment.data() + pos, n, nullptr);
      header_sent = true;
      pos += n;
      offset += static_cast<int64_t>(n);
      STRATA_RETURN_IF_ERROR(Write(&message, deadline, what));
    }
  }
  if (!header_sent) {
    message = EncodeChunk(header, 0, nullptr, 0, nullptr);
    STRATA_RETURN_IF_ERROR(Write(&message, deadline, what));
  }

  // The reply: a LaneReply, then the pulled values.
  grpc::ByteBuffer in;
  STRATA_RETURN_IF_ERROR(Read(&in, deadline, what));
  DecodedChunk chunk;
  v1::LaneReply reply;
  absl::Status decoded = DecodeChunk(in, &chunk);
  if (decoded.ok() && (!chunk.has_header || !reply.ParseFromString(chunk.header) ||
                       reply.id() != id ||
                       (reply.code() != 0 && chunk.data_size != 0))) {
    decoded = absl::InternalError(
        absl::StrCat("lane: the answer to ", what, " is not its LaneReply"));
  }
  if (!decoded.ok()) {
    (void)Break(what, false);
    return decoded;
  }
  if (reply.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(reply.code()),
                        reply.message());
  }
  const v1::PullVariablesHeader& pulled = reply.pull();
  std::vector<size_t> starts;
  size_t total = 0;
  absl::Status shape_error;
  if (pulled.variables_size() != static_cast<int>(dsts.size())) {
    shape_error = absl::InternalError(absl::StrCat(
        "lane: ", what, " pulled ", pulled.variables_size(),
        " variables for ", dsts.size(), " destinations"));
  }
  for (int i = 0; shape_error.ok() && i < pulled.variables_size(); ++i) {
    const int64_t bytes = pulled.variables(i).bytes();
    if (bytes < 0 || static_cast<size_t>(bytes) != sizes[i]) {
      shape_error = absl::InvalidArgumentError(absl::StrCat(
          "pull: variable '", pulled.variables(i).name(), "' has ", bytes,
          " bytes, the destination has ", sizes[i]));
    }
    starts.push_back(total);
    total += static_cast<size_t>(bytes);
  }
  if (shape_error.ok() && pulled.payload_bytes() != static_cast<int64_t>(total)) {
    shape_error = absl::InternalError(absl::StrCat(
        "lane: ", what, " announces ", pulled.payload_bytes(),
        " payload bytes for variables of ", total));
  }
  if (!shape_error.ok()) {
    // The values that follow have nowhere to go: drop the stream.
    (void)Break(what, false);
    return shape_error;
  }
  // The values: the header's chunk may carry the first of them.
  size_t received = 0;
  bool first = true;
  while (received < total) {
    absl::Status s;
    if (!first || chunk.data_size == 0) {
      in.Clear();
      STRATA_RETURN_IF_ERROR(Read(&in, deadline, what));
      chunk = DecodedChunk();
      s = DecodeChunk(in, &chunk);
      if (s.ok() && chunk.has_header) {
        s = absl::InternalError(
            absl::StrCat("lane: ", what, ": a header repeated in a chunk"));
      }
    }
    first = false;
    const size_t at = static_cast<size_t>(chunk.offset);
    if (s.ok() && (at != received || at + chunk.data_size > total ||
                   chunk.data_size == 0)) {
      s = absl::InternalError(absl::StrCat(
          "lane: ", what, ": chunk at offset ", at, " of ", chunk.data_size,
          " bytes does not follow ", received, " of ", total));
    }
    size_t i = 0;
    if (s.ok()) {
      i = std::upper_bound(starts.begin(), starts.end(), at) - starts.begin() -
          1;
      // Empty variables share their start with the next one.
      while (i + 1 < starts.size() && starts[i + 1] == at) ++i;
      if (at + chunk.data_size > starts[i] + sizes[i]) {
        s = absl::InternalError(
            absl::StrCat("lane: ", what, ": a chunk spans two variables"));
      }
    }
    if (!s.ok()) {
      (void)Break(what, false);
      return s;
    }
    chunk.CopyDataTo(static_cast<char*>(dsts[i]) + (at - starts[i]));
    received += chunk.data_size;
  }
  return reply;
}

}  // namespace strata

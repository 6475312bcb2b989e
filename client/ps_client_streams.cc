#include "client/ps_client_streams.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "grpcpp/support/client_callback.h"
#include "proto/chunk_codec.h"
#include "rpc/grpc_status.h"

namespace strata {
namespace {

constexpr char kPullMethod[] = "/strata.v1.ParameterService/Pull";
constexpr char kPullVariablesMethod[] =
    "/strata.v1.ParameterService/PullVariables";

// Client side of Push and Assign: streams the payload segments in chunks
// (first chunk carries the header), then reads the one response.
class UploadReactor final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  UploadReactor(const std::string& header,
                absl::Span<const absl::string_view> payload,
                size_t chunk_bytes)
      : header_(header), payload_(payload), chunk_bytes_(chunk_bytes) {}

  void Go() {
    StartRead(&response_);
    WriteNext();
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the server ended the call; OnDone has its status
    WriteNext();
  }
  void OnReadDone(bool ok) override { got_response_ = ok; }
  void OnDone(const grpc::Status& status) override {
    status_ = status;
    done_.Notify();
  }

  absl::StatusOr<std::string> Wait() {
    done_.WaitForNotification();
    if (!status_.ok()) return FromGrpcStatus(status_);
    if (!got_response_) {
      return absl::InternalError("server closed the call without a response");
    }
    return ByteBufferToString(response_);
  }

 private:
  void WriteNext() {
    // Skip exhausted segments.
    while (segment_ < payload_.size() && pos_ >= payload_[segment_].size()) {
      ++segment_;
      pos_ = 0;
    }
    if (segment_ >= payload_.size()) {
      if (!header_sent_) {
        header_sent_ = true;
        message_ = EncodeChunk(header_, 0, nullptr, 0, nullptr);
        StartWrite(&message_);
        return;
      }
      StartWritesDone();
      return;
    }
    absl::string_view seg = payload_[segment_];
    size_t n = std::min(chunk_bytes_, seg.size() - pos_);
    message_ = EncodeChunk(header_sent_ ? absl::string_view() : header_,
                           static_cast<int64_t>(offset_), seg.data() + pos_, n,
                           nullptr);
    header_sent_ = true;
    pos_ += n;
    offset_ += n;
    StartWrite(&message_);
  }

  const std::string& header_;
  absl::Span<const absl::string_view> payload_;
  const size_t chunk_bytes_;
  size_t segment_ = 0;
  size_t pos_ = 0;
  size_t offset_ = 0;
  bool header_sent_ = false;
  grpc::ByteBuffer message_;
  grpc::ByteBuffer response_;
  bool got_response_ = false;
  grpc::Status status_;
  absl::Notification done_;
};

// Client side of the server-streaming pulls: writes the request, reads
// TensorChunk messages, and copies each chunk once into the destination the
// subclass names for it.
class ChunkStreamReader
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  ChunkStreamReader(grpc::ClientContext* ctx, std::string request)
      : ctx_(ctx), request_(StringToByteBuffer(std::move(request))) {}

  void Go() {
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&message_);
    StartCall();
  }

  void OnWriteDone(bool ok) override {}
  void OnReadDone(bool ok) override {
    if (!ok) return;
    absl::Status s = Consume();
    if (!s.ok()) {
      local_error_ = s;
      ctx_->TryCancel();
      return;
    }
    message_.Clear();
    StartRead(&message_);
  }
  void OnDone(const grpc::Status& status) override {
    status_ = status;
    done_.Notify();
  }

 protected:
  // Parses the first chunk's header; returns the payload size.
  virtual absl::StatusOr<size_t> OnHeader(const std::string& header) = 0;
  // Where the `n` payload bytes at `offset` go (they never span two
  // destinations); null when they would.
  virtual char* Destination(size_t offset, size_t n) = 0;

  // Waits for the end of the call; OK when the whole payload arrived.
  absl::Status WaitDone() {
    done_.WaitForNotification();
    if (!local_error_.ok()) return local_error_;
    if (!status_.ok()) return FromGrpcStatus(status_);
    if (!header_seen_) {
      return absl::InternalError("pull stream ended without a header");
    }
    if (received_ != total_) {
      return absl::DataLossError(absl::StrCat(
          "pull stream ended after ", received_, " of ", total_, " bytes"));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Consume() {
    DecodedChunk chunk;
    STRATA_RETURN_IF_ERROR(DecodeChunk(message_, &chunk));
    if (!header_seen_) {
      if (!chunk.has_header) {
        return absl::InternalError("pull stream: first chunk has no header");
      }
      header_seen_ = true;
      STRATA_ASSIGN_OR_RETURN(total_, OnHeader(chunk.header));
    }
    if (chunk.data_size == 0) return absl::OkStatus();
    const size_t at = static_cast<size_t>(chunk.offset);
    if (at != received_ || at + chunk.data_size > total_) {
      return absl::InternalError(absl::StrCat(
          "pull stream: chunk at offset ", at, " of ", chunk.data_size,
          " bytes does not follow ", received_, " of ", total_));
    }
    char* dst = Destination(at, chunk.data_size);
    if (dst == nullptr) {
      return absl::InternalError("pull stream: chunk spans two variables");
    }
    chunk.CopyDataTo(dst);
    received_ += chunk.data_size;
    return absl::OkStatus();
  }

  grpc::ClientContext* const ctx_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer message_;
  bool header_seen_ = false;
  size_t total_ = 0;
  size_t received_ = 0;
  absl::Status local_error_;
  grpc::Status status_;
  absl::Notification done_;
};

// Client side of Pull: one variable (or rows) into one buffer, allocated on
// the header when `alloc` is set.
class PullReactor final : public ChunkStreamReader {
 public:
  PullReactor(grpc::ClientContext* ctx, const v1::PullRequest& request,
              void* dst, size_t dst_bytes, std::shared_ptr<Buffer>* alloc)
      : ChunkStreamReader(ctx, request.SerializeAsString()),
        dst_(static_cast<char*>(dst)),
        dst_bytes_(dst_bytes),
        alloc_(alloc) {}

  absl::StatusOr<PullResult> Wait() {
    STRATA_RETURN_IF_ERROR(WaitDone());
    return result_;
  }

 private:
  absl::StatusOr<size_t> OnHeader(const std::string& bytes) override {
    v1::PullHeader header;
    if (!header.ParseFromString(bytes) || header.dtype() == v1::DT_INVALID) {
      return absl::InternalError("pull stream: bad PullHeader");
    }
    result_.dtype = static_cast<DType>(header.dtype());
    result_.shape.assign(header.shape().begin(), header.shape().end());
    result_.version = header.version();
    const size_t payload = static_cast<size_t>(header.payload_bytes());
    if (alloc_ != nullptr) {
      *alloc_ = Buffer::Allocate(payload, /*zero=*/false);
      dst_ = (*alloc_)->data();
      dst_bytes_ = payload;
    } else if (payload != dst_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pull: the variable has ", payload, " bytes (",
          DTypeName(result_.dtype), " ", ShapeString(result_.shape),
          "), the destination has ", dst_bytes_));
    }
    return payload;
  }

  char* Destination(size_t offset, size_t n) override { return dst_ + offset; }

  char* dst_;
  size_t dst_bytes_;
  std::shared_ptr<Buffer>* alloc_;
  PullResult result_;
};

// Client side of PullVariables: scatters chunks to one destination per
// variable.
class PullVariablesReactor final : public ChunkStreamReader {
 public:
  PullVariablesReactor(grpc::ClientContext* ctx,
                       const v1::PullVariablesRequest& request,
                       const std::vector<void*>& dsts,
                       const std::vector<size_t>& sizes)
      : ChunkStreamReader(ctx, request.SerializeAsString()),
        names_(request.names().begin(), request.names().end()),
        dsts_(dsts),
        sizes_(sizes) {}

  absl::StatusOr<std::vector<int64_t>> Wait() {
    STRATA_RETURN_IF_ERROR(WaitDone());
    return versions_;
  }

 private:
  absl::StatusOr<size_t> OnHeader(const std::string& bytes) override {
    v1::PullVariablesHeader header;
    if (!header.ParseFromString(bytes) ||
        header.variables_size() != static_cast<int>(names_.size())) {
      return absl::InternalError("pull stream: bad PullVariablesHeader");
    }
    size_t offset = 0;
    for (int i = 0; i < header.variables_size(); ++i) {
      const v1::VariableSlot& slot = header.variables(i);
      if (static_cast<size_t>(slot.bytes()) != sizes_[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pull: variable '", names_[i], "' has ", slot.bytes(),
            " bytes, the destination has ", sizes_[i]));
      }
      starts_.push_back(offset);
      offset += static_cast<size_t>(slot.bytes());
      versions_.push_back(slot.version());
    }
    return offset;
  }

  char* Destination(size_t offset, size_t n) override {
    // The last variable starting at or before `offset` (skipping empty ones).
    size_t i = std::upper_bound(starts_.begin(), starts_.end(), offset) -
               starts_.begin() - 1;
    if (offset + n > starts_[i] + sizes_[i]) return nullptr;
    return static_cast<char*>(dsts_[i]) + (offset - starts_[i]);
  }

  const std::vector<std::string> names_;
  const std::vector<void*>& dsts_;
  const std::vector<size_t>& sizes_;
  std::vector<size_t> starts_;
  std::vector<int64_t> versions_;
};

}  // namespace

void SetDeadline(grpc::ClientContext* ctx, absl::Duration d) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(d));
}

absl::StatusOr<std::string> UploadChunks(
    grpc::GenericStub& stub, const char* method, absl::Duration deadline,
    const std::string& header, absl::Span<const absl::string_view> payload,
    size_t chunk_bytes) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  UploadReactor reactor(header, payload, chunk_bytes);
  stub.PrepareBidiStreamingCall(&ctx, method, grpc::StubOptions(), &reactor);
  reactor.Go();
  return reactor.Wait();
}

absl::StatusOr<PullResult> PullChunks(grpc::GenericStub& stub,
                                      absl::Duration deadline,
                                      const v1::PullRequest& request,
                                      void* dst, size_t dst_bytes,
                                      std::shared_ptr<Buffer>* alloc) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  PullReactor reactor(&ctx, request, dst, dst_bytes, alloc);
  stub.PrepareBidiStreamingCall(&ctx, kPullMethod, grpc::StubOptions(),
                                &reactor);
  reactor.Go();
  return reactor.Wait();
}

absl::StatusOr<std::vector<int64_t>> PullVariablesChunks(
    grpc::GenericStub& stub, absl::Duration deadline,
    const v1::PullVariablesRequest& request, const std::vector<void*>& dsts,
    const std::vector<size_t>& sizes) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  PullVariablesReactor reactor(&ctx, request, dsts, sizes);
  stub.PrepareBidiStreamingCall(&ctx, kPullVariablesMethod,
                                grpc::StubOptions(), &reactor);
  reactor.Go();
  return reactor.Wait();
}

}  // namespace strata

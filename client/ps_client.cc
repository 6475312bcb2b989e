#include "client/ps_client.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_callback.h"
#include "proto/chunk_codec.h"

namespace strata {
namespace {

constexpr char kPushMethod[] = "/strata.v1.ParameterService/Push";
constexpr char kAssignMethod[] = "/strata.v1.ParameterService/Assign";
constexpr char kPullMethod[] = "/strata.v1.ParameterService/Pull";
constexpr char kPullVariablesMethod[] =
    "/strata.v1.ParameterService/PullVariables";
constexpr char kPushVariablesMethod[] =
    "/strata.v1.ParameterService/PushVariables";

// Row ids per pull request, keeping requests far below gRPC's 4 MiB limit.
constexpr size_t kMaxIdsPerPull = 256 * 1024;

void SetDeadline(grpc::ClientContext* ctx, absl::Duration d) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(d));
}

// Blocks until Done() is called.
class Latch {
 public:
  void Done() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

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
    latch_.Done();
  }

  absl::StatusOr<std::string> Wait() {
    latch_.Wait();
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
  Latch latch_;
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
    latch_.Done();
  }

 protected:
  // Parses the first chunk's header; returns the payload size.
  virtual absl::StatusOr<size_t> OnHeader(const std::string& header) = 0;
  // Where the `n` payload bytes at `offset` go (they never span two
  // destinations); null when they would.
  virtual char* Destination(size_t offset, size_t n) = 0;

  // Waits for the end of the call; OK when the whole payload arrived.
  absl::Status WaitDone() {
    latch_.Wait();
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
  Latch latch_;
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

std::unique_ptr<PsClient> PsClient::Connect(const std::string& target,
                                            const PsClientOptions& options) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  const int n = std::max(1, options.num_channels);
  for (int i = 0; i < n; ++i) {
    grpc::ChannelArguments args;
    // Distinct arguments plus a local subchannel pool give each channel its
    // own TCP connection.
    args.SetInt("strata.channel_index", i);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(8 << 20);
    ApplyDataPlaneChannelArgs(&args);
    channels.push_back(CreateChannel(target, options.security, args));
  }
  return FromChannels(std::move(channels), options, target);
}

std::unique_ptr<PsClient> PsClient::FromChannels(
    std::vector<std::shared_ptr<grpc::Channel>> channels,
    const PsClientOptions& options, const std::string& target) {
  return std::unique_ptr<PsClient>(
      new PsClient(std::move(channels), options, target));
}

PsClient::PsClient(std::vector<std::shared_ptr<grpc::Channel>> channels,
                   const PsClientOptions& options, std::string target)
    : options_(options), target_(std::move(target)) {
  for (auto& ch : channels) {
    Conn c;
    c.channel = ch;
    c.stub = v1::ParameterService::NewStub(ch);
    c.generic = std::make_unique<grpc::GenericStub>(ch);
    conns_.push_back(std::move(c));
  }
}

PsClient::~PsClient() = default;

PsClient::Conn& PsClient::Next() {
  return conns_[next_.fetch_add(1, std::memory_order_relaxed) % conns_.size()];
}

absl::Duration PsClient::Backoff(int attempt) const {
  absl::Duration d = options_.initial_backoff;
  for (int i = 1; i < attempt && d < options_.max_backoff; ++i) d *= 2;
  return std::min(d, options_.max_backoff);
}

// Runs `fn` (returning StatusOr) until it succeeds or fails with a code other
// than UNAVAILABLE, or attempts run out.
#define STRATA_RETRY_LOOP(result, fn)                                  \
  for (int attempt = 1;; ++attempt) {                                  \
    result = (fn);                                                     \
    if (result.ok() ||                                                 \
        result.status().code() != absl::StatusCode::kUnavailable ||    \
        attempt >= options_.max_attempts) {                            \
      break;                                                           \
    }                                                                  \
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(Backoff(attempt))); \
  }

absl::StatusOr<bool> PsClient::CreateVariable(const v1::VariableSpec& spec) {
  v1::CreateVariableRequest req;
  *req.mutable_spec() = spec;
  absl::StatusOr<bool> result;
  STRATA_RETRY_LOOP(result, ([&]() -> absl::StatusOr<bool> {
                      grpc::ClientContext ctx;
                      SetDeadline(&ctx, options_.deadline);
                      v1::CreateVariableResponse resp;
                      grpc::Status s =
                          Next().stub->CreateVariable(&ctx, req, &resp);
                      if (!s.ok()) return FromGrpcStatus(s);
                      return resp.created();
                    })());
  return result;
}

absl::StatusOr<PullResult> PsClient::PullOnce(Conn& conn,
                                              const v1::PullRequest& request,
                                              void* dst, size_t dst_bytes,
                                              std::shared_ptr<Buffer>* alloc) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.deadline);
  PullReactor reactor(&ctx, request, dst, dst_bytes, alloc);
  conn.generic->PrepareBidiStreamingCall(&ctx, kPullMethod, grpc::StubOptions(),
                                         &reactor);
  reactor.Go();
  return reactor.Wait();
}

absl::StatusOr<PullResult> PsClient::Pull(const std::string& name, void* dst,
                                          size_t dst_bytes,
                                          const PullOptions& options) {
  v1::PullRequest req;
  req.set_name(name);
  req.set_min_version(options.min_version);
  req.set_clock(options.clock);
  req.set_worker(options.worker);
  absl::StatusOr<PullResult> result;
  STRATA_RETRY_LOOP(result, PullOnce(Next(), req, dst, dst_bytes, nullptr));
  return result;
}

absl::StatusOr<Tensor> PsClient::PullTensor(const std::string& name,
                                            const PullOptions& options,
                                            int64_t* version) {
  v1::PullRequest req;
  req.set_name(name);
  req.set_min_version(options.min_version);
  req.set_clock(options.clock);
  req.set_worker(options.worker);
  std::shared_ptr<Buffer> buffer;
  absl::StatusOr<PullResult> result;
  STRATA_RETRY_LOOP(result, PullOnce(Next(), req, nullptr, 0, &buffer));
  if (!result.ok()) return result.status();
  if (version != nullptr) *version = result->version;
  Tensor t;
  t.dtype = result->dtype;
  t.shape = result->shape;
  t.buffer = std::move(buffer);
  return t;
}

absl::StatusOr<PullResult> PsClient::PullRows(const std::string& name,
                                              absl::Span<const int64_t> ids,
                                              void* dst, size_t dst_bytes,
                                              const PullOptions& options) {
  if (ids.empty()) {
    // Still ask the server, so an unknown or non-2-D variable is reported.
  } else if (dst_bytes % ids.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull rows of '", name, "': destination of ", dst_bytes,
        " bytes is not a whole number of ", ids.size(), " rows"));
  }
  const size_t row_bytes = ids.empty() ? 0 : dst_bytes / ids.size();
  PullResult total;
  size_t done = 0;
  do {
    size_t n = std::min(kMaxIdsPerPull, ids.size() - done);
    v1::PullRequest req;
    req.set_name(name);
    req.set_rows(true);
    req.set_min_version(options.min_version);
    req.set_clock(options.clock);
    req.set_worker(options.worker);
    req.mutable_row_ids()->Add(ids.begin() + done, ids.begin() + done + n);
    absl::StatusOr<PullResult> result;
    STRATA_RETRY_LOOP(result,
                      PullOnce(Next(), req, static_cast<char*>(dst) +
                                                done * row_bytes,
                               n * row_bytes, nullptr));
    if (!result.ok()) return result.status();
    if (done == 0) {
      total = *result;
    }
    done += n;
  } while (done < ids.size());
  if (!total.shape.empty()) total.shape[0] = static_cast<int64_t>(ids.size());
  return total;
}

absl::StatusOr<std::string> PsClient::UploadOnce(
    Conn& conn, const char* method, const std::string& header,
    absl::Span<const absl::string_view> payload) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.deadline);
  UploadReactor reactor(header, payload, options_.chunk_bytes);
  conn.generic->PrepareBidiStreamingCall(&ctx, method, grpc::StubOptions(),
                                         &reactor);
  reactor.Go();
  return reactor.Wait();
}

absl::StatusOr<PushResult> PsClient::PushPayload(
    const std::string& name, v1::PushHeader header,
    std::vector<absl::string_view> payload) {
  int64_t bytes = 0;
  for (auto p : payload) bytes += static_cast<int64_t>(p.size());
  header.set_name(name);
  header.set_payload_bytes(bytes);
  absl::StatusOr<std::string> raw;
  int attempts = 0;
  for (int attempt = 1;; ++attempt) {
    attempts = attempt;
    // A retry carries a new attempt id and the same (job, worker, step):
    // the server applies the push at most once.
    header.mutable_tag()->set_attempt(attempt - 1);
    raw = UploadOnce(Next(), kPushMethod, header.SerializeAsString(), payload);
    if (raw.ok() || raw.status().code() != absl::StatusCode::kUnavailable ||
        attempt >= options_.max_attempts) {
      break;
    }
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(Backoff(attempt)));
  }
  if (!raw.ok()) return raw.status();
  v1::PushResponse resp;
  if (!resp.ParseFromString(*raw)) {
    return absl::InternalError("push: the response is not a PushResponse");
  }
  PushResult r;
  r.version = resp.version();
  r.duplicate = resp.duplicate();
  r.applied = resp.applied();
  r.attempts = attempts;
  return r;
}

absl::StatusOr<PushResult> PsClient::Push(const std::string& name, DType dtype,
                                          const Shape& shape, const void* data,
                                          const PushTag& tag) {
  v1::PushHeader header;
  header.set_dtype(static_cast<v1::DType>(dtype));
  for (int64_t d : shape) header.add_shape(d);
  header.mutable_tag()->set_job(tag.job);
  header.mutable_tag()->set_worker(tag.worker);
  header.mutable_tag()->set_step(tag.step);
  header.mutable_tag()->set_group(tag.group);
  header.mutable_tag()->set_group_size(tag.group_size);
  size_t bytes = NumElements(shape) * DTypeSize(dtype);
  return PushPayload(
      name, std::move(header),
      {absl::string_view(static_cast<const char*>(data), bytes)});
}

absl::StatusOr<PushResult> PsClient::PushRows(const std::string& name,
                                              DType dtype,
                                              absl::Span<const int64_t> ids,
                                              int64_t row_width,
                                              const void* values,
                                              const PushTag& tag) {
  v1::PushHeader header;
  header.set_dtype(static_cast<v1::DType>(dtype));
  header.add_shape(static_cast<int64_t>(ids.size()));
  header.add_shape(row_width);
  header.set_rows(true);
  header.set_num_rows(static_cast<int64_t>(ids.size()));
  header.mutable_tag()->set_job(tag.job);
  header.mutable_tag()->set_worker(tag.worker);
  header.mutable_tag()->set_step(tag.step);
  header.mutable_tag()->set_group(tag.group);
  header.mutable_tag()->set_group_size(tag.group_size);
  size_t value_bytes = ids.size() * row_width * DTypeSize(dtype);
  return PushPayload(
      name, std::move(header),
      {absl::string_view(reinterpret_cast<const char*>(ids.data()),
                         ids.size() * sizeof(int64_t)),
       absl::string_view(static_cast<const char*>(values), value_bytes)});
}

absl::StatusOr<std::vector<int64_t>> PsClient::PullVariablesOnce(
    Conn& conn, const v1::PullVariablesRequest& request,
    const std::vector<void*>& dsts, const std::vector<size_t>& sizes) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.deadline);
  PullVariablesReactor reactor(&ctx, request, dsts, sizes);
  conn.generic->PrepareBidiStreamingCall(&ctx, kPullVariablesMethod,
                                         grpc::StubOptions(), &reactor);
  reactor.Go();
  return reactor.Wait();
}

absl::StatusOr<std::vector<int64_t>> PsClient::PullVariables(
    const std::vector<std::string>& names, const std::vector<void*>& dsts,
    const std::vector<size_t>& sizes, const PullOptions& options) {
  if (names.size() != dsts.size() || names.size() != sizes.size()) {
    return absl::InvalidArgumentError(
        "PullVariables: names, destinations and sizes differ in count");
  }
  v1::PullVariablesRequest req;
  for (const auto& n : names) req.add_names(n);
  req.set_min_version(options.min_version);
  req.set_clock(options.clock);
  req.set_worker(options.worker);
  absl::StatusOr<std::vector<int64_t>> result;
  STRATA_RETRY_LOOP(result, PullVariablesOnce(Next(), req, dsts, sizes));
  return result;
}

absl::StatusOr<std::vector<PushResult>> PsClient::PushVariables(
    const std::vector<std::string>& names, DType dtype,
    const std::vector<Shape>& shapes, const std::vector<const void*>& data,
    const PushTag& tag) {
  if (names.size() != shapes.size() || names.size() != data.size()) {
    return absl::InvalidArgumentError(
        "PushVariables: names, shapes and data differ in count");
  }
  v1::PushVariablesHeader header;
  std::vector<absl::string_view> payload;
  int64_t total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const size_t bytes = NumElements(shapes[i]) * DTypeSize(dtype);
    v1::VariableSlot* slot = header.add_variables();
    slot->set_name(names[i]);
    slot->set_dtype(static_cast<v1::DType>(dtype));
    for (int64_t d : shapes[i]) slot->add_shape(d);
    slot->set_bytes(static_cast<int64_t>(bytes));
    payload.emplace_back(static_cast<const char*>(data[i]), bytes);
    total += static_cast<int64_t>(bytes);
  }
  header.set_payload_bytes(total);
  header.mutable_tag()->set_job(tag.job);
  header.mutable_tag()->set_worker(tag.worker);
  header.mutable_tag()->set_step(tag.step);
  header.mutable_tag()->set_group(tag.group);
  header.mutable_tag()->set_group_size(tag.group_size);
  absl::StatusOr<std::string> raw;
  int attempts = 0;
  for (int attempt = 1;; ++attempt) {
    attempts = attempt;
    header.mutable_tag()->set_attempt(attempt - 1);
    raw = UploadOnce(Next(), kPushVariablesMethod, header.SerializeAsString(),
                     payload);
    if (raw.ok() || raw.status().code() != absl::StatusCode::kUnavailable ||
        attempt >= options_.max_attempts) {
      break;
    }
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(Backoff(attempt)));
  }
  if (!raw.ok()) return raw.status();
  v1::PushVariablesResponse resp;
  if (!resp.ParseFromString(*raw) ||
      resp.results_size() != static_cast<int>(names.size())) {
    return absl::InternalError(
        "PushVariables: the response is not a PushVariablesResponse");
  }
  std::vector<PushResult> out;
  for (const auto& r : resp.results()) {
    PushResult p;
    p.version = r.version();
    p.duplicate = r.duplicate();
    p.applied = r.applied();
    p.attempts = attempts;
    out.push_back(p);
  }
  return out;
}

absl::StatusOr<int64_t> PsClient::Assign(const std::string& name, DType dtype,
                                         const Shape& shape,
                                         const void* data) {
  v1::AssignHeader header;
  header.set_name(name);
  header.set_dtype(static_cast<v1::DType>(dtype));
  for (int64_t d : shape) header.add_shape(d);
  size_t bytes = NumElements(shape) * DTypeSize(dtype);
  header.set_payload_bytes(static_cast<int64_t>(bytes));
  const std::string header_bytes = header.SerializeAsString();
  std::vector<absl::string_view> payload = {
      absl::string_view(static_cast<const char*>(data), bytes)};
  absl::StatusOr<std::string> raw;
  STRATA_RETRY_LOOP(raw,
                    UploadOnce(Next(), kAssignMethod, header_bytes, payload));
  if (!raw.ok()) return raw.status();
  v1::AssignResponse resp;
  if (!resp.ParseFromString(*raw)) {
    return absl::InternalError("assign: the response is not an AssignResponse");
  }
  return resp.version();
}

#define STRATA_UNARY(Method, Request, Response)                           \
  absl::StatusOr<v1::Response> result;                                    \
  STRATA_RETRY_LOOP(result, ([&]() -> absl::StatusOr<v1::Response> {      \
                      grpc::ClientContext ctx;                            \
                      SetDeadline(&ctx, options_.deadline);               \
                      v1::Response resp;                                  \
                      grpc::Status s = Next().stub->Method(&ctx, Request, &resp); \
                      if (!s.ok()) return FromGrpcStatus(s);              \
                      return resp;                                        \
                    })());                                                \
  return result

absl::StatusOr<v1::SaveResponse> PsClient::Save(const std::string& path) {
  v1::SaveRequest req;
  req.set_path(path);
  STRATA_UNARY(Save, req, SaveResponse);
}

absl::StatusOr<v1::RestoreResponse> PsClient::Restore(const std::string& path) {
  v1::RestoreRequest req;
  req.set_path(path);
  STRATA_UNARY(Restore, req, RestoreResponse);
}

absl::StatusOr<v1::ListVariablesResponse> PsClient::ListVariables() {
  v1::ListVariablesRequest req;
  STRATA_UNARY(ListVariables, req, ListVariablesResponse);
}

absl::StatusOr<v1::StatsResponse> PsClient::Stats() {
  v1::StatsRequest req;
  STRATA_UNARY(Stats, req, StatsResponse);
}

absl::StatusOr<uint64_t> PsClient::AttachSharedRegion(
    const SharedRegion& region, int64_t* server_pid) {
  v1::AttachSharedRegionRequest req;
  req.set_pid(static_cast<int64_t>(::getpid()));
  req.set_fd(region.fd());
  req.set_bytes(static_cast<int64_t>(region.size()));
  req.set_nonce(region.nonce());
  absl::StatusOr<v1::AttachSharedRegionResponse> resp = [&] {
    STRATA_UNARY(AttachSharedRegion, req, AttachSharedRegionResponse);
  }();
  if (!resp.ok()) return resp.status();
  if (server_pid != nullptr) *server_pid = resp->server_pid();
  return resp->region();
}

absl::Status PsClient::DetachSharedRegion(uint64_t id) {
  v1::DetachSharedRegionRequest req;
  req.set_region(id);
  absl::StatusOr<v1::DetachSharedRegionResponse> resp = [&] {
    STRATA_UNARY(DetachSharedRegion, req, DetachSharedRegionResponse);
  }();
  return resp.status();
}

absl::StatusOr<v1::SharedExchangeResponse> PsClient::ExchangeShared(
    v1::SharedExchangeRequest request) {
  absl::StatusOr<v1::SharedExchangeResponse> result;
  for (int attempt = 1;; ++attempt) {
    if (request.push().variables_size() > 0) {
      request.mutable_push()->mutable_tag()->set_attempt(attempt - 1);
    }
    grpc::ClientContext ctx;
    SetDeadline(&ctx, options_.deadline);
    v1::SharedExchangeResponse resp;
    grpc::Status s = Next().stub->ExchangeShared(&ctx, request, &resp);
    result = s.ok() ? absl::StatusOr<v1::SharedExchangeResponse>(
                          std::move(resp))
                    : FromGrpcStatus(s);
    if (result.ok() ||
        result.status().code() != absl::StatusCode::kUnavailable ||
        attempt >= options_.max_attempts) {
      break;
    }
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(Backoff(attempt)));
  }
  return result;
}

absl::StatusOr<int64_t> PsClient::ServeSharedRegion(uint64_t id,
                                                    uint64_t control_offset,
                                                    uint32_t message_bytes) {
  v1::ServeSharedRegionRequest req;
  req.set_region(id);
  req.set_control_offset(control_offset);
  req.set_message_bytes(message_bytes);
  absl::StatusOr<v1::ServeSharedRegionResponse> resp = [&] {
    STRATA_UNARY(ServeSharedRegion, req, ServeSharedRegionResponse);
  }();
  if (!resp.ok()) return resp.status();
  return resp->server_pid();
}

absl::Status PsClient::MirrorVariables(uint64_t id,
                                      const std::vector<std::string>& names,
                                      const std::vector<size_t>& offsets) {
  v1::MirrorVariablesRequest req;
  req.set_region(id);
  for (const auto& n : names) req.add_names(n);
  for (size_t o : offsets) req.add_offsets(o);
  absl::StatusOr<v1::MirrorVariablesResponse> resp = [&] {
    STRATA_UNARY(MirrorVariables, req, MirrorVariablesResponse);
  }();
  return resp.status();
}

bool PsClient::TargetIsLoopback() const {
  absl::string_view t = target_;
  if (absl::StartsWith(t, "unix:")) return true;
  if (absl::StartsWith(t, "ipv4:") || absl::StartsWith(t, "ipv6:") ||
      absl::StartsWith(t, "dns:")) {
    t = t.substr(t.find(':') + 1);
    while (absl::StartsWith(t, "/")) t.remove_prefix(1);
  }
  return absl::StartsWith(t, "127.") || absl::StartsWith(t, "[::1]") ||
         absl::StartsWith(t, "localhost:") || t == "localhost";
}

}  // namespace strata

#include "collective/worker_service.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "common/tf_config.h"
#include "grpc/slice.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "proto/chunk_codec.h"

namespace strata {
namespace collective {
namespace internal {
namespace {

constexpr char kDeliverMethod[] = "/strata.v1.WorkerService/Deliver";
// Room for a Deliver's header fields beside its pack.
constexpr int64_t kHeaderAllowance = 64 << 10;
// Payloads up to this size are copied into the header slice: cheaper than a
// separate aliasing slice and its release callback.
constexpr size_t kInlineBytes = 4096;
// Charged per kept message on top of its bytes, so that many tiny early
// messages are bounded too.
constexpr int64_t kMessageOverhead = 256;

std::chrono::system_clock::time_point ToChrono(absl::Time t) {
  return absl::ToChronoTime(t);
}

// ---------------------------------------------------------------------------
// Wire codec of CollectiveMessage (worker_service.proto):
//   1 int64 group, 2 int32 from_rank, 3 string key, 4 bytes data.

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Counts aliasing slices that gRPC still holds, so that Flush can wait until
// gRPC no longer reads the senders' memory. Thread-safe. Kept apart from the
// group so that the release callback, which may run deep inside gRPC, only
// touches this small object.
class SliceCounter {
 public:
  void Add() {
    absl::MutexLock lock(&mu_);
    ++held_;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    if (--held_ == 0) cv_.SignalAll();
  }
  // True when none is held by `deadline`.
  bool WaitZero(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    while (held_ > 0) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) return held_ == 0;
    }
    return true;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
};

struct SliceTag {
  std::shared_ptr<SliceCounter> counter;
};

void ReleaseSlice(void* p) {
  auto* tag = static_cast<SliceTag*>(p);
  tag->counter->Release();
  delete tag;
}

// Builds a CollectiveMessage: the fields before `data` written by hand into
// one small slice, then `data` as a slice aliasing the caller's memory
// (counted in `counter` until gRPC releases it).
grpc::ByteBuffer EncodeMessage(int64_t group, int from_rank,
                               const std::string& key,
                               absl::Span<const char> data,
                               const std::shared_ptr<SliceCounter>& counter) {
  std::string prefix;
  prefix.reserve(key.size() + 40 +
                 (data.size() <= kInlineBytes ? data.size() : 0));
  PutVarint(&prefix, (1 << 3) | 0);
  PutVarint(&prefix, static_cast<uint64_t>(group));
  PutVarint(&prefix, (2 << 3) | 0);
  PutVarint(&prefix, static_cast<uint64_t>(static_cast<int64_t>(from_rank)));
  PutVarint(&prefix, (3 << 3) | 2);
  PutVarint(&prefix, key.size());
  prefix.append(key);
  PutVarint(&prefix, (4 << 3) | 2);
  PutVarint(&prefix, data.size());
  if (data.size() <= kInlineBytes) {
    prefix.append(data.data(), data.size());
    grpc::Slice slice(prefix);
    return grpc::ByteBuffer(&slice, 1);
  }
  counter->Add();
  grpc_slice raw = grpc_slice_new_with_user_data(
      const_cast<char*>(data.data()), data.size(), &ReleaseSlice,
      new SliceTag{counter});
  grpc::Slice slices[2] = {grpc::Slice(prefix),
                           grpc::Slice(raw, grpc::Slice::STEAL_REF)};
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace

// A received CollectiveMessage. `data` views point into `slices`, which hold
// references to the received memory (no copy).
struct DecodedMessage {
  int64_t group = 0;
  int32_t from_rank = 0;
  std::string key;
  std::vector<grpc::Slice> slices;
  std::vector<absl::string_view> data;
  size_t data_size = 0;

  void CopyDataTo(char* dst) const {
    for (absl::string_view v : data) {
      std::memcpy(dst, v.data(), v.size());
      dst += v.size();
    }
  }
};

namespace {

// Sequential reader over received slices.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {
    SkipEmpty();
  }
  bool done() const { return index_ >= slices_.size(); }
  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) return false;
      const uint8_t b = slices_[index_].begin()[pos_];
      Advance(1);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool ReadViews(uint64_t n, std::vector<absl::string_view>* views) {
    while (n > 0) {
      if (done()) return false;
      const grpc::Slice& s = slices_[index_];
      const size_t avail = s.size() - pos_;
      const size_t take = n < avail ? static_cast<size_t>(n) : avail;
      views->emplace_back(reinterpret_cast<const char*>(s.begin()) + pos_,
                          take);
      Advance(take);
      n -= take;
    }
    return true;
  }

 private:
  void Advance(size_t n) {
    pos_ += n;
    SkipEmpty();
  }
  void SkipEmpty() {
    while (index_ < slices_.size() && pos_ >= slices_[index_].size()) {
      ++index_;
      pos_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t pos_ = 0;
};

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed CollectiveMessage: ", what));
}

absl::Status DecodeMessage(const grpc::ByteBuffer& buffer,
                           DecodedMessage* out) {
  grpc::Status dumped = buffer.Dump(&out->slices);
  if (!dumped.ok()) return Malformed(dumped.error_message());
  const uint64_t total = buffer.Length();
  SliceReader reader(out->slices);
  while (!reader.done()) {
    uint64_t tag;
    if (!reader.ReadVarint(&tag)) return Malformed("truncated tag");
    const uint32_t field = static_cast<uint32_t>(tag >> 3);
    const uint32_t wire = static_cast<uint32_t>(tag & 7);
    if (field == 0) return Malformed("field number 0");
    if (wire == 0) {
      uint64_t v;
      if (!reader.ReadVarint(&v)) return Malformed("truncated varint");
      if (field == 1) out->group = static_cast<int64_t>(v);
      if (field == 2) out->from_rank = static_cast<int32_t>(v);
    } else if (wire == 2) {
      uint64_t len;
      if (!reader.ReadVarint(&len)) return Malformed("truncated length");
      std::vector<absl::string_view> views;
      if (len > total || !reader.ReadViews(len, &views)) {
        return Malformed("length beyond the end of the message");
      }
      if (field == 3) {
        out->key.clear();
        for (absl::string_view v : views) out->key.append(v.data(), v.size());
      } else if (field == 4) {
        out->data = std::move(views);
        out->data_size = static_cast<size_t>(len);
      }
    } else if (wire == 1 || wire == 5) {
      std::vector<absl::string_view> skipped;
      if (!reader.ReadViews(wire == 1 ? 8 : 4, &skipped)) {
        return Malformed("truncated fixed-width field");
      }
    } else {
      return Malformed(absl::StrCat("unsupported wire type ", wire));
    }
  }
  if (out->key.empty()) return Malformed("empty key");
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------
// The channels and stubs of one group to its peers ([peer][channel]).
// Owned by the transport and destroyed on its thread, never on a gRPC
// callback thread: destroying a channel from inside one of its own callbacks
// shuts its callback completion queue down under the running callback (seen
// as "assertion failed: prior > 0" in grpc_cq_internal_unref).
struct PeerLinks {
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> generic;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs;

  PeerLinks(const std::vector<std::string>& peers, int channels_per_peer,
            const ClientSecurity& security) {
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
};

// One opened group on this process: the receive mailbox of its rank, and the
// asynchronous senders to its peers. Shared by the transport, the server's
// mailbox (which routes deliveries and aborts to it) and in-flight calls.
// Thread-safe.
//
// `links` belongs to the transport and outlives every use: a call or abort
// notice is counted in flight (under mu_, while the group is not closed)
// before it touches the links, and Close() waits until none is in flight.
class GrpcGroup : public std::enable_shared_from_this<GrpcGroup> {
 public:
  GrpcGroup(int64_t group, int rank, std::vector<std::string> peers,
            const CollectiveOptions& options,
            const WorkerServerOptions& server_options, const PeerLinks* links,
            grpc::CompletionQueue* cq, std::weak_ptr<Mailbox> mailbox,
            Logger* logger)
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

  int64_t group() const { return group_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(peers_.size()); }

  absl::Status Send(int peer, const std::string& key,
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
    call->ctx.set_deadline(ToChrono(absl::Now() + options_.timeout));
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

  absl::Status Recv(int peer, const std::string& key, absl::Span<char> out,
                    absl::Time deadline) {
    if (peer < 0 || peer >= size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "recv '", key, "': peer ", peer, " outside [0, ", size(), ")"));
    }
    const std::pair<int, std::string> id(peer, key);
    DecodedMessage msg;
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (aborted_) return Failure();
        auto it = arrived_.find(id);
        if (it != arrived_.end()) {
          msg = std::move(it->second);
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
    if (msg.data_size != out.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "recv '", key, "' from rank ", peer, ": message has ", msg.data_size,
          " bytes, the destination ", out.size()));
    }
    msg.CopyDataTo(out.data());
    return absl::OkStatus();
  }

  absl::Status Flush(absl::Time deadline) {
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

  // Aborts the group with "aborted by rank `by_rank`: `reason`"; tells the
  // peers when `tell_peers`. Only the first call has an effect.
  void Abort(int by_rank, const std::string& reason, bool tell_peers) {
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

  // A message for this group from the server.
  absl::Status Deliver(DecodedMessage msg) {
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

  // Ends the group here: cancels what is still in flight, waits for the
  // calls and abort notices to end, and leaves the server's mailbox.
  void Close();

  // An RPC this group started. Its completion comes out of the transport's
  // completion queue, whose thread calls OnRpcDone.
  struct Rpc {
    virtual ~Rpc() = default;
    GrpcGroup* group = nullptr;
    grpc::ClientContext ctx;
    grpc::Status status;
  };
  void OnRpcDone(Rpc* rpc);

 private:
  struct Call : Rpc {
    int peer = 0;
    int channel = 0;
    std::string key;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
    std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> reader;
  };
  struct Notice : Rpc {
    v1::AbortGroupRequest request;
    v1::AbortGroupAck response;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::AbortGroupAck>> reader;
  };

  absl::Status Aborted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::AbortedError(abort_message_);
  }
  // What this rank's operations return once the group failed: its own
  // delivery failure when that caused the abort (e.g. UNAVAILABLE), ABORTED
  // with the reason otherwise. (Peers are always answered ABORTED.)
  absl::Status Failure() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!send_error_.ok()) return send_error_;
    return Aborted();
  }

  bool QueuesEmpty() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& q : queue_) {
      if (!q.empty()) return false;
    }
    return true;
  }

  // Moves queued calls for `peer` into `start` while the window allows.
  void PopStartable(int peer, std::vector<std::shared_ptr<Call>>* start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto& q = queue_[peer];
    while (in_flight_[peer] < max_in_flight_ && !q.empty()) {
      ++in_flight_[peer];
      ++total_in_flight_;
      live_.emplace(q.front().get(), q.front());
      start->push_back(std::move(q.front()));
      q.pop_front();
    }
  }

  void StartCall(const std::shared_ptr<Call>& call) {
    call->reader = links_->generic[call->peer][call->channel]->PrepareUnaryCall(
        &call->ctx, kDeliverMethod, call->request, cq_);
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status,
                         static_cast<Rpc*>(call.get()));
  }

  void OnCallDone(std::shared_ptr<Call> call) {
    call->request.Clear();  // gRPC is done with the payload
    std::vector<std::shared_ptr<Call>> start;
    absl::Status error;
    bool abort_now = false;
    {
      absl::MutexLock lock(&mu_);
      --in_flight_[call->peer];
      --total_in_flight_;
      if (!call->status.ok()) {
        const absl::Status s = FromGrpcStatus(call->status);
        error = absl::Status(
            s.code(), absl::StrCat("deliver '", call->key, "' to rank ",
                                   call->peer, " (", peers_[call->peer],
                                   "): ", s.message()));
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

  void StartNotice(const std::shared_ptr<Notice>& notice, int peer) {
    notice->reader = links_->stubs[peer]->PrepareAsyncAbortGroup(
        &notice->ctx, notice->request, cq_);
    notice->reader->StartCall();
    notice->reader->Finish(&notice->response, &notice->status,
                           static_cast<Rpc*>(notice.get()));
  }

  const int64_t group_;
  const int rank_;
  const std::vector<std::string> peers_;
  const CollectiveOptions options_;
  const int64_t max_message_bytes_;
  const int max_in_flight_;
  const absl::Duration notice_timeout_;
  const PeerLinks* const links_;
  grpc::CompletionQueue* const cq_;
  const std::weak_ptr<Mailbox> mailbox_;
  Logger* const logger_;
  const std::shared_ptr<SliceCounter> counter_;

  absl::Mutex mu_;
  // Signalled on arrivals, call completions, abort and notice completions.
  absl::CondVar cv_;
  std::map<std::pair<int, std::string>, DecodedMessage> arrived_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::deque<std::shared_ptr<Call>>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<int> in_flight_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> next_channel_ ABSL_GUARDED_BY(mu_);
  int64_t total_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Started calls and abort notices, by their completion tag.
  std::map<const Rpc*, std::shared_ptr<Call>> live_ ABSL_GUARDED_BY(mu_);
  std::map<const Rpc*, std::shared_ptr<Notice>> notices_ ABSL_GUARDED_BY(mu_);
  absl::Status send_error_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::string abort_message_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// ---------------------------------------------------------------------------
// The per-process mailbox: routes deliveries and aborts to the open group,
// keeps (bounded) those for groups not opened yet, refuses those for older
// groups. Thread-safe.
class Mailbox : public std::enable_shared_from_this<Mailbox> {
 public:
  Mailbox(const WorkerServerOptions& options, Logger* logger)
      : options_(options), logger_(logger) {}

  absl::Status Deliver(DecodedMessage msg) {
    std::shared_ptr<GrpcGroup> group;
    {
      absl::MutexLock lock(&mu_);
      if (shut_down_) {
        return absl::UnavailableError("worker server is shutting down");
      }
      if (newest_.has_value() && msg.group < *newest_) {
        return absl::AbortedError(absl::StrCat(
            "group ", msg.group, " is older than group ", *newest_,
            ", the newest opened on this worker"));
      }
      if (newest_.has_value() && msg.group == *newest_) {
        group = current_.lock();
        if (group == nullptr) {
          return absl::AbortedError(
              absl::StrCat("group ", msg.group, " is closed on this worker"));
        }
      } else {
        const int64_t bytes =
            static_cast<int64_t>(msg.data_size + msg.key.size()) +
            kMessageOverhead;
        if (early_bytes_ + bytes > options_.max_early_bytes) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "message '", msg.key, "' for group ", msg.group,
              ", not opened on this worker yet: messages kept for unopened "
              "groups would exceed max_early_bytes ",
              options_.max_early_bytes));
        }
        early_bytes_ += bytes;
        Early& early = early_[msg.group];
        early.bytes += bytes;
        early.messages.push_back(std::move(msg));
        return absl::OkStatus();
      }
    }
    return group->Deliver(std::move(msg));
  }

  void AbortGroup(int64_t group_id, int from_rank, const std::string& reason) {
    std::shared_ptr<GrpcGroup> group;
    {
      absl::MutexLock lock(&mu_);
      if (newest_.has_value() && group_id < *newest_) return;
      if (newest_.has_value() && group_id == *newest_) {
        group = current_.lock();
      } else {
        // Kept until the group opens, counted in the same bound as early
        // messages (dropped beyond it: notices are best effort).
        auto it = early_.find(group_id);
        if (it != early_.end() && it->second.aborted) return;
        const int64_t bytes =
            static_cast<int64_t>(reason.size()) + kMessageOverhead;
        if (early_bytes_ + bytes > options_.max_early_bytes) return;
        early_bytes_ += bytes;
        Early& early = early_[group_id];
        early.bytes += bytes;
        early.aborted = true;
        early.abort_rank = from_rank;
        early.abort_reason = reason;
      }
    }
    if (group != nullptr) group->Abort(from_rank, reason, /*tell_peers=*/false);
  }

  // `links` and `cq` must outlive the group's Close().
  absl::StatusOr<std::shared_ptr<GrpcGroup>> Open(
      int64_t group_id, int rank, std::vector<std::string> peers,
      const CollectiveOptions& options, const PeerLinks* links,
      grpc::CompletionQueue* cq) {
    auto group = std::make_shared<GrpcGroup>(group_id, rank, std::move(peers),
                                             options, options_, links, cq,
                                             weak_from_this(), logger_);
    std::shared_ptr<GrpcGroup> previous;
    Early early;
    {
      absl::MutexLock lock(&mu_);
      if (shut_down_) {
        return absl::FailedPreconditionError(
            "worker server is shut down: cannot open a group");
      }
      if (newest_.has_value() && group_id <= *newest_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "group ", group_id, " is not newer than group ", *newest_,
            " already opened on this worker"));
      }
      previous = current_.lock();
      newest_ = group_id;
      current_ = group;
      // Keep this group's early messages; drop those of older groups.
      for (auto it = early_.begin();
           it != early_.end() && it->first <= group_id;) {
        early_bytes_ -= it->second.bytes;
        if (it->first == group_id) early = std::move(it->second);
        it = early_.erase(it);
      }
    }
    if (previous != nullptr) {
      previous->Abort(previous->rank(),
                      absl::StrCat("ABORTED: superseded by group ", group_id),
                      /*tell_peers=*/true);
    }
    for (auto& msg : early.messages) {
      absl::Status s = group->Deliver(std::move(msg));
      if (!s.ok() && logger_ != nullptr) {
        logger_->Warning("collective_early_message_dropped",
                         {{"group", group_id}, {"error", s.ToString()}});
      }
    }
    if (early.aborted) {
      group->Abort(early.abort_rank, early.abort_reason, /*tell_peers=*/false);
    }
    if (logger_ != nullptr) {
      logger_->Info("collective_group_opened", {{"group", group_id},
                                                {"rank", rank},
                                                {"size", group->size()}});
    }
    return group;
  }

  // Called by a closing group.
  void Forget(int64_t group_id, const GrpcGroup* group) {
    absl::MutexLock lock(&mu_);
    auto current = current_.lock();
    if (current.get() == group || current == nullptr) current_.reset();
  }

  void Shutdown(const std::string& address) {
    std::shared_ptr<GrpcGroup> group;
    {
      absl::MutexLock lock(&mu_);
      shut_down_ = true;
      group = current_.lock();
      early_.clear();
      early_bytes_ = 0;
    }
    if (group != nullptr) {
      group->Abort(group->rank(),
                   absl::StrCat("UNAVAILABLE: worker server ", address,
                                " is shutting down"),
                   /*tell_peers=*/true);
    }
  }

 private:
  struct Early {
    std::vector<DecodedMessage> messages;
    int64_t bytes = 0;
    bool aborted = false;
    int abort_rank = -1;
    std::string abort_reason;
  };

  const WorkerServerOptions options_;
  Logger* const logger_;
  absl::Mutex mu_;
  std::optional<int64_t> newest_ ABSL_GUARDED_BY(mu_);
  std::weak_ptr<GrpcGroup> current_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Early> early_ ABSL_GUARDED_BY(mu_);
  int64_t early_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

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

// Drives the completion queue of one transport's RPCs on its own thread, so
// that completions never run on (and channels are never destroyed from)
// gRPC's callback threads. Destroyed after the group closed.
class Poller {
 public:
  Poller() : thread_([this] { Loop(); }) {}
  ~Poller() {
    cq_.Shutdown();
    thread_.join();
  }
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  grpc::CompletionQueue* cq() { return &cq_; }

 private:
  void Loop() {
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
      auto* rpc = static_cast<GrpcGroup::Rpc*>(tag);
      rpc->group->OnRpcDone(rpc);
    }
  }

  grpc::CompletionQueue cq_;
  std::thread thread_;
};

namespace {

// The Transport handed out by OpenGroup: a handle on its group, and the
// owner of the group's channels.
class GrpcTransport final : public Transport {
 public:
  GrpcTransport(std::shared_ptr<GrpcGroup> group,
                std::unique_ptr<PeerLinks> links,
                std::unique_ptr<Poller> poller)
      : group_(std::move(group)),
        links_(std::move(links)),
        poller_(std::move(poller)) {}
  ~GrpcTransport() override {
    group_->Close();
    // Here, on the caller's thread, after every call ended.
    poller_.reset();
    links_.reset();
  }

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  absl::Status Send(int peer, const std::string& key,
                    absl::Span<const char> data) override {
    return group_->Send(peer, key, data);
  }
  absl::Status Recv(int peer, const std::string& key, absl::Span<char> out,
                    absl::Time deadline) override {
    return group_->Recv(peer, key, out, deadline);
  }
  absl::Status Flush(absl::Time deadline) override {
    return group_->Flush(deadline);
  }
  void Abort(const absl::Status& reason) override {
    group_->Abort(group_->rank(), reason.ToString(), /*tell_peers=*/true);
  }

 private:
  const std::shared_ptr<GrpcGroup> group_;
  std::unique_ptr<PeerLinks> links_;
  std::unique_ptr<Poller> poller_;
};

}  // namespace
}  // namespace internal

// ---------------------------------------------------------------------------
// WorkerServiceImpl

WorkerServiceImpl::WorkerServiceImpl(
    std::shared_ptr<internal::Mailbox> mailbox, Logger* logger)
    : mailbox_(std::move(mailbox)), logger_(logger) {}

WorkerServiceImpl::~WorkerServiceImpl() = default;

void WorkerServiceImpl::SetStateProvider(StateProvider provider) {
  absl::MutexLock lock(&mu_);
  provider_ = std::move(provider);
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Deliver(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  internal::DecodedMessage msg;
  absl::Status s = internal::DecodeMessage(*request, &msg);
  if (!s.ok() && logger_ != nullptr) {
    logger_->Warning("collective_bad_message",
                     {{"peer", ctx->peer()}, {"error", s.ToString()}});
  }
  if (s.ok()) s = mailbox_->Deliver(std::move(msg));
  if (s.ok()) {
    grpc::Slice empty;
    *response = grpc::ByteBuffer(&empty, 1);
  }
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::AbortGroup(
    grpc::CallbackServerContext* ctx, const v1::AbortGroupRequest* request,
    v1::AbortGroupAck* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  mailbox_->AbortGroup(request->group(), request->from_rank(),
                       request->reason());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::GetState(
    grpc::CallbackServerContext* ctx, const v1::GetStateRequest* request,
    v1::WorkerState* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  StateProvider provider;
  {
    absl::MutexLock lock(&mu_);
    provider = provider_;
  }
  absl::Status s;
  if (!provider) {
    s = absl::FailedPreconditionError("no state yet");
  } else {
    absl::StatusOr<v1::WorkerState> state = provider(*request);
    if (state.ok()) {
      *response = *std::move(state);
    } else {
      s = state.status();
    }
  }
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

// ---------------------------------------------------------------------------
// WorkerServer

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const WorkerServerOptions& options, Logger* logger) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", options.port, " is outside [0, 65535]"));
  }
  if (options.max_message_bytes <= internal::kHeaderAllowance ||
      options.max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes ", options.max_message_bytes, " is outside (",
        internal::kHeaderAllowance, ", ", std::numeric_limits<int>::max(),
        "]"));
  }
  if (options.max_early_bytes < 0 || options.max_sends_in_flight < 1 ||
      options.channels_per_peer < 1 ||
      options.abort_notice_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "max_early_bytes must be >= 0, max_sends_in_flight and "
        "channels_per_peer >= 1, abort_notice_timeout > 0");
  }
  std::unique_ptr<WorkerServer> s(new WorkerServer());
  s->options_ = options;
  s->logger_ = logger;
  s->mailbox_ = std::make_shared<internal::Mailbox>(options, logger);
  s->service_ = std::make_unique<WorkerServiceImpl>(s->mailbox_, logger);

  auto credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = JoinHostPort(options.host, options.port);
  builder.AddListeningPort(address, *credentials, &s->port_);
  builder.RegisterService(s->service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  // A second process on the same port would receive half of the group's
  // messages: refuse to share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (const auto& [name, value] : DataPlaneChannelArgs()) {
    builder.AddChannelArgument(name, value);
  }
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  if (auto* health = s->server_->GetHealthCheckService()) {
    health->SetServingStatus("strata.v1.WorkerService", true);
    health->SetServingStatus(true);
  }
  if (logger != nullptr) {
    logger->Info("worker_server_listening", {{"address", s->address()}});
  }
  return s;
}

WorkerServer::~WorkerServer() { Shutdown(absl::Seconds(5)); }

std::string WorkerServer::address() const {
  return JoinHostPort(options_.host, port_);
}

void WorkerServer::SetStateProvider(StateProvider provider) {
  service_->SetStateProvider(std::move(provider));
}

absl::StatusOr<std::unique_ptr<Transport>> WorkerServer::OpenGroup(
    int64_t group, int rank, std::vector<std::string> peers,
    const CollectiveOptions& options) {
  if (peers.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group, ": empty peer list"));
  }
  if (rank < 0 || rank >= static_cast<int>(peers.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", group, ": rank ", rank, " outside [0, ", peers.size(), ")"));
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    absl::StatusOr<std::pair<std::string, int>> hp = SplitHostPort(peers[i]);
    if (!hp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", group, ": peer ", i, ": ", hp.status().message()));
    }
  }
  if (options.pack_bytes <= 0 ||
      options.pack_bytes + internal::kHeaderAllowance >
          options_.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", group, ": pack_bytes ", options.pack_bytes,
        " must be positive and fit in max_message_bytes ",
        options_.max_message_bytes));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group, ": timeout must be positive"));
  }
  auto links = std::make_unique<internal::PeerLinks>(
      peers, options_.channels_per_peer, options_.peer_security);
  auto poller = std::make_unique<internal::Poller>();
  STRATA_ASSIGN_OR_RETURN(
      std::shared_ptr<internal::GrpcGroup> g,
      mailbox_->Open(group, rank, std::move(peers), options, links.get(),
                     poller->cq()));
  return std::unique_ptr<Transport>(std::make_unique<internal::GrpcTransport>(
      std::move(g), std::move(links), std::move(poller)));
}

void WorkerServer::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  mailbox_->Shutdown(address());
  if (server_) {
    if (auto* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(false);
    }
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(grace));
    server_->Wait();
  }
}

absl::StatusOr<v1::WorkerState> FetchState(const std::string& address,
                                           const v1::GetStateRequest& request,
                                           absl::Duration timeout,
                                           const ClientSecurity& security) {
  if (address.empty()) {
    return absl::InvalidArgumentError("fetch state: empty address");
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("fetch state: timeout must be positive");
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A worker's whole state in one message.
  args.SetMaxReceiveMessageSize(-1);
  ApplyDataPlaneChannelArgs(&args);
  auto channel = CreateChannel(address, security, args);
  auto stub = v1::WorkerService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(false);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::WorkerState state;
  grpc::Status s = stub->GetState(&ctx, request, &state);
  if (!s.ok()) {
    const absl::Status status = FromGrpcStatus(s);
    return absl::Status(status.code(),
                        absl::StrCat("GetState from ", address, ": ",
                                     status.message()));
  }
  return state;
}

}  // namespace collective
}  // namespace strata

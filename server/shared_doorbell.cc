#include "server/shared_doorbell.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/futex.h"
#include "common/shared_layout.h"

namespace strata {
namespace {

std::atomic<uint32_t>* Word(char* control, size_t offset) {
  return reinterpret_cast<std::atomic<uint32_t>*>(control + offset);
}

}  // namespace

DoorbellServer::DoorbellServer(std::shared_ptr<MappedRegion> region,
                               uint64_t control_offset,
                               uint32_t message_bytes, Handler handle,
                               std::function<bool()> alive)
    : region_(std::move(region)),
      control_(region_->data() + control_offset),
      message_bytes_(message_bytes),
      handle_(std::move(handle)),
      alive_(std::move(alive)) {
  // A doorbell that served this region before may have closed it.
  Word(control_, 0)->store(kDoorbellIdle, std::memory_order_release);
  thread_ = std::thread([this] { Loop(); });
}

DoorbellServer::~DoorbellServer() {
  Stop();
  thread_.join();
}

void DoorbellServer::Stop() {
  stop_.store(true);
  FutexWakeAll(Word(control_, 0));
}

void DoorbellServer::Loop() {
  std::atomic<uint32_t>* state = Word(control_, 0);
  char* request_area = control_ + kDoorbellControlBytes;
  char* answer_area = request_area + message_bytes_;
  while (true) {
    uint32_t s = state->load(std::memory_order_acquire);
    if (s == kDoorbellRequest && stop_.load()) {
      // Stopping: answer what was posted, then close (a client that keeps
      // posting cannot hold the thread).
      const std::string text = "doorbell: the server stops serving this region";
      std::memcpy(answer_area, text.data(),
                  std::min<size_t>(text.size(), message_bytes_));
      Word(control_, 8)->store(
          static_cast<uint32_t>(std::min<size_t>(text.size(), message_bytes_)),
          std::memory_order_relaxed);
      Word(control_, 12)->store(
          static_cast<uint32_t>(absl::StatusCode::kUnavailable),
          std::memory_order_relaxed);
      state->store(kDoorbellClosed, std::memory_order_release);
      FutexWakeAll(state);
      break;
    }
    if (s != kDoorbellRequest) {
      if (stop_.load() || !alive_()) {
        // Tell the client (unless a request just came: answer it first).
        if (state->compare_exchange_strong(s, kDoorbellClosed,
                                           std::memory_order_acq_rel)) {
          FutexWakeAll(state);
          break;
        }
        continue;
      }
      FutexWait(state, s, absl::Milliseconds(100));
      continue;
    }
    // The client may write anything: take a bounded copy first.
    const uint32_t n = std::min(
        Word(control_, 4)->load(std::memory_order_relaxed), message_bytes_);
    const std::string bytes(request_area, n);
    v1::SharedExchangeRequest request;
    v1::SharedExchangeResponse response;
    absl::Status status =
        request.ParseFromString(bytes)
            ? handle_(request, &response)
            : absl::InvalidArgumentError(
                  "doorbell: the request is not a SharedExchangeRequest");
    std::string answer;
    if (status.ok()) {
      answer = response.SerializeAsString();
      if (answer.size() > message_bytes_) {
        status = absl::ResourceExhaustedError(absl::StrCat(
            "doorbell: the answer has ", answer.size(),
            " bytes, the region's message area ", message_bytes_));
      }
    }
    if (!status.ok()) {
      answer = std::string(status.message()).substr(0, message_bytes_);
    }
    std::memcpy(answer_area, answer.data(), answer.size());
    Word(control_, 8)->store(static_cast<uint32_t>(answer.size()),
                             std::memory_order_relaxed);
    Word(control_, 12)->store(static_cast<uint32_t>(status.code()),
                              std::memory_order_relaxed);
    state->store(kDoorbellAnswer, std::memory_order_release);
    FutexWakeAll(state);
  }
  finished_.store(true);
}

}  // namespace strata

// PsClient::Exchange: a step's push and pull with one task as one frame on
// a persistent Lane stream per lane, or as PushVariables then PullVariables
// against a server without lanes.
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "client/ps_lane.h"

namespace strata {

struct PsClient::LaneSlot {
  absl::Mutex mu;
  std::unique_ptr<StreamLane> lane ABSL_GUARDED_BY(mu);
};

std::shared_ptr<PsClient::LaneSlot> PsClient::LaneFor(int lane) {
  absl::MutexLock lock(&lanes_mu_);
  std::shared_ptr<LaneSlot>& slot = lanes_[lane];
  if (slot == nullptr) slot = std::make_shared<LaneSlot>();
  return slot;
}

bool PsClient::UsesLanes() const {
  return options_.lanes && !lanes_refused_.load();
}

absl::StatusOr<ExchangeResult> PsClient::ExchangeUnary(
    PreparedPush* push, const std::vector<std::string>& pull_names,
    const std::vector<void*>& dsts, const std::vector<size_t>& sizes,
    const PullOptions& options) {
  ExchangeResult result;
  if (push != nullptr) {
    absl::StatusOr<std::vector<PushResult>> pushed = PushPrepared(push);
    if (!pushed.ok()) return pushed.status();
    result.pushed = *std::move(pushed);
  }
  if (!pull_names.empty()) {
    absl::StatusOr<std::vector<int64_t>> pulled =
        PullVariables(pull_names, dsts, sizes, options);
    if (!pulled.ok()) return pulled.status();
    result.pulled = *std::move(pulled);
  }
  return result;
}

absl::StatusOr<ExchangeResult> PsClient::Exchange(
    int lane, const std::vector<std::string>& names,
    const std::vector<Shape>& shapes, const std::vector<const void*>& grads,
    const PushTag& tag, const std::vector<std::string>& pull_names,
    const std::vector<void*>& dsts, const std::vector<size_t>& sizes,
    const PullOptions& options) {
  if (names.size() != shapes.size() || names.size() != grads.size()) {
    return absl::InvalidArgumentError(
        "Exchange: names, shapes and gradients differ in count");
  }
  if (pull_names.size() != dsts.size() || pull_names.size() != sizes.size()) {
    return absl::InvalidArgumentError(
        "Exchange: pulled names, destinations and sizes differ in count");
  }
  if (lane < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Exchange: lane ", lane, " is negative"));
  }
  // Encoded once, before any attempt: a retry (or the fallback to unary
  // calls) resends the same bytes, and the residuals advance once.
  std::optional<PreparedPush> push;
  if (!names.empty()) {
    push.emplace(PreparePush(names, DType::kFloat32, shapes, grads, tag));
  }
  PreparedPush* push_ptr = push.has_value() ? &*push : nullptr;
  if (!UsesLanes()) {
    return ExchangeUnary(push_ptr, pull_names, dsts, sizes, options);
  }

  v1::LaneRequest request;
  if (push.has_value()) *request.mutable_push() = push->header;
  const std::vector<absl::string_view> no_payload;
  const std::vector<absl::string_view>& payload =
      push.has_value() ? push->payload : no_payload;
  if (!pull_names.empty()) {
    v1::PullVariablesRequest* pull = request.mutable_pull();
    for (const std::string& n : pull_names) pull->add_names(n);
    pull->set_min_version(options.min_version);
    pull->set_clock(options.clock);
    pull->set_worker(options.worker);
  }

  std::shared_ptr<LaneSlot> slot = LaneFor(lane);
  absl::MutexLock lock(&slot->mu);
  bool refused = false;
  int attempts = 0;
  absl::StatusOr<v1::LaneReply> reply;
  for (int attempt = 1;; ++attempt) {
    attempts = attempt;
    // A retry carries a new attempt id and the same (job, worker, step):
    // the server applies the push at most once.
    if (request.has_push()) {
      request.mutable_push()->mutable_tag()->set_attempt(attempt - 1);
    }
    if (slot->lane == nullptr) {
      const size_t i = static_cast<size_t>(lane) % conns_.size();
      slot->lane =
          std::make_unique<StreamLane>(conns_[i].channel, options_.chunk_bytes);
    }
    const bool was_open = slot->lane->open();
    reply = slot->lane->Exchange(request, payload, dsts, sizes,
                                 options_.deadline);
    // UNIMPLEMENTED on a new stream: the server has no lanes.
    if (!was_open && !slot->lane->open() && !reply.ok() &&
        reply.status().code() == absl::StatusCode::kUnimplemented) {
      refused = true;
      break;
    }
    if (!retrier_.WaitToRetry(reply.status(), attempt)) break;
  }
  if (refused) {
    lanes_refused_.store(true);
    return ExchangeUnary(push_ptr, pull_names, dsts, sizes, options);
  }
  if (!reply.ok()) return reply.status();
  ExchangeResult result;
  if (reply->push().results_size() != static_cast<int>(names.size())) {
    return absl::InternalError(absl::StrCat(
        "Exchange: the lane's reply has ", reply->push().results_size(),
        " push results for ", names.size(), " variables"));
  }
  for (const v1::PushResponse& r : reply->push().results()) {
    PushResult p;
    p.version = r.version();
    p.duplicate = r.duplicate();
    p.applied = r.applied();
    p.attempts = attempts;
    result.pushed.push_back(p);
  }
  for (const auto& v : reply->pull().variables()) {
    result.pulled.push_back(v.version());
  }
  return result;
}

}  // namespace strata

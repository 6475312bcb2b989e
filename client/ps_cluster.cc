#include "client/ps_cluster.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/push_tag.h"
#include "common/futex.h"
#include "common/shared_layout.h"
#include "common/status_macros.h"

namespace strata {

std::unique_ptr<PsCluster> PsCluster::Connect(
    const std::vector<std::string>& ps_addresses,
    const PsClientOptions& options) {
  std::vector<std::unique_ptr<PsClient>> clients;
  for (const auto& a : ps_addresses) {
    clients.push_back(PsClient::Connect(a, options));
  }
  return std::make_unique<PsCluster>(std::move(clients));
}

PsCluster::PsCluster(std::vector<std::unique_ptr<PsClient>> clients)
    : clients_(std::move(clients)),
      pool_(std::make_unique<ThreadPool>(
          std::max<int>(2, 2 * static_cast<int>(clients_.size())))) {
  absl::MutexLock lock(&mu_);
  mirrors_.resize(clients_.size());
  for (size_t i = 0; i < clients_.size(); ++i) {
    mirror_setup_mu_.push_back(std::make_unique<absl::Mutex>());
  }
  read_mirror_.assign(clients_.size(), false);
  failures_.assign(clients_.size(), 0);
  for (const auto& c : clients_) {
    mirror_refused_.push_back(!c->options().shared_memory ||
                              !c->TargetIsLoopback());
  }
}

absl::StatusOr<VariablePlacement> PsCluster::CreateVariable(
    const v1::VariableSpec& spec, const std::vector<ShardSlice>& slices) {
  std::vector<PlacementPolicy::Shard> shards;
  for (size_t i = 0; i < slices.size(); ++i) {
    shards.push_back({slices[i], PlaceShard(static_cast<int>(i), num_ps())});
  }
  return CreateVariableOn(spec, shards);
}

absl::StatusOr<VariablePlacement> PsCluster::CreateVariableOn(
    const v1::VariableSpec& spec,
    const std::vector<PlacementPolicy::Shard>& shards) {
  if (clients_.empty()) {
    return absl::FailedPreconditionError("the cluster has no PS task");
  }
  STRATA_ASSIGN_OR_RETURN(DType dtype,
                          spec.dtype() == v1::DT_INVALID
                              ? absl::StatusOr<DType>(absl::InvalidArgumentError(
                                    absl::StrCat("variable '", spec.name(),
                                                 "' has no dtype")))
                              : absl::StatusOr<DType>(
                                    static_cast<DType>(spec.dtype())));
  Shape shape(spec.shape().begin(), spec.shape().end());
  VariablePlacement placement;
  placement.spec = spec;
  const size_t esize = DTypeSize(dtype);
  placement.bytes = NumElements(shape) * esize;
  std::vector<PlacementPolicy::Shard> parts = shards;
  if (parts.empty() || shape.empty()) {
    parts = {PlacementPolicy::Shard{
        ShardSlice{0, shape.empty() ? 1 : shape[0]},
        parts.empty() ? 0 : parts[0].ps}};
  }
  const size_t row_bytes =
      shape.empty() || shape[0] == 0 ? placement.bytes
                                     : placement.bytes / shape[0];
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].ps < 0 || parts[i].ps >= num_ps()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable '", spec.name(), "': shard ", i, " is placed on ps ",
          parts[i].ps, " but the cluster has ", num_ps(), " ps tasks"));
    }
    ShardPlacement s;
    s.ps = parts[i].ps;
    s.name = parts.size() == 1 ? spec.name()
                               : absl::StrCat(spec.name(), "/part_", i);
    s.row_offset = parts[i].slice.row_offset;
    s.num_rows = parts[i].slice.num_rows;
    s.byte_offset = shape.empty() ? 0 : parts[i].slice.row_offset * row_bytes;
    s.bytes =
        shape.empty() ? placement.bytes : parts[i].slice.num_rows * row_bytes;
    placement.shards.push_back(s);
  }
  std::vector<absl::Status> status(placement.shards.size());
  pool_->ParallelFor(static_cast<int>(placement.shards.size()), [&](int i) {
    const ShardPlacement& s = placement.shards[i];
    v1::VariableSpec shard = spec;
    shard.set_name(s.name);
    shard.set_full_name(spec.name());
    if (placement.shards.size() > 1) {
      shard.set_shape(0, s.num_rows);
      shard.clear_full_shape();
      for (int64_t d : shape) shard.add_full_shape(d);
      shard.set_row_offset(s.row_offset);
    }
    status[i] = clients_[s.ps]->CreateVariable(shard).status();
  });
  for (size_t i = 0; i < status.size(); ++i) {
    if (!status[i].ok()) {
      return absl::Status(
          status[i].code(),
          absl::StrCat("creating shard '", placement.shards[i].name,
                       "' on ps ", placement.shards[i].ps, ": ",
                       status[i].message()));
    }
  }
  absl::MutexLock lock(&mu_);
  placements_[spec.name()] = placement;
  return placement;
}

absl::StatusOr<VariablePlacement> PsCluster::Placement(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = placements_.find(name);
  if (it == placements_.end()) {
    return absl::NotFoundError(
        absl::StrCat("variable '", name, "' was not created in this cluster"));
  }
  return it->second;
}

void PsCluster::RunPerPs(const std::function<void(int)>& fn) {
  // One thread per extra PS task, not the shared pool: a pull may block
  // (sync mode, staleness bound) and must not hold a pool thread that
  // another step's call is queued behind.
  std::vector<std::thread> threads;
  for (int i = 1; i < num_ps(); ++i) threads.emplace_back(fn, i);
  if (num_ps() > 0) fn(0);
  for (auto& t : threads) t.join();
}

absl::StatusOr<std::vector<PsCluster::PerPs>> PsCluster::SplitPerPs(
    const std::vector<std::string>& names,
    const std::vector<const void*>& grads,
    const std::vector<void*>& dsts) const {
  std::vector<PerPs> per_ps(clients_.size());
  for (size_t v = 0; v < names.size(); ++v) {
    STRATA_ASSIGN_OR_RETURN(VariablePlacement p, Placement(names[v]));
    if (!grads.empty() && p.spec.dtype() != v1::DT_FLOAT32) {
      // The model runtime's variables are float32.
      return absl::InvalidArgumentError(absl::StrCat(
          "pushing variable '", names[v], "': it is not float32"));
    }
    for (const auto& s : p.shards) {
      Shape shape(p.spec.shape().begin(), p.spec.shape().end());
      if (!shape.empty()) shape[0] = s.num_rows;
      PerPs& part = per_ps[s.ps];
      part.names.push_back(s.name);
      part.shapes.push_back(std::move(shape));
      part.sizes.push_back(s.bytes);
      if (!dsts.empty()) {
        part.dsts.push_back(static_cast<char*>(dsts[v]) + s.byte_offset);
      }
      if (!grads.empty()) {
        part.grads.push_back(static_cast<const char*>(grads[v]) +
                             s.byte_offset);
      }
    }
  }
  return per_ps;
}

absl::Status PsCluster::PullMany(const std::vector<std::string>& names,
                                 const std::vector<void*>& dsts,
                                 const PullOptions& options) {
  // One pull frame per PS task (a lane of the pool), all tasks in
  // parallel.
  STRATA_ASSIGN_OR_RETURN(std::vector<PerPs> per_ps,
                          SplitPerPs(names, {}, dsts));
  std::vector<absl::Status> status(clients_.size());
  const int lane = TakePoolLane();
  RunPerPs([&](int i) {
    if (per_ps[i].names.empty()) return;
    status[i] = clients_[i]
                    ->Exchange(lane, {}, {}, {}, {}, per_ps[i].names,
                               per_ps[i].dsts, per_ps[i].sizes, options)
                    .status();
  });
  ReturnPoolLane(lane);
  for (const auto& s : status) STRATA_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

int PsCluster::TakePoolLane() {
  // Far above the lanes callers name (step threads count from 0).
  constexpr int kFirstPoolLane = 1 << 20;
  absl::MutexLock lock(&mu_);
  if (!free_pool_lanes_.empty()) {
    const int lane = free_pool_lanes_.back();
    free_pool_lanes_.pop_back();
    return lane;
  }
  return kFirstPoolLane + pool_lanes_++;
}

void PsCluster::ReturnPoolLane(int lane) {
  absl::MutexLock lock(&mu_);
  free_pool_lanes_.push_back(lane);
}

absl::StatusOr<int64_t> PsCluster::PushMany(
    const std::vector<std::string>& names,
    const std::vector<const void*>& grads, const PushTag& tag) {
  // One push frame per PS task (a lane of the pool), all tasks in
  // parallel.
  STRATA_ASSIGN_OR_RETURN(std::vector<PerPs> per_ps,
                          SplitPerPs(names, grads, {}));
  std::vector<absl::StatusOr<ExchangeResult>> results(clients_.size());
  const int lane = TakePoolLane();
  RunPerPs([&](int i) {
    if (per_ps[i].names.empty()) {
      results[i] = ExchangeResult();
      return;
    }
    results[i] = clients_[i]->Exchange(lane, per_ps[i].names, per_ps[i].shapes,
                                       per_ps[i].grads, tag, {}, {}, {});
  });
  ReturnPoolLane(lane);
  int64_t version = std::numeric_limits<int64_t>::max();
  for (const auto& r : results) {
    if (!r.ok()) return r.status();
    for (const PushResult& p : r->pushed) version = std::min(version, p.version);
  }
  return version;
}

PsCluster::~PsCluster() {
  std::map<std::pair<int, int>, std::unique_ptr<SharedLane>> lanes;
  std::vector<std::shared_ptr<const MirrorSet>> mirrors;
  {
    absl::MutexLock lock(&mu_);
    lanes.swap(lanes_);
    mirrors.swap(mirrors_);
  }
  for (auto& [key, lane] : lanes) {
    if (lane->id != 0) (void)clients_[key.second]->DetachSharedRegion(lane->id);
  }
  for (size_t ps = 0; ps < mirrors.size(); ++ps) {
    if (mirrors[ps] != nullptr) {
      (void)clients_[ps]->DetachSharedRegion(mirrors[ps]->id);
    }
  }
}

void PsCluster::NoteFailure(int ps) {
  absl::MutexLock lock(&mu_);
  ++failures_[ps];
}

PsCluster::SharedLane* PsCluster::Lane(int lane, int ps) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<SharedLane>& l = lanes_[{lane, ps}];
  if (l == nullptr) {
    l = std::make_unique<SharedLane>();
    PsClient* client = clients_[ps].get();
    l->refused = !client->options().shared_memory || !client->TargetIsLoopback();
  }
  return l.get();
}

bool PsCluster::UsesSharedMemory(int lane, int ps) const {
  absl::MutexLock lock(&mu_);
  auto it = lanes_.find({lane, ps});
  return it != lanes_.end() && !it->second->refused && it->second->id != 0;
}

namespace {

bool NotAttached(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition &&
         absl::StartsWith(s.message(), "shared region ");
}

}  // namespace

absl::Status PsCluster::ExchangeWith(int ps, SharedLane* lane,
                                     const PerPs& part, const PushTag& tag,
                                     const PullOptions& options,
                                     bool* shared) {
  *shared = false;
  if (lane->refused) return absl::OkStatus();
  PsClient* client = clients_[ps].get();
  size_t push_bytes = 0;
  size_t pull_bytes = 0;
  for (size_t i = 0; i < part.names.size(); ++i) {
    if (!part.grads.empty()) push_bytes += part.sizes[i];
    if (!part.dsts.empty()) pull_bytes += part.sizes[i];
  }
  // [header][doorbell control][request area][answer area][push][pull]
  // Request and answer name each variable at most twice, with its shape
  // and a few numbers.
  size_t names_bytes = 0;
  for (const std::string& name : part.names) names_bytes += name.size();
  const uint32_t message_bytes = static_cast<uint32_t>(std::min<size_t>(
      RoundUp64(1024 + 2 * names_bytes + 128 * part.names.size()),
      size_t{1} << 20));
  const size_t control_offset = SharedRegion::kHeaderBytes;
  const size_t push_offset =
      control_offset + kDoorbellControlBytes + 2 * size_t{message_bytes};
  const size_t pull_offset = push_offset + RoundUp64(push_bytes);
  const size_t needed = pull_offset + pull_bytes;
  for (int round = 0; round < 2; ++round) {
    if (lane->region == nullptr || lane->region->size() < needed ||
        lane->message_bytes < message_bytes || lane->id == 0) {
      if (lane->region == nullptr || lane->region->size() < needed ||
          lane->message_bytes < message_bytes) {
        if (lane->id != 0) (void)client->DetachSharedRegion(lane->id);
        lane->id = 0;
        lane->message_bytes = message_bytes;
        absl::StatusOr<std::unique_ptr<SharedRegion>> region =
            SharedRegion::Create(needed);
        if (!region.ok()) {
          lane->refused = true;
          return absl::OkStatus();
        }
        lane->region = *std::move(region);
      }
      absl::StatusOr<uint64_t> id = client->AttachSharedRegion(*lane->region);
      if (!id.ok()) {
        if (id.status().code() == absl::StatusCode::kUnavailable ||
            id.status().code() == absl::StatusCode::kDeadlineExceeded) {
          return id.status();  // the server is down: the caller retries
        }
        // Refused (another host, a server without the call, limits):
        // stream from now on.
        lane->refused = true;
        lane->region.reset();
        return absl::OkStatus();
      }
      lane->id = *id;
      // A doorbell when the server offers one and its process is visible
      // from here (to notice it is gone); ExchangeShared calls otherwise.
      absl::StatusOr<int64_t> pid = client->ServeSharedRegion(
          lane->id, control_offset, lane->message_bytes);
      lane->doorbell = pid.ok() && *pid > 0 &&
                       ::kill(static_cast<pid_t>(*pid), 0) == 0;
      lane->server_pid = pid.ok() ? *pid : 0;
    }
    char* base = lane->region->data();
    v1::SharedExchangeRequest request;
    request.set_region(lane->id);
    if (!part.grads.empty()) {
      v1::PushVariablesHeader* push = request.mutable_push();
      size_t offset = push_offset;
      for (size_t i = 0; i < part.names.size(); ++i) {
        v1::VariableSlot* slot = push->add_variables();
        slot->set_name(part.names[i]);
        slot->set_dtype(v1::DT_FLOAT32);
        for (int64_t d : part.shapes[i]) slot->add_shape(d);
        slot->set_bytes(static_cast<int64_t>(part.sizes[i]));
        if (i < tag.base_versions.size() && tag.base_versions[i] >= 0) {
          slot->set_base_version(tag.base_versions[i]);
        }
        std::memcpy(base + offset, part.grads[i], part.sizes[i]);
        offset += part.sizes[i];
      }
      push->set_payload_bytes(static_cast<int64_t>(push_bytes));
      *push->mutable_tag() = ToProto(tag);
      request.set_push_offset(push_offset);
    }
    if (!part.dsts.empty()) {
      v1::PullVariablesRequest* pull = request.mutable_pull();
      for (const std::string& name : part.names) pull->add_names(name);
      pull->set_min_version(options.min_version);
      pull->set_clock(options.clock);
      pull->set_worker(options.worker);
      request.set_pull_offset(pull_offset);
    }
    const bool waits = options.min_version != 0 || options.clock != 0;
    absl::StatusOr<v1::SharedExchangeResponse> resp =
        lane->doorbell && !waits ? RingDoorbell(ps, lane, request)
                                 : client->ExchangeShared(request);
    if (lane->region == nullptr) return resp.status();  // the lane broke
    if (!resp.ok() &&
        resp.status().code() == absl::StatusCode::kResourceExhausted &&
        absl::StartsWith(resp.status().message(), "doorbell: the answer")) {
      // The answer did not fit the message area: the call carries it (a
      // push already applied is acknowledged as a duplicate).
      resp = client->ExchangeShared(request);
    }
    if (!resp.ok() && NotAttached(resp.status()) && round == 0) {
      // The server restarted or dropped the region: attach a new one (a
      // doorbell thread of the old one may still watch its memory).
      NoteFailure(ps);
      lane->id = 0;
      lane->region.reset();
      continue;
    }
    if (!resp.ok()) return resp.status();
    const size_t pulled = part.dsts.empty() ? 0 : part.names.size();
    if (resp->pulled_size() != static_cast<int>(pulled)) {
      return absl::InternalError(absl::StrCat(
          "ExchangeShared with ps ", ps, ": ", resp->pulled_size(),
          " variables pulled, ", part.names.size(), " asked"));
    }
    size_t offset = pull_offset;
    for (size_t i = 0; i < pulled; ++i) {
      if (static_cast<size_t>(resp->pulled(static_cast<int>(i)).bytes()) !=
          part.sizes[i]) {
        return absl::InternalError(absl::StrCat(
            "ExchangeShared: variable '", part.names[i], "' pulled with ",
            resp->pulled(static_cast<int>(i)).bytes(), " bytes, expected ",
            part.sizes[i]));
      }
      std::memcpy(part.dsts[i], base + offset, part.sizes[i]);
      offset += part.sizes[i];
      lane->delivered[part.names[i]] =
          resp->pulled(static_cast<int>(i)).version();
    }
    *shared = true;
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "ExchangeShared with ps ", ps, ": the region was dropped twice"));
}

absl::StatusOr<v1::SharedExchangeResponse> PsCluster::RingDoorbell(
    int ps, SharedLane* lane, const v1::SharedExchangeRequest& request) {
  char* control = lane->region->data() + SharedRegion::kHeaderBytes;
  auto word = [control](size_t offset) {
    return reinterpret_cast<std::atomic<uint32_t>*>(control + offset);
  };
  const std::string bytes = request.SerializeAsString();
  if (bytes.size() > lane->message_bytes) {
    return clients_[ps]->ExchangeShared(request);
  }
  const auto closed = [&] {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared region ", lane->id, " is not attached (its doorbell closed)"));
  };
  if (word(0)->load(std::memory_order_acquire) == kDoorbellClosed) {
    return closed();
  }
  std::memcpy(control + kDoorbellControlBytes, bytes.data(), bytes.size());
  word(4)->store(static_cast<uint32_t>(bytes.size()),
                 std::memory_order_relaxed);
  // Idle → Request, unless the server closed the word meanwhile.
  uint32_t idle = kDoorbellIdle;
  if (!word(0)->compare_exchange_strong(idle, kDoorbellRequest,
                                        std::memory_order_acq_rel)) {
    return closed();
  }
  FutexWakeAll(word(0));
  const absl::Time deadline =
      absl::Now() + clients_[ps]->options().deadline;
  absl::Status broken;
  while (word(0)->load(std::memory_order_acquire) != kDoorbellAnswer) {
    FutexWait(word(0), kDoorbellRequest, absl::Milliseconds(20));
    const uint32_t state = word(0)->load(std::memory_order_acquire);
    if (state == kDoorbellAnswer) break;
    if (state == kDoorbellClosed) return closed();
    if (absl::Now() > deadline) {
      broken = absl::DeadlineExceededError(absl::StrCat(
          "ExchangeShared with ps ", ps, ": no answer at the doorbell"));
      break;
    }
    if (::kill(static_cast<pid_t>(lane->server_pid), 0) != 0 &&
        errno == ESRCH) {
      broken = absl::UnavailableError(absl::StrCat(
          "ExchangeShared with ps ", ps, ": the server process ",
          lane->server_pid, " is gone"));
      break;
    }
  }
  if (!broken.ok()) {
    // The server may still answer into this region: never reuse it (and
    // tell a live server to let it go).
    if (broken.code() == absl::StatusCode::kDeadlineExceeded) {
      (void)clients_[ps]->DetachSharedRegion(lane->id);
    }
    lane->region.reset();
    lane->id = 0;
    lane->doorbell = false;
    return broken;
  }
  const uint32_t n =
      std::min(word(8)->load(std::memory_order_relaxed), lane->message_bytes);
  const auto code = static_cast<absl::StatusCode>(
      word(12)->load(std::memory_order_relaxed));
  std::string answer(control + kDoorbellControlBytes + lane->message_bytes, n);
  // Answer → Idle; a server that closed the word since keeps it closed.
  uint32_t answered = kDoorbellAnswer;
  word(0)->compare_exchange_strong(answered, kDoorbellIdle,
                                   std::memory_order_acq_rel);
  if (code != absl::StatusCode::kOk) return absl::Status(code, answer);
  v1::SharedExchangeResponse response;
  if (!response.ParseFromString(answer)) {
    return absl::InternalError(absl::StrCat(
        "ExchangeShared with ps ", ps,
        ": the doorbell's answer is not a SharedExchangeResponse"));
  }
  return response;
}

PushTag PsCluster::WithBaseVersions(const PushTag& tag,
                                   const SharedLane& lane,
                                   const PerPs& part) {
  PushTag with = tag;
  with.base_versions.assign(part.names.size(), -1);
  for (size_t i = 0; i < part.names.size(); ++i) {
    auto it = lane.delivered.find(part.names[i]);
    if (it != lane.delivered.end()) with.base_versions[i] = it->second;
  }
  return with;
}

absl::Status PsCluster::PushPullOne(int lane, int ps, const PerPs& part,
                                    const PushTag& tag,
                                    const PullOptions& options) {
  SharedLane* shared_lane = Lane(lane, ps);
  const bool push = !part.grads.empty();
  const bool pull = !part.dsts.empty();
  // A push's gradients were computed from the values this lane delivered
  // last.
  const PushTag with_base =
      push ? WithBaseVersions(tag, *shared_lane, part) : tag;
  bool shared = false;
  absl::Status status =
      ExchangeWith(ps, shared_lane, part, with_base, options, &shared);
  if (status.ok() && !shared) {
    // One frame on the lane's stream: the push, then the pull.
    static const std::vector<std::string> kNone;
    static const std::vector<Shape> kNoShapes;
    absl::StatusOr<ExchangeResult> result = clients_[ps]->Exchange(
        lane, push ? part.names : kNone, push ? part.shapes : kNoShapes,
        part.grads, with_base, pull ? part.names : kNone, part.dsts,
        pull ? part.sizes : std::vector<size_t>(), options);
    status = result.status();
    if (result.ok() && pull && result->pulled.size() == part.names.size()) {
      for (size_t i = 0; i < part.names.size(); ++i) {
        shared_lane->delivered[part.names[i]] = result->pulled[i];
      }
    }
  }
  if (!status.ok()) NoteFailure(ps);
  return status;
}

absl::Status PsCluster::PushPullMany(int lane,
                                     const std::vector<std::string>& names,
                                     const std::vector<const void*>& grads,
                                     const PushTag& tag,
                                     const std::vector<void*>& dsts,
                                     const PullOptions& options) {
  STRATA_ASSIGN_OR_RETURN(std::vector<PerPs> per_ps,
                          SplitPerPs(names, grads, dsts));
  std::vector<absl::Status> status(clients_.size());
  RunPerPs([&](int i) {
    if (per_ps[i].names.empty()) return;
    status[i] = PushPullOne(lane, i, per_ps[i], tag, options);
  });
  for (const auto& s : status) STRATA_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

}  // namespace strata

// ParameterServiceImpl's same-host shared-memory calls: regions attached
// and detached, ExchangeShared over gRPC, variables mirrored into a region,
// and doorbells served in one.
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rpc/grpc_status.h"
#include "server/parameter_service_call.h"
#include "server/parameter_service_impl.h"
#include "server/ready_wait.h"
#include "server/shared_exchange.h"
#include "server/shared_regions.h"

namespace strata {
namespace {

// The job whose shared regions a caller may use ("" for any: no
// credentials, or an admin).
std::string RegionJob(const std::optional<Caller>& caller) {
  return caller.has_value() && !caller->Has(Role::kAdmin) ? caller->job
                                                          : std::string();
}

// ExchangeShared over gRPC (see SharedExchange); a pull waits like
// PullVariables.
class ExchangeReactor final : public grpc::ServerUnaryReactor {
 public:
  ExchangeReactor(ParameterServiceImpl* service,
                  grpc::CallbackServerContext* ctx,
                  const v1::SharedExchangeRequest* request,
                  v1::SharedExchangeResponse* response)
      : service_(service),
        call_(service, "ExchangeShared"),
        ctx_(ctx),
        request_(request),
        response_(response) {}

  ServiceCall& call() { return call_; }

  void Begin() {
    exchange_.emplace(service_->store(), service_->buffers(), call_.caller());
    absl::StatusOr<std::shared_ptr<MappedRegion>> region =
        service_->shared_regions()->Get(request_->region(),
                                        RegionJob(call_.caller()),
                                        call_.start());
    absl::Status s = region.status();
    if (s.ok()) s = exchange_->Prepare(*request_, *std::move(region));
    if (s.ok()) s = exchange_->ApplyPush(response_);
    if (!s.ok()) {
      Complete(s, exchange_->variable());
      return;
    }
    if (exchange_->pull().empty()) {
      Complete(absl::OkStatus(), "");
      return;
    }
    wait_.Start(service_->timer(), service_->options().max_pull_wait, ctx_,
                exchange_->pull(), request_->pull().min_version(),
                request_->pull().clock(),
                [this](const absl::Status& s, const std::string& name) {
                  if (s.ok()) exchange_->WritePull(response_);
                  Complete(s, name);
                });
  }

  void Reject(const absl::Status& status) { Complete(status, ""); }
  void OnDone() override { delete this; }

 private:
  void Complete(const absl::Status& status, const std::string& variable) {
    const bool counted = status.ok() && exchange_.has_value();
    if (call_.End(status, variable,
                  counted ? static_cast<int64_t>(exchange_->push_bytes()) : 0,
                  counted ? static_cast<int64_t>(exchange_->pull_bytes()) : 0)) {
      Finish(ToGrpcStatus(status));
    }
  }

  ParameterServiceImpl* const service_;
  ServiceCall call_;
  grpc::CallbackServerContext* const ctx_;
  const v1::SharedExchangeRequest* const request_;
  v1::SharedExchangeResponse* const response_;
  // Made once the caller is known.
  std::optional<SharedExchange> exchange_;
  ReadyWait wait_;
};

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
  return Unary(
      ctx, "AttachSharedRegion", Role::kWorker, RunOn::kCallbackThread,
      [&](const ServiceCall& call) -> absl::Status {
        // The region belongs to the caller's job, an admin's included.
        STRATA_ASSIGN_OR_RETURN(
            uint64_t id,
            shared_regions_.Attach(
                ctx->peer(), req->pid(), req->fd(),
                static_cast<uint64_t>(req->bytes()), req->nonce(),
                call.caller().has_value() ? call.caller()->job : std::string(),
                call.start()));
        resp->set_region(id);
        resp->set_server_pid(static_cast<int64_t>(::getpid()));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::DetachSharedRegion(
    grpc::CallbackServerContext* ctx,
    const v1::DetachSharedRegionRequest* req,
    v1::DetachSharedRegionResponse* /*resp*/) {
  return Unary(
      ctx, "DetachSharedRegion", Role::kWorker, RunOn::kCallbackThread,
      [&](const ServiceCall& call) -> absl::Status {
        absl::Status detached =
            shared_regions_.Detach(req->region(), RegionJob(call.caller()));
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
        return detached;
      });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::ExchangeShared(
    grpc::CallbackServerContext* ctx, const v1::SharedExchangeRequest* req,
    v1::SharedExchangeResponse* resp) {
  return StartAuthorized(new ExchangeReactor(this, ctx, req, resp), ctx,
                         Role::kWorker);
}

grpc::ServerUnaryReactor* ParameterServiceImpl::MirrorVariables(
    grpc::CallbackServerContext* ctx, const v1::MirrorVariablesRequest* req,
    v1::MirrorVariablesResponse* /*resp*/) {
  return Unary(
      ctx, "MirrorVariables", Role::kWorker, RunOn::kCallbackThread,
      [&](const ServiceCall& call) -> absl::Status {
        if (req->names_size() != req->offsets_size() ||
            req->names_size() > 4096) {
          return absl::InvalidArgumentError(absl::StrCat(
              "MirrorVariables: ", req->names_size(), " names and ",
              req->offsets_size(), " offsets (equal counts, at most 4096)"));
        }
        STRATA_ASSIGN_OR_RETURN(
            std::shared_ptr<MappedRegion> region,
            shared_regions_.Get(req->region(), RegionJob(call.caller()),
                                call.start()));
        std::vector<std::shared_ptr<Variable>> variables;
        for (int i = 0; i < req->names_size(); ++i) {
          STRATA_RETURN_IF_ERROR(
              store_->CheckOwner(call.caller(), req->names(i)));
          STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Variable> v,
                                  store_->Get(req->names(i)));
          STRATA_RETURN_IF_ERROR(v->CheckMirror(*region, req->offsets(i)));
          variables.push_back(std::move(v));
        }
        for (size_t i = 0; i < variables.size(); ++i) {
          STRATA_RETURN_IF_ERROR(variables[i]->AddMirror(
              region, req->offsets(static_cast<int>(i))));
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ParameterServiceImpl::ServeSharedRegion(
    grpc::CallbackServerContext* ctx, const v1::ServeSharedRegionRequest* req,
    v1::ServeSharedRegionResponse* resp) {
  return Unary(
      ctx, "ServeSharedRegion", Role::kWorker, RunOn::kCallbackThread,
      [&](const ServiceCall& call) -> absl::Status {
        return ServeDoorbell(*req, call, resp);
      });
}

absl::Status ParameterServiceImpl::ServeDoorbell(
    const v1::ServeSharedRegionRequest& req, const ServiceCall& call,
    v1::ServeSharedRegionResponse* resp) {
  const std::string job = RegionJob(call.caller());
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<MappedRegion> region,
                          shared_regions_.Get(req.region(), job, call.start()));
  if (req.control_offset() % 64 != 0 || req.message_bytes() < 256 ||
      req.message_bytes() > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ServeSharedRegion: control_offset ", req.control_offset(),
        " must be a multiple of 64 and message_bytes ", req.message_bytes(),
        " in [256, 1048576]"));
  }
  STRATA_RETURN_IF_ERROR(region->CheckRange(
      req.control_offset(),
      kDoorbellControlBytes + 2 * uint64_t{req.message_bytes()},
      "ServeSharedRegion"));
  const uint64_t id = req.region();
  const std::optional<Caller> who = call.caller();
  auto handle = [this, id, job, who, region](
                    const v1::SharedExchangeRequest& request,
                    v1::SharedExchangeResponse* response) -> absl::Status {
    ServiceCall exchange_call(this, "ExchangeShared");
    exchange_call.set_transport("doorbell");
    SharedExchange exchange(store_, buffers_.get(), who);
    absl::Status s =
        request.pull().min_version() != 0 || request.pull().clock() != 0
            ? absl::InvalidArgumentError(
                  "doorbell: a pull that waits for a version or a clock goes "
                  "through the ExchangeShared call")
            : absl::OkStatus();
    // Marks the region used; fails once it was detached or dropped.
    if (s.ok()) s = shared_regions_.Get(id, job, exchange_call.start()).status();
    if (s.ok()) s = exchange.Prepare(request, region);
    if (s.ok()) s = exchange.ApplyPush(response);
    if (s.ok()) exchange.WritePull(response);
    exchange_call.End(
        s, exchange.variable(),
        s.ok() ? static_cast<int64_t>(exchange.push_bytes()) : 0,
        s.ok() ? static_cast<int64_t>(exchange.pull_bytes()) : 0);
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
        region, req.control_offset(), req.message_bytes(), std::move(handle),
        std::move(alive));
  }
  resp->set_server_pid(static_cast<int64_t>(::getpid()));
  return absl::OkStatus();
}

}  // namespace strata

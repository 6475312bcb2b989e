#include "server/shared_exchange.h"

#include <cstring>
#include <utility>

#include "common/status_macros.h"
#include "server/requests.h"  // ValidatePullVariablesRequest

namespace strata {

SharedExchange::SharedExchange(ParameterStore* store, BufferPool* buffers,
                               std::optional<Caller> caller)
    : store_(store), buffers_(buffers), caller_(std::move(caller)) {}

absl::Status SharedExchange::Prepare(const v1::SharedExchangeRequest& request,
                                     std::shared_ptr<MappedRegion> region) {
  request_ = &request;
  region_ = std::move(region);
  const v1::PushVariablesHeader& push = request.push();
  if (push.variables_size() > 0) {
    variable_ = push.variables(0).name();
    STRATA_ASSIGN_OR_RETURN(push_, store_->StartPush(push, caller_));
    push_bytes_ = push_->payload_bytes();
    STRATA_RETURN_IF_ERROR(region_->CheckRange(
        request.push_offset(), push_bytes_, "ExchangeShared push"));
  }
  const v1::PullVariablesRequest& pull = request.pull();
  if (pull.names_size() > 0) {
    STRATA_RETURN_IF_ERROR(ValidatePullVariablesRequest(pull));
    for (const std::string& name : pull.names()) {
      variable_ = name;
      STRATA_RETURN_IF_ERROR(store_->CheckOwner(caller_, name));
      STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Variable> v, store_->Get(name));
      pull_bytes_ += v->byte_size();
      pull_.push_back(std::move(v));
    }
    STRATA_RETURN_IF_ERROR(region_->CheckRange(
        request.pull_offset(), pull_bytes_, "ExchangeShared pull"));
  }
  return absl::OkStatus();
}

absl::Status SharedExchange::ApplyPush(v1::SharedExchangeResponse* response) {
  if (push_ == nullptr) return absl::OkStatus();
  variable_ = request_->push().variables(0).name();
  std::shared_ptr<Buffer> grads = buffers_->Acquire(push_bytes_);
  std::memcpy(grads->data(), region_->data() + request_->push_offset(),
              push_bytes_);
  push_->Attach(grads->data());
  STRATA_ASSIGN_OR_RETURN(*response->mutable_push(), push_->Finish());
  return absl::OkStatus();
}

void SharedExchange::WritePull(v1::SharedExchangeResponse* response) {
  char* dst = region_->data() + request_->pull_offset();
  for (const auto& v : pull_) {
    VariableSnapshot snap = v->Snapshot();
    std::memcpy(dst, snap.value->data(), snap.value->size());
    dst += snap.value->size();
    v1::VariableSlot* slot = response->add_pulled();
    slot->set_name(v->name());
    slot->set_dtype(DTypeToProto(snap.dtype));
    for (int64_t d : snap.shape) slot->add_shape(d);
    slot->set_bytes(static_cast<int64_t>(snap.value->size()));
    slot->set_version(snap.version);
  }
  if (!pull_.empty()) store_->RecordPull(static_cast<int64_t>(pull_bytes_));
}

}  // namespace strata

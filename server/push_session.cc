#include "server/push_session.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace strata {

absl::StatusOr<std::unique_ptr<PushSession>> ParameterStore::StartPush(
    const v1::PushVariablesHeader& header,
    const std::optional<Caller>& caller) {
  for (const auto& v : header.variables()) {
    STRATA_RETURN_IF_ERROR(CheckOwner(caller, v.name()));
  }
  uint64_t bytes = 0;
  STRATA_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<Variable>> variables,
                          ValidatePushVariablesHeader(header, *this, &bytes));
  const uint64_t limit = max_variable_bytes();
  if (bytes > limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "PushVariables of variable '", header.variables(0).name(),
        "': payload of ", bytes, " bytes is above the server limit of ",
        limit));
  }
  return std::make_unique<PushSession>(this, header, std::move(variables),
                                       bytes);
}

PushSession::PushSession(ParameterStore* store,
                         const v1::PushVariablesHeader& header,
                         std::vector<std::shared_ptr<Variable>> variables,
                         uint64_t payload_bytes)
    : store_(store),
      header_(header),
      variables_(std::move(variables)),
      payload_bytes_(payload_bytes) {}

void PushSession::Attach(const char* data) {
  gradients_ = std::make_unique<PushGradients>(header_, variables_, data,
                                               payload_bytes_);
}

void PushSession::Stage(BufferPool* pool, uint64_t max_bytes) {
  gradients_->Stage(pool, max_bytes);
}

absl::Status PushSession::Receive(size_t received) {
  return gradients_->Advance(received);
}

absl::StatusOr<v1::PushVariablesResponse> PushSession::Finish() {
  // Again for a payload of no bytes, and for the verdict on the tags.
  STRATA_RETURN_IF_ERROR(gradients_->Advance(payload_bytes_));
  return ApplyCheckedPushVariables(header_, variables_, *gradients_, store_);
}

}  // namespace strata

// One ExchangeShared request (parameter_server.proto) against a mapped
// region, apart from its transports (the gRPC call and the doorbell in
// shared memory, server/shared_doorbell.h): everything is checked before
// the push is applied, so a bad request changes nothing; the gradients are
// copied out of the region before they are checked and applied, so that
// the client cannot change them in between.
#ifndef STRATA_SERVER_SHARED_EXCHANGE_H_
#define STRATA_SERVER_SHARED_EXCHANGE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/buffer_pool.h"
#include "rpc/auth.h"
#include "server/parameter_store.h"
#include "server/push_session.h"
#include "server/shared_regions.h"
#include "server/variable.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

class SharedExchange {
 public:
  // For `caller` (nullopt: a server without credentials), who may reach
  // the variables ParameterStore::CheckOwner allows. The store and the
  // buffers must outlive this object.
  SharedExchange(ParameterStore* store, BufferPool* buffers,
                 std::optional<Caller> caller);

  // Checks the request against `region`: owners, the push header as
  // PushVariables checks it, the pull names and request, and both byte
  // ranges inside the region after its nonce. Changes nothing. Errors:
  // those of ParameterStore::StartPush; NOT_FOUND, PERMISSION_DENIED,
  // INVALID_ARGUMENT for the pull and the ranges.
  absl::Status Prepare(const v1::SharedExchangeRequest& request,
                       std::shared_ptr<MappedRegion> region);
  // Applies the push (none without one) and fills response->push. Errors:
  // those of PushSession::Finish (NaN/Inf, sync-mode refusals).
  absl::Status ApplyPush(v1::SharedExchangeResponse* response);
  // The variables to pull (empty: no pull), and their wait conditions.
  const std::vector<std::shared_ptr<Variable>>& pull() const { return pull_; }
  // Writes every pulled variable's snapshot into the region and fills
  // response->pulled. Call once the pull is ready.
  void WritePull(v1::SharedExchangeResponse* response);

  // The variable the request was about when it failed (for logs).
  const std::string& variable() const { return variable_; }
  uint64_t push_bytes() const { return push_bytes_; }
  uint64_t pull_bytes() const { return pull_bytes_; }

 private:
  ParameterStore* const store_;
  BufferPool* const buffers_;
  const std::optional<Caller> caller_;
  const v1::SharedExchangeRequest* request_ = nullptr;
  std::shared_ptr<MappedRegion> region_;
  std::string variable_;
  std::unique_ptr<PushSession> push_;
  uint64_t push_bytes_ = 0;
  std::vector<std::shared_ptr<Variable>> pull_;
  uint64_t pull_bytes_ = 0;
};

}  // namespace strata

#endif  // STRATA_SERVER_SHARED_EXCHANGE_H_

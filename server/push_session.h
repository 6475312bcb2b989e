// One PushVariables as the PS core takes it, whatever carried its bytes
// (the Lane's frames, the PushVariables stream, a shared-memory region):
// the owner check and the header's validation when it starts, the decode
// and the NaN/Inf and tag checks as the payload arrives, staging, and at
// the end the apply, the accounting and (inside Variable) the replication.
// The adapters only move bytes into the payload and call these.
//
//   auto push = store->StartPush(header, caller);     // checks the header
//   push->Attach(payload);   // where the payload_bytes() bytes will be
//   push->Receive(n);        // as the first n bytes arrive (optional)
//   auto response = push->Finish();   // once all are in
//
// Thread-compatible: one thread at a time drives a push.
#ifndef STRATA_SERVER_PUSH_SESSION_H_
#define STRATA_SERVER_PUSH_SESSION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/buffer_pool.h"
#include "server/parameter_store.h"
#include "server/requests.h"
#include "server/variable.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

class PushSession {
 public:
  // Use ParameterStore::StartPush. `header` must outlive the session.
  PushSession(ParameterStore* store, const v1::PushVariablesHeader& header,
              std::vector<std::shared_ptr<Variable>> variables,
              uint64_t payload_bytes);
  PushSession(const PushSession&) = delete;
  PushSession& operator=(const PushSession&) = delete;

  // The payload's size on the wire, as the header announced and the
  // variables need.
  uint64_t payload_bytes() const { return payload_bytes_; }

  // The payload will be at `data` (payload_bytes() bytes, owned by the
  // caller and kept until Finish returns). Called once, before Receive,
  // Stage and Finish.
  void Attach(const char* data);

  // Gradients arriving in pieces are also applied as they arrive, to
  // staged copies published whole by Finish (PushGradients::Stage).
  void Stage(BufferPool* pool, uint64_t max_bytes);

  // The first `received` bytes are in: decodes and checks them. An error
  // (NaN/Inf naming the element, a tag that does not fit a variable) is
  // final; nothing of the push is applied.
  absl::Status Receive(size_t received);

  // Every byte is in: the verdict on the whole payload, then each
  // variable's apply in the header's order, each counted in the store's
  // statistics with the bytes its gradient took on the wire.
  // Errors: those of Receive, and of Variable::PushDense.
  absl::StatusOr<v1::PushVariablesResponse> Finish();

 private:
  ParameterStore* const store_;
  const v1::PushVariablesHeader& header_;
  const std::vector<std::shared_ptr<Variable>> variables_;
  const uint64_t payload_bytes_;
  std::unique_ptr<PushGradients> gradients_;
};

}  // namespace strata

#endif  // STRATA_SERVER_PUSH_SESSION_H_

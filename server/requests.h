// Validation and application of the parameter service's streamed requests
// (Push, Assign, PushVariables, Pull, PullVariables), apart from the gRPC
// adapter so that they can be tested and fuzzed without a server. Pure logic
// over Variable and ParameterStore; ParameterServiceImpl only receives the
// bytes, calls these and maps the status.
#ifndef STRATA_SERVER_REQUESTS_H_
#define STRATA_SERVER_REQUESTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gradient_encoding.h"
#include "server/variable.h"
#include "server/parameter_store.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

// Checks a Push header against `variable`: dtype, then for a row push a 2-D
// variable, shape [num_rows, width] and a payload of num_rows int64 ids
// followed by the rows; for a dense push the variable's shape and byte size.
// Returns the payload bytes the stream must carry.
// Errors: INVALID_ARGUMENT naming the variable and what was expected;
// RESOURCE_EXHAUSTED for a row count whose payload size overflows.
absl::StatusOr<uint64_t> ValidatePushHeader(const v1::PushHeader& header,
                                            const Variable& variable);

// Applies a push whose header passed ValidatePushHeader; `data` holds its
// `size` payload bytes. Errors: those of Variable::PushDense / PushRows.
absl::StatusOr<PushOutcome> ApplyPush(const v1::PushHeader& header,
                                      Variable* variable, const char* data,
                                      size_t size);

// Checks an Assign header (dtype, shape, payload size) against `variable`.
// Returns the payload bytes. Errors: INVALID_ARGUMENT.
absl::StatusOr<uint64_t> ValidateAssignHeader(const v1::AssignHeader& header,
                                              const Variable& variable);

// Looks up every variable a PushVariables header names and checks dtype,
// shape, encoding and bytes of each (an encoded slot: a float32 variable,
// 2 bytes per element), and the total payload size. Returns the variables
// in the header's order; sets `*payload_bytes` (the bytes on the wire).
// Errors: NOT_FOUND (a variable does not exist), INVALID_ARGUMENT (naming
// the variable: a mismatch, an encoding of a non-float32 variable, an
// encoding the enum does not define).
absl::StatusOr<std::vector<std::shared_ptr<Variable>>>
ValidatePushVariablesHeader(const v1::PushVariablesHeader& header,
                            const ParameterStore& store,
                            uint64_t* payload_bytes);

// The gradients of a validated PushVariables payload (`variables` as
// returned by ValidatePushVariablesHeader, `data` its `size` bytes),
// decoded to float32 where encoded and checked for NaN/Inf as far as the
// payload has arrived: Advance(received) takes the bytes up to `received`
// (a prefix that only grows), so that a reader of a chunked payload does
// this work while the rest is still on its way (the Lane's frames). Once
// Stage is called, the optimizer steps run then too, on staged copies
// (StagedDense) that ApplyCheckedPushVariables publishes once the whole
// payload is in and checked: a bad value anywhere changes nothing.
// Thread-compatible.
class PushGradients {
 public:
  PushGradients(const v1::PushVariablesHeader& header,
                const std::vector<std::shared_ptr<Variable>>& variables,
                const char* data, size_t size);

  // From the next Advance on, the gradients of variables none of whose
  // elements were taken yet are also applied as they arrive, each to a
  // staged copy with buffers from `pool` (Variable::StageDense), unless
  // the push's tag does not fit some variable, or its copy (value and
  // slots) would exceed `max_bytes`. For a payload that arrives in pieces:
  // a payload taken whole gains nothing from it.
  void Stage(BufferPool* pool, uint64_t max_bytes) {
    stage_pool_ = pool;
    stage_max_bytes_ = max_bytes;
  }

  // Decodes and checks the elements the first `received` bytes complete.
  // Once every byte is in, the push's verdict: OK, or the error
  // ApplyPushVariables gives for it (the first variable, in the header's
  // order, whose tag does not fit its update mode or whose gradient holds
  // a non-finite value, naming the element; a payload shorter than the
  // variables need). An error is final (later calls return it).
  absl::Status Advance(size_t received);

  // After Advance(size) returned OK: the gradients, in the header's order.
  const std::vector<const char*>& grads() const { return grads_; }
  // The bytes gradient `i` took on the wire.
  size_t wire_bytes(size_t i) const { return parts_[i].wire; }
  // The push's tag.
  const PushMeta& meta() const { return meta_; }
  // Gradient `i`'s tag: meta() with the slot's base version.
  const PushMeta& meta(size_t i) const { return parts_[i].meta; }
  // Gradient `i`'s staged step; null when it is not staged.
  StagedDense* staged(size_t i) const { return parts_[i].staged.get(); }

 private:
  struct Part {
    size_t offset = 0;     // in the payload
    size_t wire = 0;       // bytes on the wire
    size_t wire_elem = 0;  // bytes per element on the wire
    size_t elem = 0;       // bytes per element of grads_[i]
    int64_t n = 0;
    int64_t done = 0;      // elements decoded and checked
    bool encoded = false;
    // Not aligned in the payload: copied to `aligned` as it arrives.
    bool copied = false;
    std::unique_ptr<uint64_t[]> aligned;
    GradientEncoding encoding = GradientEncoding::kNone;
    DType dtype = DType::kInvalid;
    std::string what;      // "gradient for variable 'x'"
    PushMeta meta;
    Variable* variable = nullptr;
    std::unique_ptr<StagedDense> staged;
  };

  const char* const data_;
  const size_t size_;
  BufferPool* stage_pool_ = nullptr;
  uint64_t stage_max_bytes_ = 0;
  PushMeta meta_;
  std::vector<Part> parts_;
  std::vector<const char*> grads_;
  std::unique_ptr<float[]> decoded_;
  // The first variable whose tag does not fit (-1: none) and why.
  int bad_meta_ = -1;
  absl::Status meta_error_;
  absl::Status error_;
};

// Applies a push whose gradients `gradients` has taken whole (Advance
// returned OK for the whole payload): each outcome is recorded in `store`
// with the bytes the gradient took on the wire. Errors: those of
// Variable::PushDense.
absl::StatusOr<v1::PushVariablesResponse> ApplyCheckedPushVariables(
    const v1::PushVariablesHeader& header,
    const std::vector<std::shared_ptr<Variable>>& variables,
    const PushGradients& gradients, ParameterStore* store);

// Applies the gradients of a validated PushVariables (`variables` as
// returned by ValidatePushVariablesHeader): encoded gradients are decoded
// to float32, then every gradient is checked for NaN/Inf before any
// variable is updated; each outcome is recorded in `store` with the bytes
// the gradient took on the wire. Errors: INVALID_ARGUMENT, and those of Variable::PushDense.
absl::StatusOr<v1::PushVariablesResponse> ApplyPushVariables(
    const v1::PushVariablesHeader& header,
    const std::vector<std::shared_ptr<Variable>>& variables, const char* data,
    size_t size, ParameterStore* store);

// Pull / PullVariables: min_version and clock must be >= 0.
// Errors: INVALID_ARGUMENT.
absl::Status ValidatePullRequest(const v1::PullRequest& request);
absl::Status ValidatePullVariablesRequest(
    const v1::PullVariablesRequest& request);

// What a ready Pull streams: the whole value, or the requested rows.
// Errors: INVALID_ARGUMENT from Variable::ReadRows; RESOURCE_EXHAUSTED when
// the rows requested add up to more than `max_bytes` (the server's
// --max-variable-bytes: ids may repeat, so a small request can name far
// more rows than the variable holds).
absl::StatusOr<VariableSnapshot> ReadPull(const v1::PullRequest& request,
                                          const Variable& variable,
                                          uint64_t max_bytes);

// The header streamed before a Pull's payload.
v1::PullHeader MakePullHeader(const VariableSnapshot& snapshot);

// The header and buffers (in order) a ready PullVariables streams: one
// consistent snapshot per variable.
v1::PullVariablesHeader MakePullVariablesPayload(
    const std::vector<std::shared_ptr<Variable>>& variables,
    std::vector<std::shared_ptr<const Buffer>>* buffers);

}  // namespace strata

#endif  // STRATA_SERVER_REQUESTS_H_

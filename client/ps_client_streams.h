// The streamed calls of the parameter service, client side: Push, Assign
// and PushVariables upload a header and payload as TensorChunk messages;
// Pull and PullVariables read them back into caller memory. Each function
// makes one attempt (no retries) and blocks until the call ends.
//
// Thread-safe: calls share nothing but the stub, which gRPC makes safe.
// Nothing is owned: stubs and buffers belong to the caller and must outlive
// the call.
#ifndef STRATA_CLIENT_PS_CLIENT_STREAMS_H_
#define STRATA_CLIENT_PS_CLIENT_STREAMS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/ps_client.h"
#include "common/tensor.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

// Sets `ctx`'s deadline `d` from now.
void SetDeadline(grpc::ClientContext* ctx, absl::Duration d);

// Streams `header` then `payload`'s segments in chunks of at most
// `chunk_bytes` to `method`; returns the serialized response.
absl::StatusOr<std::string> UploadChunks(
    grpc::GenericStub& stub, const char* method, absl::Duration deadline,
    const std::string& header, absl::Span<const absl::string_view> payload,
    size_t chunk_bytes);

// Pull: the variable (or rows) into `dst`, which must have exactly the
// payload's `dst_bytes` (INVALID_ARGUMENT otherwise); when `alloc` is set,
// into a buffer allocated for it instead.
absl::StatusOr<PullResult> PullChunks(grpc::GenericStub& stub,
                                      absl::Duration deadline,
                                      const v1::PullRequest& request,
                                      void* dst, size_t dst_bytes,
                                      std::shared_ptr<Buffer>* alloc);

// PullVariables: variable i into dsts[i], of sizes[i] bytes (its size, or
// INVALID_ARGUMENT). Returns the versions read.
absl::StatusOr<std::vector<int64_t>> PullVariablesChunks(
    grpc::GenericStub& stub, absl::Duration deadline,
    const v1::PullVariablesRequest& request, const std::vector<void*>& dsts,
    const std::vector<size_t>& sizes);

}  // namespace strata

#endif  // STRATA_CLIENT_PS_CLIENT_STREAMS_H_

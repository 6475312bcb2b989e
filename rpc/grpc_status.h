// The one conversion between absl::Status (used everywhere inside Strata) and
// grpc::Status (used only at the gRPC edge).
#ifndef STRATA_RPC_GRPC_STATUS_H_
#define STRATA_RPC_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace strata {

// Maps each canonical code to the gRPC code of the same name and keeps the
// message. Payloads of `status` are not carried.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The inverse of ToGrpcStatus: same-named code, same message. The gRPC error
// details blob is not carried. An unrecognized code becomes kUnknown, with the
// original number appended to the message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace strata

#endif  // STRATA_RPC_GRPC_STATUS_H_

#include "rpc/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace strata {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return grpc::Status::OK;
    case absl::StatusCode::kCancelled:
      return grpc::Status(grpc::StatusCode::CANCELLED, message);
    case absl::StatusCode::kUnknown:
      return grpc::Status(grpc::StatusCode::UNKNOWN, message);
    case absl::StatusCode::kInvalidArgument:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
    case absl::StatusCode::kDeadlineExceeded:
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, message);
    case absl::StatusCode::kNotFound:
      return grpc::Status(grpc::StatusCode::NOT_FOUND, message);
    case absl::StatusCode::kAlreadyExists:
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, message);
    case absl::StatusCode::kPermissionDenied:
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, message);
    case absl::StatusCode::kResourceExhausted:
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, message);
    case absl::StatusCode::kFailedPrecondition:
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, message);
    case absl::StatusCode::kAborted:
      return grpc::Status(grpc::StatusCode::ABORTED, message);
    case absl::StatusCode::kOutOfRange:
      return grpc::Status(grpc::StatusCode::OUT_OF_RANGE, message);
    case absl::StatusCode::kUnimplemented:
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, message);
    case absl::StatusCode::kInternal:
      return grpc::Status(grpc::StatusCode::INTERNAL, message);
    case absl::StatusCode::kUnavailable:
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, message);
    case absl::StatusCode::kDataLoss:
      return grpc::Status(grpc::StatusCode::DATA_LOSS, message);
    case absl::StatusCode::kUnauthenticated:
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, message);
    default:
      break;
  }
  // absl::Status already maps codes outside the canonical set to kUnknown.
  return grpc::Status(grpc::StatusCode::UNKNOWN, message);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  const std::string& message = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return absl::OkStatus();
    case grpc::StatusCode::CANCELLED:
      return absl::CancelledError(message);
    case grpc::StatusCode::UNKNOWN:
      return absl::UnknownError(message);
    case grpc::StatusCode::INVALID_ARGUMENT:
      return absl::InvalidArgumentError(message);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(message);
    case grpc::StatusCode::NOT_FOUND:
      return absl::NotFoundError(message);
    case grpc::StatusCode::ALREADY_EXISTS:
      return absl::AlreadyExistsError(message);
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::PermissionDeniedError(message);
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return absl::ResourceExhaustedError(message);
    case grpc::StatusCode::FAILED_PRECONDITION:
      return absl::FailedPreconditionError(message);
    case grpc::StatusCode::ABORTED:
      return absl::AbortedError(message);
    case grpc::StatusCode::OUT_OF_RANGE:
      return absl::OutOfRangeError(message);
    case grpc::StatusCode::UNIMPLEMENTED:
      return absl::UnimplementedError(message);
    case grpc::StatusCode::INTERNAL:
      return absl::InternalError(message);
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(message);
    case grpc::StatusCode::DATA_LOSS:
      return absl::DataLossError(message);
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::UnauthenticatedError(message);
    default:
      break;
  }
  return absl::UnknownError(
      absl::StrCat(message, " [unrecognized gRPC status code ",
                   static_cast<int>(status.error_code()), "]"));
}

}  // namespace strata

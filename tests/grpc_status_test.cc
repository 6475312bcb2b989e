#include "rpc/grpc_status.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

struct CodePair {
  absl::StatusCode absl_code;
  grpc::StatusCode grpc_code;
};

// Every canonical code except OK, which drops its message both ways.
const std::vector<CodePair>& ErrorCodes() {
  static const auto* pairs = new std::vector<CodePair>{
      {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
      {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN},
      {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {absl::StatusCode::kDeadlineExceeded,
       grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
      {absl::StatusCode::kPermissionDenied,
       grpc::StatusCode::PERMISSION_DENIED},
      {absl::StatusCode::kResourceExhausted,
       grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::StatusCode::kFailedPrecondition,
       grpc::StatusCode::FAILED_PRECONDITION},
      {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED},
      {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
      {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
      {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
      {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
      {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
  };
  return *pairs;
}

TEST(GrpcStatusTest, OkBothWays) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status(grpc::StatusCode::OK, "")).ok());
}

TEST(GrpcStatusTest, EveryCodeToGrpcKeepsMessage) {
  ASSERT_EQ(ErrorCodes().size(), 16u);
  for (const CodePair& p : ErrorCodes()) {
    const std::string message = "boom " + absl::StatusCodeToString(p.absl_code);
    grpc::Status g = ToGrpcStatus(absl::Status(p.absl_code, message));
    EXPECT_EQ(g.error_code(), p.grpc_code) << message;
    EXPECT_EQ(g.error_message(), message);
  }
}

TEST(GrpcStatusTest, EveryCodeFromGrpcKeepsMessage) {
  for (const CodePair& p : ErrorCodes()) {
    const std::string message = "bang " + std::to_string(p.grpc_code);
    absl::Status s = FromGrpcStatus(grpc::Status(p.grpc_code, message));
    EXPECT_EQ(s.code(), p.absl_code) << message;
    EXPECT_EQ(s.message(), message);
  }
}

TEST(GrpcStatusTest, RoundTripsEveryCode) {
  for (const CodePair& p : ErrorCodes()) {
    absl::Status original(p.absl_code, "msg with \"quotes\" and\nnewline");
    EXPECT_EQ(FromGrpcStatus(ToGrpcStatus(original)), original);
  }
}

TEST(GrpcStatusTest, EmptyMessageStaysEmpty) {
  absl::Status s = FromGrpcStatus(ToGrpcStatus(absl::AbortedError("")));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "");
}

TEST(GrpcStatusTest, UnrecognizedAbslCodeBecomesUnknown) {
  // absl::Status itself maps a non-canonical code to kUnknown.
  grpc::Status g =
      ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(42), "odd"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(g.error_message(), "odd");
}

TEST(GrpcStatusTest, UnrecognizedGrpcCodeBecomesUnknown) {
  // 20 is not a gRPC code but lies within the enum's range (0..31; the
  // codes need 5 bits): a value outside it would be undefined behaviour
  // in the cast itself (UBSan's enum check in `make asan`).
  absl::Status s = FromGrpcStatus(
      grpc::Status(static_cast<grpc::StatusCode>(20), "strange"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(s.message(), "strange [unrecognized gRPC status code 20]");
}

}  // namespace
}  // namespace strata

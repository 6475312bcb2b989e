// StreamLane: the client end of one Lane stream of a PS task (see
// LaneRequest in parameter_server.proto): frames of pushes and pulls on one
// persistent bidirectional stream, so that a step pays no per-call setup.
//
// The stream runs on the async API with a completion queue of its own that
// the calling thread drains itself: a frame's writes and reads complete on
// the thread that waits for them, with no hand-off to a callback thread.
//
// Not thread-safe: one frame at a time (PsClient keeps one lane per caller
// lane and serializes each). The channel must outlive it.
#ifndef STRATA_CLIENT_PS_LANE_H_
#define STRATA_CLIENT_PS_LANE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

class StreamLane {
 public:
  StreamLane(std::shared_ptr<grpc::Channel> channel, size_t chunk_bytes);
  ~StreamLane();
  StreamLane(const StreamLane&) = delete;
  StreamLane& operator=(const StreamLane&) = delete;

  // Sends one frame (`request`, whose id this sets, and the push's payload
  // segments, concatenated) and waits for its reply; the pulled values go
  // to dsts[i] (sizes[i] bytes, which must equal variable i's size). Opens
  // the stream first when none is open. Returns the reply.
  // Errors: the frame's status (the server's, as PushVariables and
  // PullVariables give it; the lane stays open); INVALID_ARGUMENT when a
  // pulled variable's size differs from its destination; for a broken
  // stream (closed; the next call opens a new one): UNAVAILABLE (the
  // connection), DEADLINE_EXCEEDED (no reply within `timeout`),
  // UNIMPLEMENTED (the server has no lanes), or the status the server
  // ended it with.
  absl::StatusOr<v1::LaneReply> Exchange(
      v1::LaneRequest request, absl::Span<const absl::string_view> payload,
      const std::vector<void*>& dsts, const std::vector<size_t>& sizes,
      absl::Duration timeout);

  // Whether a stream is open.
  bool open() const { return stream_ != nullptr; }

 private:
  struct Stream;
  absl::Status Open(absl::Time deadline);
  // Waits for the one outstanding operation; false when it failed (the
  // stream is broken) or the deadline passed (*timed_out).
  bool Await(absl::Time deadline, bool* timed_out);
  // Ends a broken stream: cancels it, collects its status and closes it.
  // Returns the error to report for `what` (never OK).
  absl::Status Break(absl::string_view what, bool timed_out);
  absl::Status Write(grpc::ByteBuffer* message, absl::Time deadline,
                     absl::string_view what);
  absl::Status Read(grpc::ByteBuffer* message, absl::Time deadline,
                    absl::string_view what);

  const std::shared_ptr<grpc::Channel> channel_;
  const size_t chunk_bytes_;
  grpc::GenericStub stub_;
  std::unique_ptr<Stream> stream_;
  // The last operation completed as failed (the call is over).
  bool failed_ = false;
  uint64_t next_id_ = 1;
};

}  // namespace strata

#endif  // STRATA_CLIENT_PS_LANE_H_

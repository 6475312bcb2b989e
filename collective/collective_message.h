// The wire codec of CollectiveMessage (strata/v1/worker_service.proto), the
// payload of a Deliver call:
//   1 int64 group, 2 int32 from_rank, 3 string key, 4 bytes data.
// Built on proto/slice_codec.h: a sent message aliases the sender's memory,
// a received one keeps the received slices by reference. Internal to the
// gRPC collectives (collective/worker_service.h).
//
// SliceCounter is thread-safe; the functions are stateless.
#ifndef STRATA_COLLECTIVE_COLLECTIVE_MESSAGE_H_
#define STRATA_COLLECTIVE_COLLECTIVE_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/tensor.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace strata {
namespace collective {
namespace internal {

// Room for a Deliver's header fields beside its pack.
inline constexpr int64_t kHeaderAllowance = 64 << 10;

// Counts aliasing slices that gRPC still holds, so that Flush can wait until
// gRPC no longer reads the senders' memory. Thread-safe. Kept apart from the
// group so that the release of a slice, which may run deep inside gRPC, only
// touches this small object.
class SliceCounter {
 public:
  // Counts one more held slice until the returned token is destroyed.
  static std::shared_ptr<const void> Hold(
      const std::shared_ptr<SliceCounter>& counter);
  // True when none is held by `deadline`.
  bool WaitZero(absl::Time deadline);

 private:
  void Add();
  void Release();

  absl::Mutex mu_;
  absl::CondVar cv_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
};

// Builds a CollectiveMessage: the fields before `data` written by hand into
// one small slice, then `data` as a slice aliasing the caller's memory
// (counted in `counter` until gRPC releases it). Small payloads are copied
// into the first slice instead.
grpc::ByteBuffer EncodeMessage(int64_t group, int from_rank,
                               const std::string& key,
                               absl::Span<const char> data,
                               const std::shared_ptr<SliceCounter>& counter);

// A received CollectiveMessage. `data` views point into `slices`, which hold
// references to the received memory (no copy).
struct DecodedMessage {
  int64_t group = 0;
  int32_t from_rank = 0;
  std::string key;
  std::vector<grpc::Slice> slices;
  std::vector<absl::string_view> data;
  size_t data_size = 0;

  // Copies the payload pieces, in order, to `dst` (data_size bytes).
  void CopyDataTo(char* dst) const;

  // Adds the payload, read as elements of `dtype`, into the data_size bytes
  // at `inout` (collective::AddInto), straight from the received pieces: no
  // intermediate copy. An element split across two pieces is put together
  // first. The caller checked that data_size is a whole number of elements
  // of a valid dtype; a trailing partial element would be ignored.
  void AddDataTo(DType dtype, char* inout) const;
};

// Parses `buffer` into `*out` (a fresh DecodedMessage). Unknown fields are
// skipped. Errors: INVALID_ARGUMENT "malformed CollectiveMessage: ..." for a
// malformed message (truncated tag, varint or length, field number 0, bad
// wire type) or an empty key.
absl::Status DecodeMessage(const grpc::ByteBuffer& buffer,
                           DecodedMessage* out);

}  // namespace internal
}  // namespace collective
}  // namespace strata

#endif  // STRATA_COLLECTIVE_COLLECTIVE_MESSAGE_H_

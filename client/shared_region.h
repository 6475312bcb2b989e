// The client's half of the same-host shared-memory exchange with a
// parameter server (AttachSharedRegion in parameter_server.proto): a memfd
// sealed against shrinking and growing, mapped here, starting with a random
// nonce that proves to the server that the caller owns it.
#ifndef STRATA_CLIENT_SHARED_REGION_H_
#define STRATA_CLIENT_SHARED_REGION_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace strata {

class SharedRegion {
 public:
  // Bytes at the start reserved for the nonce (kSharedRegionNonceBytes,
  // rounded up to a cache line).
  static constexpr size_t kHeaderBytes = 64;

  // Creates and maps a region of `bytes` (at least kHeaderBytes). Errors:
  // INVALID_ARGUMENT for a size below that; INTERNAL or RESOURCE_EXHAUSTED
  // naming the failed system call.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(size_t bytes);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  const std::string& nonce() const { return nonce_; }

 private:
  SharedRegion(int fd, char* data, size_t size, std::string nonce)
      : fd_(fd), data_(data), size_(size), nonce_(std::move(nonce)) {}

  const int fd_;
  char* const data_;
  const size_t size_;
  const std::string nonce_;
};

}  // namespace strata

#endif  // STRATA_CLIENT_SHARED_REGION_H_

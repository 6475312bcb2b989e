#include "client/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/shared_layout.h"

namespace strata {

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(
    size_t bytes) {
  if (bytes < kHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared region of ", bytes, " bytes: at least ", kHeaderBytes,
        " needed"));
  }
  const int fd =
      ::memfd_create("strata-exchange", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("memfd_create: ", std::strerror(errno)));
  }
  auto fail = [fd](const char* call) {
    const int err = errno;
    ::close(fd);
    return err == ENOMEM || err == ENOSPC
               ? absl::ResourceExhaustedError(
                     absl::StrCat(call, ": ", std::strerror(err)))
               : absl::InternalError(
                     absl::StrCat(call, ": ", std::strerror(err)));
  };
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("ftruncate");
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
      0) {
    return fail("fcntl(F_ADD_SEALS)");
  }
  void* data =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return fail("mmap");
  std::string nonce(kSharedRegionNonceBytes, '\0');
  std::random_device rd;
  for (size_t i = 0; i < nonce.size(); i += 4) {
    const uint32_t r = rd();
    std::memcpy(&nonce[i], &r, 4);
  }
  std::memcpy(data, nonce.data(), nonce.size());
  return std::unique_ptr<SharedRegion>(
      new SharedRegion(fd, static_cast<char*>(data), bytes, std::move(nonce)));
}

SharedRegion::~SharedRegion() {
  ::munmap(data_, size_);
  ::close(fd_);
}

}  // namespace strata

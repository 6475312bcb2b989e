// FdCloser: closes a file descriptor on scope exit.
#ifndef STRATA_COMMON_FD_CLOSER_H_
#define STRATA_COMMON_FD_CLOSER_H_

#include <unistd.h>

namespace strata {

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

  int fd() const { return fd_; }
  // Closes now, reporting the error close() returns.
  int Close() {
    int fd = fd_;
    fd_ = -1;
    return ::close(fd);
  }

 private:
  int fd_;
};

}  // namespace strata

#endif  // STRATA_COMMON_FD_CLOSER_H_

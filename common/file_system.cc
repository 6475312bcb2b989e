#include "common/file_system.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

absl::Status ErrnoError(const char* what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// The directory holding `path` ("." for a bare name).
std::string DirOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  std::string dir = path.substr(0, slash);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir.empty() ? "/" : dir;
}

class LocalFileSystemImpl final : public FileSystem {
 public:
  absl::Status WriteFileAtomically(const std::string& path,
                                   absl::string_view contents) override {
    const std::string tmp = absl::StrCat(path, ".tmp");
    int fd =
        ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError("open", tmp);
    size_t written = 0;
    while (written < contents.size()) {
      ssize_t n = ::write(fd, contents.data() + written,
                          contents.size() - written);
      if (n < 0) {
        if (errno == EINTR) continue;
        absl::Status s = ErrnoError("write", tmp);
        ::close(fd);
        return s;
      }
      written += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0) {
      absl::Status s = ErrnoError("fsync", tmp);
      ::close(fd);
      return s;
    }
    if (::close(fd) != 0) return ErrnoError("close", tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      return ErrnoError("rename to", path);
    }
    const std::string dir = DirOf(path);
    int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) return ErrnoError("open", dir);
    int rc = ::fsync(dir_fd);
    ::close(dir_fd);
    if (rc != 0) return ErrnoError("fsync", dir);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    }
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in.good() && !in.eof()) {
      return absl::UnavailableError(absl::StrCat("cannot read ", path));
    }
    return text.str();
  }

  absl::Status CreateDirs(const std::string& path) override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return absl::UnavailableError(ec.message());
    return absl::OkStatus();
  }

  bool FileExists(const std::string& path) override {
    std::error_code ec;
    return std::filesystem::exists(path, ec);
  }
};

}  // namespace

FileSystem* LocalFileSystem() {
  static FileSystem* const fs = new LocalFileSystemImpl();
  return fs;
}

absl::Status InMemoryFileSystem::WriteFileAtomically(
    const std::string& path, absl::string_view contents) {
  absl::MutexLock lock(&mu_);
  if (!fail_writes_.ok()) return fail_writes_;
  files_[path] = std::string(contents);
  writes_.push_back(path);
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryFileSystem::ReadFile(
    const std::string& path) {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(path);
  if (it == files_.end()) {
    return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  }
  return it->second;
}

absl::Status InMemoryFileSystem::CreateDirs(const std::string&) {
  return absl::OkStatus();
}

bool InMemoryFileSystem::FileExists(const std::string& path) {
  absl::MutexLock lock(&mu_);
  return files_.count(path) > 0;
}

void InMemoryFileSystem::FailWrites(absl::Status status) {
  absl::MutexLock lock(&mu_);
  fail_writes_ = std::move(status);
}

std::vector<std::string> InMemoryFileSystem::Writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

}  // namespace strata

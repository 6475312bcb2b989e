#include "common/file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/fd_closer.h"
#include "common/status_macros.h"

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

absl::Status Unsupported(absl::string_view method) {
  return absl::UnimplementedError(
      absl::StrCat(method, " is not supported by this file system"));
}

absl::StatusCode CodeOfErrno(int err) {
  switch (err) {
    case ENOENT:
      return absl::StatusCode::kNotFound;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case ENOSPC:
    case EDQUOT:
      return absl::StatusCode::kResourceExhausted;
    default:
      return absl::StatusCode::kUnavailable;
  }
}

// "<step> <path>: <errno's text>" with errno's code (see FileSystem).
absl::Status PosixError(absl::string_view step, const std::string& path,
                        int err) {
  return absl::Status(CodeOfErrno(err),
                      absl::StrCat(step, " ", path, ": ", std::strerror(err)));
}

absl::Status PosixError(absl::string_view step, const std::string& path,
                        const std::error_code& ec) {
  return absl::Status(CodeOfErrno(ec.value()),
                      absl::StrCat(step, " ", path, ": ", ec.message()));
}

class LocalSequentialFile final : public SequentialFile {
 public:
  LocalSequentialFile(int fd, std::string path)
      : closer_(fd), path_(std::move(path)) {}

  absl::StatusOr<uint64_t> Size() override {
    struct stat st;
    if (::fstat(closer_.fd(), &st) != 0) {
      return PosixError("cannot stat", path_, errno);
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path_, ": not a regular file"));
    }
    return static_cast<uint64_t>(st.st_size);
  }

  absl::StatusOr<size_t> Read(char* dst, size_t n) override {
    for (;;) {
      const ssize_t got = ::read(closer_.fd(), dst, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) return PosixError("cannot read", path_, errno);
    }
  }

 private:
  FdCloser closer_;
  const std::string path_;
};

class LocalDirectory final : public Directory {
 public:
  LocalDirectory(int fd, std::string path)
      : closer_(fd), path_(std::move(path)) {}

  absl::StatusOr<std::unique_ptr<SequentialFile>> OpenFile(
      const std::string& name) override {
    std::string path = absl::StrCat(path_, "/", name);
    const int fd = ::openat(closer_.fd(), name.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return PosixError("cannot open", path, errno);
    return std::unique_ptr<SequentialFile>(
        new LocalSequentialFile(fd, std::move(path)));
  }

 private:
  FdCloser closer_;
  const std::string path_;
};

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

  absl::Status WriteFile(const std::string& path,
                         absl::string_view contents) override {
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return PosixError("cannot create", path, errno);
    FdCloser closer(fd);
    const char* data = contents.data();
    size_t size = contents.size();
    while (size > 0) {
      const ssize_t n = ::write(fd, data, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        return PosixError("cannot write", path, errno);
      }
      data += n;
      size -= static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0) return PosixError("cannot fsync", path, errno);
    if (closer.Close() != 0) return PosixError("cannot close", path, errno);
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError("cannot open directory", path, errno);
    FdCloser closer(fd);
    if (::fsync(fd) != 0) {
      return PosixError("cannot fsync directory", path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) {
      return PosixError("cannot create directory", path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return PosixError(absl::StrCat("cannot rename ", from, " to"), to, errno);
    }
    return absl::OkStatus();
  }

  absl::Status ExchangePaths(const std::string& a,
                             const std::string& b) override {
    const std::string step = absl::StrCat("cannot exchange ", a, " with");
#ifdef RENAME_EXCHANGE
    if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(),
                    RENAME_EXCHANGE) == 0) {
      return absl::OkStatus();
    }
    const int err = errno;
#else
    const int err = ENOSYS;
#endif
    if (err == EINVAL || err == ENOSYS || err == EOPNOTSUPP) {
      return absl::UnimplementedError(
          absl::StrCat(step, " ", b, ": ", std::strerror(err)));
    }
    return PosixError(step, b, err);
  }

  absl::Status RemoveAll(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return PosixError("cannot delete", path, ec);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& path) override {
    std::vector<std::string> names;
    std::error_code ec;
    std::filesystem::directory_iterator it(path, ec);
    for (; !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      names.push_back(it->path().filename().string());
    }
    if (ec) return PosixError("cannot list", path, ec);
    return names;
  }

  absl::StatusOr<FileType> GetFileType(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return FileType::kMissing;
      return PosixError("cannot stat", path, errno);
    }
    if (S_ISREG(st.st_mode)) return FileType::kFile;
    if (S_ISDIR(st.st_mode)) return FileType::kDirectory;
    return FileType::kOther;
  }

  absl::StatusOr<std::unique_ptr<Directory>> OpenDirectory(
      const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOTDIR) {
        return absl::NotFoundError(absl::StrCat("cannot open directory ", path,
                                                ": ", std::strerror(err)));
      }
      return PosixError("cannot open directory", path, err);
    }
    return std::unique_ptr<Directory>(new LocalDirectory(fd, path));
  }
};

}  // namespace

// ---- FileSystem's defaults ----

absl::Status FileSystem::WriteFile(const std::string&, absl::string_view) {
  return Unsupported("WriteFile");
}
absl::Status FileSystem::SyncDir(const std::string&) {
  return Unsupported("SyncDir");
}
absl::Status FileSystem::CreateDir(const std::string&) {
  return Unsupported("CreateDir");
}
absl::Status FileSystem::Rename(const std::string&, const std::string&) {
  return Unsupported("Rename");
}
absl::Status FileSystem::ExchangePaths(const std::string&, const std::string&) {
  return Unsupported("ExchangePaths");
}
absl::Status FileSystem::RemoveAll(const std::string&) {
  return Unsupported("RemoveAll");
}
absl::StatusOr<std::vector<std::string>> FileSystem::ListDir(
    const std::string&) {
  return Unsupported("ListDir");
}
absl::StatusOr<FileType> FileSystem::GetFileType(const std::string&) {
  return Unsupported("GetFileType");
}
absl::StatusOr<std::unique_ptr<Directory>> FileSystem::OpenDirectory(
    const std::string&) {
  return Unsupported("OpenDirectory");
}

FileSystem* LocalFileSystem() {
  static FileSystem* const fs = new LocalFileSystemImpl();
  return fs;
}

}  // namespace strata

// A scratch directory for the fuzz targets that touch files, made once per
// process under /dev/shm where it exists (fsync is free there) or $TMPDIR,
// and removed at exit.
#ifndef STRATA_TESTS_FUZZ_FUZZ_SANDBOX_H_
#define STRATA_TESTS_FUZZ_FUZZ_SANDBOX_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "tests/fuzz/fuzz_util.h"

namespace strata {
namespace fuzz {

class Sandbox {
 public:
  Sandbox() {
    std::error_code ec;
    std::string base = "/dev/shm";
    if (!std::filesystem::is_directory(base, ec) || ::access(base.c_str(), W_OK) != 0) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    }
    std::string pattern = base + "/strata-fuzz-XXXXXX";
    FUZZ_CHECK(::mkdtemp(pattern.data()) != nullptr, "mkdtemp under " + base);
    path_ = std::filesystem::canonical(pattern, ec).string();
    FUZZ_CHECK(!ec, "canonical sandbox path");
  }
  ~Sandbox() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  const std::string& path() const { return path_; }

  // Whether `p` (absolute, normalized) lies inside the sandbox.
  bool Contains(const std::string& p) const {
    return p.size() > path_.size() && p.compare(0, path_.size(), path_) == 0 &&
           p[path_.size()] == '/';
  }

  // Removes everything inside the sandbox.
  void Clear() const {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(path_, ec)) {
      std::filesystem::remove_all(entry.path(), ec);
    }
  }

 private:
  std::string path_;
};

// The process's sandbox (made on first use, removed at exit).
inline const Sandbox& GetSandbox() {
  static const Sandbox sandbox;
  return sandbox;
}

}  // namespace fuzz
}  // namespace strata

#endif  // STRATA_TESTS_FUZZ_FUZZ_SANDBOX_H_

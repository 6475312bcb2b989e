// A small file-system interface (LevelDB's Env, reduced to what Strata
// writes): whole-file atomic writes, reads and directories. The local
// implementation is the real disk; InMemoryFileSystem is the fake for tests
// (and can be slowed or made to fail to exercise callers' error paths).
#ifndef STRATA_COMMON_FILE_SYSTEM_H_
#define STRATA_COMMON_FILE_SYSTEM_H_

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace strata {

// Thread-safe.
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Replaces `path` with `contents` so that a crash at any point leaves
  // either the old file or the new one, never a mix: writes `path`.tmp,
  // fsyncs it, renames it over `path`, fsyncs the directory. Errors:
  // UNAVAILABLE naming the failing step, the file and errno's text.
  virtual absl::Status WriteFileAtomically(const std::string& path,
                                           absl::string_view contents) = 0;
  // The whole file. Errors: NOT_FOUND when it does not exist, UNAVAILABLE
  // for other read failures.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // Creates `path` and its parents (no error when it exists). Errors:
  // UNAVAILABLE.
  virtual absl::Status CreateDirs(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
};

// The process's real file system (never null, never destroyed).
FileSystem* LocalFileSystem();

// Files in memory, for tests. Thread-safe.
class InMemoryFileSystem final : public FileSystem {
 public:
  absl::Status WriteFileAtomically(const std::string& path,
                                   absl::string_view contents) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  absl::Status CreateDirs(const std::string& path) override;
  bool FileExists(const std::string& path) override;

  // Every later write fails with `status` (OK again: writes succeed).
  void FailWrites(absl::Status status);
  // Paths written so far, in order (a path written twice appears twice).
  std::vector<std::string> Writes() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> files_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> writes_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_writes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_COMMON_FILE_SYSTEM_H_

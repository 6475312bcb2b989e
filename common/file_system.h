// A small file-system interface (LevelDB's Env, reduced to what Strata
// writes): whole-file writes (atomic, or synced for callers that get their
// atomicity from a directory rename), reads, directories and renames. The
// local implementation is the real disk; InMemoryFileSystem is the fake for
// tests (and can be slowed or made to fail, fill up or tear writes to
// exercise callers' error paths).
#ifndef STRATA_COMMON_FILE_SYSTEM_H_
#define STRATA_COMMON_FILE_SYSTEM_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace strata {

// What a path names (symbolic links followed).
enum class FileType { kMissing, kFile, kDirectory, kOther };

// A file open for reading from its start (LevelDB's SequentialFile). Not
// thread-safe.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;

  // The file's size. Errors: FAILED_PRECONDITION "<path>: not a regular
  // file" (a directory, a device); UNAVAILABLE "cannot stat <path>: ...".
  virtual absl::StatusOr<uint64_t> Size() = 0;
  // Reads up to `n` bytes into `dst` and returns how many: 0 at the end of
  // the file. Errors: UNAVAILABLE "cannot read <path>: ...".
  virtual absl::StatusOr<size_t> Read(char* dst, size_t n) = 0;
};

// A directory open for reading. Names resolve against the directory that was
// opened, not against its path, so a rename over that path afterwards cannot
// mix two directories' files. Not thread-safe.
class Directory {
 public:
  virtual ~Directory() = default;

  // Opens `name` (a plain name, no '/') in this directory. Errors: NOT_FOUND
  // when there is none; UNAVAILABLE "cannot open <dir>/<name>: ...".
  virtual absl::StatusOr<std::unique_ptr<SequentialFile>> OpenFile(
      const std::string& name) = 0;
};

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

  // What checkpoints need (checkpoint/checkpoint.h). Their errors read
  // "cannot <step> <path>: <reason>" (errno's text on disk) with the code:
  // NOT_FOUND for a missing path (ENOENT), RESOURCE_EXHAUSTED for a full
  // disk (ENOSPC, EDQUOT), ALREADY_EXISTS (EEXIST), else UNAVAILABLE. The
  // defaults return UNIMPLEMENTED, for file systems that hold no
  // checkpoints.

  // Creates or truncates `path`, writes `contents` and fsyncs the file. Not
  // atomic: a failure can leave a partial file behind (callers write into a
  // temporary directory and rename it). Steps: create, write, fsync, close.
  virtual absl::Status WriteFile(const std::string& path,
                                 absl::string_view contents);
  // Fsyncs directory `path`, so that the entries created, renamed or removed
  // in it survive a crash. Steps: "open directory", "fsync directory".
  virtual absl::Status SyncDir(const std::string& path);
  // Creates directory `path`; its parent must exist. Step: "create
  // directory" (ALREADY_EXISTS when something is at `path`).
  virtual absl::Status CreateDir(const std::string& path);
  // Renames `from` to `to`, replacing a file or an empty directory there
  // (rename(2)). Message: "cannot rename <from> to <to>: <reason>".
  virtual absl::Status Rename(const std::string& from, const std::string& to);
  // Atomically swaps the existing entries `a` and `b` (renameat2 with
  // RENAME_EXCHANGE). UNIMPLEMENTED when this file system cannot (callers
  // fall back to Rename). Message: "cannot exchange <a> with <b>: <reason>".
  virtual absl::Status ExchangePaths(const std::string& a,
                                     const std::string& b);
  // Removes `path` and everything under it; OK when nothing is there.
  // Step: "delete".
  virtual absl::Status RemoveAll(const std::string& path);
  // The names in directory `path` ("." and ".." left out), in no particular
  // order. Step: "list".
  virtual absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& path);
  // What `path` is; kMissing when nothing is there or a parent is no
  // directory. Step: "stat".
  virtual absl::StatusOr<FileType> GetFileType(const std::string& path);
  // Opens directory `path` for reading its files. Step: "open directory";
  // NOT_FOUND also when `path` is no directory.
  virtual absl::StatusOr<std::unique_ptr<Directory>> OpenDirectory(
      const std::string& path);
};

// The process's real file system (never null, never destroyed).
FileSystem* LocalFileSystem();

// Files and directories in memory, for tests. WriteFileAtomically and
// CreateDirs create the parents they need; WriteFile, CreateDir and Rename
// need them to exist, as on disk. A Directory is a snapshot taken when it is
// opened. Thread-safe.
class InMemoryFileSystem final : public FileSystem {
 public:
  absl::Status WriteFileAtomically(const std::string& path,
                                   absl::string_view contents) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  absl::Status CreateDirs(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  absl::Status WriteFile(const std::string& path,
                         absl::string_view contents) override;
  absl::Status SyncDir(const std::string& path) override;
  absl::Status CreateDir(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status ExchangePaths(const std::string& a,
                             const std::string& b) override;
  absl::Status RemoveAll(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& path) override;
  absl::StatusOr<FileType> GetFileType(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<Directory>> OpenDirectory(
      const std::string& path) override;

  // Every later write (WriteFileAtomically, WriteFile) fails with `status`,
  // writing nothing (OK again: writes succeed).
  void FailWrites(absl::Status status);
  // The disk has room for `bytes` more bytes: a later write that does not
  // fit fails with `status`'s code and message; WriteFile keeps the part
  // that fit (a torn file, as a full disk leaves), WriteFileAtomically the
  // old file. OK `status`: no limit.
  void FailWritesAfter(uint64_t bytes, absl::Status status);
  // Later Rename and ExchangePaths calls for which `fails(from, to)` holds
  // (the paths as the caller spelled them) fail with `status`'s code and
  // message, moving nothing. `fails` runs under the file system's lock and
  // must not call it. OK `status`: renames succeed again.
  void FailRenames(
      std::function<bool(const std::string& from, const std::string& to)> fails,
      absl::Status status);
  // Whether ExchangePaths works (the default) or is UNIMPLEMENTED, as on
  // file systems without RENAME_EXCHANGE.
  void SetExchangeSupported(bool supported);
  // Paths written so far, in order (a path written twice appears twice; a
  // torn WriteFile counts).
  std::vector<std::string> Writes() const;

 private:
  using Contents = std::shared_ptr<const std::string>;
  // A subtree taken out of the file system: paths relative to its root
  // ("" for the root itself, else "/<rest>").
  struct Tree {
    std::map<std::string, Contents> files;
    std::set<std::string> dirs;
  };

  bool IsDirLocked(const std::string& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AncestorIsFileLocked(const std::string& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasChildrenLocked(const std::string& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when `key`'s parent is a directory; else "<step> <path>: <reason>".
  absl::Status CheckParentLocked(absl::string_view step,
                                 const std::string& path,
                                 const std::string& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddParentsLocked(const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Tree ExtractLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void InsertLocked(const std::string& key, Tree tree)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // Keyed by normalized path; every directory that holds something is in
  // dirs_ ("/" and "." always exist and are not).
  std::map<std::string, Contents> files_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> writes_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_writes_ ABSL_GUARDED_BY(mu_);
  absl::Status write_limit_status_ ABSL_GUARDED_BY(mu_);
  uint64_t write_budget_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<bool(const std::string&, const std::string&)> fail_renames_if_
      ABSL_GUARDED_BY(mu_);
  absl::Status fail_renames_ ABSL_GUARDED_BY(mu_);
  bool exchange_supported_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace strata

#endif  // STRATA_COMMON_FILE_SYSTEM_H_

// InMemoryFileSystem (common/file_system.h): files and directories in
// maps, with the failures tests ask for.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_system.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// The map key of `path`: lexically normal, no trailing '/', "." for "".
std::string KeyOf(const std::string& path) {
  std::string key = std::filesystem::path(path).lexically_normal().string();
  while (key.size() > 1 && key.back() == '/') key.pop_back();
  return key.empty() ? "." : key;
}

// The root ("/") or the working directory ("."): always a directory, never
// created, moved or removed.
bool IsRootKey(const std::string& key) { return key == "/" || key == "."; }

std::string ParentKey(const std::string& key) {
  const size_t slash = key.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return key.substr(0, slash);
}

// What the keys of `key`'s children start with.
std::string ChildPrefix(const std::string& key) {
  if (key == ".") return "";
  if (key == "/") return "/";
  return key + "/";
}

// `key` is `root` or lies under it.
bool IsWithin(const std::string& key, const std::string& root) {
  return key == root || absl::StartsWith(key, ChildPrefix(root));
}

// A file of an InMemoryDirectory; null contents: a directory.
class InMemorySequentialFile final : public SequentialFile {
 public:
  InMemorySequentialFile(std::string path,
                         std::shared_ptr<const std::string> contents)
      : path_(std::move(path)), contents_(std::move(contents)) {}

  absl::StatusOr<uint64_t> Size() override {
    if (contents_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(path_, ": not a regular file"));
    }
    return contents_->size();
  }

  absl::StatusOr<size_t> Read(char* dst, size_t n) override {
    if (contents_ == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("cannot read ", path_, ": Is a directory"));
    }
    const size_t got = std::min(n, contents_->size() - offset_);
    std::memcpy(dst, contents_->data() + offset_, got);
    offset_ += got;
    return got;
  }

 private:
  const std::string path_;
  const std::shared_ptr<const std::string> contents_;
  size_t offset_ = 0;
};

// A snapshot of a directory's entries: name -> contents (null: directory).
class InMemoryDirectory final : public Directory {
 public:
  InMemoryDirectory(
      std::string path,
      std::map<std::string, std::shared_ptr<const std::string>> entries)
      : path_(std::move(path)), entries_(std::move(entries)) {}

  absl::StatusOr<std::unique_ptr<SequentialFile>> OpenFile(
      const std::string& name) override {
    std::string path = absl::StrCat(path_, "/", name);
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      return absl::NotFoundError(
          absl::StrCat("cannot open ", path, ": No such file or directory"));
    }
    return std::unique_ptr<SequentialFile>(
        new InMemorySequentialFile(std::move(path), it->second));
  }

 private:
  const std::string path_;
  const std::map<std::string, std::shared_ptr<const std::string>> entries_;
};

}  // namespace


bool InMemoryFileSystem::IsDirLocked(const std::string& key) const {
  return IsRootKey(key) || dirs_.count(key) > 0;
}

bool InMemoryFileSystem::AncestorIsFileLocked(const std::string& key) const {
  for (std::string p = ParentKey(key); !IsRootKey(p); p = ParentKey(p)) {
    if (files_.count(p) > 0) return true;
  }
  return false;
}

bool InMemoryFileSystem::HasChildrenLocked(const std::string& key) const {
  const std::string prefix = ChildPrefix(key);
  auto file = files_.lower_bound(prefix);
  if (file != files_.end() && absl::StartsWith(file->first, prefix)) {
    return true;
  }
  auto dir = dirs_.lower_bound(prefix);
  return dir != dirs_.end() && absl::StartsWith(*dir, prefix);
}

absl::Status InMemoryFileSystem::CheckParentLocked(
    absl::string_view step, const std::string& path,
    const std::string& key) const {
  const std::string parent = ParentKey(key);
  if (IsDirLocked(parent)) return absl::OkStatus();
  if (files_.count(parent) > 0 || AncestorIsFileLocked(parent)) {
    return absl::UnavailableError(
        absl::StrCat(step, " ", path, ": Not a directory"));
  }
  return absl::NotFoundError(
      absl::StrCat(step, " ", path, ": No such file or directory"));
}

void InMemoryFileSystem::AddParentsLocked(const std::string& key) {
  for (std::string p = ParentKey(key); !IsRootKey(p); p = ParentKey(p)) {
    dirs_.insert(p);
  }
}

InMemoryFileSystem::Tree InMemoryFileSystem::ExtractLocked(
    const std::string& key) {
  Tree tree;
  const std::string prefix = ChildPrefix(key);
  if (auto it = files_.find(key); it != files_.end()) {
    tree.files.emplace("", std::move(it->second));
    files_.erase(it);
  }
  for (auto it = files_.lower_bound(prefix);
       it != files_.end() && absl::StartsWith(it->first, prefix);) {
    tree.files.emplace(it->first.substr(key.size()), std::move(it->second));
    it = files_.erase(it);
  }
  if (dirs_.erase(key) > 0) tree.dirs.insert("");
  for (auto it = dirs_.lower_bound(prefix);
       it != dirs_.end() && absl::StartsWith(*it, prefix);) {
    tree.dirs.insert(it->substr(key.size()));
    it = dirs_.erase(it);
  }
  return tree;
}

void InMemoryFileSystem::InsertLocked(const std::string& key, Tree tree) {
  AddParentsLocked(key);
  for (auto& [rest, contents] : tree.files) {
    files_[key + rest] = std::move(contents);
  }
  for (const std::string& rest : tree.dirs) dirs_.insert(key + rest);
}

absl::Status InMemoryFileSystem::WriteFileAtomically(
    const std::string& path, absl::string_view contents) {
  absl::MutexLock lock(&mu_);
  if (!fail_writes_.ok()) return fail_writes_;
  const std::string key = KeyOf(path);
  if (IsDirLocked(key) || AncestorIsFileLocked(key)) {
    return absl::UnavailableError(
        absl::StrCat("rename to ", path, ": ",
                     IsDirLocked(key) ? "Is a directory" : "Not a directory"));
  }
  if (!write_limit_status_.ok()) {
    if (contents.size() > write_budget_) {
      write_budget_ = 0;
      return absl::Status(write_limit_status_.code(),
                          absl::StrCat("write ", path, ".tmp: ",
                                       write_limit_status_.message()));
    }
    write_budget_ -= contents.size();
  }
  AddParentsLocked(key);
  files_[key] = std::make_shared<const std::string>(contents);
  writes_.push_back(path);
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryFileSystem::ReadFile(
    const std::string& path) {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(KeyOf(path));
  if (it == files_.end()) {
    return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  }
  return *it->second;
}

absl::Status InMemoryFileSystem::CreateDirs(const std::string& path) {
  absl::MutexLock lock(&mu_);
  const std::string key = KeyOf(path);
  if (files_.count(key) > 0) return absl::UnavailableError("File exists");
  if (AncestorIsFileLocked(key)) {
    return absl::UnavailableError("Not a directory");
  }
  if (!IsRootKey(key)) dirs_.insert(key);
  AddParentsLocked(key);
  return absl::OkStatus();
}

bool InMemoryFileSystem::FileExists(const std::string& path) {
  absl::MutexLock lock(&mu_);
  const std::string key = KeyOf(path);
  return files_.count(key) > 0 || IsDirLocked(key);
}

absl::Status InMemoryFileSystem::WriteFile(const std::string& path,
                                           absl::string_view contents) {
  absl::MutexLock lock(&mu_);
  if (!fail_writes_.ok()) {
    return absl::Status(
        fail_writes_.code(),
        absl::StrCat("cannot write ", path, ": ", fail_writes_.message()));
  }
  const std::string key = KeyOf(path);
  STRATA_RETURN_IF_ERROR(CheckParentLocked("cannot create", path, key));
  if (IsDirLocked(key)) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", path, ": Is a directory"));
  }
  absl::Status status;
  if (!write_limit_status_.ok()) {
    if (contents.size() > write_budget_) {
      contents = contents.substr(0, write_budget_);
      status = absl::Status(write_limit_status_.code(),
                            absl::StrCat("cannot write ", path, ": ",
                                         write_limit_status_.message()));
    }
    write_budget_ -= contents.size();
  }
  files_[key] = std::make_shared<const std::string>(contents);
  writes_.push_back(path);
  return status;
}

absl::Status InMemoryFileSystem::SyncDir(const std::string& path) {
  absl::MutexLock lock(&mu_);
  const std::string key = KeyOf(path);
  if (IsDirLocked(key)) return absl::OkStatus();
  if (files_.count(key) > 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open directory ", path, ": Not a directory"));
  }
  return absl::NotFoundError(absl::StrCat("cannot open directory ", path,
                                          ": No such file or directory"));
}

absl::Status InMemoryFileSystem::CreateDir(const std::string& path) {
  absl::MutexLock lock(&mu_);
  const std::string key = KeyOf(path);
  if (files_.count(key) > 0 || IsDirLocked(key)) {
    return absl::AlreadyExistsError(
        absl::StrCat("cannot create directory ", path, ": File exists"));
  }
  STRATA_RETURN_IF_ERROR(
      CheckParentLocked("cannot create directory", path, key));
  dirs_.insert(key);
  return absl::OkStatus();
}

absl::Status InMemoryFileSystem::Rename(const std::string& from,
                                        const std::string& to) {
  absl::MutexLock lock(&mu_);
  const std::string step = absl::StrCat("cannot rename ", from, " to");
  auto error = [&](absl::StatusCode code, absl::string_view reason) {
    return absl::Status(code, absl::StrCat(step, " ", to, ": ", reason));
  };
  if (fail_renames_if_ && fail_renames_if_(from, to)) {
    return error(fail_renames_.code(), fail_renames_.message());
  }
  const std::string src = KeyOf(from);
  const std::string dst = KeyOf(to);
  const bool src_file = files_.count(src) > 0;
  if (!src_file && !IsDirLocked(src)) {
    return error(absl::StatusCode::kNotFound, "No such file or directory");
  }
  if (IsRootKey(src) || IsRootKey(dst) || (src != dst && IsWithin(dst, src))) {
    return error(absl::StatusCode::kUnavailable, "Invalid argument");
  }
  STRATA_RETURN_IF_ERROR(CheckParentLocked(step, to, dst));
  if (src == dst) return absl::OkStatus();
  const bool dst_file = files_.count(dst) > 0;
  const bool dst_dir = !dst_file && IsDirLocked(dst);
  if (src_file && dst_dir) {
    return error(absl::StatusCode::kUnavailable, "Is a directory");
  }
  if (!src_file && dst_file) {
    return error(absl::StatusCode::kUnavailable, "Not a directory");
  }
  if (dst_dir && HasChildrenLocked(dst)) {
    return error(absl::StatusCode::kUnavailable, "Directory not empty");
  }
  ExtractLocked(dst);  // the file or empty directory replaced
  InsertLocked(dst, ExtractLocked(src));
  return absl::OkStatus();
}

absl::Status InMemoryFileSystem::ExchangePaths(const std::string& a,
                                               const std::string& b) {
  absl::MutexLock lock(&mu_);
  const std::string step = absl::StrCat("cannot exchange ", a, " with");
  auto error = [&](absl::StatusCode code, absl::string_view reason) {
    return absl::Status(code, absl::StrCat(step, " ", b, ": ", reason));
  };
  if (!exchange_supported_) {
    return error(absl::StatusCode::kUnimplemented, "Invalid argument");
  }
  if (fail_renames_if_ && fail_renames_if_(a, b)) {
    return error(fail_renames_.code(), fail_renames_.message());
  }
  const std::string ka = KeyOf(a);
  const std::string kb = KeyOf(b);
  for (const std::string& key : {ka, kb}) {
    if (files_.count(key) == 0 && !IsDirLocked(key)) {
      return error(absl::StatusCode::kNotFound, "No such file or directory");
    }
  }
  if (ka == kb) return absl::OkStatus();
  if (IsRootKey(ka) || IsRootKey(kb) || IsWithin(ka, kb) || IsWithin(kb, ka)) {
    return error(absl::StatusCode::kUnavailable, "Invalid argument");
  }
  Tree at_a = ExtractLocked(ka);
  Tree at_b = ExtractLocked(kb);
  InsertLocked(kb, std::move(at_a));
  InsertLocked(ka, std::move(at_b));
  return absl::OkStatus();
}

absl::Status InMemoryFileSystem::RemoveAll(const std::string& path) {
  absl::MutexLock lock(&mu_);
  const std::string key = KeyOf(path);
  if (IsRootKey(key)) {
    return absl::UnavailableError(
        absl::StrCat("cannot delete ", path, ": Invalid argument"));
  }
  ExtractLocked(key);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> InMemoryFileSystem::ListDir(
    const std::string& path) {
  absl::MutexLock lock(&mu_);
  const std::string key = KeyOf(path);
  if (!IsDirLocked(key)) {
    if (files_.count(key) > 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot list ", path, ": Not a directory"));
    }
    return absl::NotFoundError(
        absl::StrCat("cannot list ", path, ": No such file or directory"));
  }
  const std::string prefix = ChildPrefix(key);
  std::set<std::string> names;
  auto add = [&](const std::string& entry) {
    const std::string rest = entry.substr(prefix.size());
    if (!rest.empty() && rest.find('/') == std::string::npos) {
      names.insert(rest);
    }
  };
  for (auto it = files_.lower_bound(prefix);
       it != files_.end() && absl::StartsWith(it->first, prefix); ++it) {
    add(it->first);
  }
  for (auto it = dirs_.lower_bound(prefix);
       it != dirs_.end() && absl::StartsWith(*it, prefix); ++it) {
    add(*it);
  }
  return std::vector<std::string>(names.begin(), names.end());
}

absl::StatusOr<FileType> InMemoryFileSystem::GetFileType(
    const std::string& path) {
  absl::MutexLock lock(&mu_);
  const std::string key = KeyOf(path);
  if (files_.count(key) > 0) return FileType::kFile;
  if (IsDirLocked(key)) return FileType::kDirectory;
  return FileType::kMissing;
}

absl::StatusOr<std::unique_ptr<Directory>> InMemoryFileSystem::OpenDirectory(
    const std::string& path) {
  absl::MutexLock lock(&mu_);
  const std::string key = KeyOf(path);
  if (!IsDirLocked(key)) {
    return absl::NotFoundError(
        absl::StrCat("cannot open directory ", path, ": ",
                     files_.count(key) > 0 ? "Not a directory"
                                           : "No such file or directory"));
  }
  const std::string prefix = ChildPrefix(key);
  std::map<std::string, Contents> entries;
  for (auto it = files_.lower_bound(prefix);
       it != files_.end() && absl::StartsWith(it->first, prefix); ++it) {
    std::string rest = it->first.substr(prefix.size());
    if (!rest.empty() && rest.find('/') == std::string::npos) {
      entries.emplace(std::move(rest), it->second);
    }
  }
  for (auto it = dirs_.lower_bound(prefix);
       it != dirs_.end() && absl::StartsWith(*it, prefix); ++it) {
    std::string rest = it->substr(prefix.size());
    if (!rest.empty() && rest.find('/') == std::string::npos) {
      entries.emplace(std::move(rest), nullptr);
    }
  }
  return std::unique_ptr<Directory>(
      new InMemoryDirectory(path, std::move(entries)));
}

void InMemoryFileSystem::FailWrites(absl::Status status) {
  absl::MutexLock lock(&mu_);
  fail_writes_ = std::move(status);
}

void InMemoryFileSystem::FailWritesAfter(uint64_t bytes, absl::Status status) {
  absl::MutexLock lock(&mu_);
  write_budget_ = bytes;
  write_limit_status_ = std::move(status);
}

void InMemoryFileSystem::FailRenames(
    std::function<bool(const std::string& from, const std::string& to)> fails,
    absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (status.ok()) fails = nullptr;
  fail_renames_if_ = std::move(fails);
  fail_renames_ = std::move(status);
}

void InMemoryFileSystem::SetExchangeSupported(bool supported) {
  absl::MutexLock lock(&mu_);
  exchange_supported_ = supported;
}

std::vector<std::string> InMemoryFileSystem::Writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

}  // namespace strata

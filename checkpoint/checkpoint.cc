#include "checkpoint/checkpoint.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// Paths only: all I/O goes through the FileSystem passed in.
namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kFormat[] = "strata-checkpoint-v1";
constexpr char kManifest[] = "manifest.json";
constexpr char kValueRole[] = "value";

std::atomic<uint64_t> g_dir_counter{0};

// A file-system error as checkpoints report it: INTERNAL, with the file
// system's "cannot <step> <path>: <reason>".
absl::Status IoError(const absl::Status& status) {
  if (status.ok()) return status;
  return absl::InternalError(status.message());
}

template <typename T>
absl::StatusOr<T> IoError(absl::StatusOr<T> result) {
  if (!result.ok()) return IoError(result.status());
  return result;
}

// The reason in a file-system error about `path`: what follows "<path>: ".
absl::string_view ReasonOf(const absl::Status& status,
                           const std::string& path) {
  const absl::string_view message = status.message();
  const std::string marker = absl::StrCat(path, ": ");
  const size_t at = message.find(marker);
  if (at == absl::string_view::npos) return message;
  return message.substr(at + marker.size());
}

// Whether something is at `path` (false when that cannot be told either).
bool Exists(FileSystem* file_system, const std::string& path) {
  absl::StatusOr<FileType> type = file_system->GetFileType(path);
  return type.ok() && *type != FileType::kMissing;
}

bool IsFile(FileSystem* file_system, const std::string& path) {
  absl::StatusOr<FileType> type = file_system->GetFileType(path);
  return type.ok() && *type == FileType::kFile;
}

absl::Status CheckBuffer(const CheckpointVariable& var, absl::string_view role,
                         const std::shared_ptr<const Buffer>& buffer) {
  if (buffer == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint variable '", var.name, "' ", role, ": no buffer"));
  }
  const uint64_t expected =
      static_cast<uint64_t>(NumElements(var.shape)) * DTypeSize(var.dtype);
  if (buffer->size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint variable '", var.name, "' ", role, ": buffer holds ",
        buffer->size(), " bytes, but ", DTypeName(var.dtype), " ",
        ShapeString(var.shape), " needs ", expected));
  }
  return absl::OkStatus();
}

absl::Status ValidateForWrite(const Checkpoint& checkpoint) {
  std::set<std::string> names;
  for (const CheckpointVariable& var : checkpoint.variables) {
    if (var.name.empty()) {
      return absl::InvalidArgumentError("checkpoint variable with empty name");
    }
    if (!names.insert(var.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint variable '", var.name, "' appears twice"));
    }
    if (DTypeSize(var.dtype) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint variable '", var.name, "' has an invalid dtype"));
    }
    absl::Status shape = ValidateShape(var.shape, DTypeSize(var.dtype),
                                       std::numeric_limits<uint64_t>::max());
    if (!shape.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint variable '", var.name, "': ", shape.message()));
    }
    STRATA_RETURN_IF_ERROR(CheckBuffer(var, kValueRole, var.value));
    std::set<std::string> roles = {kValueRole};
    for (const auto& [slot, buffer] : var.slots) {
      if (slot.empty() || !roles.insert(slot).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint variable '", var.name,
                         "' has an empty, duplicate or "
                         "reserved slot name '",
                         slot, "'"));
      }
      STRATA_RETURN_IF_ERROR(
          CheckBuffer(var, absl::StrCat("slot '", slot, "'"), buffer));
    }
  }
  return absl::OkStatus();
}

// Writes payloads and manifest into `dir`; returns the payload byte count.
absl::StatusOr<int64_t> WriteContents(FileSystem* file_system,
                                      const std::string& dir,
                                      const Checkpoint& checkpoint) {
  json variables = json::array();
  int64_t total = 0;
  int file_index = 0;
  auto write_tensor = [&](absl::string_view role, const Buffer& buffer,
                          json* tensors) -> absl::Status {
    std::string file = absl::StrCat(file_index++, ".bin");
    STRATA_RETURN_IF_ERROR(IoError(file_system->WriteFile(
        absl::StrCat(dir, "/", file),
        absl::string_view(buffer.data(), buffer.size()))));
    tensors->push_back({{"role", std::string(role)},
                        {"file", file},
                        {"bytes", buffer.size()},
                        {"crc32c", Crc32c(buffer.data(), buffer.size())}});
    total += static_cast<int64_t>(buffer.size());
    return absl::OkStatus();
  };
  for (const CheckpointVariable& var : checkpoint.variables) {
    json tensors = json::array();
    STRATA_RETURN_IF_ERROR(write_tensor(kValueRole, *var.value, &tensors));
    for (const auto& [slot, buffer] : var.slots) {
      STRATA_RETURN_IF_ERROR(write_tensor(slot, *buffer, &tensors));
    }
    variables.push_back({{"name", var.name},
                         {"dtype", DTypeName(var.dtype)},
                         {"shape", var.shape},
                         {"meta", var.meta},
                         {"tensors", std::move(tensors)}});
  }
  json manifest = {{"format", kFormat},
                   {"extra", checkpoint.extra},
                   {"variables", std::move(variables)}};
  const std::string text =
      manifest.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
  STRATA_RETURN_IF_ERROR(
      IoError(file_system->WriteFile(absl::StrCat(dir, "/", kManifest), text)));
  STRATA_RETURN_IF_ERROR(IoError(file_system->SyncDir(dir)));
  return total;
}

// Moves the complete checkpoint in `tmp` to `target`, replacing whatever is
// there. Where the file system can swap directories atomically, a reader of
// `target` always sees a whole checkpoint; otherwise the old one is renamed
// aside first, leaving a short window with none.
absl::Status Replace(FileSystem* file_system, const std::string& tmp,
                     const std::string& target, const std::string& aside) {
  STRATA_ASSIGN_OR_RETURN(const FileType type,
                          IoError(file_system->GetFileType(target)));
  if (type == FileType::kMissing) {
    return IoError(file_system->Rename(tmp, target));
  }
  const absl::Status exchanged = file_system->ExchangePaths(tmp, target);
  if (exchanged.ok()) {
    // `tmp` now holds the old checkpoint.
    file_system->RemoveAll(tmp).IgnoreError();
    return absl::OkStatus();
  }
  if (!absl::IsUnimplemented(exchanged)) return IoError(exchanged);
  STRATA_RETURN_IF_ERROR(IoError(file_system->Rename(target, aside)));
  if (absl::Status moved = file_system->Rename(tmp, target); !moved.ok()) {
    // Put the old one back.
    file_system->Rename(aside, target).IgnoreError();
    return IoError(moved);
  }
  file_system->RemoveAll(aside).IgnoreError();
  return absl::OkStatus();
}

// ---- Reading ----

absl::Status ManifestError(const std::string& manifest,
                           absl::string_view what) {
  return absl::DataLossError(absl::StrCat(manifest, ": ", what));
}

absl::StatusOr<std::string> ReadWholeFile(Directory* dir,
                                          const std::string& name,
                                          bool* missing) {
  *missing = false;
  absl::StatusOr<std::unique_ptr<SequentialFile>> file = dir->OpenFile(name);
  if (!file.ok()) {
    if (absl::IsNotFound(file.status())) {
      *missing = true;
      return file.status();
    }
    return IoError(file.status());
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    STRATA_ASSIGN_OR_RETURN(const size_t n,
                            IoError((*file)->Read(buf, sizeof(buf))));
    if (n == 0) break;
    out.append(buf, n);
  }
  return out;
}

// A file name written by WriteCheckpoint: no directories, no "..".
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

struct TensorEntry {
  std::string role;
  std::string file;
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// A non-negative JSON integer.
bool GetUnsigned(const json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

absl::StatusOr<TensorEntry> ParseTensorEntry(const json& t,
                                             const std::string& manifest,
                                             const std::string& where) {
  if (!t.is_object()) {
    return ManifestError(manifest, where + " is not an object");
  }
  TensorEntry entry;
  auto role = t.find("role");
  if (role == t.end() || !role->is_string() ||
      role->get_ref<const std::string&>().empty()) {
    return ManifestError(manifest, where + ".role is not a non-empty string");
  }
  entry.role = role->get<std::string>();
  auto file = t.find("file");
  if (file == t.end() || !file->is_string() ||
      !IsPlainFileName(file->get_ref<const std::string&>())) {
    return ManifestError(manifest, where + ".file is not a plain file name");
  }
  entry.file = file->get<std::string>();
  auto bytes = t.find("bytes");
  if (bytes == t.end() || !GetUnsigned(*bytes, &entry.bytes)) {
    return ManifestError(manifest,
                         where + ".bytes is not a non-negative integer");
  }
  auto crc = t.find("crc32c");
  uint64_t crc_value = 0;
  if (crc == t.end() || !GetUnsigned(*crc, &crc_value) ||
      crc_value > 0xFFFFFFFFu) {
    return ManifestError(manifest,
                         where + ".crc32c is not a 32-bit unsigned integer");
  }
  entry.crc = static_cast<uint32_t>(crc_value);
  return entry;
}

absl::StatusOr<std::shared_ptr<const Buffer>> ReadPayload(
    Directory* dir, const std::string& dir_path, const TensorEntry& entry) {
  const std::string path = absl::StrCat(dir_path, "/", entry.file);
  absl::StatusOr<std::unique_ptr<SequentialFile>> file =
      dir->OpenFile(entry.file);
  if (!file.ok()) {
    if (absl::IsNotFound(file.status())) {
      return absl::DataLossError(
          absl::StrCat(path, ": payload file is missing"));
    }
    return IoError(file.status());
  }
  absl::StatusOr<uint64_t> size = (*file)->Size();
  if (!size.ok()) {
    if (absl::IsFailedPrecondition(size.status())) {
      return absl::DataLossError(absl::StrCat(path, ": not a regular file"));
    }
    return IoError(size.status());
  }
  if (*size != entry.bytes) {
    return absl::DataLossError(
        absl::StrCat(path, ": size is ", *size, " bytes, the manifest says ",
                     entry.bytes, *size < entry.bytes ? " (truncated)" : ""));
  }
  // Read straight into the tensor's buffer: payloads can be large.
  std::shared_ptr<Buffer> buffer =
      Buffer::Allocate(entry.bytes, /*zero=*/false);
  size_t done = 0;
  while (done < entry.bytes) {
    STRATA_ASSIGN_OR_RETURN(
        const size_t n,
        IoError((*file)->Read(buffer->data() + done, entry.bytes - done)));
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": truncated while reading (", done, " of ",
                       entry.bytes, " bytes)"));
    }
    done += n;
  }
  const uint32_t crc = Crc32c(buffer->data(), buffer->size());
  if (crc != entry.crc) {
    return absl::DataLossError(
        absl::StrFormat("%s: CRC32C mismatch (file 0x%08x, manifest 0x%08x)",
                        path, crc, entry.crc));
  }
  return std::shared_ptr<const Buffer>(std::move(buffer));
}

// `name` is "<base>.tmp-<pid>-<n>" or "<base>.old-<pid>-<n>" (as
// WriteCheckpoint names its temporaries); sets *pid (and *base, *old).
bool IsTemporaryName(const std::string& name, pid_t* pid,
                     std::string* base = nullptr, bool* old = nullptr) {
  for (const char* marker : {".tmp-", ".old-"}) {
    const size_t at = name.rfind(marker);
    if (at == std::string::npos || at == 0) continue;
    const std::string rest = name.substr(at + 5);
    const size_t dash = rest.find('-');
    if (dash == std::string::npos || dash == 0 || dash + 1 == rest.size()) {
      continue;
    }
    auto digits = [](absl::string_view s) {
      return !s.empty() && s.size() <= 18 &&
             s.find_first_not_of("0123456789") == absl::string_view::npos;
    };
    const absl::string_view p(rest.data(), dash);
    if (!digits(p) || !digits(absl::string_view(rest).substr(dash + 1))) {
      continue;
    }
    *pid = static_cast<pid_t>(std::stoll(std::string(p)));
    if (base != nullptr) *base = name.substr(0, at);
    if (old != nullptr) *old = std::string(marker) == ".old-";
    return true;
  }
  return false;
}

// Whether a temporary of process `pid` may still be written to. This
// process writes none yet when it sweeps (a restarted container often gets
// its predecessor's pid).
bool WriterAlive(pid_t pid) {
  if (pid <= 0 || pid == ::getpid()) return false;
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace

absl::StatusOr<bool> DeleteCheckpoint(const std::string& path,
                                      FileSystem* file_system) {
  const std::string manifest = (fs::path(path) / kManifest).string();
  absl::StatusOr<FileType> manifest_type = file_system->GetFileType(manifest);
  if (!manifest_type.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot stat ", path, ": ",
                     ReasonOf(manifest_type.status(), manifest)));
  }
  if (*manifest_type != FileType::kFile) return false;
  // Renamed to a temporary first, so that a kill part-way through the
  // removal leaves no half-deleted checkpoint under its own name, only a
  // temporary the next start sweeps (SweepCheckpointTemporaries).
  const fs::path normal = fs::path(path).lexically_normal();
  const std::string doomed = absl::StrCat(
      normal.has_filename() ? normal.string() : normal.parent_path().string(),
      ".tmp-", ::getpid(), "-", g_dir_counter.fetch_add(1));
  STRATA_RETURN_IF_ERROR(IoError(file_system->Rename(path, doomed)));
  const fs::path parent = fs::path(doomed).parent_path();
  if (!parent.empty()) {
    STRATA_RETURN_IF_ERROR(IoError(file_system->SyncDir(parent.string())));
  }
  STRATA_RETURN_IF_ERROR(IoError(file_system->RemoveAll(doomed)));
  return true;
}

absl::StatusOr<int> SweepCheckpointTemporaries(const std::string& dir,
                                               FileSystem* file_system) {
  int removed = 0;
  absl::StatusOr<FileType> dir_type = file_system->GetFileType(dir);
  if (!dir_type.ok() || *dir_type != FileType::kDirectory) return 0;
  // The subdirectories of `d`.
  auto list = [file_system](
                  const fs::path& d) -> absl::StatusOr<std::vector<fs::path>> {
    STRATA_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                            IoError(file_system->ListDir(d.string())));
    std::vector<fs::path> out;
    for (const std::string& name : names) {
      fs::path p = d / name;
      absl::StatusOr<FileType> type = file_system->GetFileType(p.string());
      if (type.ok() && *type == FileType::kDirectory)
        out.push_back(std::move(p));
    }
    return out;
  };
  std::vector<fs::path> dirs = {fs::path(dir)};
  STRATA_ASSIGN_OR_RETURN(const std::vector<fs::path> subdirs, list(dir));
  for (const fs::path& p : subdirs) {
    pid_t pid = 0;
    if (!IsTemporaryName(p.filename().string(), &pid)) dirs.push_back(p);
  }
  for (const fs::path& d : dirs) {
    STRATA_ASSIGN_OR_RETURN(const std::vector<fs::path> entries, list(d));
    for (const fs::path& p : entries) {
      pid_t pid = 0;
      std::string base;
      bool old = false;
      if (!IsTemporaryName(p.filename().string(), &pid, &base, &old) ||
          WriterAlive(pid)) {
        continue;
      }
      const fs::path target = d / base;
      if (old && !Exists(file_system, target.string()) &&
          IsFile(file_system, (p / kManifest).string())) {
        // Killed between moving the old checkpoint aside and the new one
        // in: the old one goes back.
        STRATA_RETURN_IF_ERROR(
            IoError(file_system->Rename(p.string(), target.string())));
        continue;
      }
      STRATA_RETURN_IF_ERROR(IoError(file_system->RemoveAll(p.string())));
      ++removed;
    }
  }
  return removed;
}

absl::StatusOr<int64_t> WriteCheckpoint(const std::string& path,
                                        const Checkpoint& checkpoint,
                                        FileSystem* file_system) {
  STRATA_RETURN_IF_ERROR(ValidateForWrite(checkpoint));
  fs::path target_path = fs::path(path).lexically_normal();
  if (!target_path.has_filename()) target_path = target_path.parent_path();
  if (target_path.empty() || target_path == "." || target_path == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint path '", path, "' names no directory"));
  }
  const std::string target = target_path.string();
  fs::path parent = target_path.parent_path();
  if (parent.empty()) parent = ".";

  if (absl::Status s = file_system->CreateDirs(parent.string()); !s.ok()) {
    return absl::InternalError(absl::StrCat(
        "cannot create directory ", parent.string(), ": ", s.message()));
  }

  const std::string suffix =
      absl::StrCat(::getpid(), "-", g_dir_counter.fetch_add(1));
  const std::string tmp = absl::StrCat(target, ".tmp-", suffix);
  const std::string aside = absl::StrCat(target, ".old-", suffix);
  // Left by a crashed process with the same pid.
  file_system->RemoveAll(tmp).IgnoreError();
  STRATA_RETURN_IF_ERROR(IoError(file_system->CreateDir(tmp)));

  absl::StatusOr<int64_t> total = WriteContents(file_system, tmp, checkpoint);
  absl::Status status = total.status();
  if (status.ok()) status = Replace(file_system, tmp, target, aside);
  if (status.ok()) status = IoError(file_system->SyncDir(parent.string()));
  if (!status.ok()) {
    file_system->RemoveAll(tmp).IgnoreError();
    return status;
  }
  return total;
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path,
                                          FileSystem* file_system) {
  const std::string manifest_path = absl::StrCat(path, "/", kManifest);
  // Everything is opened relative to one directory handle, so a concurrent
  // WriteCheckpoint that swaps the directory cannot mix two checkpoints.
  absl::StatusOr<std::unique_ptr<Directory>> dir =
      file_system->OpenDirectory(path);
  if (!dir.ok()) {
    if (absl::IsNotFound(dir.status())) {
      return absl::NotFoundError(
          absl::StrCat("no checkpoint at ", path, " (no ", kManifest, ")"));
    }
    return absl::InternalError(absl::StrCat("cannot open checkpoint directory ",
                                            path, ": ",
                                            ReasonOf(dir.status(), path)));
  }

  bool missing = false;
  absl::StatusOr<std::string> text =
      ReadWholeFile(dir->get(), kManifest, &missing);
  if (!text.ok()) {
    if (missing) {
      return absl::NotFoundError(
          absl::StrCat("no checkpoint at ", path, " (no ", kManifest, ")"));
    }
    return text.status();
  }
  json manifest;
  try {
    manifest = json::parse(*text);
  } catch (const json::exception& e) {
    return ManifestError(manifest_path,
                         absl::StrCat("invalid JSON: ", e.what()));
  }
  if (!manifest.is_object()) {
    return ManifestError(manifest_path, "not a JSON object");
  }
  auto format = manifest.find("format");
  if (format == manifest.end() || !format->is_string() ||
      format->get<std::string>() != kFormat) {
    return ManifestError(
        manifest_path,
        absl::StrCat(
            "unsupported format ",
            format == manifest.end()
                ? std::string("(missing)")
                : format->dump(-1, ' ', false, json::error_handler_t::replace),
            "; expected \"", kFormat, "\""));
  }
  auto variables = manifest.find("variables");
  if (variables == manifest.end() || !variables->is_array()) {
    return ManifestError(manifest_path, "\"variables\" is not an array");
  }

  Checkpoint checkpoint;
  if (auto extra = manifest.find("extra"); extra != manifest.end()) {
    checkpoint.extra = *extra;
  }
  std::set<std::string> names;
  for (size_t i = 0; i < variables->size(); ++i) {
    const json& v = (*variables)[i];
    const std::string where = absl::StrCat("variables[", i, "]");
    if (!v.is_object())
      return ManifestError(manifest_path, where + " is not an object");
    CheckpointVariable var;
    auto name = v.find("name");
    if (name == v.end() || !name->is_string() ||
        name->get_ref<const std::string&>().empty()) {
      return ManifestError(manifest_path,
                           where + ".name is not a non-empty string");
    }
    var.name = name->get<std::string>();
    if (!names.insert(var.name).second) {
      return ManifestError(manifest_path, absl::StrCat("variable '", var.name,
                                                       "' appears twice"));
    }
    const std::string vwhere = absl::StrCat(where, " ('", var.name, "')");
    auto dtype = v.find("dtype");
    if (dtype == v.end() || !dtype->is_string()) {
      return ManifestError(manifest_path, vwhere + ".dtype is not a string");
    }
    absl::StatusOr<DType> parsed = ParseDType(dtype->get<std::string>());
    if (!parsed.ok()) {
      return ManifestError(
          manifest_path,
          absl::StrCat(vwhere, ".dtype: ", parsed.status().message()));
    }
    var.dtype = *parsed;
    auto shape = v.find("shape");
    if (shape == v.end() || !shape->is_array()) {
      return ManifestError(manifest_path, vwhere + ".shape is not an array");
    }
    for (const json& d : *shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return ManifestError(manifest_path,
                             vwhere +
                                 ".shape has a dimension that is not a "
                                 "non-negative integer");
      }
      var.shape.push_back(d.get<int64_t>());
    }
    absl::Status shape_ok = ValidateShape(var.shape, DTypeSize(var.dtype),
                                          std::numeric_limits<uint64_t>::max());
    if (!shape_ok.ok()) {
      return ManifestError(
          manifest_path, absl::StrCat(vwhere, ".shape: ", shape_ok.message()));
    }
    const uint64_t expected_bytes =
        static_cast<uint64_t>(NumElements(var.shape)) * DTypeSize(var.dtype);
    if (auto meta = v.find("meta"); meta != v.end()) var.meta = *meta;

    auto tensors = v.find("tensors");
    if (tensors == v.end() || !tensors->is_array()) {
      return ManifestError(manifest_path, vwhere + ".tensors is not an array");
    }
    std::set<std::string> roles;
    for (size_t j = 0; j < tensors->size(); ++j) {
      const std::string twhere = absl::StrCat(vwhere, ".tensors[", j, "]");
      STRATA_ASSIGN_OR_RETURN(
          TensorEntry entry,
          ParseTensorEntry((*tensors)[j], manifest_path, twhere));
      if (!roles.insert(entry.role).second) {
        return ManifestError(
            manifest_path,
            absl::StrCat(twhere, ": role '", entry.role, "' appears twice"));
      }
      if (entry.bytes != expected_bytes) {
        return ManifestError(
            manifest_path,
            absl::StrCat(twhere, ".bytes is ", entry.bytes, ", but ",
                         DTypeName(var.dtype), " ", ShapeString(var.shape),
                         " needs ", expected_bytes));
      }
      STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const Buffer> buffer,
                              ReadPayload(dir->get(), path, entry));
      if (entry.role == kValueRole) {
        var.value = std::move(buffer);
      } else {
        var.slots.emplace_back(entry.role, std::move(buffer));
      }
    }
    if (var.value == nullptr) {
      return ManifestError(manifest_path,
                           vwhere + " has no tensor with role \"value\"");
    }
    checkpoint.variables.push_back(std::move(var));
  }
  return checkpoint;
}

}  // namespace strata

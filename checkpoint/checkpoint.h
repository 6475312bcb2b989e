// On-disk checkpoints of a parameter server's variables and optimizer slots.
//
// Layout of a checkpoint directory:
//   manifest.json   format version, extra metadata, and per tensor: file,
//                   dtype, shape, byte size and CRC32C
//   <n>.bin         raw little-endian payload of one tensor
// A checkpoint is written into a temporary sibling directory, fsynced, and
// renamed into place, so a reader sees either the old or the new checkpoint,
// never a partial one. Every function works through a FileSystem (the local
// disk by default; tests pass an InMemoryFileSystem).
#ifndef STRATA_CHECKPOINT_CHECKPOINT_H_
#define STRATA_CHECKPOINT_CHECKPOINT_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/file_system.h"
#include "common/tensor.h"
#include "nlohmann/json.hpp"

namespace strata {

// One variable in a checkpoint: its value, its optimizer slots (each with the
// value's dtype and shape) and opaque metadata the store round-trips (spec,
// version, iteration count, exactly-once window).
struct CheckpointVariable {
  std::string name;
  DType dtype = DType::kInvalid;
  Shape shape;
  std::shared_ptr<const Buffer> value;
  std::vector<std::pair<std::string, std::shared_ptr<const Buffer>>> slots;
  nlohmann::json meta;
};

struct Checkpoint {
  std::vector<CheckpointVariable> variables;
  nlohmann::json extra;  // checkpoint-wide metadata
};

// Writes `checkpoint` to directory `path`, replacing any checkpoint there.
// Returns the number of payload bytes written.
// Errors: INVALID_ARGUMENT for a buffer whose size does not match dtype and
// shape; INTERNAL (with the path and errno text) for I/O failures.
absl::StatusOr<int64_t> WriteCheckpoint(
    const std::string& path, const Checkpoint& checkpoint,
    FileSystem* file_system = LocalFileSystem());

// Reads and verifies the checkpoint in `path`: every file listed must exist,
// have the recorded size, and match its CRC32C.
// Errors: NOT_FOUND when there is no manifest; DATA_LOSS naming the file for
// a missing, truncated or corrupt payload or an unreadable manifest.
absl::StatusOr<Checkpoint> ReadCheckpoint(
    const std::string& path, FileSystem* file_system = LocalFileSystem());

// Deletes the checkpoint directory `path`: true when deleted, false when
// there is none or `path` holds no manifest.json (it is then left alone, so
// nothing but a checkpoint is ever deleted). It is renamed to a temporary
// before its files go, so a crash mid-way leaves only that temporary (for
// SweepCheckpointTemporaries). Errors: INTERNAL (path, errno text).
absl::StatusOr<bool> DeleteCheckpoint(
    const std::string& path, FileSystem* file_system = LocalFileSystem());

// Removes what killed writers left in `dir` and in its subdirectories (one
// level down: the job directories): "<name>.tmp-<pid>-<n>" and
// "<name>.old-<pid>-<n>" directories whose pid is not another running
// process; an ".old-" one whose <name> is missing (the writer was killed
// between moving it aside and the new one in) is renamed back instead.
// Call it before this process writes checkpoints (at start).
// Returns how many were removed; `dir` missing is 0. Errors: INTERNAL.
absl::StatusOr<int> SweepCheckpointTemporaries(
    const std::string& dir, FileSystem* file_system = LocalFileSystem());

}  // namespace strata

#endif  // STRATA_CHECKPOINT_CHECKPOINT_H_

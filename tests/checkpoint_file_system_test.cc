// Checkpoints through an injected FileSystem: on InMemoryFileSystem the disk
// fills up, writes tear and renames fail on demand, and the old checkpoint
// must survive each of them.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "checkpoint/checkpoint.h"
#include "common/file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

const std::string kRoot = "/ckpts";
const std::string kJob = kRoot + "/job";
const std::string kPath = kJob + "/ckpt-1";

std::shared_ptr<const Buffer> FloatBuffer(const std::vector<float>& values) {
  auto buffer = Buffer::Allocate(values.size() * sizeof(float));
  std::memcpy(buffer->data(), values.data(), buffer->size());
  return buffer;
}

std::vector<float> Floats(const Buffer& buffer) {
  auto span = buffer.span<float>();
  return std::vector<float>(span.begin(), span.end());
}

// "w" (float32 [2, 3], value in 0.bin, slot "m" in 1.bin) and "step" (int64
// scalar, 2.bin): 56 payload bytes.
Checkpoint MakeCheckpoint(float base) {
  Checkpoint ckpt;
  ckpt.extra = {{"base", base}};
  CheckpointVariable w;
  w.name = "w";
  w.dtype = DType::kFloat32;
  w.shape = {2, 3};
  w.value =
      FloatBuffer({base, base + 1, base + 2, base + 3, base + 4, base + 5});
  w.slots.emplace_back("m",
                       FloatBuffer({-base, -base, -base, -base, -base, -base}));
  ckpt.variables.push_back(w);
  CheckpointVariable step;
  step.name = "step";
  step.dtype = DType::kInt64;
  step.shape = {};
  auto step_buffer = Buffer::Allocate(sizeof(int64_t));
  step_buffer->span<int64_t>()[0] = static_cast<int64_t>(base) * 100;
  step.value = step_buffer;
  ckpt.variables.push_back(step);
  return ckpt;
}

// What this process's temporaries of `target` start with.
std::string TemporaryPrefix(const std::string& target) {
  return target + ".tmp-" + std::to_string(::getpid()) + "-";
}

class CheckpointFileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fs_.CreateDirs(kJob).ok()); }

  // The names in `dir`, sorted.
  std::vector<std::string> List(const std::string& dir) {
    absl::StatusOr<std::vector<std::string>> names = fs_.ListDir(dir);
    EXPECT_TRUE(names.ok()) << names.status();
    if (!names.ok()) return {};
    std::sort(names->begin(), names->end());
    return *names;
  }

  FileType TypeOf(const std::string& path) {
    absl::StatusOr<FileType> type = fs_.GetFileType(path);
    EXPECT_TRUE(type.ok()) << type.status();
    return type.ok() ? *type : FileType::kOther;
  }

  // Reads the checkpoint at `path` and checks that it is MakeCheckpoint(base).
  void ExpectCheckpoint(const std::string& path, float base) {
    absl::StatusOr<Checkpoint> read = ReadCheckpoint(path, &fs_);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->extra, nlohmann::json({{"base", base}}));
    ASSERT_EQ(read->variables.size(), 2u);
    const CheckpointVariable& w = read->variables[0];
    EXPECT_EQ(w.name, "w");
    EXPECT_EQ(w.dtype, DType::kFloat32);
    EXPECT_EQ(w.shape, (Shape{2, 3}));
    ASSERT_NE(w.value, nullptr);
    EXPECT_EQ(Floats(*w.value),
              (std::vector<float>{base, base + 1, base + 2, base + 3, base + 4,
                                  base + 5}));
    ASSERT_EQ(w.slots.size(), 1u);
    EXPECT_EQ(w.slots[0].first, "m");
    EXPECT_EQ(Floats(*w.slots[0].second), std::vector<float>(6, -base));
    const CheckpointVariable& step = read->variables[1];
    EXPECT_EQ(step.name, "step");
    ASSERT_NE(step.value, nullptr);
    ASSERT_EQ(step.value->size(), sizeof(int64_t));
    EXPECT_EQ(step.value->span<int64_t>()[0], static_cast<int64_t>(base) * 100);
  }

  InMemoryFileSystem fs_;
};

TEST_F(CheckpointFileSystemTest, RoundTripsInMemoryOnly) {
  absl::StatusOr<int64_t> written =
      WriteCheckpoint(kPath, MakeCheckpoint(1), &fs_);
  STRATA_ASSERT_OK(written);
  EXPECT_EQ(*written, 24 + 24 + 8);
  ExpectCheckpoint(kPath, 1);
  EXPECT_THAT(List(kJob), ElementsAre("ckpt-1"));
  EXPECT_THAT(List(kPath),
              ElementsAre("0.bin", "1.bin", "2.bin", "manifest.json"));
  // Every file went into this process's temporary, none to the target.
  const std::vector<std::string> writes = fs_.Writes();
  ASSERT_EQ(writes.size(), 4u);
  for (const std::string& path : writes) {
    EXPECT_THAT(path, StartsWith(TemporaryPrefix(kPath)));
  }
  // Replacing it swaps the directories and leaves no temporary.
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(2), &fs_));
  ExpectCheckpoint(kPath, 2);
  EXPECT_THAT(List(kJob), ElementsAre("ckpt-1"));
  // Nothing reached the real disk.
  EXPECT_FALSE(std::filesystem::exists(kRoot));
}

TEST_F(CheckpointFileSystemTest, ReplacesWithoutExchange) {
  fs_.SetExchangeSupported(false);
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(1), &fs_));
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(2), &fs_));
  ExpectCheckpoint(kPath, 2);
  EXPECT_THAT(List(kJob), ElementsAre("ckpt-1"));
}

TEST_F(CheckpointFileSystemTest, CreatesMissingParents) {
  const std::string path = kRoot + "/new/deeper/ckpt";
  STRATA_ASSERT_OK(WriteCheckpoint(path, MakeCheckpoint(3), &fs_));
  ExpectCheckpoint(path, 3);
}

TEST_F(CheckpointFileSystemTest, MissingCheckpointIsNotFound) {
  EXPECT_THAT(ReadCheckpoint(kJob + "/none", &fs_),
              StatusIsWithMessage(
                  absl::StatusCode::kNotFound,
                  "no checkpoint at " + kJob + "/none (no manifest.json)"));
  STRATA_ASSERT_OK(fs_.CreateDir(kJob + "/empty"));
  EXPECT_THAT(ReadCheckpoint(kJob + "/empty", &fs_),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "no checkpoint at " + kJob + "/empty"));
}

TEST_F(CheckpointFileSystemTest, FullDiskFailsNamingTheFileAndKeepsTheOld) {
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(1), &fs_));
  const size_t writes_before = fs_.Writes().size();
  // Room for 0.bin (24 bytes) and 6 bytes of 1.bin.
  fs_.FailWritesAfter(30,
                      absl::ResourceExhaustedError("No space left on device"));
  absl::StatusOr<int64_t> written =
      WriteCheckpoint(kPath, MakeCheckpoint(2), &fs_);
  EXPECT_THAT(written, StatusIsWithMessage(absl::StatusCode::kInternal,
                                           "/1.bin: No space left on device"));
  EXPECT_THAT(std::string(written.status().message()),
              StartsWith("cannot write " + TemporaryPrefix(kPath)));
  // Only the temporary was written to, and it is gone.
  const std::vector<std::string> writes = fs_.Writes();
  ASSERT_EQ(writes.size(), writes_before + 2);
  EXPECT_THAT(writes[writes_before], StartsWith(TemporaryPrefix(kPath)));
  EXPECT_THAT(writes[writes_before + 1], StartsWith(TemporaryPrefix(kPath)));
  EXPECT_THAT(List(kJob), ElementsAre("ckpt-1"));
  // The old checkpoint is whole while the disk stays full.
  ExpectCheckpoint(kPath, 1);
  EXPECT_THAT(WriteCheckpoint(kPath, MakeCheckpoint(3), &fs_),
              StatusIs(absl::StatusCode::kInternal));
  ExpectCheckpoint(kPath, 1);
  // With room again, the next write goes through.
  fs_.FailWritesAfter(0, absl::OkStatus());
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(2), &fs_));
  ExpectCheckpoint(kPath, 2);
}

TEST_F(CheckpointFileSystemTest, FullDiskOnAFirstWriteLeavesNothing) {
  fs_.FailWritesAfter(10,
                      absl::ResourceExhaustedError("No space left on device"));
  EXPECT_THAT(WriteCheckpoint(kPath, MakeCheckpoint(1), &fs_),
              StatusIsWithMessage(absl::StatusCode::kInternal,
                                  "/0.bin: No space left on device"));
  EXPECT_THAT(List(kJob), IsEmpty());
  EXPECT_THAT(ReadCheckpoint(kPath, &fs_),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CheckpointFileSystemTest, TornManifestWriteKeepsTheOld) {
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(1), &fs_));
  // The payloads fit; the manifest stops after 10 bytes.
  fs_.FailWritesAfter(56 + 10, absl::UnavailableError("Input/output error"));
  absl::StatusOr<int64_t> written =
      WriteCheckpoint(kPath, MakeCheckpoint(2), &fs_);
  EXPECT_THAT(written,
              StatusIsWithMessage(absl::StatusCode::kInternal,
                                  "/manifest.json: Input/output error"));
  EXPECT_THAT(std::string(written.status().message()),
              HasSubstr(TemporaryPrefix(kPath)));
  EXPECT_THAT(List(kJob), ElementsAre("ckpt-1"));
  ExpectCheckpoint(kPath, 1);
}

TEST_F(CheckpointFileSystemTest, DamagedPayloadIsDataLossNamingTheFile) {
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(1), &fs_));
  const std::string file = kPath + "/1.bin";
  absl::StatusOr<std::string> data = fs_.ReadFile(file);
  STRATA_ASSERT_OK(data);
  ASSERT_EQ(data->size(), 24u);

  // Cut short behind the writer's back.
  STRATA_ASSERT_OK(fs_.WriteFile(file, data->substr(0, 10)));
  EXPECT_THAT(ReadCheckpoint(kPath, &fs_),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  file + ": size is 10 bytes, the manifest "
                                         "says 24 (truncated)"));
  // Whole length, one bit flipped.
  std::string flipped = *data;
  flipped[5] = static_cast<char>(flipped[5] ^ 0x01);
  STRATA_ASSERT_OK(fs_.WriteFile(file, flipped));
  EXPECT_THAT(ReadCheckpoint(kPath, &fs_),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  file + ": CRC32C mismatch"));
  // Gone.
  STRATA_ASSERT_OK(fs_.RemoveAll(file));
  EXPECT_THAT(ReadCheckpoint(kPath, &fs_),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  file + ": payload file is missing"));
  // A directory where the payload should be.
  STRATA_ASSERT_OK(fs_.CreateDir(file));
  EXPECT_THAT(ReadCheckpoint(kPath, &fs_),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  file + ": not a regular file"));
  // Restored, it reads again.
  STRATA_ASSERT_OK(fs_.RemoveAll(file));
  STRATA_ASSERT_OK(fs_.WriteFile(file, *data));
  ExpectCheckpoint(kPath, 1);
}

TEST_F(CheckpointFileSystemTest, FailedExchangeKeepsTheOld) {
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(1), &fs_));
  fs_.FailRenames(
      [](const std::string& from, const std::string&) {
        return absl::StrContains(from, ".tmp-");
      },
      absl::UnavailableError("Input/output error"));
  absl::StatusOr<int64_t> written =
      WriteCheckpoint(kPath, MakeCheckpoint(2), &fs_);
  EXPECT_THAT(written,
              StatusIsWithMessage(absl::StatusCode::kInternal,
                                  " with " + kPath + ": Input/output error"));
  EXPECT_THAT(std::string(written.status().message()),
              StartsWith("cannot exchange " + TemporaryPrefix(kPath)));
  ExpectCheckpoint(kPath, 1);
  EXPECT_THAT(List(kJob), ElementsAre("ckpt-1"));
}

TEST_F(CheckpointFileSystemTest, FailedFinalRenamePutsTheOldBack) {
  fs_.SetExchangeSupported(false);
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(1), &fs_));
  // Moving the old one aside works; moving the new one in does not.
  fs_.FailRenames(
      [](const std::string& from, const std::string&) {
        return absl::StrContains(from, ".tmp-");
      },
      absl::UnavailableError("Input/output error"));
  absl::StatusOr<int64_t> written =
      WriteCheckpoint(kPath, MakeCheckpoint(2), &fs_);
  EXPECT_THAT(written,
              StatusIsWithMessage(absl::StatusCode::kInternal,
                                  " to " + kPath + ": Input/output error"));
  EXPECT_THAT(std::string(written.status().message()),
              StartsWith("cannot rename " + TemporaryPrefix(kPath)));
  ExpectCheckpoint(kPath, 1);
  EXPECT_THAT(List(kJob), ElementsAre("ckpt-1"));

  // A first write whose rename fails leaves nothing.
  const std::string fresh = kJob + "/ckpt-2";
  EXPECT_THAT(WriteCheckpoint(fresh, MakeCheckpoint(2), &fs_),
              StatusIsWithMessage(absl::StatusCode::kInternal,
                                  " to " + fresh + ": Input/output error"));
  EXPECT_THAT(List(kJob), ElementsAre("ckpt-1"));

  fs_.FailRenames(nullptr, absl::OkStatus());
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(2), &fs_));
  ExpectCheckpoint(kPath, 2);
}

TEST_F(CheckpointFileSystemTest, ReaderKeepsTheDirectoryItOpened) {
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(1), &fs_));
  absl::StatusOr<std::unique_ptr<Directory>> dir = fs_.OpenDirectory(kPath);
  STRATA_ASSERT_OK(dir);
  // A writer swaps a new checkpoint in after the reader opened the old one.
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(2), &fs_));
  absl::StatusOr<std::unique_ptr<SequentialFile>> file =
      (*dir)->OpenFile("0.bin");
  STRATA_ASSERT_OK(file);
  absl::StatusOr<uint64_t> size = (*file)->Size();
  STRATA_ASSERT_OK(size);
  ASSERT_EQ(*size, 24u);
  std::vector<float> values(6);
  absl::StatusOr<size_t> n =
      (*file)->Read(reinterpret_cast<char*>(values.data()), 24);
  STRATA_ASSERT_OK(n);
  EXPECT_EQ(*n, 24u);
  EXPECT_EQ(values, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  n = (*file)->Read(reinterpret_cast<char*>(values.data()), 24);
  STRATA_ASSERT_OK(n);
  EXPECT_EQ(*n, 0u);
  ExpectCheckpoint(kPath, 2);
}

TEST_F(CheckpointFileSystemTest, DeleteRemovesOnlyCheckpoints) {
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(1), &fs_));
  absl::StatusOr<bool> deleted = DeleteCheckpoint(kPath, &fs_);
  STRATA_ASSERT_OK(deleted);
  EXPECT_TRUE(*deleted);
  EXPECT_EQ(TypeOf(kPath), FileType::kMissing);
  EXPECT_THAT(List(kJob), IsEmpty());
  // Gone already: nothing to do.
  deleted = DeleteCheckpoint(kPath, &fs_);
  STRATA_ASSERT_OK(deleted);
  EXPECT_FALSE(*deleted);
  // A directory that is no checkpoint is left alone.
  const std::string other = kJob + "/data";
  STRATA_ASSERT_OK(fs_.CreateDir(other));
  STRATA_ASSERT_OK(fs_.WriteFile(other + "/keep.txt", "x"));
  deleted = DeleteCheckpoint(other, &fs_);
  STRATA_ASSERT_OK(deleted);
  EXPECT_FALSE(*deleted);
  EXPECT_EQ(TypeOf(other + "/keep.txt"), FileType::kFile);
}

TEST_F(CheckpointFileSystemTest, FailedDeleteKeepsTheCheckpoint) {
  STRATA_ASSERT_OK(WriteCheckpoint(kPath, MakeCheckpoint(1), &fs_));
  fs_.FailRenames([](const std::string&, const std::string&) { return true; },
                  absl::UnavailableError("Input/output error"));
  absl::StatusOr<bool> deleted = DeleteCheckpoint(kPath, &fs_);
  EXPECT_THAT(deleted, StatusIsWithMessage(absl::StatusCode::kInternal,
                                           "cannot rename " + kPath + " to " +
                                               TemporaryPrefix(kPath)));
  EXPECT_THAT(std::string(deleted.status().message()),
              HasSubstr(": Input/output error"));
  ExpectCheckpoint(kPath, 1);
  EXPECT_THAT(List(kJob), ElementsAre("ckpt-1"));
}

TEST_F(CheckpointFileSystemTest, SweepRemovesWhatKilledWritersLeft) {
  STRATA_ASSERT_OK(WriteCheckpoint(kJob + "/ckpt-2", MakeCheckpoint(1), &fs_));
  // A pid no process has (above the kernel's pid_max), this process's own
  // (a restarted container's predecessor), and a live one (the parent).
  const std::string dead = kJob + "/ckpt-4.tmp-99999999-0";
  const std::string dead_old = kJob + "/ckpt-2.old-99999999-3";
  const std::string own =
      kRoot + "/ckpt-9.tmp-" + std::to_string(::getpid()) + "-1";
  const std::string live =
      kJob + "/ckpt-6.tmp-" + std::to_string(::getppid()) + "-0";
  const std::string not_ours = kJob + "/notes.tmp-x-1";
  for (const std::string& d : {dead, dead_old, own, live, not_ours}) {
    STRATA_ASSERT_OK(fs_.CreateDir(d));
    STRATA_ASSERT_OK(fs_.WriteFile(d + "/0.bin", "partial"));
  }
  // A file with a temporary's name is no temporary directory.
  const std::string file = kJob + "/ckpt-7.tmp-99999999-0";
  STRATA_ASSERT_OK(fs_.WriteFile(file, "x"));

  absl::StatusOr<int> swept = SweepCheckpointTemporaries(kRoot, &fs_);
  STRATA_ASSERT_OK(swept);
  EXPECT_EQ(*swept, 3);
  EXPECT_EQ(TypeOf(dead), FileType::kMissing);
  EXPECT_EQ(TypeOf(dead_old), FileType::kMissing);
  EXPECT_EQ(TypeOf(own), FileType::kMissing);
  EXPECT_EQ(TypeOf(live), FileType::kDirectory);
  EXPECT_EQ(TypeOf(not_ours), FileType::kDirectory);
  EXPECT_EQ(TypeOf(file), FileType::kFile);
  ExpectCheckpoint(kJob + "/ckpt-2", 1);

  // Killed between moving ckpt-3 aside and its successor in: ckpt-3 comes
  // back, the half-moved successor goes.
  STRATA_ASSERT_OK(WriteCheckpoint(kJob + "/ckpt-3", MakeCheckpoint(2), &fs_));
  STRATA_ASSERT_OK(
      fs_.Rename(kJob + "/ckpt-3", kJob + "/ckpt-3.old-99999999-5"));
  STRATA_ASSERT_OK(fs_.CreateDir(kJob + "/ckpt-3.tmp-99999999-5"));
  swept = SweepCheckpointTemporaries(kRoot, &fs_);
  STRATA_ASSERT_OK(swept);
  EXPECT_EQ(*swept, 1);
  ExpectCheckpoint(kJob + "/ckpt-3", 2);
  EXPECT_EQ(TypeOf(kJob + "/ckpt-3.old-99999999-5"), FileType::kMissing);
  EXPECT_EQ(TypeOf(kJob + "/ckpt-3.tmp-99999999-5"), FileType::kMissing);

  // Nothing there: nothing to do.
  swept = SweepCheckpointTemporaries(kRoot + "/none", &fs_);
  STRATA_ASSERT_OK(swept);
  EXPECT_EQ(*swept, 0);
}

TEST_F(CheckpointFileSystemTest, SweepReportsAFailedRemoval) {
  const std::string dead = kJob + "/ckpt-4.tmp-99999999-0";
  STRATA_ASSERT_OK(fs_.CreateDir(dead));
  // Put back instead of removed: the rename fails.
  const std::string dead_old = kJob + "/ckpt-5.old-99999999-1";
  STRATA_ASSERT_OK(fs_.CreateDir(dead_old));
  STRATA_ASSERT_OK(fs_.WriteFile(dead_old + "/manifest.json", "{}"));
  fs_.FailRenames([](const std::string&, const std::string&) { return true; },
                  absl::UnavailableError("Input/output error"));
  EXPECT_THAT(SweepCheckpointTemporaries(kRoot, &fs_),
              StatusIsWithMessage(absl::StatusCode::kInternal,
                                  "cannot rename " + dead_old + " to " + kJob +
                                      "/ckpt-5: Input/output error"));
  EXPECT_EQ(TypeOf(dead_old), FileType::kDirectory);
  EXPECT_EQ(TypeOf(kJob + "/ckpt-5"), FileType::kMissing);
}

}  // namespace
}  // namespace strata

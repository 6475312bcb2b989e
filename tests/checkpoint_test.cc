#include "checkpoint/checkpoint.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the test temp dir, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "/checkpoint_test.XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    char* made = ::mkdtemp(buf.data());
    EXPECT_NE(made, nullptr) << std::strerror(errno);
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::shared_ptr<const Buffer> FloatBuffer(const std::vector<float>& values) {
  auto buffer = Buffer::Allocate(values.size() * sizeof(float));
  std::memcpy(buffer->data(), values.data(), buffer->size());
  return buffer;
}

std::vector<float> Floats(const Buffer& buffer) {
  auto span = buffer.span<float>();
  return std::vector<float>(span.begin(), span.end());
}

Checkpoint MakeCheckpoint(float base) {
  Checkpoint ckpt;
  ckpt.extra = {{"step", 120}, {"job", "mnist"}};

  CheckpointVariable kernel;
  kernel.name = "dense/kernel";
  kernel.dtype = DType::kFloat32;
  kernel.shape = {2, 3};
  kernel.value =
      FloatBuffer({base, base + 1, base + 2, base + 3, base + 4, base + 5});
  kernel.slots.emplace_back("m",
                            FloatBuffer({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}));
  kernel.slots.emplace_back("v", FloatBuffer({1, 2, 3, 4, 5, 6}));
  kernel.meta = {{"version", 7}, {"initializer", "glorot_uniform"}};
  ckpt.variables.push_back(kernel);

  CheckpointVariable step;
  step.name = "global_step";
  step.dtype = DType::kInt64;
  step.shape = {};
  auto step_buffer = Buffer::Allocate(sizeof(int64_t));
  step_buffer->span<int64_t>()[0] = 120;
  step.value = step_buffer;
  ckpt.variables.push_back(step);

  CheckpointVariable empty;
  empty.name = "empty";
  empty.dtype = DType::kFloat64;
  empty.shape = {0, 4};
  empty.value = Buffer::Allocate(0);
  ckpt.variables.push_back(empty);
  return ckpt;
}

// Directory entries of `dir` other than the checkpoint itself.
std::vector<std::string> Leftovers(const std::string& dir,
                                   const std::string& keep) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name != keep) names.push_back(name);
  }
  return names;
}

void OverwriteByte(const std::string& file, std::streamoff offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.is_open()) << file;
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(offset);
  f.write(&c, 1);
}

TEST(CheckpointTest, RoundTripsValuesSlotsAndMeta) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ckpt";
  Checkpoint original = MakeCheckpoint(1.0f);
  absl::StatusOr<int64_t> written = WriteCheckpoint(path, original);
  STRATA_ASSERT_OK(written);
  EXPECT_EQ(*written, 3 * 6 * 4 + 8);

  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  STRATA_ASSERT_OK(read);
  EXPECT_EQ(read->extra, original.extra);
  ASSERT_EQ(read->variables.size(), 3u);

  const CheckpointVariable& kernel = read->variables[0];
  EXPECT_EQ(kernel.name, "dense/kernel");
  EXPECT_EQ(kernel.dtype, DType::kFloat32);
  EXPECT_EQ(kernel.shape, (Shape{2, 3}));
  EXPECT_EQ(kernel.meta, original.variables[0].meta);
  EXPECT_EQ(Floats(*kernel.value), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  ASSERT_EQ(kernel.slots.size(), 2u);
  EXPECT_EQ(kernel.slots[0].first, "m");
  EXPECT_EQ(Floats(*kernel.slots[0].second),
            (std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}));
  EXPECT_EQ(kernel.slots[1].first, "v");
  EXPECT_EQ(Floats(*kernel.slots[1].second),
            (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(kernel.value->data()) % 64, 0u);

  const CheckpointVariable& step = read->variables[1];
  EXPECT_EQ(step.dtype, DType::kInt64);
  EXPECT_TRUE(step.shape.empty());
  EXPECT_EQ(step.value->span<int64_t>()[0], 120);
  EXPECT_TRUE(step.slots.empty());
  EXPECT_TRUE(step.meta.is_null());

  const CheckpointVariable& empty = read->variables[2];
  EXPECT_EQ(empty.shape, (Shape{0, 4}));
  EXPECT_EQ(empty.value->size(), 0u);

  EXPECT_TRUE(Leftovers(tmp.path(), "ckpt").empty());
}

TEST(CheckpointTest, ManifestLayout) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ckpt";
  STRATA_ASSERT_OK(WriteCheckpoint(path, MakeCheckpoint(0)));
  std::ifstream in(path + "/manifest.json");
  nlohmann::json manifest = nlohmann::json::parse(in);
  EXPECT_EQ(manifest["format"], "strata-checkpoint-v1");
  EXPECT_EQ(manifest["extra"]["step"], 120);
  const auto& kernel = manifest["variables"][0];
  EXPECT_EQ(kernel["name"], "dense/kernel");
  EXPECT_EQ(kernel["dtype"], "float32");
  EXPECT_EQ(kernel["shape"], nlohmann::json({2, 3}));
  ASSERT_EQ(kernel["tensors"].size(), 3u);
  EXPECT_EQ(kernel["tensors"][0]["role"], "value");
  EXPECT_EQ(kernel["tensors"][0]["file"], "0.bin");
  EXPECT_EQ(kernel["tensors"][0]["bytes"], 24);
  EXPECT_TRUE(kernel["tensors"][0]["crc32c"].is_number_unsigned());
  EXPECT_EQ(kernel["tensors"][1]["role"], "m");
  EXPECT_EQ(kernel["tensors"][2]["role"], "v");
  EXPECT_EQ(fs::file_size(path + "/0.bin"), 24u);
}

TEST(CheckpointTest, OverwritesExistingCheckpoint) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ckpt";
  STRATA_ASSERT_OK(WriteCheckpoint(path, MakeCheckpoint(1.0f)));
  Checkpoint second = MakeCheckpoint(100.0f);
  second.variables.pop_back();  // fewer files than before
  second.extra = {{"step", 240}};
  STRATA_ASSERT_OK(WriteCheckpoint(path, second));

  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  STRATA_ASSERT_OK(read);
  EXPECT_EQ(read->extra["step"], 240);
  ASSERT_EQ(read->variables.size(), 2u);
  EXPECT_EQ(Floats(*read->variables[0].value),
            (std::vector<float>{100, 101, 102, 103, 104, 105}));
  // The old checkpoint's fifth payload is gone with it.
  EXPECT_TRUE(fs::exists(path + "/3.bin"));
  EXPECT_FALSE(fs::exists(path + "/4.bin"));
  EXPECT_TRUE(Leftovers(tmp.path(), "ckpt").empty());
}

TEST(CheckpointTest, CreatesParentDirectoriesAndAcceptsTrailingSlash) {
  TempDir tmp;
  const std::string path = tmp.path() + "/a/b/ckpt/";
  STRATA_ASSERT_OK(WriteCheckpoint(path, MakeCheckpoint(0)));
  STRATA_ASSERT_OK(ReadCheckpoint(path));
  STRATA_ASSERT_OK(ReadCheckpoint(tmp.path() + "/a/b/ckpt"));
  EXPECT_TRUE(Leftovers(tmp.path() + "/a/b", "ckpt").empty());
}

TEST(CheckpointTest, EmptyCheckpoint) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ckpt";
  absl::StatusOr<int64_t> written = WriteCheckpoint(path, Checkpoint{});
  STRATA_ASSERT_OK(written);
  EXPECT_EQ(*written, 0);
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(path);
  STRATA_ASSERT_OK(read);
  EXPECT_TRUE(read->variables.empty());
  EXPECT_TRUE(read->extra.is_null());
}

TEST(CheckpointTest, FlippedByteIsDataLossNamingFile) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ckpt";
  STRATA_ASSERT_OK(WriteCheckpoint(path, MakeCheckpoint(1.0f)));
  OverwriteByte(path + "/1.bin", 5);
  EXPECT_THAT(ReadCheckpoint(path),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  path + "/1.bin: CRC32C mismatch"));
}

TEST(CheckpointTest, TruncatedPayloadIsDataLoss) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ckpt";
  STRATA_ASSERT_OK(WriteCheckpoint(path, MakeCheckpoint(1.0f)));
  fs::resize_file(path + "/2.bin", 10);
  EXPECT_THAT(ReadCheckpoint(path),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  path + "/2.bin: size is 10 bytes, the "
                                         "manifest says 24 (truncated)"));
}

TEST(CheckpointTest, GrownPayloadIsDataLoss) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ckpt";
  STRATA_ASSERT_OK(WriteCheckpoint(path, MakeCheckpoint(1.0f)));
  fs::resize_file(path + "/3.bin", 9);
  EXPECT_THAT(ReadCheckpoint(path),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  path + "/3.bin: size is 9 bytes"));
}

TEST(CheckpointTest, DeletedPayloadIsDataLoss) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ckpt";
  STRATA_ASSERT_OK(WriteCheckpoint(path, MakeCheckpoint(1.0f)));
  fs::remove(path + "/0.bin");
  EXPECT_THAT(ReadCheckpoint(path),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  path + "/0.bin: payload file is missing"));
}

TEST(CheckpointTest, MissingManifestIsNotFound) {
  TempDir tmp;
  EXPECT_THAT(ReadCheckpoint(tmp.path() + "/nothing"),
              StatusIs(absl::StatusCode::kNotFound));
  const std::string path = tmp.path() + "/ckpt";
  STRATA_ASSERT_OK(WriteCheckpoint(path, MakeCheckpoint(1.0f)));
  fs::remove(path + "/manifest.json");
  EXPECT_THAT(
      ReadCheckpoint(path),
      StatusIsWithMessage(absl::StatusCode::kNotFound, "manifest.json"));
}

void WriteManifest(const std::string& path, const std::string& text) {
  std::ofstream out(path + "/manifest.json", std::ios::trunc);
  out << text;
}

TEST(CheckpointTest, CorruptManifestIsDataLoss) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ckpt";
  STRATA_ASSERT_OK(WriteCheckpoint(path, MakeCheckpoint(1.0f)));
  const std::string manifest = path + "/manifest.json";

  WriteManifest(path, "{\"format\": \"strata-checkpoint-v1\", \"vari");
  EXPECT_THAT(ReadCheckpoint(path),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  manifest + ": invalid JSON"));

  WriteManifest(path, "");
  EXPECT_THAT(ReadCheckpoint(path),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  manifest + ": invalid JSON"));

  WriteManifest(path, R"({"format":"other","variables":[]})");
  EXPECT_THAT(ReadCheckpoint(path),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  "unsupported format \"other\""));
}

TEST(CheckpointTest, BadManifestFieldsAreDataLoss) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ckpt";
  STRATA_ASSERT_OK(WriteCheckpoint(path, MakeCheckpoint(1.0f)));
  std::ifstream in(path + "/manifest.json");
  const nlohmann::json good = nlohmann::json::parse(in);

  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& m) { m["variables"][0]["dtype"] = "float16"; },
       "variables[0] ('dense/kernel').dtype: unknown dtype 'float16'"},
      {[](nlohmann::json& m) {
         m["variables"][0]["shape"] = {2, -3};
       },
       "variables[0] ('dense/kernel').shape has a dimension"},
      {[](nlohmann::json& m) {
         m["variables"][0]["shape"] = {2, 4};
       },
       "variables[0] ('dense/kernel').tensors[0].bytes is 24, but float32 "
       "[2, 4] needs 32"},
      {[](nlohmann::json& m) {
         m["variables"][0]["tensors"][0]["file"] = "../escape.bin";
       },
       "tensors[0].file is not a plain file name"},
      {[](nlohmann::json& m) {
         m["variables"][0]["tensors"][1]["role"] = "value";
       },
       "role 'value' appears twice"},
      {[](nlohmann::json& m) { m["variables"][0]["tensors"].erase(0); },
       "has no tensor with role \"value\""},
      {[](nlohmann::json& m) { m["variables"][1]["name"] = "dense/kernel"; },
       "variable 'dense/kernel' appears twice"},
      {[](nlohmann::json& m) {
         m["variables"][0]["tensors"][0]["crc32c"] = -1;
       },
       "crc32c is not a 32-bit unsigned integer"},
      {[](nlohmann::json& m) { m.erase("variables"); },
       "\"variables\" is not an array"},
  };
  for (const Case& c : cases) {
    nlohmann::json m = good;
    c.edit(m);
    WriteManifest(path, m.dump());
    EXPECT_THAT(ReadCheckpoint(path),
                StatusIsWithMessage(absl::StatusCode::kDataLoss, c.message))
        << c.message;
  }
  WriteManifest(path, good.dump());
  STRATA_ASSERT_OK(ReadCheckpoint(path));
}

TEST(CheckpointTest, RejectsInconsistentInputWithoutWriting) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ckpt";

  Checkpoint bad_size = MakeCheckpoint(0);
  bad_size.variables[0].shape = {3, 3};
  EXPECT_THAT(WriteCheckpoint(path, bad_size),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "buffer holds 24 bytes, but float32 [3, 3] "
                                  "needs 36"));

  Checkpoint bad_slot = MakeCheckpoint(0);
  bad_slot.variables[0].slots[1].second = FloatBuffer({1});
  EXPECT_THAT(WriteCheckpoint(path, bad_slot),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "slot 'v': buffer holds 4 bytes"));

  Checkpoint value_slot = MakeCheckpoint(0);
  value_slot.variables[0].slots[0].first = "value";
  EXPECT_THAT(WriteCheckpoint(path, value_slot),
              StatusIs(absl::StatusCode::kInvalidArgument));

  Checkpoint duplicate = MakeCheckpoint(0);
  duplicate.variables.push_back(duplicate.variables[0]);
  EXPECT_THAT(
      WriteCheckpoint(path, duplicate),
      StatusIsWithMessage(absl::StatusCode::kInvalidArgument, "appears twice"));

  Checkpoint no_value = MakeCheckpoint(0);
  no_value.variables[1].value = nullptr;
  EXPECT_THAT(WriteCheckpoint(path, no_value),
              StatusIs(absl::StatusCode::kInvalidArgument));

  Checkpoint bad_dtype = MakeCheckpoint(0);
  bad_dtype.variables[1].dtype = DType::kInvalid;
  EXPECT_THAT(WriteCheckpoint(path, bad_dtype),
              StatusIs(absl::StatusCode::kInvalidArgument));

  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(Leftovers(tmp.path(), "").empty());
}

TEST(CheckpointTest, IoFailureIsInternalAndLeavesNoTempDir) {
  TempDir tmp;
  // The parent "directory" is a regular file, so nothing can be created.
  const std::string blocker = tmp.path() + "/file";
  std::ofstream(blocker) << "x";
  EXPECT_THAT(WriteCheckpoint(blocker + "/ckpt", MakeCheckpoint(0)),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(Leftovers(tmp.path(), ""), std::vector<std::string>{"file"});
}

TEST(CheckpointTest, DeleteRemovesOnlyCheckpoints) {
  TempDir dir;
  const std::string ckpt = dir.path() + "/job/ckpt-4";
  STRATA_ASSERT_OK(WriteCheckpoint(ckpt, MakeCheckpoint(1)).status());
  absl::StatusOr<bool> deleted = DeleteCheckpoint(ckpt);
  STRATA_ASSERT_OK(deleted.status());
  EXPECT_TRUE(*deleted);
  EXPECT_FALSE(fs::exists(ckpt));
  // Gone already: nothing to do.
  deleted = DeleteCheckpoint(ckpt);
  STRATA_ASSERT_OK(deleted.status());
  EXPECT_FALSE(*deleted);
  // A directory that is no checkpoint is left alone.
  const std::string other = dir.path() + "/job/data";
  fs::create_directories(other);
  std::ofstream(other + "/keep.txt") << "x";
  deleted = DeleteCheckpoint(other);
  STRATA_ASSERT_OK(deleted.status());
  EXPECT_FALSE(*deleted);
  EXPECT_TRUE(fs::exists(other + "/keep.txt"));
}

TEST(CheckpointTest, SweepRemovesWhatKilledWritersLeft) {
  TempDir dir;
  const std::string job = dir.path() + "/job";
  STRATA_ASSERT_OK(WriteCheckpoint(job + "/ckpt-2", MakeCheckpoint(1)).status());
  // A pid no process has (above the kernel's pid_max), this process's own
  // (a restarted container's predecessor), and a live one (the parent).
  const std::string dead = job + "/ckpt-4.tmp-99999999-0";
  const std::string dead_old = job + "/ckpt-2.old-99999999-3";
  const std::string own =
      dir.path() + "/ckpt-9.tmp-" + std::to_string(::getpid()) + "-1";
  const std::string live =
      job + "/ckpt-6.tmp-" + std::to_string(::getppid()) + "-0";
  const std::string not_ours = job + "/notes.tmp-x-1";
  for (const std::string& d : {dead, dead_old, own, live, not_ours}) {
    fs::create_directories(d);
    std::ofstream(d + "/0.bin") << "partial";
  }
  absl::StatusOr<int> swept = SweepCheckpointTemporaries(dir.path());
  STRATA_ASSERT_OK(swept.status());
  EXPECT_EQ(*swept, 3);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(dead_old));
  EXPECT_FALSE(fs::exists(own));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(not_ours));
  STRATA_ASSERT_OK(ReadCheckpoint(job + "/ckpt-2").status());
  // Killed between moving ckpt-3 aside and its successor in: ckpt-3 comes
  // back, the half-moved successor goes.
  STRATA_ASSERT_OK(WriteCheckpoint(job + "/ckpt-3", MakeCheckpoint(2)).status());
  fs::rename(job + "/ckpt-3", job + "/ckpt-3.old-99999999-5");
  fs::create_directories(job + "/ckpt-3.tmp-99999999-5");
  swept = SweepCheckpointTemporaries(dir.path());
  STRATA_ASSERT_OK(swept.status());
  EXPECT_EQ(*swept, 1);
  STRATA_ASSERT_OK(ReadCheckpoint(job + "/ckpt-3").status());
  EXPECT_FALSE(fs::exists(job + "/ckpt-3.old-99999999-5"));
  // Nothing there: nothing to do.
  swept = SweepCheckpointTemporaries(dir.path() + "/none");
  STRATA_ASSERT_OK(swept.status());
  EXPECT_EQ(*swept, 0);
}

}  // namespace
}  // namespace strata

// LocalFileSystem on a temporary directory and the InMemoryFileSystem fake.
#include "common/file_system.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string NewDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/file_system_test_" +
                          std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  return dir;
}

TEST(LocalFileSystemTest, WritesReadsAndReplacesAtomically) {
  FileSystem* local = LocalFileSystem();
  ASSERT_EQ(local, LocalFileSystem());
  const std::string dir = NewDir("write");
  ASSERT_TRUE(local->CreateDirs(dir + "/a/b").ok());
  ASSERT_TRUE(local->CreateDirs(dir + "/a/b").ok());  // exists: no error
  const std::string path = dir + "/a/b/state.json";
  EXPECT_FALSE(local->FileExists(path));
  EXPECT_EQ(local->ReadFile(path).status().code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(local->WriteFileAtomically(path, "first").ok());
  EXPECT_TRUE(local->FileExists(path));
  EXPECT_EQ(*local->ReadFile(path), "first");
  ASSERT_TRUE(local->WriteFileAtomically(path, std::string("x\0y", 3)).ok());
  EXPECT_EQ(*local->ReadFile(path), std::string("x\0y", 3));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  fs::remove_all(dir);
}

TEST(LocalFileSystemTest, BareNameWritesInTheWorkingDirectory) {
  const std::string dir = NewDir("bare");
  ASSERT_TRUE(LocalFileSystem()->CreateDirs(dir).ok());
  const fs::path old = fs::current_path();
  fs::current_path(dir);
  EXPECT_TRUE(LocalFileSystem()->WriteFileAtomically("bare.txt", "b").ok());
  fs::current_path(old);
  EXPECT_EQ(*LocalFileSystem()->ReadFile(dir + "/bare.txt"), "b");
  fs::remove_all(dir);
}

TEST(LocalFileSystemTest, FailuresAreUnavailableAndNameTheStep) {
  const std::string dir = NewDir("fail");
  absl::Status s =
      LocalFileSystem()->WriteFileAtomically(dir + "/missing/f", "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message().rfind("open " + dir + "/missing/f.tmp: ", 0), 0u)
      << s;

  // A file where a directory should be.
  ASSERT_TRUE(LocalFileSystem()->CreateDirs(dir).ok());
  ASSERT_TRUE(LocalFileSystem()->WriteFileAtomically(dir + "/file", "").ok());
  s = LocalFileSystem()->CreateDirs(dir + "/file/sub");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(s.message().empty());
  fs::remove_all(dir);
}

TEST(InMemoryFileSystemTest, WritesReadsAndRecords) {
  InMemoryFileSystem mem;
  EXPECT_TRUE(mem.CreateDirs("/d").ok());
  EXPECT_FALSE(mem.FileExists("/d/f"));
  EXPECT_EQ(mem.ReadFile("/d/f").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(mem.WriteFileAtomically("/d/f", "one").ok());
  ASSERT_TRUE(mem.WriteFileAtomically("/d/g", "two").ok());
  ASSERT_TRUE(mem.WriteFileAtomically("/d/f", "three").ok());
  EXPECT_TRUE(mem.FileExists("/d/f"));
  EXPECT_EQ(*mem.ReadFile("/d/f"), "three");
  EXPECT_EQ(*mem.ReadFile("/d/g"), "two");
  EXPECT_EQ(mem.Writes(), (std::vector<std::string>{"/d/f", "/d/g", "/d/f"}));
  // Nothing on the real disk.
  EXPECT_FALSE(fs::exists("/d/f"));
}

TEST(InMemoryFileSystemTest, FailWritesFailsUntilCleared) {
  InMemoryFileSystem mem;
  ASSERT_TRUE(mem.WriteFileAtomically("f", "old").ok());
  mem.FailWrites(absl::UnavailableError("disk full"));
  absl::Status s = mem.WriteFileAtomically("f", "new");
  EXPECT_EQ(s, absl::UnavailableError("disk full"));
  EXPECT_EQ(*mem.ReadFile("f"), "old");
  EXPECT_EQ(mem.Writes().size(), 1u);
  mem.FailWrites(absl::OkStatus());
  EXPECT_TRUE(mem.WriteFileAtomically("f", "new").ok());
  EXPECT_EQ(*mem.ReadFile("f"), "new");
}

}  // namespace
}  // namespace strata

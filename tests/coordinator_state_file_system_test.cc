// CoordinatorState's state.json through an injected FileSystem: writes and
// reloads in memory, write failures as UNAVAILABLE, a corrupt file as
// DATA_LOSS. Fake clock; nothing touches the disk.
#include <memory>
#include <sstream>
#include <string>

#include "common/file_system.h"
#include "common/logging.h"
#include "coordinator/coordinator_state.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

constexpr const char* kDir = "/in-memory/coordinator";
constexpr const char* kPath = "/in-memory/coordinator/state.json";

v1::TaskId Task(const std::string& role, int index) {
  v1::TaskId t;
  t.set_role(role);
  t.set_index(index);
  return t;
}

class CoordinatorStateFileSystemTest : public ::testing::Test {
 protected:
  CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.state_dir = kDir;
    o.file_system = &fs_;
    o.clock = [this] { return now_; };
    return o;
  }

  InMemoryFileSystem fs_;
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
  std::ostringstream log_;
  Logger logger_{"coordinator", &log_};
};

TEST_F(CoordinatorStateFileSystemTest, StateIsWrittenAndReloaded) {
  auto state = CoordinatorState::Create(Options(), &logger_);
  STRATA_ASSERT_OK(state);
  EXPECT_THAT(fs_.ReadFile(kPath), StatusIs(absl::StatusCode::kNotFound));
  STRATA_ASSERT_OK((*state)->Register(Task("worker", 0), "w0:1", "a"));
  absl::StatusOr<std::string> text = fs_.ReadFile(kPath);
  STRATA_ASSERT_OK(text);
  EXPECT_THAT(*text, HasSubstr("\"incarnation\":\"a\""));
  EXPECT_THAT(fs_.Writes(), ::testing::Contains(kPath));
  const int64_t generation = (*state)->generation();

  auto reloaded = CoordinatorState::Create(Options(), &logger_);
  STRATA_ASSERT_OK(reloaded);
  EXPECT_EQ((*reloaded)->generation(), generation);
  const v1::ClusterState cluster = (*reloaded)->GetClusterState();
  ASSERT_EQ(cluster.members_size(), 1);
  EXPECT_EQ(cluster.members(0).incarnation(), "a");
  STRATA_ASSERT_OK((*reloaded)->Heartbeat(Task("worker", 0), "a"));
}

TEST_F(CoordinatorStateFileSystemTest, FailedWriteIsUnavailableAndRetried) {
  auto state = CoordinatorState::Create(Options(), &logger_);
  STRATA_ASSERT_OK(state);
  fs_.FailWrites(absl::InternalError("disk on fire"));
  auto registered = (*state)->Register(Task("worker", 0), "w0:1", "a");
  EXPECT_THAT(registered,
              StatusIsWithMessage(absl::StatusCode::kUnavailable,
                                  "cannot write coordinator state: "));
  EXPECT_THAT(registered, StatusIsWithMessage(absl::StatusCode::kUnavailable,
                                              "disk on fire"));
  // The registration holds in memory; the next Flush writes it.
  STRATA_ASSERT_OK((*state)->Heartbeat(Task("worker", 0), "a"));
  fs_.FailWrites(absl::OkStatus());
  STRATA_ASSERT_OK((*state)->Flush());
  absl::StatusOr<std::string> text = fs_.ReadFile(kPath);
  STRATA_ASSERT_OK(text);
  EXPECT_THAT(*text, HasSubstr("\"role\":\"worker\""));
}

TEST_F(CoordinatorStateFileSystemTest, CorruptStateIsDataLoss) {
  STRATA_ASSERT_OK(fs_.WriteFileAtomically(kPath, "{\"format\": 1, "));
  auto state = CoordinatorState::Create(Options(), &logger_);
  EXPECT_THAT(state, StatusIsWithMessage(absl::StatusCode::kDataLoss, kPath));
  EXPECT_THAT(state,
              StatusIsWithMessage(absl::StatusCode::kDataLoss, "is corrupt"));
}

TEST_F(CoordinatorStateFileSystemTest, NothingIsWrittenWithoutStateDir) {
  CoordinatorOptions options = Options();
  options.state_dir.clear();
  auto state = CoordinatorState::Create(options, &logger_);
  STRATA_ASSERT_OK(state);
  STRATA_ASSERT_OK((*state)->Register(Task("worker", 0), "w0:1", "a"));
  STRATA_ASSERT_OK((*state)->Flush());
  EXPECT_TRUE(fs_.Writes().empty());
}

}  // namespace
}  // namespace strata

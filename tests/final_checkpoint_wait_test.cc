// TakeFinalCheckpoint against a fake CheckpointProgress, with a fake clock
// and sleep that step time: no real waiting.
#include <csignal>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/final_checkpoint.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

// A checkpoint that is attempted after `polls_until_done` sleeps (never
// when negative).
class FakeProgress final : public CheckpointProgress {
 public:
  FakeProgress(int64_t target, int polls_until_done)
      : target_(target), polls_until_done_(polls_until_done) {}

  int64_t RequestCheckpoint() override {
    ++requests;
    return target_;
  }
  int64_t CheckpointAttempted() const override {
    return polls_until_done_ >= 0 && polls >= polls_until_done_ ? target_ : 0;
  }
  std::string LastCheckpoint() const override {
    return CheckpointAttempted() >= target_ ? "ckpt-7" : "";
  }

  int requests = 0;
  int polls = 0;

 private:
  const int64_t target_;
  const int polls_until_done_;
};

// Options whose sleep advances the fake clock and counts a poll.
FinalCheckpointOptions FakeTime(absl::Duration timeout, absl::Time* now,
                                FakeProgress* progress) {
  FinalCheckpointOptions options;
  options.timeout = timeout;
  options.poll = absl::Milliseconds(50);
  options.clock = [now] { return *now; };
  options.sleep = [now, progress](absl::Duration d) {
    *now += d;
    ++progress->polls;
  };
  return options;
}

std::vector<nlohmann::json> Lines(const std::ostringstream& out) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(out.str());
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(FinalCheckpointTest, ZeroTimeoutRequestsNothing) {
  FakeProgress progress(10, 0);
  absl::Time now = absl::UnixEpoch();
  std::ostringstream out;
  Logger logger("coordinator", &out);
  FinalCheckpointResult result = TakeFinalCheckpoint(
      &progress, FakeTime(absl::ZeroDuration(), &now, &progress), &logger,
      SIGTERM);
  EXPECT_FALSE(result.requested);
  EXPECT_EQ(progress.requests, 0);
  EXPECT_TRUE(out.str().empty());
}

TEST(FinalCheckpointTest, NoneDueLogsNothing) {
  FakeProgress progress(-1, 0);
  absl::Time now = absl::UnixEpoch();
  std::ostringstream out;
  Logger logger("coordinator", &out);
  FinalCheckpointResult result = TakeFinalCheckpoint(
      &progress, FakeTime(absl::Seconds(30), &now, &progress), &logger,
      SIGTERM);
  EXPECT_EQ(progress.requests, 1);
  EXPECT_FALSE(result.requested);
  EXPECT_EQ(progress.polls, 0);
  EXPECT_TRUE(out.str().empty());
}

TEST(FinalCheckpointTest, WaitsUntilAttempted) {
  FakeProgress progress(10, 3);
  absl::Time now = absl::UnixEpoch();
  std::ostringstream out;
  Logger logger("coordinator", &out);
  FinalCheckpointResult result = TakeFinalCheckpoint(
      &progress, FakeTime(absl::Seconds(30), &now, &progress), &logger,
      SIGTERM);
  EXPECT_TRUE(result.requested);
  EXPECT_TRUE(result.done);
  EXPECT_EQ(result.target, 10);
  EXPECT_EQ(result.steps_covered, 10);
  EXPECT_EQ(result.checkpoint, "ckpt-7");
  EXPECT_EQ(progress.polls, 3);
  EXPECT_EQ(now, absl::UnixEpoch() + absl::Milliseconds(150));

  std::vector<nlohmann::json> lines = Lines(out);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["event"], "final_checkpoint_started");
  EXPECT_EQ(lines[0]["signal"], SIGTERM);
  EXPECT_EQ(lines[0]["steps_completed"], 10);
  EXPECT_EQ(lines[1]["event"], "final_checkpoint");
  EXPECT_EQ(lines[1]["level"], "info");
  EXPECT_EQ(lines[1]["done"], true);
  EXPECT_EQ(lines[1]["checkpoint"], "ckpt-7");
  EXPECT_EQ(lines[1]["steps_covered"], 10);
}

TEST(FinalCheckpointTest, GivesUpAtTheTimeout) {
  FakeProgress progress(10, -1);
  absl::Time now = absl::UnixEpoch();
  std::ostringstream out;
  Logger logger("coordinator", &out);
  FinalCheckpointResult result = TakeFinalCheckpoint(
      &progress, FakeTime(absl::Seconds(1), &now, &progress), &logger,
      SIGINT);
  EXPECT_TRUE(result.requested);
  EXPECT_FALSE(result.done);
  EXPECT_EQ(result.steps_covered, 0);
  EXPECT_EQ(result.checkpoint, "");
  EXPECT_EQ(progress.polls, 20);  // 1 s in 50 ms polls
  EXPECT_EQ(now, absl::UnixEpoch() + absl::Seconds(1));

  std::vector<nlohmann::json> lines = Lines(out);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["signal"], SIGINT);
  EXPECT_EQ(lines[1]["event"], "final_checkpoint");
  EXPECT_EQ(lines[1]["level"], "warning");
  EXPECT_EQ(lines[1]["done"], false);
}

}  // namespace
}  // namespace strata

// A replica's state as a WorkerState (snapshot, load, final-state export)
// and the epoch progress line.
#include "worker/replica_state.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/progress.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

StateLayout Layout() {
  StateLayout layout;
  layout.names = {"dense/kernel", "dense/bias"};
  layout.sizes = {4, 2};
  layout.slot_names = {"m", "v"};
  return layout;
}

std::vector<std::vector<float>> Params() { return {{1, 2, 3, 4}, {5, 6}}; }

std::vector<std::vector<std::vector<float>>> Slots() {
  return {{{0.1f, 0.2f, 0.3f, 0.4f}, {1, 1, 1, 1}}, {{0.5f, 0.6f}, {2, 2}}};
}

TEST(ReplicaStateTest, SnapshotNamesVariablesAndSlots) {
  const v1::WorkerState state =
      SnapshotReplicaState(Layout(), 42, Params(), Slots());
  EXPECT_EQ(state.step(), 42);
  std::vector<std::string> names;
  for (const v1::NamedTensor& t : state.tensors()) {
    names.push_back(t.name());
    EXPECT_EQ(t.dtype(), v1::DT_FLOAT32);
  }
  EXPECT_THAT(names, ElementsAre("dense/kernel", "dense/kernel/m",
                                 "dense/kernel/v", "dense/bias",
                                 "dense/bias/m", "dense/bias/v"));
}

TEST(ReplicaStateTest, LoadRestoresTheSnapshot) {
  const v1::WorkerState state =
      SnapshotReplicaState(Layout(), 3, Params(), Slots());
  std::vector<std::vector<float>> params = {std::vector<float>(4),
                                            std::vector<float>(2)};
  std::vector<std::vector<std::vector<float>>> slots;
  STRATA_ASSERT_OK(LoadReplicaState(state, Layout(), &params, &slots));
  EXPECT_EQ(params, Params());
  EXPECT_EQ(slots, Slots());
}

TEST(ReplicaStateTest, MissingTensorIsDataLoss) {
  v1::WorkerState state = SnapshotReplicaState(Layout(), 3, Params(), Slots());
  state.mutable_tensors()->RemoveLast();
  std::vector<std::vector<float>> params = Params();
  std::vector<std::vector<std::vector<float>>> slots;
  EXPECT_THAT(LoadReplicaState(state, Layout(), &params, &slots),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  "lacks tensor 'dense/bias/v'"));
}

TEST(ReplicaStateTest, WrongSizeIsDataLoss) {
  v1::WorkerState state = SnapshotReplicaState(Layout(), 3, Params(), Slots());
  state.mutable_tensors(0)->set_data(std::string(12, '\0'));
  std::vector<std::vector<float>> params = Params();
  std::vector<std::vector<std::vector<float>>> slots;
  EXPECT_THAT(LoadReplicaState(state, Layout(), &params, &slots),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  "'dense/kernel' has 12 bytes, expected 16"));
}

TEST(ReplicaStateTest, ExportWritesFinalStateAndLogs) {
  InMemoryFileSystem fs;
  std::ostringstream log;
  Logger logger("worker:0", &log);
  const v1::WorkerState state =
      SnapshotReplicaState(Layout(), 9, Params(), Slots());
  STRATA_ASSERT_OK(ExportFinalState(&fs, &logger, "/out", state));
  EXPECT_THAT(fs.Writes(), ElementsAre("/out/final_state.pb"));
  absl::StatusOr<std::string> bytes = fs.ReadFile("/out/final_state.pb");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  v1::WorkerState read;
  ASSERT_TRUE(read.ParseFromString(*bytes));
  EXPECT_EQ(read.step(), 9);
  EXPECT_EQ(read.tensors_size(), 6);
  EXPECT_THAT(log.str(), HasSubstr("state_exported"));
  EXPECT_THAT(log.str(), HasSubstr("/out/final_state.pb"));
}

TEST(ReplicaStateTest, ExportFailureIsUnavailable) {
  InMemoryFileSystem fs;
  fs.FailWrites(absl::UnavailableError("disk full"));
  std::ostringstream log;
  Logger logger("worker:0", &log);
  EXPECT_THAT(ExportFinalState(&fs, &logger, "/out", v1::WorkerState()),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(log.str(), ::testing::Not(HasSubstr("state_exported")));
}

TEST(ProgressTest, EpochLine) {
  EpochProgress p;
  p.epoch = 3;
  p.epochs = 10;
  p.steps = 469;
  p.loss = 0.41234;
  p.accuracy = 0.85126;
  p.examples_per_second = 51234.4;
  p.seconds = 1.24;
  EXPECT_EQ(FormatEpochLine(p),
            "Epoch 3/10 - 469 steps - loss: 0.4123 - accuracy: 0.8513 - "
            "51234 examples/s - 1.2s");
  p.evaluated = true;
  p.test_loss = 0.44;
  p.test_accuracy = 0.8421;
  EXPECT_EQ(FormatEpochLine(p, "s elapsed"),
            "Epoch 3/10 - 469 steps - loss: 0.4123 - accuracy: 0.8513 - "
            "test_loss: 0.4400 - test_accuracy: 0.8421 - 51234 examples/s - "
            "1.2s elapsed");
}

}  // namespace
}  // namespace strata

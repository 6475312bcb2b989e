// One job parser: a table of bad jobs is refused with the same message by
// the coordinator's SubmitJob, `strata submit` and `local_train` (each a
// valid job but for one field).
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/logging.h"
#include "coordinator/coordinator_state.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/process_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using nlohmann::json;

constexpr std::chrono::seconds kLimit{60};  // a hang guard only

struct BadJob {
  const char* what;
  json::json_pointer field;
  json value;
  // What the one message says.
  const char* message;
};

json ValidJob(const std::string& dir) {
  return {
      {"name", "table"},
      {"model",
       {{"input_shape", {784}},
        {"layers",
         {{{"type", "dense"}, {"units", 16}, {"activation", "relu"}},
          {{"type", "dense"}, {"units", 10}, {"activation", "softmax"}}}}}},
      {"loss", "sparse_categorical_crossentropy"},
      {"optimizer", "adam"},
      {"data",
       {{"format", "idx"},
        {"train",
         {{"images", dir + "/train-images"},
          {"labels", dir + "/train-labels"}}}}},
      {"strategy", {{"type", "parameter_server"}}},
      {"batch_size", 32},
      {"epochs", 1}};
}

v1::TaskId Task(const std::string& role, int index) {
  v1::TaskId t;
  t.set_role(role);
  t.set_index(index);
  return t;
}

TEST(OneJobParserTest, BadJobsAreRefusedIdenticallyByEveryReader) {
  const std::string dir = ::testing::TempDir() + "/one_job_parser_" +
                          std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<BadJob> table = {
      {"a strategy the registry does not know", json::json_pointer("/strategy/type"),
       "default",
       "job.strategy.type: 'default' is not one of parameter_server, "
       "central_storage, multi_worker_mirrored, mirrored, one_device"},
      {"a strategy given as a string", json::json_pointer("/strategy"),
       "mirrored", "job.strategy: expected an object, got \"mirrored\""},
      {"an unknown strategy", json::json_pointer("/strategy/type"), "magic",
       "job.strategy.type: 'magic' is not one of parameter_server"},
      {"an asynchronous mirrored strategy", json::json_pointer("/strategy"),
       json{{"type", "mirrored"}, {"update", "async"}},
       "job.strategy.update: 'async' is not supported by mirrored"},
      {"an unknown collective", json::json_pointer("/strategy"),
       json{{"type", "multi_worker_mirrored"}, {"collective", "mpi"}},
       "job.strategy.collective: 'mpi' is not one of ring, ps"},
      {"a zero batch", json::json_pointer("/batch_size"), 0,
       "job.batch_size: must be >= 1, got 0"},
      {"epochs as text", json::json_pointer("/epochs"), "ten",
       "job.epochs: expected an integer, got \"ten\""},
      {"an unknown key", json::json_pointer("/epoch"), 3,
       "job: unknown key 'epoch'"},
      {"a negative checkpoint cadence",
       json::json_pointer("/checkpoint/every_steps"), -1,
       "job.checkpoint.every_steps: must be >= 0, got -1"},
      {"a fractional evaluation cadence",
       json::json_pointer("/evaluation/every_epochs"), 1.5,
       "job.evaluation.every_epochs: expected an integer, got 1.5"},
      {"a layer of no units", json::json_pointer("/model/layers/0/units"), 0,
       "job.model.layers[0].units: must be >= 1, got 0"},
      {"an unknown loss", json::json_pointer("/loss"), "hinge",
       "job.loss: 'hinge' is not one of"},
  };
  std::ostringstream log;
  Logger logger("coordinator:test", &log);
  for (size_t i = 0; i < table.size(); ++i) {
    const BadJob& bad = table[i];
    SCOPED_TRACE(bad.what);
    json job = ValidJob(dir);
    job[bad.field] = bad.value;
    const std::string text = job.dump();
    const std::string path = dir + "/job" + std::to_string(i) + ".json";
    {
      std::ofstream out(path);
      out << text;
    }

    // The coordinator, as SubmitJob receives it.
    auto state = CoordinatorState::Create(CoordinatorOptions{}, &logger);
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE((*state)->Register(Task("ps", 0), "p:1", "a").ok());
    ASSERT_TRUE((*state)->Register(Task("worker", 0), "w:1", "a").ok());
    absl::StatusOr<std::string> submitted = (*state)->SubmitJob(text, 100);
    ASSERT_FALSE(submitted.ok());
    EXPECT_EQ(submitted.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(submitted.status().message());
    EXPECT_THAT(message, HasSubstr(bad.message));
    EXPECT_EQ((*state)->GetJob().state(), v1::JobStatus::NONE);

    // The tools: exit 2, and the coordinator's message word for word.
    for (const std::vector<std::string>& args :
         std::vector<std::vector<std::string>>{
             {STRATA_BIN_DIR "/strata", "submit", "--job", path,
              "--coordinator", "127.0.0.1:1"},
             {STRATA_BIN_DIR "/local_train", "--job", path}}) {
      SCOPED_TRACE(args[0]);
      testing_util::ChildOptions options;
      options.own_process_group = true;
      const testing_util::ChildResult r =
          testing_util::RunChild(args, kLimit, options);
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_THAT(r.output, HasSubstr(message));
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata

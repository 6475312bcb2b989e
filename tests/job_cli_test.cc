// Job files that used to crash or hang the tools (a trillion-unit layer, a
// 50 MB name, 50 MB of '[', a missing data file) are refused at once by
// `local_train`, `strata launch` and `strata submit`: exit 2, a short
// message naming the field, no flood of output. The big inputs are made
// here, in a temporary directory, never committed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process_util.h"
#include "nlohmann/json.hpp"


namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// A hang guard only: every refusal takes well under a second.
constexpr std::chrono::seconds kLimit{60};
// Output of a refusal: one line. A flood is far more.
constexpr size_t kMaxOutput = 4096;
// What is kept of a child's output (its size is counted in full).
constexpr size_t kKeptOutput = 64 << 10;

// Runs `args` in its own process group, reading its output until it exits
// (the first kKeptOutput bytes kept, all counted); after kLimit kills the
// group (exit_code -1 and a test failure).
testing_util::ChildResult RunTool(std::vector<std::string> args) {
  testing_util::ChildOptions options;
  options.max_output = kKeptOutput;
  options.own_process_group = true;
  return testing_util::RunChild(std::move(args), kLimit, options);
}

// The start of `output`, for failure messages.
std::string Head(const std::string& output) { return output.substr(0, 2048); }

class JobCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::path(::testing::TempDir()) /
            ("job_cli_" +
             std::string(::testing::UnitTest::GetInstance()
                             ->current_test_info()
                             ->name()) +
             "_" + std::to_string(getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The reference model on IDX files DIR/NAME, `units` in its first layer.
  nlohmann::json Job(int64_t units = 128) const {
    return {
        {"name", "cli"},
        {"model",
         {{"input_shape", {784}},
          {"layers",
           {{{"type", "dense"}, {"units", units}, {"activation", "relu"}},
            {{"type", "dense"}, {"units", 10}, {"activation", "softmax"}}}}}},
        {"loss", "sparse_categorical_crossentropy"},
        {"optimizer", "adam"},
        {"data",
         {{"format", "idx"},
          {"train",
           {{"images", dir_ + "/train-images"},
            {"labels", dir_ + "/train-labels"}}}}},
        {"batch_size", 128},
        {"epochs", 1}};
  }

  std::string Write(const std::string& name, const std::string& text) const {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out << text;
    EXPECT_TRUE(out.good()) << path;
    return path;
  }

  // `prefix`, then `n` copies of `c`, then `suffix`, written in chunks.
  std::string WriteRepeated(const std::string& name, const std::string& prefix,
                            char c, size_t n,
                            const std::string& suffix) const {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out << prefix;
    const std::string chunk(1 << 20, c);
    for (size_t left = n; left > 0;) {
      const size_t k = std::min(left, chunk.size());
      out.write(chunk.data(), static_cast<std::streamsize>(k));
      left -= k;
    }
    out << suffix;
    EXPECT_TRUE(out.good()) << path;
    return path;
  }

  // Each tool's command line for job file `job`.
  std::vector<std::pair<std::string, std::vector<std::string>>> Tools(
      const std::string& job, bool with_submit = true) const {
    std::vector<std::pair<std::string, std::vector<std::string>>> tools = {
        {"local_train", {STRATA_BIN_DIR "/local_train", "--job", job}},
        {"strata launch",
         {STRATA_BIN_DIR "/strata", "launch", "--job", job,
          "--run-dir=" + dir_ + "/run"}},
    };
    if (with_submit) {
      tools.push_back({"strata submit",
                       {STRATA_BIN_DIR "/strata", "submit", "--job", job,
                        "--coordinator", "127.0.0.1:1"}});
    }
    return tools;
  }

  // Every tool refuses `job` with exit 2 and a short message holding each
  // of `expected`.
  void ExpectRefused(const std::string& job,
                     const std::vector<std::string>& expected,
                     bool with_submit = true) const {
    for (const auto& [name, args] : Tools(job, with_submit)) {
      SCOPED_TRACE(name);
      // Bounded: RunTool fails the test past kLimit.
      const testing_util::ChildResult r = RunTool(args);
      EXPECT_EQ(r.exit_code, 2) << Head(r.output);
      EXPECT_LT(r.output_bytes, kMaxOutput) << Head(r.output);
      for (const std::string& e : expected) {
        EXPECT_THAT(r.output, HasSubstr(e)) << Head(r.output);
      }
      // No process was started.
      EXPECT_FALSE(fs::exists(dir_ + "/run/cluster.json"));
    }
  }

  std::string dir_;
};

TEST_F(JobCliTest, TrillionUnitsAreRefusedWithTheSizeTheyNeed) {
  const std::string job = Write("units.json", Job(1000000000000).dump());
  ExpectRefused(job, {"job.model.layers[0].units: 1000000000000 units make "
                      "the model 8.0e14 parameters, needing 12.2 PiB",
                      "at most 256 GiB per worker"});
}

TEST_F(JobCliTest, ModelLargerThanThisMachineIsRefused) {
  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
                         static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  // 13744 bytes per unit of the first layer (784 inputs, adam, batch 128:
  // 16 x 795 for the parameters, 4 x 256 for the activations); aim at about
  // 1.25 x this machine, which must stay under the 256 GiB every job is held
  // to.
  const int64_t target = memory / 4 * 5;
  if (memory <= 0 || target > (int64_t{250} << 30)) {
    GTEST_SKIP() << "this machine has " << memory
                 << " bytes: no model is too large for it yet allowed";
  }
  const std::string job = Write("memory.json", Job(target / 13744).dump());
  // submit hands the job to another machine: only the ceiling applies.
  ExpectRefused(job, {"job.model.layers[0].units: ", "this machine has "},
                /*with_submit=*/false);
}

TEST_F(JobCliTest, FiftyMegabyteNameIsRefusedBySize) {
  nlohmann::json rest = Job();
  rest.erase("name");
  const std::string job =
      WriteRepeated("name.json", "{\"name\": \"", 'n', size_t{50} << 20,
                    "\", " + rest.dump().substr(1));
  ExpectRefused(job, {"job file " + job + ": ", "bytes, at most 1048576"});
  // The value is never echoed.
  const testing_util::ChildResult r = RunTool(Tools(job)[0].second);
  EXPECT_THAT(r.output, Not(HasSubstr(std::string(64, 'n'))));
}

TEST_F(JobCliTest, LongNameWithinTheFileLimitIsRefusedByItsField) {
  nlohmann::json j = Job();
  j["name"] = std::string(512 << 10, 'n');
  const std::string job = Write("name.json", j.dump());
  ExpectRefused(job, {"job.name: 524288 characters, at most 128"});
}

TEST_F(JobCliTest, FiftyMegabytesOfBracketsAreRefusedBySize) {
  const std::string job =
      WriteRepeated("brackets.json", "", '[', size_t{50} << 20, "");
  ExpectRefused(job, {"job file " + job + ": 52428800 bytes, at most "
                      "1048576"});
}

TEST_F(JobCliTest, DeepNestingIsRefused) {
  const std::string job =
      Write("deep.json", std::string(1000, '[') + std::string(1000, ']'));
  ExpectRefused(job, {"job: more than 32 nested arrays or objects"});
}

TEST_F(JobCliTest, MissingTrainingImagesAreRefusedByTheirField) {
  Write("train-labels", "labels");
  const std::string job = Write("missing.json", Job().dump());
  ExpectRefused(job, {"job.data.train.images: " + dir_ +
                      "/train-images: No such file or directory"});
}

TEST_F(JobCliTest, MissingTestLabelsAreRefusedByTheirField) {
  // Only checked for existence, never read.
  Write("train-images", "images");
  Write("train-labels", "labels");
  Write("test-images", "images");
  nlohmann::json j = Job();
  j["data"]["test"] = {{"images", dir_ + "/test-images"},
                       {"labels", dir_ + "/test-labels"}};
  const std::string job = Write("missing_test.json", j.dump());
  // submit reads only the training files (the workers read the rest).
  ExpectRefused(job,
                {"job.data.test.labels: " + dir_ +
                 "/test-labels: No such file or directory"},
                /*with_submit=*/false);
}

}  // namespace
}  // namespace strata

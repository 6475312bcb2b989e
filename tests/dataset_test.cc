#include "worker/dataset.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "job/job.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

// A fresh directory under the test temp dir, one per test.
std::string TestDir() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = ::testing::TempDir() + "/strata_dataset_test_" +
                    info->name() + "_" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  return dir;
}

void WriteFile(const std::string& path, const std::string& bytes,
               bool gzip) {
  if (gzip) {
    gzFile gz = gzopen(path.c_str(), "wb");
    ASSERT_NE(gz, nullptr) << path;
    ASSERT_EQ(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    ASSERT_EQ(gzclose(gz), Z_OK);
  } else {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

void PutBigEndian(uint32_t v, std::string* out) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

// n images of rows x cols; pixel (i, k) = (i * 16 + k) % 256.
std::string IdxImages(uint32_t n, uint32_t rows, uint32_t cols) {
  std::string s;
  PutBigEndian(0x00000803, &s);
  PutBigEndian(n, &s);
  PutBigEndian(rows, &s);
  PutBigEndian(cols, &s);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t k = 0; k < rows * cols; ++k) {
      s.push_back(static_cast<char>((i * 16 + k) % 256));
    }
  }
  return s;
}

// n labels; label i = i % 3.
std::string IdxLabels(uint32_t n) {
  std::string s;
  PutBigEndian(0x00000801, &s);
  PutBigEndian(n, &s);
  for (uint32_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i % 3));
  return s;
}

void ExpectSmallIdx(const Dataset& d, int64_t n) {
  EXPECT_EQ(d.size, n);
  EXPECT_EQ(d.features, 6);
  ASSERT_EQ(d.x.size(), static_cast<size_t>(n * 6));
  ASSERT_EQ(d.labels.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(d.labels[i], i % 3);
    for (int64_t k = 0; k < 6; ++k) {
      EXPECT_FLOAT_EQ(d.x[i * 6 + k], static_cast<float>(i * 16 + k) / 2.0f);
    }
  }
}

TEST(DatasetTest, LoadsPlainAndGzipIdx) {
  const std::string dir = TestDir();
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string images = dir + (gzip ? "/images.gz" : "/images");
    const std::string labels = dir + (gzip ? "/labels.gz" : "/labels");
    WriteFile(images, IdxImages(5, 2, 3), gzip);
    WriteFile(labels, IdxLabels(5), gzip);
    absl::StatusOr<Dataset> d = LoadIdx(images, labels, 2.0, 0);
    STRATA_ASSERT_OK(d);
    ExpectSmallIdx(*d, 5);
    EXPECT_EQ(d->num_classes, 3);

    absl::StatusOr<Dataset> limited = LoadIdx(images, labels, 2.0, 3);
    STRATA_ASSERT_OK(limited);
    ExpectSmallIdx(*limited, 3);

    // A limit above the count keeps everything.
    absl::StatusOr<Dataset> all = LoadIdx(images, labels, 2.0, 100);
    STRATA_ASSERT_OK(all);
    EXPECT_EQ(all->size, 5);

    EXPECT_EQ(CountIdxExamples(images).value_or(-1), 5);
    EXPECT_EQ(CountIdxExamples(labels).value_or(-1), 5);
  }
}

TEST(DatasetTest, MissingFileIsNotFound) {
  const std::string dir = TestDir();
  WriteFile(dir + "/labels", IdxLabels(5), false);
  EXPECT_THAT(LoadIdx(dir + "/nope", dir + "/labels", 1.0, 0),
              StatusIsWithMessage(absl::StatusCode::kNotFound, "/nope"));
  EXPECT_THAT(CountIdxExamples(dir + "/nope"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(DatasetTest, BadMagicNamesFile) {
  const std::string dir = TestDir();
  WriteFile(dir + "/images", IdxImages(5, 2, 3), false);
  WriteFile(dir + "/labels", IdxLabels(5), false);
  // Images and labels swapped.
  absl::StatusOr<Dataset> d =
      LoadIdx(dir + "/labels", dir + "/images", 1.0, 0);
  EXPECT_THAT(d, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr(dir + "/labels: bad magic 0x00000801; expected IDX "
                              "images: 0x00000803 (unsigned bytes), "
                              "0x00000D02 or 0x00000D03 (float32)"));
  WriteFile(dir + "/text", "hello world, not IDX", true);
  EXPECT_THAT(CountIdxExamples(dir + "/text"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  dir + "/text: bad magic"));
}

// WriteIdx's float32 / int32 pair reads back bit for bit, limited and
// scaled as byte IDX files are; bad values are refused naming the example.
TEST(DatasetTest, FloatIdxWrittenReadsBackExactly) {
  const std::string dir = TestDir();
  Dataset data;
  data.size = 3;
  data.features = 2;
  data.x = {0.1f, -2.5f, 1e-30f, 3.25f, 7.0f, -0.0f};
  data.labels = {2, 0, 70000};
  ASSERT_TRUE(WriteIdx(data, dir + "/fx", dir + "/fy").ok());
  absl::StatusOr<Dataset> back = LoadIdx(dir + "/fx", dir + "/fy", 1.0, 0);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->x, data.x);
  EXPECT_EQ(back->labels, data.labels);
  EXPECT_EQ(back->features, 2);
  EXPECT_EQ(back->num_classes, 70001);
  EXPECT_EQ(CountIdxExamples(dir + "/fx").value_or(-1), 3);
  back = LoadIdx(dir + "/fx", dir + "/fy", 2.0, 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->x, (std::vector<float>{0.05f, -1.25f, 5e-31f, 1.625f}));
  EXPECT_EQ(back->labels, (std::vector<int32_t>{2, 0}));

  Dataset bad = data;
  bad.x[3] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(WriteIdx(bad, dir + "/nx", dir + "/ny").ok());
  EXPECT_THAT(LoadIdx(dir + "/nx", dir + "/ny", 1.0, 0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  dir + "/nx: example 1 holds a non-finite"));
  bad = data;
  bad.labels[1] = -4;
  ASSERT_TRUE(WriteIdx(bad, dir + "/mx", dir + "/my").ok());
  EXPECT_THAT(LoadIdx(dir + "/mx", dir + "/my", 1.0, 0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  dir + "/my: label 1 is negative (-4)"));
  bad = data;
  bad.labels.pop_back();
  EXPECT_THAT(WriteIdx(bad, dir + "/bx", dir + "/by"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "inconsistent dataset"));
  // Truncated float payload.
  std::ifstream in(dir + "/fx", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  WriteFile(dir + "/cut", bytes.substr(0, bytes.size() - 3), false);
  EXPECT_THAT(LoadIdx(dir + "/cut", dir + "/fy", 1.0, 0),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(DatasetTest, TruncatedFilesAreDataLoss) {
  const std::string dir = TestDir();
  const std::string images = IdxImages(5, 2, 3);
  WriteFile(dir + "/labels", IdxLabels(5), false);

  // Payload cut short, plain and gzip.
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string path = dir + (gzip ? "/short.gz" : "/short");
    WriteFile(path, images.substr(0, images.size() - 4), gzip);
    EXPECT_THAT(LoadIdx(path, dir + "/labels", 1.0, 0),
                StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                    path + ": truncated"));
  }
  // Header cut short.
  WriteFile(dir + "/header", images.substr(0, 10), false);
  EXPECT_THAT(LoadIdx(dir + "/header", dir + "/labels", 1.0, 0),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  dir + "/header: truncated IDX header"));
  EXPECT_THAT(CountIdxExamples(dir + "/header"),
              StatusIs(absl::StatusCode::kDataLoss));
  WriteFile(dir + "/empty", "", false);
  EXPECT_THAT(CountIdxExamples(dir + "/empty"),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  "truncated IDX header"));

  // A gzip stream cut in the middle of the compressed bytes.
  WriteFile(dir + "/full.gz", images, true);
  const std::string gz = ReadFile(dir + "/full.gz");
  WriteFile(dir + "/cut.gz", gz.substr(0, gz.size() - 12), false);
  EXPECT_THAT(LoadIdx(dir + "/cut.gz", dir + "/labels", 1.0, 0),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  dir + "/cut.gz"));

  // Trailing bytes after the announced examples.
  WriteFile(dir + "/long", images + "xyz", false);
  EXPECT_THAT(LoadIdx(dir + "/long", dir + "/labels", 1.0, 0),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  dir + "/long: unexpected data after"));
}

TEST(DatasetTest, CountMismatchNamesBothFiles) {
  const std::string dir = TestDir();
  WriteFile(dir + "/images", IdxImages(5, 2, 3), false);
  WriteFile(dir + "/labels", IdxLabels(4), false);
  absl::StatusOr<Dataset> d = LoadIdx(dir + "/images", dir + "/labels", 1, 0);
  EXPECT_THAT(d, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr(dir + "/images holds 5 images but " + dir +
                        "/labels holds 4 labels"));
}

TEST(DatasetTest, BadScaleOrLimit) {
  const std::string dir = TestDir();
  WriteFile(dir + "/images", IdxImages(5, 2, 3), false);
  WriteFile(dir + "/labels", IdxLabels(5), false);
  EXPECT_THAT(LoadIdx(dir + "/images", dir + "/labels", 0.0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(LoadIdx(dir + "/images", dir + "/labels", 1.0, -1),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DatasetTest, LoadsCsv) {
  const std::string dir = TestDir();
  WriteFile(dir + "/a.csv",
            "label,f1,f2\r\n"
            "1, 2.5, 4\r\n"
            "0,-1,1e1\r\n"
            "\r\n"
            "2,0,0\r\n",
            false);
  absl::StatusOr<Dataset> d = LoadCsv(dir + "/a.csv", 0, true, 0, 2.0);
  STRATA_ASSERT_OK(d);
  EXPECT_EQ(d->size, 3);
  EXPECT_EQ(d->features, 2);
  EXPECT_THAT(d->x, ElementsAre(1.25f, 2.0f, -0.5f, 5.0f, 0.0f, 0.0f));
  EXPECT_THAT(d->labels, ElementsAre(1, 0, 2));
  EXPECT_EQ(d->num_classes, 3);

  // Label in the last column, no header, limit, gzip.
  WriteFile(dir + "/b.csv.gz", "1,2,3\n4,5,6\n7,8,9", true);
  d = LoadCsv(dir + "/b.csv.gz", 2, false, 2);
  STRATA_ASSERT_OK(d);
  EXPECT_EQ(d->size, 2);
  EXPECT_THAT(d->x, ElementsAre(1, 2, 4, 5));
  EXPECT_THAT(d->labels, ElementsAre(3, 6));
}

TEST(DatasetTest, CsvErrorsNameLine) {
  const std::string dir = TestDir();
  const std::string path = dir + "/bad.csv";
  WriteFile(path, "h1,h2\n1,2\n0,abc\n", false);
  EXPECT_THAT(LoadCsv(path, 0, true, 0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  path + ":3: column 1: 'abc' is not a "
                                         "finite number"));
  WriteFile(path, "1,2\n0,1,2\n", false);
  EXPECT_THAT(LoadCsv(path, 0, false, 0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  path + ":2: 3 columns, but the first row "
                                         "has 2"));
  WriteFile(path, "-1,2\n", false);
  EXPECT_THAT(LoadCsv(path, 0, false, 0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  path + ":1: column 0: label '-1' is not a "
                                         "non-negative integer"));
  WriteFile(path, "1.5,2\n", false);
  EXPECT_THAT(LoadCsv(path, 0, false, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  WriteFile(path, "1,2\n", false);
  EXPECT_THAT(LoadCsv(path, 5, false, 0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "label_column 5 is out of range"));
  EXPECT_THAT(LoadCsv(dir + "/missing.csv", 0, false, 0),
              StatusIs(absl::StatusCode::kNotFound));
}

JobSpec CsvJob(const std::string& train, const std::string& test,
               int64_t features) {
  JobSpec job;
  job.model.input_shape = {features};
  job.data.format = "csv";
  job.data.train.path = train;
  job.data.train.header = false;
  job.data.has_test = !test.empty();
  job.data.test.path = test;
  job.data.test.header = false;
  return job;
}

TEST(DatasetTest, LoadTrainAndTestFollowTheJob) {
  const std::string dir = TestDir();
  WriteFile(dir + "/train.csv", "0,1,2\n1,3,4\n0,5,6\n", false);
  WriteFile(dir + "/test.csv", "1,7,8\n", false);
  JobSpec job = CsvJob(dir + "/train.csv", dir + "/test.csv", 2);
  job.data.limit_train = 2;
  job.data.scale = 2.0;
  absl::StatusOr<Dataset> train = LoadTrain(job);
  STRATA_ASSERT_OK(train);
  EXPECT_EQ(train->size, 2);
  EXPECT_THAT(train->x, ElementsAre(0.5f, 1.0f, 1.5f, 2.0f));
  EXPECT_EQ(CountTrainExamples(job).value_or(-1), 2);
  absl::StatusOr<Dataset> test = LoadTest(job);
  STRATA_ASSERT_OK(test);
  EXPECT_EQ(test->size, 1);

  JobSpec wrong = CsvJob(dir + "/train.csv", "", 3);
  EXPECT_THAT(LoadTrain(wrong),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.data.train: examples have 2 features "
                                  "but job.model.input_shape [3] needs 3"));
  EXPECT_THAT(LoadTest(wrong), StatusIs(absl::StatusCode::kFailedPrecondition));
}

// An IDX job of 6 features whose files are `dir`/NAME.
JobSpec IdxJob(const std::string& dir, const std::string& images,
               const std::string& labels) {
  JobSpec job;
  job.model.input_shape = {6};
  job.data.format = "idx";
  job.data.train.images = dir + "/" + images;
  job.data.train.labels = dir + "/" + labels;
  return job;
}

TEST(DatasetTest, LoadErrorsNameTheJobField) {
  const std::string dir = TestDir();
  WriteFile(dir + "/images", IdxImages(5, 2, 3), false);
  WriteFile(dir + "/labels", IdxLabels(5), false);
  WriteFile(dir + "/labels4", IdxLabels(4), false);
  WriteFile(dir + "/short_labels", IdxLabels(5).substr(0, 10), false);
  STRATA_ASSERT_OK(LoadTrain(IdxJob(dir, "images", "labels")));

  EXPECT_THAT(LoadTrain(IdxJob(dir, "nope.gz", "labels")),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "job.data.train.images: " + dir +
                                      "/nope.gz: No such file or directory"));
  EXPECT_THAT(LoadTrain(IdxJob(dir, "images", "nope")),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "job.data.train.labels: " + dir +
                                      "/nope: No such file or directory"));
  EXPECT_THAT(LoadTrain(IdxJob(dir, "labels", "labels")),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.data.train.images: " + dir +
                                      "/labels: bad magic"));
  EXPECT_THAT(LoadTrain(IdxJob(dir, "images", "short_labels")),
              StatusIsWithMessage(absl::StatusCode::kDataLoss,
                                  "job.data.train.labels: " + dir +
                                      "/short_labels: truncated"));
  EXPECT_THAT(LoadTrain(IdxJob(dir, "images", "labels4")),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.data.train: IDX count mismatch"));
  EXPECT_THAT(CountTrainExamples(IdxJob(dir, "nope.gz", "labels")),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "job.data.train.images: " + dir +
                                      "/nope.gz"));

  JobSpec test = IdxJob(dir, "images", "labels");
  test.data.has_test = true;
  test.data.test.images = dir + "/images";
  test.data.test.labels = dir + "/missing_test_labels";
  EXPECT_THAT(LoadTest(test),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "job.data.test.labels: " + dir +
                                      "/missing_test_labels: No such file"));

  WriteFile(dir + "/bad.csv", "0,1,2\n1,abc,4\n", false);
  EXPECT_THAT(LoadTrain(CsvJob(dir + "/bad.csv", "", 2)),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.data.train.path: " + dir +
                                      "/bad.csv:2: column 1: 'abc'"));
  EXPECT_THAT(LoadTrain(CsvJob(dir + "/missing.csv", "", 2)),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "job.data.train.path: " + dir +
                                      "/missing.csv: No such file"));
  EXPECT_THAT(CountTrainExamples(CsvJob(dir + "/missing.csv", "", 2)),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "job.data.train.path: "));
  WriteFile(dir + "/train.csv", "0,1,2\n", false);
  EXPECT_THAT(LoadTest(CsvJob(dir + "/train.csv", dir + "/missing.csv", 2)),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "job.data.test.path: " + dir +
                                      "/missing.csv"));
}

TEST(DatasetTest, CheckDataFilesNamesTheMissingField) {
  const std::string dir = TestDir();
  // Not read: garbage passes.
  WriteFile(dir + "/images", "garbage", false);
  WriteFile(dir + "/labels", "", false);
  JobSpec job = IdxJob(dir, "images", "labels");
  STRATA_ASSERT_OK(CheckDataFiles(job));
  // No data.test: its paths are not looked at.
  job.data.test.images = dir + "/nope";
  STRATA_ASSERT_OK(CheckDataFiles(job));

  EXPECT_THAT(CheckDataFiles(IdxJob(dir, "nope.gz", "labels")),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "job.data.train.images: " + dir +
                                      "/nope.gz: No such file or directory"));
  EXPECT_THAT(CheckDataFiles(IdxJob(dir, "images", "no/such/dir")),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "job.data.train.labels: " + dir +
                                      "/no/such/dir: No such file"));
  job = IdxJob(dir, "images", "labels");
  job.data.has_test = true;
  job.data.test.images = dir + "/images";
  job.data.test.labels = dir + "/test_labels";
  EXPECT_THAT(CheckDataFiles(job),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "job.data.test.labels: " + dir +
                                      "/test_labels: No such file"));
  mkdir((dir + "/sub").c_str(), 0755);
  EXPECT_THAT(CheckDataFiles(IdxJob(dir, "sub", "labels")),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.data.train.images: " + dir +
                                      "/sub: Is a directory"));
  EXPECT_THAT(CheckDataFiles(CsvJob(dir + "/missing.csv", "", 2)),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  "job.data.train.path: " + dir +
                                      "/missing.csv: No such file"));
  STRATA_ASSERT_OK(CheckDataFiles(CsvJob(dir + "/images", "", 2)));
  // A FIFO without a writer does not block the check.
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0644), 0);
  STRATA_ASSERT_OK(CheckDataFiles(CsvJob(dir + "/fifo", "", 2)));
  if (geteuid() != 0) {  // root reads anything
    WriteFile(dir + "/secret", "x", false);
    chmod((dir + "/secret").c_str(), 0);
    EXPECT_THAT(CheckDataFiles(CsvJob(dir + "/secret", "", 2)),
                StatusIsWithMessage(absl::StatusCode::kPermissionDenied,
                                    "job.data.train.path: " + dir +
                                        "/secret: Permission denied"));
  }
}

TEST(DatasetTest, CountTrainExamplesReadsIdxHeader) {
  const std::string dir = TestDir();
  WriteFile(dir + "/images.gz", IdxImages(7, 2, 3), true);
  JobSpec job;
  job.model.input_shape = {6};
  job.data.format = "idx";
  job.data.train.images = dir + "/images.gz";
  job.data.train.labels = dir + "/missing";  // not read by the count
  EXPECT_EQ(CountTrainExamples(job).value_or(-1), 7);
  job.data.limit_train = 3;
  EXPECT_EQ(CountTrainExamples(job).value_or(-1), 3);
}

TEST(DatasetTest, EpochPermutationIsDeterministic) {
  const std::vector<int64_t> a = EpochPermutation(1000, 42, 0);
  EXPECT_EQ(a, EpochPermutation(1000, 42, 0));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(a, EpochPermutation(1000, 42, 1));
  EXPECT_NE(a, EpochPermutation(1000, 43, 0));
  // Actually shuffled: few fixed points.
  int fixed = 0;
  for (int64_t i = 0; i < 1000; ++i) fixed += a[i] == i ? 1 : 0;
  EXPECT_LT(fixed, 20);
  EXPECT_TRUE(EpochPermutation(0, 1, 0).empty());
  EXPECT_TRUE(EpochPermutation(-3, 1, 0).empty());
  EXPECT_THAT(EpochPermutation(1, 1, 0), ElementsAre(0));
}

TEST(DatasetTest, StepsPerEpochKeepsPartialBatch) {
  EXPECT_EQ(StepsPerEpoch(60000, 128), 469);
  EXPECT_EQ(StepsPerEpoch(60000, 32), 1875);
  EXPECT_EQ(StepsPerEpoch(10, 5), 2);
  EXPECT_EQ(StepsPerEpoch(11, 5), 3);
  EXPECT_EQ(StepsPerEpoch(1, 5), 1);
  EXPECT_EQ(StepsPerEpoch(0, 5), 0);
  EXPECT_EQ(StepsPerEpoch(10, 0), 0);
}

TEST(DatasetTest, GatherBatchHandlesLastPartialBatch) {
  Dataset d;
  d.size = 5;
  d.features = 2;
  for (int i = 0; i < 5; ++i) {
    d.x.push_back(static_cast<float>(10 * i));
    d.x.push_back(static_cast<float>(10 * i + 1));
    d.labels.push_back(i);
  }
  const std::vector<int64_t> perm = {4, 2, 0, 1, 3};
  std::vector<float> x;
  std::vector<int32_t> y;
  GatherBatch(d, perm, 0, 2, &x, &y);
  EXPECT_THAT(x, ElementsAre(40, 41, 20, 21));
  EXPECT_THAT(y, ElementsAre(4, 2));
  GatherBatch(d, perm, 2, 2, &x, &y);
  EXPECT_THAT(x, ElementsAre(30, 31));
  EXPECT_THAT(y, ElementsAre(3));
  GatherBatch(d, perm, 3, 2, &x, &y);
  EXPECT_TRUE(x.empty());
  EXPECT_TRUE(y.empty());
}

TEST(DatasetTest, FashionMnistCounts) {
  const std::string dir = kFashionMnist;
  struct stat st;
  if (stat((dir + "/train-images-idx3-ubyte.gz").c_str(), &st) != 0) {
    GTEST_SKIP() << dir << " not installed (Debian: dataset-fashion-mnist)";
  }
  EXPECT_EQ(CountIdxExamples(dir + "/train-images-idx3-ubyte.gz").value_or(-1),
            60000);
  EXPECT_EQ(CountIdxExamples(dir + "/train-labels-idx1-ubyte.gz").value_or(-1),
            60000);
  EXPECT_EQ(CountIdxExamples(dir + "/t10k-images-idx3-ubyte.gz").value_or(-1),
            10000);
  absl::StatusOr<Dataset> test =
      LoadIdx(dir + "/t10k-images-idx3-ubyte.gz",
              dir + "/t10k-labels-idx1-ubyte.gz", 255.0, 0);
  STRATA_ASSERT_OK(test);
  EXPECT_EQ(test->size, 10000);
  EXPECT_EQ(test->features, 784);
  EXPECT_EQ(test->num_classes, 10);
  EXPECT_GE(*std::min_element(test->x.begin(), test->x.end()), 0.0f);
  EXPECT_LE(*std::max_element(test->x.begin(), test->x.end()), 1.0f);
  EXPECT_EQ(*std::max_element(test->x.begin(), test->x.end()), 1.0f);
}

}  // namespace
}  // namespace strata

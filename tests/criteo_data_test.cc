// CriteoReader (worker/criteo_data.h): the dense transform and missing
// values, plain and gzip files, batching across calls and Rewind, and each
// kind of malformed line under kStop (the error names path:line and the
// column) and kSkip (skipped and counted).
#include "worker/criteo_data.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace strata {
namespace {

// What this process leaves in the test temp dir goes when its tests end.
const auto* const kRemoveTempEntries =
    RemoveTempEntriesAtExit("strata_criteo_data_test_");

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh directory under the test temp dir, one per test.
std::string TestDir() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = ::testing::TempDir() + "/strata_criteo_data_test_" +
                    info->name() + "_" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  return dir;
}

void WriteFile(const std::string& path, const std::string& bytes, bool gzip) {
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

// A line from its 40 fields.
std::string Line(const std::vector<std::string>& fields) {
  return absl::StrJoin(fields, "\t") + "\n";
}

// A valid line: label, integers i, i+1, ..., ids 8 hex digits.
std::vector<std::string> Fields(int label, int base) {
  std::vector<std::string> f = {std::to_string(label)};
  for (int i = 0; i < kCriteoDenseColumns; ++i) {
    f.push_back(std::to_string(base + i));
  }
  for (int i = 0; i < kCriteoCategoricalColumns; ++i) {
    f.push_back(absl::StrCat(absl::Hex(0x10000000u + 0x100 * base + i,
                                       absl::kZeroPad8)));
  }
  return f;
}

std::unique_ptr<CriteoReader> Open(const std::string& path,
                                   BadLinePolicy policy = BadLinePolicy::kStop) {
  CriteoReaderOptions options;
  options.bad_line_policy = policy;
  auto reader = CriteoReader::Create(path, options);
  EXPECT_TRUE(reader.ok()) << reader.status();
  return reader.ok() ? std::move(*reader) : nullptr;
}

float Transform(double x) { return static_cast<float>(std::log1p(x)); }

TEST(CriteoReaderTest, ReadsValuesPlainAndGzip) {
  const std::string dir = TestDir();
  std::vector<std::string> first = Fields(1, 0);
  first[2] = "-5";                   // negative: clamped to 0
  first[3] = "";                     // missing integer
  first[4] = "9223372036854775807";  // int64 max
  first[14] = "";                    // missing id
  first[15] = "FFFFFFFFFFFFFFFE";    // 16 digits, upper case
  first[16] = "a";                   // 1 digit
  const std::string text = Line(first) + Line(Fields(0, 7));
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string path = dir + (gzip ? "/d.tsv.gz" : "/d.tsv");
    WriteFile(path, text, gzip);
    auto reader = Open(path);
    ASSERT_NE(reader, nullptr);
    EXPECT_EQ(reader->path(), path);
    CriteoBatch batch;
    absl::StatusOr<bool> more = reader->Next(&batch, 10);
    STRATA_ASSERT_OK(more);
    EXPECT_TRUE(*more);
    ASSERT_EQ(batch.size, 2);
    EXPECT_THAT(batch.labels, ElementsAre(1.0f, 0.0f));
    ASSERT_EQ(batch.dense.size(), 26u);
    ASSERT_EQ(batch.categorical.size(), 52u);
    EXPECT_EQ(batch.dense[0], 0.0f);  // x = 0
    EXPECT_EQ(batch.dense[1], 0.0f);  // x = -5
    EXPECT_EQ(batch.dense[2], 0.0f);  // missing
    EXPECT_EQ(batch.dense[3], Transform(9223372036854775807.0));
    EXPECT_EQ(batch.dense[12], Transform(12));
    EXPECT_EQ(batch.categorical[0], kCriteoMissingId);
    EXPECT_EQ(batch.categorical[1], -2);  // 0xfffffffffffffffe as int64
    EXPECT_EQ(batch.categorical[2], 10);
    EXPECT_EQ(batch.categorical[3], 0x10000003);
    // The second example.
    EXPECT_EQ(batch.dense[13], Transform(7));
    EXPECT_EQ(batch.dense[25], Transform(19));
    EXPECT_EQ(batch.categorical[26], 0x10000700);
    EXPECT_EQ(batch.categorical[51], 0x10000700 + 25);

    more = reader->Next(&batch, 10);
    STRATA_ASSERT_OK(more);
    EXPECT_FALSE(*more);
    EXPECT_EQ(batch.size, 0);
    EXPECT_EQ(reader->examples_read(), 2);
    EXPECT_EQ(reader->lines_read(), 2);
  }
}

TEST(CriteoReaderTest, MissingIdIsAnOption) {
  const std::string dir = TestDir();
  std::vector<std::string> f = Fields(0, 1);
  f[39] = "";
  WriteFile(dir + "/d.tsv", Line(f), false);
  CriteoReaderOptions options;
  options.missing_id = 0;
  auto reader = CriteoReader::Create(dir + "/d.tsv", options);
  STRATA_ASSERT_OK(reader);
  CriteoBatch batch;
  STRATA_ASSERT_OK((*reader)->Next(&batch, 1));
  EXPECT_EQ(batch.categorical[25], 0);
}

TEST(CriteoReaderTest, BatchesAcrossCallsAndRewinds) {
  const std::string dir = TestDir();
  std::string text;
  for (int i = 0; i < 7; ++i) text += Line(Fields(i % 2, i));
  // CRLF, an empty line and no final newline are all accepted.
  text += "\r\n";
  text += Line(Fields(1, 7));
  text.insert(text.size() - 1, "\r");
  text += Line(Fields(0, 8));
  text.pop_back();
  const std::string path = dir + "/d.tsv.gz";
  WriteFile(path, text, true);

  // A small read buffer makes lines span chunks.
  CriteoReaderOptions options;
  options.read_buffer_bytes = 7;
  auto created = CriteoReader::Create(path, options);
  STRATA_ASSERT_OK(created);
  CriteoReader& reader = **created;
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass);
    std::vector<int64_t> sizes;
    std::vector<float> firsts;
    CriteoBatch batch;
    while (true) {
      absl::StatusOr<bool> more = reader.Next(&batch, 4);
      STRATA_ASSERT_OK(more);
      if (!*more) break;
      sizes.push_back(batch.size);
      for (int64_t i = 0; i < batch.size; ++i) {
        firsts.push_back(batch.dense[i * kCriteoDenseColumns + 1]);
      }
    }
    EXPECT_THAT(sizes, ElementsAre(4, 4, 1));
    ASSERT_EQ(firsts.size(), 9u);
    for (int i = 0; i < 9; ++i) EXPECT_EQ(firsts[i], Transform(i + 1)) << i;
    EXPECT_EQ(reader.examples_read(), 9);
    EXPECT_EQ(reader.lines_read(), 10);
    STRATA_ASSERT_OK(reader.Rewind());
    EXPECT_EQ(reader.examples_read(), 0);
  }
}

struct BadCase {
  std::string name;
  int column;  // the field replaced, or -1 to drop the last one
  std::string value;
  std::string message;  // after "path:2: "
};

std::vector<BadCase> BadCases() {
  return {
      {"too_few", -1, "", "expected 40 tab-separated columns, got 39"},
      {"label", 0, "2", "column 0: label '2' is not 0 or 1"},
      {"label_empty", 0, "", "column 0: label '' is not 0 or 1"},
      {"integer", 5, "1.5", "column 5: integer '1.5' is not a decimal integer"},
      {"integer_sign", 1, "-", "column 1: integer '-' is not a decimal"},
      {"int64_overflow", 13, "9223372036854775808",
       "column 13: integer '9223372036854775808' is out of int64 range"},
      {"int64_underflow", 2, "-9223372036854775809",
       "column 2: integer '-9223372036854775809' is out of int64 range"},
      {"not_hex", 20, "12g4", "column 20: categorical id '12g4' is not "
                              "hexadecimal"},
      {"seventeen_digits", 39, "1234567890abcdef0",
       "column 39: categorical id '1234567890abcdef0' has 17 hex digits, "
       "more than 16"},
  };
}

std::string BadLine(const BadCase& c) {
  std::vector<std::string> f = Fields(1, 3);
  if (c.column < 0) {
    f.pop_back();
  } else {
    f[c.column] = c.value;
  }
  return Line(f);
}

TEST(CriteoReaderTest, MalformedLineStopsNamingPathLineAndColumn) {
  const std::string dir = TestDir();
  for (const BadCase& c : BadCases()) {
    SCOPED_TRACE(c.name);
    const std::string path = dir + "/" + c.name + ".tsv";
    WriteFile(path, Line(Fields(0, 1)) + BadLine(c) + Line(Fields(0, 2)),
              false);
    auto reader = Open(path);
    ASSERT_NE(reader, nullptr);
    CriteoBatch batch;
    const std::string want = absl::StrCat(path, ":2: ", c.message);
    EXPECT_THAT(reader->Next(&batch, 10),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument, want));
    EXPECT_EQ(batch.size, 0);
    // Sticky until Rewind.
    EXPECT_THAT(reader->Next(&batch, 10),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument, want));
    STRATA_ASSERT_OK(reader->Rewind());
    absl::StatusOr<bool> more = reader->Next(&batch, 1);
    STRATA_ASSERT_OK(more);
    EXPECT_EQ(batch.size, 1);
  }
}

// Multi-hot columns: comma-separated id lists (empty: no id), the other
// columns one id each; the batch carries offsets, also across LoadCriteo.
TEST(CriteoReaderTest, MultiHotColumnsReadIdListsWithOffsets) {
  const std::string dir = TestDir();
  // TSV columns 14 and 16 are categorical columns 0 and 2.
  std::vector<std::string> a = Fields(1, 1);
  a[14] = "a,B,00000000000000ff";
  a[16] = "";
  std::vector<std::string> b = Fields(0, 2);
  b[14] = "7";
  b[16] = "1,2";
  b[17] = "";  // single-valued column 3: missing_id
  const std::string path = dir + "/multi.tsv";
  WriteFile(path, Line(a) + Line(b), false);
  CriteoReaderOptions options;
  options.multi_hot_columns = {0, 2};
  options.missing_id = -9;
  auto reader = CriteoReader::Create(path, options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  CriteoBatch batch;
  ASSERT_TRUE(*(*reader)->Next(&batch, 10));
  ASSERT_EQ(batch.size, 2);
  ASSERT_EQ(batch.categorical_offsets.size(), 2u * 26 + 1);
  const auto field = [&](int e, int c) {
    const int64_t* o = batch.categorical_offsets.data() + e * 26 + c;
    return std::vector<int64_t>(batch.categorical.begin() + o[0],
                                batch.categorical.begin() + o[1]);
  };
  EXPECT_THAT(field(0, 0), ElementsAre(0xa, 0xb, 0xff));
  EXPECT_THAT(field(0, 1), ElementsAre(0x10000100 + 1));
  EXPECT_TRUE(field(0, 2).empty());
  EXPECT_THAT(field(1, 0), ElementsAre(7));
  EXPECT_THAT(field(1, 2), ElementsAre(1, 2));
  EXPECT_THAT(field(1, 3), ElementsAre(-9));
  EXPECT_THAT(field(1, 25), ElementsAre(0x10000200 + 25));
  // The view a model reads: offsets from the first example asked for.
  const CategoricalIds view = batch.Categorical(1);
  EXPECT_EQ(view.ids, batch.categorical.data());
  EXPECT_EQ(view.offsets, batch.categorical_offsets.data() + 26);
  // Loaded whole, the offsets are the same.
  auto all = LoadCriteo(path, options, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->categorical, batch.categorical);
  EXPECT_EQ(all->categorical_offsets, batch.categorical_offsets);
  // Without multi-hot columns a list is not an id.
  auto plain = Open(path);
  ASSERT_NE(plain, nullptr);
  EXPECT_THAT(plain->Next(&batch, 10),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "column 14: categorical id "
                                  "'a,B,00000000000000ff' is not hexadecimal"));
}

TEST(CriteoReaderTest, MalformedMultiHotFieldsNameTheIdInTheList) {
  const std::string dir = TestDir();
  struct Case {
    std::string value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"a,,b", "column 14: id 2 of the list is empty"},
      {"a,", "column 14: id 2 of the list is empty"},
      {",a", "column 14: id 1 of the list is empty"},
      {"1,2,zz", "column 14: id 3 of the list: categorical id 'zz' is not "
                 "hexadecimal"},
      {"1,2,3,4", "column 14: more than 3 ids (max_ids_per_field)"},
      {"1,1234567890abcdef0", "column 14: id 2 of the list: categorical id "
                              "'1234567890abcdef0' has 17 hex digits"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.value);
    std::vector<std::string> f = Fields(1, 3);
    f[14] = c.value;
    const std::string path = dir + "/bad.tsv";
    WriteFile(path, Line(Fields(0, 1)) + Line(f), false);
    CriteoReaderOptions options;
    options.multi_hot_columns = {0};
    options.max_ids_per_field = 3;
    auto reader = CriteoReader::Create(path, options);
    ASSERT_TRUE(reader.ok()) << reader.status();
    CriteoBatch batch;
    EXPECT_THAT((*reader)->Next(&batch, 10),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    absl::StrCat(path, ":2: ", c.message)));
    EXPECT_EQ(batch.size, 0);
    EXPECT_TRUE(batch.categorical_offsets.empty());
  }
  // Options out of range, naming the path.
  CriteoReaderOptions options;
  options.multi_hot_columns = {0, 26};
  EXPECT_THAT(CriteoReader::Create(dir + "/bad.tsv", options).status(),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "multi_hot_columns: 26 is not a categorical "
                                  "column (0 to 25)"));
  options.multi_hot_columns = {3, 3};
  EXPECT_THAT(CriteoReader::Create(dir + "/bad.tsv", options).status(),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "multi_hot_columns: 3 is listed twice"));
  options.multi_hot_columns = {};
  options.max_ids_per_field = 0;
  EXPECT_THAT(CriteoReader::Create(dir + "/bad.tsv", options).status(),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "max_ids_per_field must be 1 to 2^20"));
}

TEST(CriteoReaderTest, MalformedLinesAreSkippedAndCounted) {
  const std::string dir = TestDir();
  std::string text;
  for (const BadCase& c : BadCases()) {
    text += Line(Fields(0, 1)) + BadLine(c);
  }
  text += Line(Fields(1, 2));
  const std::string path = dir + "/d.tsv";
  WriteFile(path, text, false);
  CriteoReaderOptions options;
  options.bad_line_policy = BadLinePolicy::kSkip;
  options.max_kept_errors = 3;
  auto reader = CriteoReader::Create(path, options);
  STRATA_ASSERT_OK(reader);
  CriteoBatch batch;
  int64_t examples = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&batch, 4);
    STRATA_ASSERT_OK(more);
    if (!*more) break;
    examples += batch.size;
  }
  const int64_t bad = static_cast<int64_t>(BadCases().size());
  EXPECT_EQ(examples, bad + 1);
  EXPECT_EQ((*reader)->lines_skipped(), bad);
  const std::vector<std::string>& kept = (*reader)->skipped_errors();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0], absl::StrCat(path, ":2: ", BadCases()[0].message));
  EXPECT_THAT(kept[1], HasSubstr(absl::StrCat(path, ":4: column 0: label")));
  EXPECT_THAT(kept[2], HasSubstr(absl::StrCat(path, ":6: column 0: label")));
  STRATA_ASSERT_OK((*reader)->Rewind());
  EXPECT_EQ((*reader)->lines_skipped(), 0);
  EXPECT_TRUE((*reader)->skipped_errors().empty());
}

TEST(CriteoReaderTest, OverlongLineIsMalformedWithoutReadingItWhole) {
  const std::string dir = TestDir();
  const std::string path = dir + "/d.tsv";
  WriteFile(path,
            Line(Fields(0, 1)) + std::string(5000, 'x') + "\n" +
                Line(Fields(1, 2)) + std::string(3000, 'y'),
            false);
  CriteoReaderOptions options;
  options.max_line_bytes = 1024;
  options.read_buffer_bytes = 100;
  options.bad_line_policy = BadLinePolicy::kSkip;
  auto reader = CriteoReader::Create(path, options);
  STRATA_ASSERT_OK(reader);
  CriteoBatch batch;
  STRATA_ASSERT_OK((*reader)->Next(&batch, 10));
  EXPECT_EQ(batch.size, 2);
  EXPECT_EQ((*reader)->lines_skipped(), 2);
  EXPECT_THAT((*reader)->skipped_errors(),
              ElementsAre(path + ":2: longer than max_line_bytes (1024)",
                          path + ":4: longer than max_line_bytes (1024)"));

  options.bad_line_policy = BadLinePolicy::kStop;
  reader = CriteoReader::Create(path, options);
  STRATA_ASSERT_OK(reader);
  EXPECT_THAT((*reader)->Next(&batch, 10),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  path + ":2: longer than max_line_bytes"));
}

TEST(CriteoReaderTest, OpenAndArgumentErrors) {
  const std::string dir = TestDir();
  EXPECT_THAT(CriteoReader::Create(dir + "/none.tsv", CriteoReaderOptions()),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  dir + "/none.tsv"));
  EXPECT_THAT(CriteoReader::Create(dir, CriteoReaderOptions()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  CriteoReaderOptions tiny;
  tiny.max_line_bytes = 10;
  WriteFile(dir + "/d.tsv", Line(Fields(0, 1)), false);
  EXPECT_THAT(CriteoReader::Create(dir + "/d.tsv", tiny),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto reader = Open(dir + "/d.tsv");
  ASSERT_NE(reader, nullptr);
  CriteoBatch batch;
  EXPECT_THAT(reader->Next(&batch, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Not sticky: the data is still there.
  STRATA_ASSERT_OK(reader->Next(&batch, 1));
  EXPECT_EQ(batch.size, 1);
}

TEST(CriteoReaderTest, TruncatedGzipIsDataLoss) {
  const std::string dir = TestDir();
  std::string text;
  for (int i = 0; i < 2000; ++i) text += Line(Fields(i % 2, i));
  const std::string path = dir + "/d.tsv.gz";
  WriteFile(path, text, true);
  std::ifstream in(path, std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)),
                 std::istreambuf_iterator<char>());
  WriteFile(path, gz.substr(0, gz.size() / 2), false);
  auto reader = Open(path);
  ASSERT_NE(reader, nullptr);
  CriteoBatch batch;
  absl::Status status;
  while (status.ok()) {
    absl::StatusOr<bool> more = reader->Next(&batch, 256);
    status = more.status();
    if (status.ok() && !*more) break;
  }
  EXPECT_THAT(status, StatusIsWithMessage(absl::StatusCode::kDataLoss, path));
}

}  // namespace
}  // namespace strata

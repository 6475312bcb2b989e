// The synthetic Criteo data generator (tools/datagen.h): deterministic from
// the seed, readable by CriteoReader line for line, the Zipf sampler's
// frequencies against the pmf, huge cardinalities in O(1) memory, the label
// rate and the Bayes AUC, option errors, and the checked-in sample.
#include "tools/datagen.h"

#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "worker/criteo_data.h"

namespace strata {
namespace {

// What this process leaves in the test temp dir goes when its tests end.
const auto* const kRemoveTempEntries =
    RemoveTempEntriesAtExit("strata_datagen_test_");

using ::testing::HasSubstr;

std::string TestDir() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = ::testing::TempDir() + "/strata_datagen_test_" +
                    info->name() + "_" + std::to_string(getpid());
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

DatagenOptions Small(const std::string& path, int64_t examples,
                     uint64_t seed) {
  DatagenOptions options;
  options.path = path;
  options.examples = examples;
  options.seed = seed;
  return options;
}

// Reads every example of `path` with kStop; fails the test on any error.
struct ReadBack {
  int64_t examples = 0;
  int64_t positives = 0;
  int64_t missing_ids = 0;
  std::vector<std::set<int64_t>> ids =
      std::vector<std::set<int64_t>>(kCriteoCategoricalColumns);
};

ReadBack ReadAll(const std::string& path) {
  ReadBack r;
  auto reader = CriteoReader::Create(path, CriteoReaderOptions());
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return r;
  CriteoBatch batch;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&batch, 1000);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    r.examples += batch.size;
    for (float l : batch.labels) r.positives += l == 1.0f;
    for (size_t i = 0; i < batch.categorical.size(); ++i) {
      const int64_t id = batch.categorical[i];
      if (id == kCriteoMissingId) {
        ++r.missing_ids;
        continue;
      }
      EXPECT_GE(id, 0);
      EXPECT_LT(id, int64_t{1} << 32);
      r.ids[i % kCriteoCategoricalColumns].insert(id);
    }
  }
  return r;
}

TEST(DatagenTest, SameSeedSameBytesOtherSeedOthers) {
  const std::string dir = TestDir();
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    DatagenOptions a = Small(dir + "/a.tsv", 3000, 17);
    a.gzip = gzip;
    DatagenOptions b = a;
    b.path = dir + "/b.tsv";
    DatagenOptions c = a;
    c.path = dir + "/c.tsv";
    c.seed = 18;
    absl::StatusOr<DatagenSummary> sa = GenerateCriteoData(a);
    absl::StatusOr<DatagenSummary> sb = GenerateCriteoData(b);
    absl::StatusOr<DatagenSummary> sc = GenerateCriteoData(c);
    STRATA_ASSERT_OK(sa);
    STRATA_ASSERT_OK(sb);
    STRATA_ASSERT_OK(sc);
    const std::string bytes = ReadFile(a.path);
    EXPECT_GT(bytes.size(), 3000u * 100 / (gzip ? 4 : 1));
    EXPECT_EQ(bytes, ReadFile(b.path));
    EXPECT_NE(bytes, ReadFile(c.path));
    EXPECT_EQ(sa->positives, sb->positives);
    EXPECT_EQ(sa->bayes_auc, sb->bayes_auc);
    EXPECT_EQ(sa->bayes_logloss, sb->bayes_logloss);
    EXPECT_NE(sa->bayes_auc, sc->bayes_auc);
    // No temporary file is left behind.
    EXPECT_NE(access((a.path + ".tmp").c_str(), F_OK), 0);
  }
}

TEST(DatagenTest, ReaderParsesEveryLineAndSummaryIsWritten) {
  const std::string dir = TestDir();
  DatagenOptions options = Small(dir + "/d.tsv.gz", 5000, 3);
  options.gzip = true;
  options.missing_rate = 0.1;
  absl::StatusOr<DatagenSummary> summary = GenerateCriteoData(options);
  STRATA_ASSERT_OK(summary);
  EXPECT_EQ(summary->examples, 5000);
  const ReadBack r = ReadAll(options.path);
  EXPECT_EQ(r.examples, 5000);
  EXPECT_EQ(r.positives, summary->positives);
  // About 10% of 130000 ids are missing.
  EXPECT_GT(r.missing_ids, 11000);
  EXPECT_LT(r.missing_ids, 15000);

  nlohmann::json json =
      nlohmann::json::parse(ReadFile(options.path + ".summary.json"));
  EXPECT_EQ(json["examples"], 5000);
  EXPECT_EQ(json["positives"], summary->positives);
  EXPECT_EQ(json["bayes_auc"].get<double>(), summary->bayes_auc);
  EXPECT_EQ(json["seed"], 3);
  EXPECT_EQ(json["cardinalities"].get<std::vector<int64_t>>(),
            DefaultCardinalities());
}

// With a split, the summary adds a learner's ceilings: the test set's Bayes
// AUC, and the oracle that knows only the ids seen in training. Every id
// seen (tiny cardinalities): the oracle is the Bayes score. Almost none seen
// (huge cardinalities): the oracle knows next to nothing.
TEST(DatagenTest, SplitReportsTheCeilingOfWhatTrainingSaw) {
  const std::string dir = TestDir();
  DatagenOptions all_seen = Small(dir + "/seen.tsv", 20000, 5);
  all_seen.cardinalities.assign(26, 3);
  all_seen.split = 15000;
  absl::StatusOr<DatagenSummary> seen = GenerateCriteoData(all_seen);
  STRATA_ASSERT_OK(seen);
  EXPECT_EQ(seen->test_ids_unseen, 0);
  EXPECT_GT(seen->test_bayes_auc, 0.6);
  EXPECT_NEAR(seen->seen_ids_auc[0], seen->test_bayes_auc, 1e-4);
  nlohmann::json json =
      nlohmann::json::parse(ReadFile(all_seen.path + ".summary.json"));
  EXPECT_EQ(json["split"], 15000);
  EXPECT_DOUBLE_EQ(json["seen_ids_auc"]["1"].get<double>(),
                   seen->seen_ids_auc[0]);

  DatagenOptions none_seen = Small(dir + "/unseen.tsv", 20000, 5);
  none_seen.cardinalities.assign(26, int64_t{1} << 32);
  none_seen.zipf_exponent = 0.01;  // nearly uniform over 2^32 ids
  none_seen.split = 15000;
  absl::StatusOr<DatagenSummary> unseen = GenerateCriteoData(none_seen);
  STRATA_ASSERT_OK(unseen);
  EXPECT_GT(unseen->test_ids_unseen, 0.99);
  EXPECT_GT(unseen->test_bayes_auc, 0.6);
  EXPECT_LT(unseen->seen_ids_auc[0], 0.55);
  // Knowing ids seen at least 5 times never beats knowing those seen once.
  EXPECT_LE(unseen->seen_ids_auc[2], unseen->seen_ids_auc[0] + 0.02);

  DatagenOptions bad = Small(dir + "/bad.tsv", 100, 5);
  bad.split = 100;
  EXPECT_THAT(GenerateCriteoData(bad).status().message(),
              HasSubstr("split must be in [0, examples)"));
}

// Multi-hot columns: 1 to max_hot ids a present field, readable as lists;
// the other columns are what they would be without them (same draws).
TEST(DatagenTest, TestOutSplitsIntoTwoFilesInNewDirectories) {
  const std::string dir = TestDir();
  // The whole set in one file, as the reference.
  DatagenOptions whole = Small(dir + "/whole.tsv", 300, 9);
  whole.split = 200;
  ASSERT_TRUE(GenerateCriteoData(whole).ok());
  // The same examples split into train and test files, in directories that
  // do not exist yet.
  DatagenOptions split = Small(dir + "/a/b/train.tsv", 300, 9);
  split.split = 200;
  split.test_path = dir + "/c/test.tsv";
  absl::StatusOr<DatagenSummary> s = GenerateCriteoData(split);
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string train = ReadFile(dir + "/a/b/train.tsv");
  const std::string test = ReadFile(dir + "/c/test.tsv");
  EXPECT_EQ(train + test, ReadFile(dir + "/whole.tsv"));
  EXPECT_EQ(ReadAll(dir + "/a/b/train.tsv").examples, 200);
  EXPECT_EQ(ReadAll(dir + "/c/test.tsv").examples, 100);
  // A test file needs a split.
  DatagenOptions bad = Small(dir + "/x.tsv", 10, 1);
  bad.test_path = dir + "/y.tsv";
  EXPECT_EQ(GenerateCriteoData(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DatagenTest, MultiHotColumnsWriteIdListsOfOneToMaxHot) {
  const std::string dir = TestDir();
  DatagenOptions options = Small(dir + "/multi.tsv", 2000, 5);
  options.multi_hot_columns = {0, 7};
  options.max_hot = 3;
  absl::StatusOr<DatagenSummary> summary = GenerateCriteoData(options);
  STRATA_ASSERT_OK(summary);
  EXPECT_GT(summary->bayes_auc, 0.7);
  CriteoReaderOptions read;
  read.multi_hot_columns = {0, 7};
  auto reader = CriteoReader::Create(options.path, read);
  ASSERT_TRUE(reader.ok()) << reader.status();
  CriteoBatch batch;
  ASSERT_TRUE(*(*reader)->Next(&batch, 5000));
  ASSERT_EQ(batch.size, 2000);
  std::map<int64_t, int> lengths;
  for (int64_t e = 0; e < batch.size; ++e) {
    for (int c : {0, 7}) {
      const int64_t* o = batch.categorical_offsets.data() + e * 26 + c;
      lengths[o[1] - o[0]]++;
    }
    for (int c : {1, 2, 25}) {  // single-valued: exactly one
      const int64_t* o = batch.categorical_offsets.data() + e * 26 + c;
      EXPECT_EQ(o[1] - o[0], 1);
    }
  }
  // 0 (missing, about 2%), then 1, 2 and 3 about equally often.
  EXPECT_LT(lengths[0], 150);
  for (int k = 1; k <= 3; ++k) EXPECT_GT(lengths[k], 1000) << k;
  EXPECT_EQ(lengths.count(4), 0u);
  nlohmann::json json =
      nlohmann::json::parse(ReadFile(options.path + ".summary.json"));
  EXPECT_EQ(json["multi_hot_columns"].get<std::vector<int>>(),
            std::vector<int>({0, 7}));
  EXPECT_EQ(json["max_hot"], 3);
  // Bad options name the field.
  options.multi_hot_columns = {26};
  EXPECT_THAT(GenerateCriteoData(options).status().message(),
              HasSubstr("multi_hot_columns: 26 is not a categorical column"));
  options.multi_hot_columns = {1};
  options.max_hot = 0;
  EXPECT_THAT(GenerateCriteoData(options).status().message(),
              HasSubstr("max_hot must be in [1, 1024]"));
}

TEST(DatagenTest, IdsPerColumnAreBoundedByTheCardinality) {
  const std::string dir = TestDir();
  DatagenOptions options = Small(dir + "/d.tsv", 4000, 5);
  options.cardinalities.assign(kCriteoCategoricalColumns, 5);
  options.cardinalities[0] = 1;
  options.cardinalities[25] = 300;
  options.missing_rate = 0;
  STRATA_ASSERT_OK(GenerateCriteoData(options));
  const ReadBack r = ReadAll(options.path);
  EXPECT_EQ(r.missing_ids, 0);
  EXPECT_EQ(r.ids[0].size(), 1u);
  for (int c = 1; c < 25; ++c) EXPECT_EQ(r.ids[c].size(), 5u) << c;
  // Zipf: most of the 300 appear, some of the tail does not.
  EXPECT_GT(r.ids[25].size(), 150u);
  EXPECT_LE(r.ids[25].size(), 300u);
}

TEST(DatagenTest, LabelRateAndBayesAuc) {
  const std::string dir = TestDir();
  absl::StatusOr<DatagenSummary> summary =
      GenerateCriteoData(Small(dir + "/d.tsv", 20000, 11));
  STRATA_ASSERT_OK(summary);
  const double rate = static_cast<double>(summary->positives) / 20000;
  EXPECT_GT(rate, 0.15);
  EXPECT_LT(rate, 0.35);
  EXPECT_GT(summary->bayes_auc, 0.6);
  EXPECT_LT(summary->bayes_auc, 0.95);
  // Better than a constant prediction of the base rate.
  const double base =
      -(rate * std::log(rate) + (1 - rate) * std::log(1 - rate));
  EXPECT_LT(summary->bayes_logloss, base);
  EXPECT_GT(summary->bayes_logloss, 0.2);

  // Without noise and with a stronger signal the data is more predictable.
  DatagenOptions sharp = Small(dir + "/e.tsv", 20000, 11);
  sharp.noise = 0;
  sharp.signal_std = 3;
  absl::StatusOr<DatagenSummary> sharper = GenerateCriteoData(sharp);
  STRATA_ASSERT_OK(sharper);
  EXPECT_GT(sharper->bayes_auc, summary->bayes_auc);
}

// Pearson's chi-square of `n`-rank Zipf draws of `exponent` against the
// exact pmf of `pmf_exponent`.
double ZipfChiSquare(uint64_t n, double exponent, int draws, uint64_t seed,
                     double pmf_exponent) {
  absl::StatusOr<ZipfSampler> sampler = ZipfSampler::Create(n, exponent);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  std::vector<int64_t> counts(n + 1, 0);
  SplitMix64 rng(seed);
  for (int i = 0; i < draws; ++i) {
    const uint64_t k = sampler->Sample(&rng);
    EXPECT_GE(k, 1u);
    EXPECT_LE(k, n);
    if (k >= 1 && k <= n) ++counts[k];
  }
  double norm = 0;
  for (uint64_t k = 1; k <= n; ++k) norm += std::pow(double(k), -pmf_exponent);
  double chi2 = 0;
  for (uint64_t k = 1; k <= n; ++k) {
    const double expected = draws * std::pow(double(k), -pmf_exponent) / norm;
    chi2 += (counts[k] - expected) * (counts[k] - expected) / expected;
  }
  return chi2;
}

TEST(ZipfSamplerTest, FrequenciesMatchThePmf) {
  // 99 degrees of freedom: mean 99, standard deviation 14; the bound is
  // 6 standard deviations out (p < 1e-6), and the seeds are fixed.
  EXPECT_LT(ZipfChiSquare(100, 1.05, 200000, 1, 1.05), 183);
  EXPECT_LT(ZipfChiSquare(100, 1.0, 200000, 2, 1.0), 183);
  EXPECT_LT(ZipfChiSquare(100, 0.5, 200000, 3, 0.5), 183);
  EXPECT_LT(ZipfChiSquare(100, 2.5, 200000, 4, 2.5), 183);
  // 9 degrees of freedom: mean 9, standard deviation 4.2.
  EXPECT_LT(ZipfChiSquare(10, 1.05, 100000, 5, 1.05), 35);
  // The test has the power to see a small bias: draws of exponent 1.05
  // against the pmf of 1.1 are far out.
  EXPECT_GT(ZipfChiSquare(100, 1.05, 200000, 1, 1.1), 500);
  absl::StatusOr<ZipfSampler> one = ZipfSampler::Create(1, 1.05);
  STRATA_ASSERT_OK(one);
  SplitMix64 rng(9);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(one->Sample(&rng), 1u);
}

TEST(ZipfSamplerTest, HugeCardinalityInRangeWithoutMemory) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  const size_t before = mallinfo2().uordblks;
#endif
  absl::StatusOr<ZipfSampler> sampler = ZipfSampler::Create(100000000, 1.05);
  STRATA_ASSERT_OK(sampler);
  SplitMix64 rng(1);
  uint64_t max = 0;
  int64_t top = 0;
  for (int i = 0; i < 1000000; ++i) {
    const uint64_t k = sampler->Sample(&rng);
    ASSERT_GE(k, 1u);
    ASSERT_LE(k, 100000000u);
    max = std::max(max, k);
    top += k == 1;
  }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  EXPECT_LT(mallinfo2().uordblks - before, size_t{64} << 10);
#endif
  // The tail is reached, and rank 1 has its share 1 / H(1e8, 1.05) = 7.92%
  // (binomial standard deviation 270).
  EXPECT_GT(max, 10000000u);
  EXPECT_GT(top, 77900);
  EXPECT_LT(top, 80600);
  EXPECT_THAT(ZipfSampler::Create(0, 1.0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ZipfSampler::Create(10, 0.0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DatagenTest, HugeCardinalitiesGenerate) {
  const std::string dir = TestDir();
  DatagenOptions options = Small(dir + "/d.tsv", 2000, 2);
  options.cardinalities = DefaultCardinalities(100000000);
  STRATA_ASSERT_OK(GenerateCriteoData(options));
  EXPECT_EQ(ReadAll(options.path).examples, 2000);
  options.cardinalities.assign(kCriteoCategoricalColumns, int64_t{1} << 32);
  STRATA_ASSERT_OK(GenerateCriteoData(options));
  EXPECT_EQ(ReadAll(options.path).examples, 2000);
}

TEST(DatagenTest, DefaultAndParsedCardinalities) {
  const std::vector<int64_t> d = DefaultCardinalities();
  ASSERT_EQ(d.size(), 26u);
  EXPECT_EQ(*std::min_element(d.begin(), d.end()), 100);
  EXPECT_EQ(*std::max_element(d.begin(), d.end()), 1000000);
  const std::vector<int64_t> big = DefaultCardinalities(100000000);
  EXPECT_EQ(*std::max_element(big.begin(), big.end()), 100000000);
  EXPECT_EQ(DefaultCardinalities(1), std::vector<int64_t>(26, 1));

  std::string text = "1";
  for (int i = 1; i < 26; ++i) absl::StrAppend(&text, ",", i * 10);
  absl::StatusOr<std::vector<int64_t>> parsed = ParseCardinalities(text);
  STRATA_ASSERT_OK(parsed);
  EXPECT_EQ((*parsed)[0], 1);
  EXPECT_EQ((*parsed)[25], 250);
  EXPECT_THAT(ParseCardinalities("1,2,3"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "expected 26 comma-separated values, got 3"));
  EXPECT_THAT(ParseCardinalities(text + ",x"),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "'x' is not an integer in [1, 2^32]"));
  EXPECT_THAT(ParseCardinalities("0," + text.substr(2)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DatagenTest, BadOptionsAreRefused) {
  const std::string dir = TestDir();
  auto refused = [&](void (*change)(DatagenOptions*), const char* what) {
    DatagenOptions options = Small(dir + "/d.tsv", 10, 1);
    change(&options);
    EXPECT_THAT(GenerateCriteoData(options),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument, what));
  };
  refused([](DatagenOptions* o) { o->path.clear(); }, "path is required");
  refused([](DatagenOptions* o) { o->examples = 0; }, "examples must be >= 1");
  refused([](DatagenOptions* o) { o->cardinalities = {1, 2}; },
          "cardinalities must hold 26 values, got 2");
  refused([](DatagenOptions* o) { o->cardinalities.assign(26, 0); },
          "cardinalities[0] must be in [1, 2^32]");
  refused([](DatagenOptions* o) { o->zipf_exponent = 0; }, "zipf_exponent");
  refused([](DatagenOptions* o) { o->latent_dim = 0; }, "latent_dim");
  refused([](DatagenOptions* o) { o->noise = -1; }, "noise");
  refused([](DatagenOptions* o) { o->missing_rate = 1; }, "missing_rate");
  refused([](DatagenOptions* o) { o->positive_rate = 0; }, "positive_rate");
  // Missing directories are made; one that cannot be (a file is in the
  // way) is NOT_FOUND naming it.
  std::ofstream(dir + "/plain") << "a file";
  EXPECT_THAT(GenerateCriteoData(Small(dir + "/plain/sub/d.tsv", 10, 1)),
              StatusIsWithMessage(absl::StatusCode::kNotFound,
                                  dir + "/plain/sub"));
}

#ifdef STRATA_SOURCE_DIR
// tests/data/criteo_sample.tsv is what tools/datagen.h says made it: the
// generator has not drifted (its output is a function of the seed through
// the C library's exp and log only), and the reader takes all of it.
TEST(DatagenTest, CheckedInSampleIsReproducedAndReadable) {
  const std::string sample =
      std::string(STRATA_SOURCE_DIR) + "/tests/data/criteo_sample.tsv";
  const ReadBack r = ReadAll(sample);
  EXPECT_EQ(r.examples, 1300);
  const std::string dir = TestDir();
  absl::StatusOr<DatagenSummary> summary =
      GenerateCriteoData(Small(dir + "/criteo_sample.tsv", 1300, 1));
  STRATA_ASSERT_OK(summary);
  EXPECT_EQ(summary->positives, r.positives);
  EXPECT_TRUE(ReadFile(dir + "/criteo_sample.tsv") == ReadFile(sample))
      << "the generator's output for seed 1 differs from " << sample;
}
#endif

}  // namespace
}  // namespace strata

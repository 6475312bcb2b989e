// The SDK's models with embeddings (issue 15): Sequential(Inputs, layers)
// over datasets::Criteo files, trained in this process (OneDeviceStrategy)
// and on a local cluster whose PS tasks hold the tables
// (ParameterServerStrategy), then evaluated here.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdk/strata.h"
#include "worker/criteo_data.h"
#include "tests/test_util.h"

namespace strata::sdk {
namespace {

// What this process leaves in the test temp dir goes when its tests end.
const auto* const kRemoveTempEntries =
    RemoveTempEntriesAtExit("criteo_multi_hot_");
const auto* const kRemoveIdsDirs = RemoveTempEntriesAtExit("sdk_embedding_ids_");

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string& Sample() {
  static const std::string* const kPath = new std::string(
      std::string(STRATA_SOURCE_DIR) + "/tests/data/criteo_sample.tsv");
  return *kPath;
}

// The Criteo model of the job files: an embedding of 4 per column, a
// hidden layer, a sigmoid.
Sequential CriteoModel() {
  Inputs inputs{13, 26, EmbeddingPerColumn(26, 4, "adagrad")};
  for (Embedding& e : inputs.embeddings) e.optimizer.learning_rate = 0.1;
  return Sequential(std::move(inputs),
                    {Dense(16, "relu"), Dense(1, "sigmoid")});
}

// The sample with categorical column 0 made multi-hot: its field lists
// the ids of columns 0 to 3 of the line, some left out (so lists hold 1 to
// 4 ids, a few none), and columns 1 to 3 emptied.
const std::string& MultiHotSample() {
  static const std::string* const kPath = [] {
    auto* path = new std::string(
        (fs::path(::testing::TempDir()) /
         ("criteo_multi_hot_" + std::to_string(getpid()) + ".tsv"))
            .string());
    std::ifstream in(Sample());
    std::ofstream out(*path);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::stringstream fields(line);
      std::string field;
      while (std::getline(fields, field, '\t')) f.push_back(field);
      if (line.back() == '\t') f.push_back("");
      std::string list;
      for (int j = 0; j < 4; ++j) {
        if ((n + j) % 5 == 0 || f[14 + j].empty()) continue;
        if (!list.empty()) list += ",";
        list += f[14 + j];
      }
      f[14] = list;
      for (int j = 1; j < 4; ++j) f[14 + j] = "";
      for (size_t i = 0; i < f.size(); ++i) out << (i ? "\t" : "") << f[i];
      out << "\n";
      ++n;
    }
    return path;
  }();
  return *kPath;
}

// A mean bag over the multi-hot column 0 and an embedding per column
// 4 to 25.
Sequential MultiHotModel() {
  Inputs inputs{13, 26, {}};
  Embedding bag("bag", {0}, 4, "mean");
  bag.optimizer.learning_rate = 0.1;
  inputs.embeddings.push_back(bag);
  for (int64_t c = 4; c < 26; ++c) {
    Embedding e("C" + std::to_string(c + 1), {c}, 4);
    e.optimizer.learning_rate = 0.1;
    inputs.embeddings.push_back(e);
  }
  return Sequential(std::move(inputs),
                    {Dense(16, "relu"), Dense(1, "sigmoid")});
}

int64_t TotalRows(const Sequential& model) {
  int64_t rows = 0;
  for (const auto& [name, n] : model.TableRows()) rows += n;
  return rows;
}

TEST(SdkEmbeddingTest, OneDeviceFitsEvaluatesAndPredictsOnCriteoFiles) {
  Sequential model = CriteoModel();
  ASSERT_TRUE(
      model.Compile(Adam(), "binary_crossentropy", {"accuracy", "auc"}).ok());
  EXPECT_EQ(model.num_features(), 13 + 26 * 4);  // the layers' input
  EXPECT_EQ(TotalRows(model), 0);
  absl::StatusOr<std::string> summary = model.Summary();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_THAT(*summary, HasSubstr("C26 (Embedding)"));

  std::ostringstream out;
  FitOptions fit{/*epochs=*/6, /*batch_size=*/32,
                 /*validation=*/datasets::Criteo(Sample())};
  fit.validation_freq = 3;
  fit.out = &out;
  FitProgress progress;
  fit.progress = &progress;
  absl::StatusOr<History> h = model.Fit(datasets::Criteo(Sample()), fit);
  ASSERT_TRUE(h.ok()) << h.status() << "\n" << out.str();
  ASSERT_EQ(h->epochs.size(), 6u);
  EXPECT_EQ(h->epochs[0].steps, (1300 + 31) / 32);
  EXPECT_FALSE(h->epochs[0].evaluated);
  ASSERT_TRUE(h->epochs[2].evaluated);
  ASSERT_TRUE(h->epochs[5].evaluated);
  ASSERT_TRUE(h->epochs[5].test_auc.has_value());
  EXPECT_THAT(out.str(), HasSubstr("test_auc: "));
  EXPECT_LT(h->epochs[5].loss, h->epochs[0].loss);
  // Trained and tested on the same 1300 lines: the model must fit them.
  EXPECT_GT(*h->epochs[5].test_auc, 0.7) << out.str();
  EXPECT_EQ(progress.epoch.load(), 6);
  EXPECT_EQ(progress.step.load(), (1300 + 31) / 32);
  EXPECT_GT(TotalRows(model), 1000);

  absl::StatusOr<EvalResult> r = model.Evaluate(datasets::Criteo(Sample()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->examples, 1300);
  ASSERT_TRUE(r->auc.has_value());
  EXPECT_NEAR(*r->auc, *h->epochs[5].test_auc, 1e-9);
  EXPECT_NEAR(r->loss, h->epochs[5].test_loss, 1e-9);
  EXPECT_NEAR(r->accuracy, h->epochs[5].test_accuracy, 1e-9);
  // Evaluation creates no rows.
  const int64_t rows = TotalRows(model);
  ASSERT_TRUE(model.Evaluate(datasets::Criteo(Sample()), 7).ok());
  EXPECT_EQ(TotalRows(model), rows);

  absl::StatusOr<std::vector<float>> p =
      model.Predict(datasets::Criteo(Sample()), 100);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 1300u);
  for (float v : *p) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LE(v, 1.0f);
  }
  // A second Fit continues from the trained tables and layers.
  FitOptions more{/*epochs=*/1, /*batch_size=*/32};
  more.verbose = 0;
  absl::StatusOr<History> h2 = model.Fit(datasets::Criteo(Sample()), more);
  ASSERT_TRUE(h2.ok()) << h2.status();
  EXPECT_LT(h2->epochs[0].loss, h->epochs[0].loss);
}

TEST(SdkEmbeddingTest, BadModelsAndDataAreRefusedNamingTheProblem) {
  {
    Sequential m(Inputs{13, 26, EmbeddingPerColumn(26, 4)},
                 {Dense(16, "relu", 13), Dense(1, "sigmoid")});
    EXPECT_THAT(m.Compile("adam", "binary_crossentropy"),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    "job.model.layers[0]"));
  }
  {
    Sequential m(Inputs{13, 26, {Embedding("t", {26}, 4)}},
                 {Dense(1, "sigmoid")});
    EXPECT_THAT(m.Compile("adam", "binary_crossentropy"),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    "job.model.embeddings[0].columns[0]"));
  }
  {
    Sequential m(Inputs{13, 26, {Embedding("t", {0}, 4, "max")}},
                 {Dense(1, "sigmoid")});
    EXPECT_THAT(m.Compile("adam", "binary_crossentropy"),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    "job.model.embeddings[0].combiner"));
  }
  {
    Embedding e("t", {0}, 4);
    e.optimizer = "adadelta";
    Sequential m(Inputs{13, 26, {e}}, {Dense(1, "sigmoid")});
    EXPECT_THAT(m.Compile("adam", "binary_crossentropy"),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    "job.model.embeddings[0].optimizer"));
  }
  {
    Sequential m(Inputs{13, 26, EmbeddingPerColumn(26, 4)},
                 {Dense(10, "softmax")});
    EXPECT_THAT(m.Compile("adam", "sparse_categorical_crossentropy",
                          {"auc"}),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    "auc"));
  }

  Sequential model = CriteoModel();
  ASSERT_TRUE(model.Compile("adam", "binary_crossentropy", {"auc"}).ok());
  FitOptions fit;
  fit.verbose = 0;
  EXPECT_THAT(model.Fit(datasets::FromArrays({1, 2}, {0, 1}, 1), fit),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "criteo"));
  EXPECT_THAT(model.Fit(datasets::Criteo(Sample()).Take(10), fit),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "Take()"));
  EXPECT_THAT(model.Fit(datasets::Criteo(Sample(), "sometimes"), fit),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "bad_lines"));
  EXPECT_THAT(model.Fit(datasets::Criteo("/nonexistent/train.tsv"), fit),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(model.Evaluate(datasets::FashionMnist().test),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "datasets::Criteo"));
  EXPECT_THAT(model.Predict(std::vector<float>(13, 0.0f)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(datasets::Criteo(Sample()).Load().status(),
              StatusIs(absl::StatusCode::kInvalidArgument));

  // A malformed line: stop names it; skip trains past it.
  const fs::path dir = fs::temp_directory_path() /
                       ("strata-sdk-embedding-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string bad = (dir / "bad.tsv").string();
  {
    std::ifstream in(Sample());
    std::ofstream f(bad);
    std::string line;
    for (int i = 0; i < 50 && std::getline(in, line); ++i) {
      f << (i == 20 ? "2\tnot a criteo line" : line) << "\n";
    }
  }
  EXPECT_THAT(model.Fit(datasets::Criteo(bad), fit),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "bad.tsv:21"));
  absl::StatusOr<History> skipped =
      model.Fit(datasets::Criteo(bad, "skip"), fit);
  EXPECT_TRUE(skipped.ok()) << skipped.status();

  // Strategies that do not train tables yet say so.
  {
    auto mirrored = MirroredStrategy::Create(2);
    ASSERT_TRUE(mirrored.ok());
    auto scope = (*mirrored)->Scope();
    Sequential m = CriteoModel();
    ASSERT_TRUE(m.Compile("adam", "binary_crossentropy").ok());
    EXPECT_THAT(m.Fit(datasets::Criteo(Sample()), fit),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    "does not train embedding tables"));
  }
  {
    auto central = CentralStorageStrategy::Local({1, 1});
    auto scope = central->Scope();
    Sequential m = CriteoModel();
    ASSERT_TRUE(m.Compile("adam", "binary_crossentropy").ok());
    EXPECT_THAT(m.Fit(datasets::Criteo(Sample()), fit),
                StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                    "does not train embedding tables"));
  }
  fs::remove_all(dir);
}

// The tables live on two PS tasks during the Fit; afterwards they are read
// back (each task saves, this process loads every shard), so Evaluate here
// gives what the cluster's last evaluation gave.
TEST(SdkEmbeddingClusterTest, ParameterServerFitReadsTheTablesBack) {
  auto strategy = ParameterServerStrategy::Local({/*num_ps=*/2,
                                                  /*num_workers=*/1});
  auto scope = strategy->Scope();
  Sequential model = CriteoModel();
  ASSERT_TRUE(
      model.Compile(Adam(), "binary_crossentropy", {"accuracy", "auc"}).ok());
  std::ostringstream out;
  FitOptions fit{/*epochs=*/6, /*batch_size=*/32,
                 /*validation=*/datasets::Criteo(Sample())};
  fit.out = &out;
  absl::StatusOr<History> h = model.Fit(datasets::Criteo(Sample()), fit);
  ASSERT_TRUE(h.ok()) << h.status() << "\n" << out.str();
  ASSERT_EQ(h->epochs.size(), 6u) << out.str();
  ASSERT_TRUE(h->epochs[5].evaluated) << out.str();
  ASSERT_TRUE(h->epochs[5].test_auc.has_value()) << out.str();
  EXPECT_GT(*h->epochs[5].test_auc, 0.7) << out.str();

  std::vector<std::pair<std::string, int64_t>> tables = model.TableRows();
  ASSERT_EQ(tables.size(), 26u);
  EXPECT_GT(TotalRows(model), 1000);
  absl::StatusOr<EvalResult> r = model.Evaluate(datasets::Criteo(Sample()));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->auc.has_value());
  // The cluster evaluated the final layers and rows: the same model.
  EXPECT_NEAR(*r->auc, *h->epochs[5].test_auc, 1e-4) << out.str();
  EXPECT_NEAR(r->loss, h->epochs[5].test_loss, 1e-4) << out.str();
}

// Multi-hot column 0 (comma-separated id lists) in a mean bag, trained
// here and on a PS task: both learn the sample, and a concat embedding of
// the multi-hot column is refused naming the field.
TEST(SdkEmbeddingTest, MultiHotColumnsTrainInABag) {
  const Dataset data = datasets::Criteo(MultiHotSample(), "stop", {0});
  Sequential model = MultiHotModel();
  ASSERT_TRUE(
      model.Compile(Adam(), "binary_crossentropy", {"accuracy", "auc"}).ok());
  std::ostringstream out;
  FitOptions fit{/*epochs=*/6, /*batch_size=*/32, /*validation=*/data};
  fit.validation_freq = 6;
  fit.out = &out;
  absl::StatusOr<History> h = model.Fit(data, fit);
  ASSERT_TRUE(h.ok()) << h.status() << "\n" << out.str();
  ASSERT_TRUE(h->epochs[5].test_auc.has_value());
  EXPECT_GT(*h->epochs[5].test_auc, 0.7) << out.str();
  int64_t bag_rows = 0;
  for (const auto& [name, n] : model.TableRows()) {
    if (name == "bag") bag_rows = n;
  }
  // The bag's table holds the ids of four columns.
  EXPECT_GT(bag_rows, 300);
  // Read as single ids, the lists are malformed.
  Sequential plain = MultiHotModel();
  ASSERT_TRUE(plain.Compile(Adam(), "binary_crossentropy", {"auc"}).ok());
  FitOptions one{/*epochs=*/1, /*batch_size=*/32};
  one.verbose = 0;
  absl::StatusOr<History> refused =
      plain.Fit(datasets::Criteo(MultiHotSample()), one);
  EXPECT_THAT(refused.status().message(), HasSubstr("is not hexadecimal"));
  // A concat embedding over the multi-hot column.
  Inputs concat{13, 26, {Embedding("bag", {0}, 4)}};
  Sequential wrong(std::move(concat), {Dense(1, "sigmoid")});
  ASSERT_TRUE(wrong.Compile(Adam(), "binary_crossentropy", {"auc"}).ok());
  absl::StatusOr<History> w = wrong.Fit(data, one);
  EXPECT_THAT(w.status().message(),
              HasSubstr("a concat embedding reads exactly one id per column"));
}

// Ids in memory (Keras's Embedding input): written once as a criteo file
// that the reader gives back as written, single ids or one multi-hot
// field, removed with the dataset; a model without dense inputs trains on
// them.
TEST(SdkEmbeddingTest, IdsInMemoryTrainAModelWithoutDenseInputs) {
  // 400 examples of 3 ids in [0, 20): label 1 when the first id is even.
  std::vector<int64_t> ids;
  std::vector<int32_t> labels;
  for (int i = 0; i < 400; ++i) {
    for (int c = 0; c < 3; ++c) ids.push_back((i * 7 + c * 13) % 20);
    labels.push_back(ids[ids.size() - 3] % 2 == 0 ? 1 : 0);
  }
  // A directory of this test's own: other tests write to the shared temp dir
  // in parallel, and the bad-input checks below count what is in this one.
  const std::string dir =
      (fs::path(::testing::TempDir()) /
       ("sdk_embedding_ids_" + std::to_string(getpid())))
          .string();
  fs::create_directories(dir);
  std::string path;
  {
    absl::StatusOr<Dataset> single = datasets::FromIds(ids, 3, labels, false, dir);
    ASSERT_TRUE(single.ok()) << single.status();
    path = single->DebugString().substr(7, single->DebugString().find(',') - 7);
    ASSERT_TRUE(fs::exists(path)) << single->DebugString();
    absl::StatusOr<std::unique_ptr<CriteoReader>> reader =
        CriteoReader::Create(path, CriteoReaderOptions());
    ASSERT_TRUE(reader.ok()) << reader.status();
    CriteoBatch batch;
    ASSERT_TRUE(*(*reader)->Next(&batch, 1000));
    ASSERT_EQ(batch.size, 400);
    for (int i = 0; i < 400; ++i) {
      EXPECT_EQ(batch.labels[i], labels[i]);
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(batch.categorical[i * 26 + c], ids[i * 3 + c]);
      }
      EXPECT_EQ(batch.categorical[i * 26 + 3], kCriteoMissingId);
      EXPECT_EQ(batch.dense[i * 13], 0.0f);
    }

    Inputs inputs{0, 26, {Embedding("ids", {0, 1, 2}, 4)}};
    inputs.embeddings[0].optimizer.learning_rate = 0.2;
    Sequential model(std::move(inputs), {Dense(8, "relu"), Dense(1, "sigmoid")});
    ASSERT_TRUE(model.Compile(Adam(0.01), "binary_crossentropy", {"accuracy"}).ok());
    EXPECT_EQ(model.num_features(), 3 * 4);
    FitOptions fit{/*epochs=*/15, /*batch_size=*/16, /*validation=*/*single};
    fit.validation_freq = 15;
    fit.verbose = 0;
    absl::StatusOr<History> h = model.Fit(*single, fit);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_GT(h->epochs.back().test_accuracy, 0.95);
    EXPECT_EQ(TotalRows(model), 20);
  }
  EXPECT_FALSE(fs::exists(path)) << "the last copy removes its file";

  // One multi-hot field per example, for a mean bag over column 0.
  absl::StatusOr<Dataset> bag = datasets::FromIds(ids, 3, labels, true, dir);
  ASSERT_TRUE(bag.ok()) << bag.status();
  Inputs bag_inputs{0, 26, {Embedding("ids", {0}, 4, "mean")}};
  Sequential bag_model(std::move(bag_inputs), {Dense(1, "sigmoid")});
  ASSERT_TRUE(bag_model.Compile(Adam(0.01), "binary_crossentropy", {"accuracy"}).ok());
  FitOptions one{/*epochs=*/1, /*batch_size=*/16};
  one.verbose = 0;
  absl::StatusOr<History> hb = bag_model.Fit(*bag, one);
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(TotalRows(bag_model), 20);

  // Bad input names the value; nothing is written.
  const auto count = [&] {
    return std::distance(fs::directory_iterator(dir), fs::directory_iterator());
  };
  const auto before = count();
  std::vector<int64_t> negative = ids;
  negative[5] = -3;
  EXPECT_THAT(datasets::FromIds(negative, 3, labels, false, dir).status().message(),
              HasSubstr("id [1, 2] is negative (-3)"));
  std::vector<int32_t> three = labels;
  three[7] = 3;
  EXPECT_THAT(datasets::FromIds(ids, 3, three, false, dir).status().message(),
              HasSubstr("label 7 is 3; labels must be 0 or 1"));
  EXPECT_THAT(datasets::FromIds(ids, 4, labels, false, dir).status().message(),
              HasSubstr("400 labels of 4 ids need 1600 ids, got 1200"));
  EXPECT_THAT(datasets::FromIds(std::vector<int64_t>(27, 1), 27, {1}, false, dir)
                  .status()
                  .message(),
              HasSubstr("columns must be in [1, 26]"));
  EXPECT_EQ(count(), before);
  EXPECT_EQ(datasets::FromIds(ids, 3, labels, false, "/nonexistent/dir")
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
}

TEST(SdkEmbeddingClusterTest, MultiHotColumnsTrainOnThePsTasks) {
  auto strategy = ParameterServerStrategy::Local({/*num_ps=*/1,
                                                  /*num_workers=*/1});
  auto scope = strategy->Scope();
  const Dataset data = datasets::Criteo(MultiHotSample(), "stop", {0});
  Sequential model = MultiHotModel();
  ASSERT_TRUE(
      model.Compile(Adam(), "binary_crossentropy", {"accuracy", "auc"}).ok());
  std::ostringstream out;
  FitOptions fit{/*epochs=*/6, /*batch_size=*/32, /*validation=*/data};
  fit.out = &out;
  absl::StatusOr<History> h = model.Fit(data, fit);
  ASSERT_TRUE(h.ok()) << h.status() << "\n" << out.str();
  ASSERT_EQ(h->epochs.size(), 6u) << out.str();
  ASSERT_TRUE(h->epochs[5].test_auc.has_value()) << out.str();
  EXPECT_GT(*h->epochs[5].test_auc, 0.7) << out.str();
  absl::StatusOr<EvalResult> r = model.Evaluate(data);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->auc.has_value());
  EXPECT_NEAR(*r->auc, *h->epochs[5].test_auc, 1e-4) << out.str();
}

}  // namespace
}  // namespace strata::sdk

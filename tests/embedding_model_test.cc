// Embedding models (worker/embedding_model.h): the layers' input gathered
// from the tables (concat, sum and mean bags, shared tables), one gradient
// row per distinct id, those gradients against finite differences, and
// local training on the checked-in Criteo-format sample.
#include "worker/embedding_model.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "job/job.h"
#include "tests/test_util.h"

namespace strata {
namespace {

// Rows in a map, each id's row a fixed function of (table, id) until set.
class FakeTables : public EmbeddingTables {
 public:
  explicit FakeTables(std::map<std::string, int64_t> dims)
      : dims_(std::move(dims)) {}

  std::vector<float>& Row(const std::string& table, int64_t id) {
    auto key = std::make_pair(table, id);
    auto it = rows_.find(key);
    if (it == rows_.end()) {
      std::vector<float> row(static_cast<size_t>(dims_.at(table)));
      for (size_t k = 0; k < row.size(); ++k) {
        row[k] = 0.1f * static_cast<float>((id * 7 + static_cast<int64_t>(k) * 3 +
                                            static_cast<int64_t>(table.size())) %
                                           11) -
                 0.5f;
      }
      it = rows_.emplace(key, row).first;
    }
    return it->second;
  }

  absl::Status Lookup(const std::string& table, absl::Span<const int64_t> ids,
                      bool train, absl::Span<float> out) override {
    lookups_[table] += static_cast<int64_t>(ids.size());
    const int64_t dim = dims_.at(table);
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::vector<float>& row = Row(table, ids[i]);
      std::copy(row.begin(), row.end(), out.begin() + i * dim);
    }
    return absl::OkStatus();
  }
  absl::Status Push(const std::string&, absl::Span<const int64_t>,
                    absl::Span<const float>, int64_t) override {
    return absl::OkStatus();
  }

  std::map<std::string, int64_t> lookups_;

 private:
  std::map<std::string, int64_t> dims_;
  std::map<std::pair<std::string, int64_t>, std::vector<float>> rows_;
};

// 2 dense features, 3 categorical columns: table "a" (dim 2) over column
// 0, a sum bag of "b" (dim 3) over columns 1 and 2, and a mean bag over
// the same columns sharing "b".
ModelSpec SmallModel() {
  ModelSpec m;
  m.input_shape = {2};
  m.categorical_columns = 3;
  EmbeddingSpec a;
  a.table = "a";
  a.columns = {0};
  a.output_dim = 2;
  EmbeddingSpec b;
  b.table = "b";
  b.columns = {1, 2};
  b.output_dim = 3;
  b.combiner = "sum";
  EmbeddingSpec c = b;
  c.combiner = "mean";
  m.embeddings = {a, b, c};
  LayerSpec hidden;
  hidden.units = 4;
  hidden.activation = Activation::kTanh;
  LayerSpec out;
  out.units = 1;
  out.activation = Activation::kSigmoid;
  m.layers = {hidden, out};
  return m;
}

TEST(EmbeddingModelTest, GatherLaysOutEachCombinerAndLooksUpDistinctIds) {
  absl::StatusOr<EmbeddingModel> model = EmbeddingModel::Create(SmallModel());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->width(), 2 + 2 + 3 + 3);
  FakeTables tables({{"a", 2}, {"b", 3}});
  const std::vector<float> dense = {1, 2, 3, 4};
  // Example 0: a=5, b ids 9 and 9 (the same id twice); example 1: a=5,
  // b ids 9 and -4.
  const std::vector<int64_t> ids = {5, 9, 9, 5, 9, -4};
  std::vector<float> x;
  GatherPlan plan;
  STRATA_ASSERT_OK(model->Gather(tables, dense.data(), CategoricalIds{ids.data()}, 2,
                                 /*train=*/true, &x, &plan));
  // One lookup per distinct id of each table.
  EXPECT_EQ(tables.lookups_["a"], 1);
  EXPECT_EQ(tables.lookups_["b"], 2);
  ASSERT_EQ(x.size(), 20u);
  const std::vector<float> a5 = tables.Row("a", 5);
  const std::vector<float> b9 = tables.Row("b", 9);
  const std::vector<float> bm4 = tables.Row("b", -4);
  EXPECT_EQ(x[0], 1);
  EXPECT_EQ(x[1], 2);
  EXPECT_EQ(x[2], a5[0]);
  EXPECT_EQ(x[3], a5[1]);
  for (int k = 0; k < 3; ++k) {
    EXPECT_FLOAT_EQ(x[4 + k], 2 * b9[k]);               // sum
    EXPECT_FLOAT_EQ(x[7 + k], b9[k]);                   // mean
    EXPECT_FLOAT_EQ(x[10 + 4 + k], b9[k] + bm4[k]);     // example 1's sum
    EXPECT_FLOAT_EQ(x[10 + 7 + k], (b9[k] + bm4[k]) / 2);
  }
  // Scatter: one summed row per distinct id.
  std::vector<float> grad(20, 0.0f);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(i);
  std::vector<TableGradients> g;
  model->Scatter(plan, grad.data(), &g);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].table, "a");
  EXPECT_EQ(g[0].ids, std::vector<int64_t>({5}));
  EXPECT_EQ(g[0].gradients, std::vector<float>({2 + 12, 3 + 13}));
  EXPECT_EQ(g[1].ids, std::vector<int64_t>({9, -4}));
  for (int k = 0; k < 3; ++k) {
    // id 9: twice in example 0's sum and mean (1/2 each), once in example
    // 1's sum and mean.
    const float e0 = 2 * grad[4 + k] + 2 * 0.5f * grad[7 + k];
    const float e1 = grad[14 + k] + 0.5f * grad[17 + k];
    EXPECT_FLOAT_EQ(g[1].gradients[k], e0 + e1);
    EXPECT_FLOAT_EQ(g[1].gradients[3 + k], e1);
  }
}

// Checks the gradient rows Scatter gives from Model::TrainStep's input
// gradient (layers of `spec`, weights from `seed`) against central
// differences of the batch's mean loss in every element of every row;
// returns how many elements it checked.
int CheckRowGradientsAgainstFiniteDifferences(
    const ModelSpec& spec, uint64_t seed, FakeTables& tables,
    const std::vector<float>& dense, CategoricalIds ids,
    const std::vector<int32_t>& labels) {
  absl::StatusOr<EmbeddingModel> model = EmbeddingModel::Create(spec);
  EXPECT_TRUE(model.ok()) << model.status();
  absl::StatusOr<Model> layers = Model::Build(spec, "binary_crossentropy", seed);
  EXPECT_TRUE(layers.ok()) << layers.status();
  if (!model.ok() || !layers.ok()) return 0;
  std::vector<std::vector<float>> params;
  EXPECT_TRUE(layers->InitializeParams(&params).ok());
  const int64_t batch = static_cast<int64_t>(labels.size());
  auto step = [&](std::vector<float>* x_grad) {
    std::vector<float> x;
    GatherPlan plan;
    EXPECT_TRUE(
        model->Gather(tables, dense.data(), ids, batch, true, &x, &plan).ok());
    std::vector<std::vector<float>> grads;
    if (x_grad != nullptr) x_grad->resize(x.size());
    absl::StatusOr<StepStats> s = layers->TrainStep(
        Model::Views(params), x.data(), labels.data(), batch, 0, &grads,
        nullptr, x_grad != nullptr ? x_grad->data() : nullptr);
    EXPECT_TRUE(s.ok()) << s.status();
    return std::make_pair(s.ok() ? s->loss : 0.0, plan);
  };
  std::vector<float> x_grad;
  const GatherPlan plan = step(&x_grad).second;
  std::vector<TableGradients> g;
  model->Scatter(plan, x_grad.data(), &g);
  int checked = 0;
  for (const TableGradients& t : g) {
    if (t.ids.empty()) continue;
    const size_t dim = t.gradients.size() / t.ids.size();
    for (size_t i = 0; i < t.ids.size(); ++i) {
      for (size_t k = 0; k < dim; ++k) {
        float& v = tables.Row(t.table, t.ids[i])[k];
        const float saved = v;
        const float eps = 1e-2f;
        v = saved + eps;
        const double up = step(nullptr).first;
        v = saved - eps;
        const double down = step(nullptr).first;
        v = saved;
        const double numeric = (up - down) / (2 * eps);
        EXPECT_NEAR(t.gradients[i * dim + k], numeric,
                    2e-3 + 2e-2 * std::abs(numeric))
            << t.table << " id " << t.ids[i] << " element " << k;
        ++checked;
      }
    }
  }
  return checked;
}

// The gradient rows are the derivatives of the batch's mean loss.
TEST(EmbeddingModelTest, RowGradientsMatchFiniteDifferences) {
  FakeTables tables({{"a", 2}, {"b", 3}});
  const std::vector<float> dense = {0.5f, -1, 2, 0.25f, -0.5f, 1};
  const std::vector<int64_t> ids = {5, 9, 9, 6, 9, -4, 5, -4, 7};
  const std::vector<int32_t> labels = {1, 0, 1};
  const int checked = CheckRowGradientsAgainstFiniteDifferences(
      SmallModel(), 3, tables, dense, CategoricalIds{ids.data()}, labels);
  EXPECT_EQ(checked, 2 * 2 + 3 * 3);  // a: ids 5 and 6; b: 9, -4 and 7
}

// Multi-hot columns: 1 dense feature, 2 categorical columns whose fields
// hold 0 or more ids; a sum bag and a mean bag over both, sharing table
// "t" (dim 2), and a concat embedding of column 1 into table "c" (dim 1).
ModelSpec MultiHotModel(bool with_concat) {
  ModelSpec m;
  m.input_shape = {1};
  m.categorical_columns = 2;
  EmbeddingSpec sum;
  sum.table = "t";
  sum.columns = {0, 1};
  sum.output_dim = 2;
  sum.combiner = "sum";
  EmbeddingSpec mean = sum;
  mean.combiner = "mean";
  m.embeddings = {sum, mean};
  if (with_concat) {
    EmbeddingSpec c;
    c.table = "c";
    c.columns = {1};
    c.output_dim = 1;
    m.embeddings.push_back(c);
  }
  LayerSpec hidden;
  hidden.units = 3;
  hidden.activation = Activation::kTanh;
  LayerSpec out;
  out.units = 1;
  out.activation = Activation::kSigmoid;
  m.layers = {hidden, out};
  return m;
}

// Example 0: column 0 {1, 2}, column 1 {3}; example 1: no ids at all;
// example 2: column 0 {2, 2, 4}, column 1 {1}.
const std::vector<int64_t> kMultiIds = {1, 2, 3, 2, 2, 4, 1};
const std::vector<int64_t> kMultiOffsets = {0, 2, 3, 3, 3, 6, 7};

TEST(EmbeddingModelTest, MultiHotBagsSumAndAverageEveryIdOfTheExample) {
  absl::StatusOr<EmbeddingModel> model =
      EmbeddingModel::Create(MultiHotModel(false));
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->width(), 1 + 2 + 2);
  FakeTables tables({{"t", 2}});
  const std::vector<float> dense = {7, 8, 9};
  std::vector<float> x;
  GatherPlan plan;
  STRATA_ASSERT_OK(model->Gather(
      tables, dense.data(), CategoricalIds{kMultiIds.data(), kMultiOffsets.data()},
      3, /*train=*/true, &x, &plan));
  // One lookup per distinct id: 1, 2, 3, 4.
  EXPECT_EQ(tables.lookups_["t"], 4);
  EXPECT_EQ(plan.ids[0], std::vector<int64_t>({1, 2, 3, 4}));
  ASSERT_EQ(x.size(), 15u);
  auto row = [&](int64_t id) { return tables.Row("t", id); };
  for (int k = 0; k < 2; ++k) {
    const float e0 = row(1)[k] + row(2)[k] + row(3)[k];
    const float e2 = 2 * row(2)[k] + row(4)[k] + row(1)[k];
    EXPECT_FLOAT_EQ(x[1 + k], e0);              // sum
    EXPECT_FLOAT_EQ(x[3 + k], e0 / 3);          // mean of 3 ids
    EXPECT_EQ(x[5 + 1 + k], 0.0f);              // no ids: zeros
    EXPECT_EQ(x[5 + 3 + k], 0.0f);
    EXPECT_FLOAT_EQ(x[10 + 1 + k], e2);
    EXPECT_FLOAT_EQ(x[10 + 3 + k], e2 / 4);     // mean of 4 ids
  }
  EXPECT_EQ(x[0], 7);
  EXPECT_EQ(x[5], 8);
  EXPECT_EQ(x[10], 9);
  // Scatter: each occurrence adds its bag's gradient (1/count for mean).
  std::vector<float> grad(15);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(i + 1);
  std::vector<TableGradients> g;
  model->Scatter(plan, grad.data(), &g);
  ASSERT_EQ(g.size(), 1u);
  for (int k = 0; k < 2; ++k) {
    const float s0 = grad[1 + k] + grad[3 + k] / 3;
    const float s2 = grad[11 + k] + grad[13 + k] / 4;
    EXPECT_FLOAT_EQ(g[0].gradients[0 * 2 + k], s0 + s2);      // id 1
    EXPECT_FLOAT_EQ(g[0].gradients[1 * 2 + k], s0 + 2 * s2);  // id 2
    EXPECT_FLOAT_EQ(g[0].gradients[2 * 2 + k], s0);           // id 3
    EXPECT_FLOAT_EQ(g[0].gradients[3 * 2 + k], s2);           // id 4
  }
}

TEST(EmbeddingModelTest, MultiHotRowGradientsMatchFiniteDifferences) {
  FakeTables tables({{"t", 2}});
  const std::vector<float> dense = {0.5f, -1, 2};
  const std::vector<int32_t> labels = {1, 0, 1};
  const int checked = CheckRowGradientsAgainstFiniteDifferences(
      MultiHotModel(false), 5, tables, dense,
      CategoricalIds{kMultiIds.data(), kMultiOffsets.data()}, labels);
  EXPECT_EQ(checked, 4 * 2);
}

TEST(EmbeddingModelTest, ConcatOfAFieldWithoutExactlyOneIdIsRefused) {
  absl::StatusOr<EmbeddingModel> model =
      EmbeddingModel::Create(MultiHotModel(true));
  ASSERT_TRUE(model.ok());
  FakeTables tables({{"t", 2}, {"c", 1}});
  const std::vector<float> dense = {7, 8, 9};
  std::vector<float> x;
  GatherPlan plan;
  // Example 1's column 1 holds no id.
  absl::Status s = model->Gather(
      tables, dense.data(), CategoricalIds{kMultiIds.data(), kMultiOffsets.data()},
      3, true, &x, &plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              testing::HasSubstr("example 1 of the batch holds 0 ids in "
                                 "categorical column 1, which a concat "
                                 "embedding (table 'c') reads as exactly one"));
}

// local_train's trainer on the checked-in sample (generated data whose
// labels follow the ids' hidden latent vectors): the tables learn, so the
// AUC rises well above chance.
TEST(EmbeddingModelTest, TrainerLearnsTheSampleAndCountsTableRows) {
  const std::string sample =
      std::string(STRATA_SOURCE_DIR) + "/tests/data/criteo_sample.tsv";
  nlohmann::json emb = nlohmann::json::array();
  for (int c = 0; c < 26; ++c) {
    emb.push_back({{"table", absl::StrCat("C", c)},
                   {"columns", {c}},
                   {"output_dim", 4},
                   {"optimizer", {{"type", "adagrad"},
                                  {"learning_rate", 0.1}}}});
  }
  const nlohmann::json job_json = {
      {"model",
       {{"input_shape", {13}},
        {"categorical_columns", 26},
        {"embeddings", emb},
        {"layers",
         {{{"type", "dense"}, {"units", 16}, {"activation", "relu"}},
          {{"type", "dense"}, {"units", 1}, {"activation", "sigmoid"}}}}}},
      {"loss", "binary_crossentropy"},
      {"optimizer", "adam"},
      {"data",
       {{"format", "criteo"}, {"train", {{"path", sample}}},
        {"test", {{"path", sample}}}}},
      {"batch_size", 32},
      {"seed", 1}};
  absl::StatusOr<JobSpec> job = ParseJob(job_json);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<EmbeddingTrainer>> trainer =
      EmbeddingTrainer::Create(*job);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<std::unique_ptr<CriteoReader>> reader =
      CriteoReader::Create(sample, CriteoReaderOptions());
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<BinaryEvaluation> before = (*trainer)->Evaluate(**reader);
  ASSERT_TRUE(before.ok()) << before.status();
  for (int epoch = 0; epoch < 10; ++epoch) {
    absl::StatusOr<StepStats> s = (*trainer)->TrainEpoch(**reader);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->examples, 1300);
  }
  absl::StatusOr<BinaryEvaluation> after = (*trainer)->Evaluate(**reader);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->examples, 1300);
  EXPECT_GT(after->auc, 0.7) << "before: " << before->auc;
  EXPECT_LT(after->log_loss, before->log_loss);
  const auto stats = (*trainer)->tables().Stats();
  ASSERT_EQ(stats.size(), 26u);
  for (const auto& [name, s] : stats) {
    EXPECT_GT(s.rows, 0) << name;
    EXPECT_GT(s.updates, 0) << name;
  }
  // The evaluation created no rows and counted nothing.
  const int64_t rows_before = stats.at("C0").rows;
  ASSERT_TRUE((*trainer)->Evaluate(**reader).ok());
  EXPECT_EQ((*trainer)->tables().Stats().at("C0").rows, rows_before);
}

TEST(EmbeddingModelTest, JobsWithEmbeddingsAreCheckedNamingTheField) {
  const nlohmann::json base = {
      {"model",
       {{"input_shape", {13}},
        {"categorical_columns", 26},
        {"embeddings",
         {{{"table", "t"}, {"columns", {0, 1}}, {"output_dim", 4},
           {"combiner", "sum"}}}},
        {"layers", {{{"type", "dense"}, {"units", 1},
                     {"activation", "sigmoid"}}}}}},
      {"loss", "binary_crossentropy"},
      {"optimizer", "adam"},
      {"data", {{"format", "criteo"}, {"train", {{"path", "/x.tsv"}}}}}};
  absl::StatusOr<JobSpec> ok = ParseJob(base);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(EmbeddingWidth(ok->model), 4);
  EXPECT_EQ(DenseModelSpec(ok->model).input_shape, Shape({17}));
  struct Case {
    std::string pointer;
    nlohmann::json value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/model/embeddings/0/columns/1", 26,
       "job.model.embeddings[0].columns[1]: expected a categorical column in "
       "[0, 26)"},
      {"/model/embeddings/0/output_dim", 0, "job.model.embeddings[0].output_dim"},
      {"/model/embeddings/0/combiner", "max", "job.model.embeddings[0].combiner"},
      {"/model/embeddings/0/optimizer", "rmsprop",
       "job.model.embeddings[0].optimizer: 'rmsprop' is not one of"},
      {"/model/embeddings/0/eviction", "fifo", "job.model.embeddings[0].eviction"},
      {"/model/categorical_columns", 3,
       "criteo data has 13 integer and 26 categorical columns"},
      {"/data/bad_lines", "ignore", "job.data.bad_lines"},
      {"/data/multi_hot_columns", nlohmann::json({3, 26}),
       "job.data.multi_hot_columns[1]: expected a categorical column in "
       "[0, 26), got 26"},
      {"/data/multi_hot_columns", nlohmann::json({4, 4}),
       "job.data.multi_hot_columns[1]: column 4 is listed twice"},
      {"/data/multi_hot_columns", 4,
       "job.data.multi_hot_columns: expected an array"},
      {"/data/max_ids_per_field", 0, "job.data.max_ids_per_field"},
      {"/model/embeddings/0/optimizer",
       nlohmann::json({{"type", "lazy_adam"}, {"beta_1", 1.0}}),
       "job.model.embeddings[0].optimizer.beta_1"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = base;
    j[nlohmann::json::json_pointer(c.pointer)] = c.value;
    EXPECT_THAT(ParseJob(j), StatusIsWithMessage(
                                 absl::StatusCode::kInvalidArgument, c.message))
        << c.pointer;
  }
  // A model with embeddings may leave the dense columns out ([0]); one
  // without may not, nor may [0] be part of a longer shape.
  nlohmann::json no_dense = base;
  no_dense["model"]["input_shape"] = {0};
  absl::StatusOr<JobSpec> no_dense_ok = ParseJob(no_dense);
  ASSERT_TRUE(no_dense_ok.ok()) << no_dense_ok.status();
  EXPECT_EQ(DenseModelSpec(no_dense_ok->model).input_shape, Shape({4}));
  no_dense["model"]["input_shape"] = {0, 13};
  EXPECT_THAT(ParseJob(no_dense),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.model.input_shape[0]: expected a "
                                  "positive integer, got 0"));
  no_dense["model"]["input_shape"] = {0};
  no_dense["model"].erase("embeddings");
  no_dense["model"].erase("categorical_columns");
  no_dense["data"] = {{"format", "csv"}, {"train", {{"path", "/x.csv"}}}};
  EXPECT_THAT(ParseJob(no_dense),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "job.model.input_shape[0]: expected a "
                                  "positive integer, got 0"));
  // Multi-hot columns: a bag may read them, a concat embedding may not.
  nlohmann::json multi = base;
  multi["data"]["multi_hot_columns"] = {1, 5};
  multi["data"]["max_ids_per_field"] = 64;
  absl::StatusOr<JobSpec> multi_ok = ParseJob(multi);
  ASSERT_TRUE(multi_ok.ok()) << multi_ok.status();
  EXPECT_EQ(multi_ok->data.multi_hot_columns, std::vector<int64_t>({1, 5}));
  EXPECT_EQ(multi_ok->data.max_ids_per_field, 64);
  multi["model"]["embeddings"].push_back(
      {{"table", "u"}, {"columns", {2, 5}}, {"output_dim", 2}});
  EXPECT_THAT(ParseJob(multi),
              StatusIsWithMessage(
                  absl::StatusCode::kInvalidArgument,
                  "job.model.embeddings[1].columns[1]: column 5 is multi-hot "
                  "(job.data.multi_hot_columns): a concat embedding reads "
                  "exactly one id per column"));
  // A second embedding on the same table with another width.
  nlohmann::json shared = base;
  shared["model"]["embeddings"].push_back(
      {{"table", "t"}, {"columns", {2}}, {"output_dim", 8}});
  EXPECT_THAT(ParseJob(shared),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "shares table 't' with embeddings[0]"));
}

}  // namespace
}  // namespace strata

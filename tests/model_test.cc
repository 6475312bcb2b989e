#include "worker/model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/initializers.h"
#include "tests/model_spec_util.h"
#include "tests/test_util.h"
#include "worker/dataset.h"
#include "job/job.h"

namespace strata {
namespace {

using testing_util::Dense;
using testing_util::Dropout;
using testing_util::Flatten;
using testing_util::ReferenceModel;

// Deterministic pseudo-random values in [lo, hi).
std::vector<float> RandomVector(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& f : v) {
    f = lo + (hi - lo) * static_cast<float>(rng() % 100000) / 100000.0f;
  }
  return v;
}

TEST(ModelTest, VariablesAreNamedLikeKeras) {
  absl::StatusOr<Model> model =
      Model::Build(ReferenceModel(), "sparse_categorical_crossentropy", 1);
  STRATA_ASSERT_OK(model);
  const std::vector<VariableDef>& vars = model->variables();
  ASSERT_EQ(vars.size(), 4u);
  EXPECT_EQ(vars[0].name, "dense/kernel");
  EXPECT_EQ(vars[0].shape, Shape({784, 128}));
  EXPECT_EQ(vars[0].init.type, InitializerType::kGlorotUniform);
  EXPECT_EQ(vars[0].init.seed, 1u);
  EXPECT_EQ(vars[1].name, "dense/bias");
  EXPECT_EQ(vars[1].shape, Shape({128}));
  EXPECT_EQ(vars[1].init.type, InitializerType::kZeros);
  EXPECT_EQ(vars[2].name, "dense_1/kernel");
  EXPECT_EQ(vars[2].shape, Shape({128, 10}));
  EXPECT_EQ(vars[2].init.seed, 2u);
  EXPECT_EQ(vars[3].name, "dense_1/bias");
  EXPECT_EQ(model->num_features(), 784);
  EXPECT_EQ(model->num_outputs(), 10);
  EXPECT_EQ(model->num_parameters(), 784 * 128 + 128 + 128 * 10 + 10);
}

TEST(ModelTest, InitializeParamsMatchesParameterServerFill) {
  absl::StatusOr<Model> model =
      Model::Build(ReferenceModel(), "sparse_categorical_crossentropy", 7);
  STRATA_ASSERT_OK(model);
  std::vector<std::vector<float>> params;
  STRATA_ASSERT_OK(model->InitializeParams(&params));
  ASSERT_EQ(params.size(), 4u);
  // A PS holding rows [100, 300) of dense/kernel computes the same values.
  const VariableDef& kernel = model->variables()[0];
  std::vector<float> shard(200 * 128);
  STRATA_ASSERT_OK(FillInitializer(kernel.init, kernel.name, DType::kFloat32,
                                   kernel.shape, 100, shard.data(),
                                   static_cast<int64_t>(shard.size())));
  EXPECT_TRUE(std::equal(shard.begin(), shard.end(),
                         params[0].begin() + 100 * 128));
  // Glorot uniform bounds, and not all equal.
  const float limit = std::sqrt(6.0f / (784 + 128));
  EXPECT_LE(*std::max_element(params[0].begin(), params[0].end()), limit);
  EXPECT_GE(*std::min_element(params[0].begin(), params[0].end()), -limit);
  EXPECT_NE(params[0][0], params[0][1]);
  EXPECT_THAT(params[1], ::testing::Each(0.0f));
  // Another seed, other values.
  absl::StatusOr<Model> other =
      Model::Build(ReferenceModel(), "sparse_categorical_crossentropy", 8);
  STRATA_ASSERT_OK(other);
  std::vector<std::vector<float>> other_params;
  STRATA_ASSERT_OK(other->InitializeParams(&other_params));
  EXPECT_NE(params[0], other_params[0]);
}

struct OutputCase {
  std::string loss;
  Activation activation;
  int64_t units;
};

// Every layer type, activation and loss: the analytic gradients of the mean
// loss match central finite differences (float forward, so a tolerance of a
// few 1e-3 relative).
TEST(ModelTest, GradientsMatchFiniteDifferences) {
  const std::vector<Activation> hidden = {
      Activation::kLinear, Activation::kRelu, Activation::kSigmoid,
      Activation::kTanh, Activation::kSoftmax};
  const std::vector<OutputCase> outputs = {
      {"sparse_categorical_crossentropy", Activation::kSoftmax, 3},
      {"categorical_crossentropy", Activation::kSoftmax, 3},
      {"binary_crossentropy", Activation::kSigmoid, 1},
      {"mse", Activation::kLinear, 3},
      {"mse", Activation::kSigmoid, 1},
      {"mse", Activation::kSoftmax, 3},
      {"mse", Activation::kTanh, 2},
      {"mean_squared_error", Activation::kRelu, 3},
      // Huber with a delta past every error: its smooth, quadratic part
      // (the kinks of both branches and of mae: MaeAndHuberGradients).
      {"huber", Activation::kLinear, 3},
  };
  const int64_t batch = 4;
  const std::vector<float> x = RandomVector(batch * 6, 1, -1.0f, 1.0f);
  for (Activation h : hidden) {
    for (const OutputCase& out : outputs) {
      for (double rate : {0.0, 0.4}) {
        SCOPED_TRACE(absl::StrCat("hidden ", ActivationName(h), ", output ",
                                  ActivationName(out.activation), " x",
                                  out.units, ", loss ", out.loss,
                                  ", dropout ", rate));
        ModelSpec spec;
        spec.input_shape = {2, 3};
        spec.layers = {Flatten(),         Dropout(rate), Dense(5, h),
                       Dropout(rate),     Dense(4, h, /*use_bias=*/false),
                       Dense(out.units, out.activation)};
        if (out.loss == "huber") spec.huber_delta = 100;
        absl::StatusOr<Model> model = Model::Build(spec, out.loss, 3);
        STRATA_ASSERT_OK(model);
        std::vector<std::vector<float>> params;
        STRATA_ASSERT_OK(model->InitializeParams(&params));
        // Non-zero biases so that every path is exercised.
        for (size_t v = 0; v < params.size(); ++v) {
          if (model->variables()[v].shape.size() == 1) {
            params[v] = RandomVector(params[v].size(), 10 + v, -0.3f, 0.3f);
          }
        }
        std::vector<int32_t> y(batch);
        for (int64_t b = 0; b < batch; ++b) {
          y[b] = static_cast<int32_t>(b % std::max<int64_t>(out.units, 2));
        }
        const uint64_t dropout_seed = 99;
        std::vector<std::vector<float>> grads;
        absl::StatusOr<StepStats> stats =
            model->TrainStep(Model::Views(params), x.data(), y.data(), batch,
                             dropout_seed, &grads);
        STRATA_ASSERT_OK(stats);
        ASSERT_EQ(grads.size(), params.size());
        EXPECT_TRUE(std::isfinite(stats->loss));

        std::vector<std::vector<float>> scratch;
        auto loss_at = [&](size_t v, size_t i, float value) {
          const float saved = params[v][i];
          params[v][i] = value;
          absl::StatusOr<StepStats> s =
              model->TrainStep(Model::Views(params), x.data(), y.data(),
                               batch, dropout_seed, &scratch);
          params[v][i] = saved;
          return s.ok() ? s->loss : std::nan("");
        };
        // ReLU is not differentiable at 0: a step that moves some
        // pre-activation across 0 shows up as one-sided slopes that
        // disagree; such points (only with relu) are skipped, a few at most.
        const bool has_kinks =
            h == Activation::kRelu || out.activation == Activation::kRelu;
        const double base = stats->loss;
        int checked = 0;
        int skipped = 0;
        for (size_t v = 0; v < params.size(); ++v) {
          for (size_t i = 0; i < params[v].size(); ++i) {
            const float p = params[v][i];
            const float hi = p + 1e-2f;
            const float lo = p - 1e-2f;
            const double up = loss_at(v, i, hi);
            const double down = loss_at(v, i, lo);
            const double numeric = (up - down) / (double{hi} - lo);
            const double right = (up - base) / (double{hi} - p);
            const double left = (base - down) / (double{p} - lo);
            const double scale =
                std::max(1e-2, std::fabs(right) + std::fabs(left));
            if (has_kinks && std::fabs(right - left) > 0.1 * scale) {
              ++skipped;
              continue;
            }
            ++checked;
            const double analytic = grads[v][i];
            const double err = std::fabs(numeric - analytic) /
                               std::max(1e-2, std::fabs(numeric) +
                                                  std::fabs(analytic));
            EXPECT_LT(err, 1e-2)
                << model->variables()[v].name << "[" << i
                << "]: numeric " << numeric << " analytic " << analytic;
          }
        }
        EXPECT_LE(skipped, checked / 10);
      }
    }
  }
}

TEST(ModelTest, DropoutOnlyInTraining) {
  ModelSpec with;
  with.input_shape = {8};
  with.layers = {Dense(16, Activation::kRelu), Dropout(0.5),
                 Dense(3, Activation::kSoftmax)};
  ModelSpec without = with;
  without.layers.erase(without.layers.begin() + 1);
  absl::StatusOr<Model> a =
      Model::Build(with, "sparse_categorical_crossentropy", 5);
  absl::StatusOr<Model> b =
      Model::Build(without, "sparse_categorical_crossentropy", 5);
  STRATA_ASSERT_OK(a);
  STRATA_ASSERT_OK(b);
  std::vector<std::vector<float>> params;
  STRATA_ASSERT_OK(a->InitializeParams(&params));

  Dataset data;
  data.size = 20;
  data.features = 8;
  data.x = RandomVector(20 * 8, 4, 0.0f, 1.0f);
  for (int i = 0; i < 20; ++i) data.labels.push_back(i % 3);
  absl::StatusOr<StepStats> ea = a->Evaluate(Model::Views(params), data);
  absl::StatusOr<StepStats> eb = b->Evaluate(Model::Views(params), data);
  STRATA_ASSERT_OK(ea);
  STRATA_ASSERT_OK(eb);
  // Same variables (dropout has none): evaluation ignores the dropout layer.
  EXPECT_DOUBLE_EQ(ea->loss, eb->loss);
  EXPECT_DOUBLE_EQ(ea->accuracy, eb->accuracy);
  EXPECT_EQ(ea->examples, 20);

  // Training applies it: the mask depends on the seed, and only on it.
  std::vector<std::vector<float>> g1, g2, g3, g_off;
  const auto views = Model::Views(params);
  absl::StatusOr<StepStats> s1 =
      a->TrainStep(views, data.x.data(), data.labels.data(), 20, 1, &g1);
  absl::StatusOr<StepStats> s2 =
      a->TrainStep(views, data.x.data(), data.labels.data(), 20, 1, &g2);
  absl::StatusOr<StepStats> s3 =
      a->TrainStep(views, data.x.data(), data.labels.data(), 20, 2, &g3);
  absl::StatusOr<StepStats> off =
      b->TrainStep(views, data.x.data(), data.labels.data(), 20, 1, &g_off);
  STRATA_ASSERT_OK(s1);
  STRATA_ASSERT_OK(s2);
  STRATA_ASSERT_OK(s3);
  STRATA_ASSERT_OK(off);
  EXPECT_EQ(g1, g2);
  EXPECT_EQ(s1->loss, s2->loss);
  EXPECT_NE(g1, g3);
  EXPECT_NE(s1->loss, off->loss);
  // Without dropout, training and evaluation agree on the loss.
  EXPECT_NEAR(off->loss, eb->loss, 1e-6);
}

TEST(ModelTest, EvaluateIndependentOfBatchSize) {
  absl::StatusOr<Model> model =
      Model::Build(ReferenceModel(), "sparse_categorical_crossentropy", 2);
  STRATA_ASSERT_OK(model);
  std::vector<std::vector<float>> params;
  STRATA_ASSERT_OK(model->InitializeParams(&params));
  Dataset data;
  data.size = 100;
  data.features = 784;
  data.x = RandomVector(100 * 784, 8, 0.0f, 1.0f);
  for (int i = 0; i < 100; ++i) data.labels.push_back(i % 10);
  absl::StatusOr<StepStats> whole = model->Evaluate(Model::Views(params), data);
  ModelWorkspace ws;
  absl::StatusOr<StepStats> pieces =
      model->Evaluate(Model::Views(params), data, 7, &ws);
  STRATA_ASSERT_OK(whole);
  STRATA_ASSERT_OK(pieces);
  EXPECT_NEAR(whole->loss, pieces->loss, 1e-6);
  EXPECT_DOUBLE_EQ(whole->accuracy, pieces->accuracy);
  // An untrained 10-class model: loss near ln(10).
  EXPECT_NEAR(whole->loss, std::log(10.0), 0.5);

  // Predict agrees with Evaluate's forward pass: rows are distributions.
  std::vector<float> out;
  STRATA_ASSERT_OK(
      model->Predict(Model::Views(params), data.x.data(), 3, &out));
  ASSERT_EQ(out.size(), 30u);
  for (int r = 0; r < 3; ++r) {
    float sum = 0;
    for (int k = 0; k < 10; ++k) sum += out[r * 10 + k];
    EXPECT_NEAR(sum, 1.0f, 1e-5);
  }
}

TEST(ModelTest, WorkspaceGivesSameResultsAsPerCallScratch) {
  ModelSpec spec;
  spec.input_shape = {10};
  spec.layers = {Dense(7, Activation::kTanh), Dropout(0.3),
                 Dense(4, Activation::kSoftmax)};
  absl::StatusOr<Model> model =
      Model::Build(spec, "sparse_categorical_crossentropy", 1);
  STRATA_ASSERT_OK(model);
  std::vector<std::vector<float>> params;
  STRATA_ASSERT_OK(model->InitializeParams(&params));
  ModelWorkspace ws;
  for (int64_t batch : {5, 9, 2}) {  // the workspace grows and shrinks
    const std::vector<float> x = RandomVector(batch * 10, batch, -1, 1);
    std::vector<int32_t> y(batch);
    for (int64_t b = 0; b < batch; ++b) y[b] = static_cast<int32_t>(b % 4);
    std::vector<std::vector<float>> g1, g2;
    absl::StatusOr<StepStats> s1 = model->TrainStep(
        Model::Views(params), x.data(), y.data(), batch, 3, &g1, &ws);
    absl::StatusOr<StepStats> s2 = model->TrainStep(
        Model::Views(params), x.data(), y.data(), batch, 3, &g2);
    STRATA_ASSERT_OK(s1);
    STRATA_ASSERT_OK(s2);
    EXPECT_EQ(s1->loss, s2->loss);
    EXPECT_EQ(g1, g2);
    EXPECT_EQ(s1->examples, batch);
  }
}

// Copies `v` into `storage` starting `offset` floats in, and returns a view.
absl::Span<const float> Shifted(const std::vector<float>& v, size_t offset,
                                std::vector<float>* storage) {
  storage->assign(v.size() + offset, 0.0f);
  std::copy(v.begin(), v.end(), storage->begin() + offset);
  return absl::Span<const float>(storage->data() + offset, v.size());
}

// Where the inputs, parameters and gradients lie in memory changes how the
// SIMD loops split, but never the results.
TEST(ModelTest, TrainStepIsBitwiseReproducible) {
  ModelSpec small;
  small.input_shape = {13};
  small.layers = {Dense(11, Activation::kSoftmax), Dropout(0.3),
                  Dense(7, Activation::kTanh), Dense(5, Activation::kSoftmax)};
  for (const ModelSpec& spec : {small, ReferenceModel()}) {
    absl::StatusOr<Model> model =
        Model::Build(spec, "sparse_categorical_crossentropy", 4);
    STRATA_ASSERT_OK(model);
    std::vector<std::vector<float>> params;
    STRATA_ASSERT_OK(model->InitializeParams(&params));
    const int64_t batch = 37;
    const std::vector<float> x =
        RandomVector(batch * model->num_features(), 6, 0, 1);
    std::vector<int32_t> y(batch);
    for (int64_t b = 0; b < batch; ++b) {
      y[b] = static_cast<int32_t>(b % model->num_outputs());
    }
    std::vector<std::vector<float>> reference;
    double reference_loss = 0;
    for (size_t offset = 0; offset < 8; ++offset) {
      SCOPED_TRACE(absl::StrCat(model->num_features(), " features, offset ",
                                offset));
      std::vector<float> x_storage;
      const absl::Span<const float> xs = Shifted(x, offset, &x_storage);
      std::vector<std::vector<float>> param_storage(params.size());
      std::vector<absl::Span<const float>> views;
      for (size_t v = 0; v < params.size(); ++v) {
        views.push_back(Shifted(params[v], (offset + v) % 8,
                                &param_storage[v]));
      }
      // Gradient buffers of different alignments too.
      std::vector<std::vector<float>> grads(params.size());
      std::vector<std::vector<float>> padding;
      for (size_t v = 0; v < params.size(); ++v) {
        padding.emplace_back(offset * 3 + v);
        grads[v].resize(params[v].size());
      }
      ModelWorkspace ws;
      absl::StatusOr<StepStats> stats = model->TrainStep(
          views, xs.data(), y.data(), batch, 11, &grads,
          offset % 2 == 0 ? &ws : nullptr);
      STRATA_ASSERT_OK(stats);
      if (offset == 0) {
        reference = grads;
        reference_loss = stats->loss;
        continue;
      }
      EXPECT_EQ(stats->loss, reference_loss);
      for (size_t v = 0; v < grads.size(); ++v) {
        EXPECT_TRUE(grads[v] == reference[v]) << model->variables()[v].name;
      }
    }
  }
}

TEST(ModelTest, BadInputsAreInvalidArgument) {
  absl::StatusOr<Model> model =
      Model::Build(ReferenceModel(), "sparse_categorical_crossentropy", 1);
  STRATA_ASSERT_OK(model);
  std::vector<std::vector<float>> params;
  STRATA_ASSERT_OK(model->InitializeParams(&params));
  std::vector<float> x(2 * 784, 0.5f);
  std::vector<int32_t> y = {1, 2};
  std::vector<std::vector<float>> grads;
  auto views = Model::Views(params);

  std::vector<absl::Span<const float>> missing(views.begin(), views.end() - 1);
  EXPECT_THAT(model->TrainStep(missing, x.data(), y.data(), 2, 0, &grads),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "expected 4 parameter tensors, got 3"));
  auto short_views = views;
  short_views[2] = short_views[2].subspan(1);
  EXPECT_THAT(model->TrainStep(short_views, x.data(), y.data(), 2, 0, &grads),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "dense_1/kernel [128, 10] needs 1280"));
  EXPECT_THAT(model->TrainStep(views, x.data(), y.data(), 0, 0, &grads),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->TrainStep(views, nullptr, y.data(), 2, 0, &grads),
              StatusIs(absl::StatusCode::kInvalidArgument));
  y[1] = 10;
  EXPECT_THAT(model->TrainStep(views, x.data(), y.data(), 2, 0, &grads),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "label 10 of example 1 is outside [0, 10)"));
  Dataset data;
  data.size = 1;
  data.features = 5;
  data.x.assign(5, 0.0f);
  data.labels = {0};
  EXPECT_THAT(model->Evaluate(views, data),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "5 features; the model takes 784"));

  ModelSpec binary;
  binary.input_shape = {3};
  binary.layers = {Dense(1, Activation::kSigmoid)};
  absl::StatusOr<Model> bm = Model::Build(binary, "binary_crossentropy", 1);
  STRATA_ASSERT_OK(bm);
  std::vector<std::vector<float>> bp;
  STRATA_ASSERT_OK(bm->InitializeParams(&bp));
  std::vector<float> bx(3, 1.0f);
  std::vector<int32_t> by = {2};
  EXPECT_THAT(bm->TrainStep(Model::Views(bp), bx.data(), by.data(), 1, 0,
                            &grads),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "not 0 or 1"));
}

// The absolute error and the Huber loss of a known output, by hand: one
// linear unit whose kernel is 0 and bias 0.5, against labels 0, 1 and 3.
TEST(ModelTest, MaeAndHuberLossesByHand) {
  struct Case {
    const char* loss;
    double delta;
    double expected;
  };
  for (const Case& c : std::vector<Case>{
           // (0.5 + 0.5 + 2.5) / 3
           {"mae", 1.0, 3.5 / 3},
           // (0.125 + 0.125 + 1 * (2.5 - 0.5)) / 3
           {"huber", 1.0, 2.25 / 3},
           // delta 0.25: 0.25 * (0.5 - 0.125) twice, 0.25 * (2.5 - 0.125)
           {"huber", 0.25, (0.09375 * 2 + 0.59375) / 3}}) {
    SCOPED_TRACE(absl::StrCat(c.loss, " delta ", c.delta));
    ModelSpec spec;
    spec.input_shape = {2};
    spec.layers = {Dense(1, Activation::kLinear)};
    spec.huber_delta = c.delta;
    absl::StatusOr<Model> model = Model::Build(spec, c.loss, 1);
    STRATA_ASSERT_OK(model);
    std::vector<std::vector<float>> params = {{0.0f, 0.0f}, {0.5f}};
    const std::vector<float> x = {1, 2, 3, 4, 5, 6};
    const std::vector<int32_t> y = {0, 1, 3};
    std::vector<std::vector<float>> grads;
    absl::StatusOr<StepStats> stats = model->TrainStep(
        Model::Views(params), x.data(), y.data(), 3, 0, &grads);
    STRATA_ASSERT_OK(stats);
    EXPECT_NEAR(stats->loss, c.expected, 1e-6);
    // d loss / d bias: the mean of the per-example slopes.
    const double slope =
        std::string(c.loss) == "mae"
            ? (1.0 - 1.0 - 1.0) / 3
            : (std::min(0.5, c.delta) - std::min(0.5, c.delta) - c.delta) / 3;
    EXPECT_NEAR(grads[1][0], slope, 1e-6);
  }
  ModelSpec spec;
  spec.input_shape = {2};
  spec.layers = {Dense(1, Activation::kLinear)};
  spec.huber_delta = 0;
  EXPECT_THAT(Model::Build(spec, "huber", 1),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "huber delta must be finite and > 0"));
}

// The absolute error's and the Huber loss's gradients, which finite
// differences cannot check at their kinks, against the chain rule worked
// out here for one linear Dense layer: d loss / d out = l'(out - onehot) /
// (batch * units), then d/dW = x^T . that and d/db = its column sums.
TEST(ModelTest, MaeAndHuberGradients) {
  const int64_t batch = 5, in = 4, units = 3;
  const std::vector<float> x = RandomVector(batch * in, 7, -1.0f, 1.0f);
  const std::vector<int32_t> y = {0, 2, 1, 1, 0};
  for (const char* loss : {"mae", "huber"}) {
    SCOPED_TRACE(loss);
    ModelSpec spec;
    spec.input_shape = {in};
    spec.layers = {Dense(units, Activation::kLinear)};
    spec.huber_delta = 0.3;
    absl::StatusOr<Model> model = Model::Build(spec, loss, 1);
    STRATA_ASSERT_OK(model);
    std::vector<std::vector<float>> params = {
        RandomVector(in * units, 8, -1.0f, 1.0f),
        RandomVector(units, 9, -0.5f, 0.5f)};
    std::vector<std::vector<float>> grads;
    STRATA_ASSERT_OK(model->TrainStep(Model::Views(params), x.data(),
                                      y.data(), batch, 0, &grads));
    std::vector<double> dw(in * units, 0.0), db(units, 0.0);
    int linear = 0, quadratic = 0;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t k = 0; k < units; ++k) {
        double out = params[1][k];
        for (int64_t i = 0; i < in; ++i) {
          out += double{x[b * in + i]} * params[0][i * units + k];
        }
        const double d = out - (k == y[b] ? 1.0 : 0.0);
        const double sign = d > 0 ? 1.0 : -1.0;
        double slope = sign;
        if (std::string(loss) == "huber") {
          slope = std::fabs(d) <= 0.3 ? d : 0.3 * sign;
          ++(std::fabs(d) <= 0.3 ? quadratic : linear);
        }
        slope /= static_cast<double>(batch * units);
        db[k] += slope;
        for (int64_t i = 0; i < in; ++i) {
          dw[i * units + k] += x[b * in + i] * slope;
        }
      }
    }
    if (std::string(loss) == "huber") {
      EXPECT_GT(linear, 0);  // both branches are exercised
      EXPECT_GT(quadratic, 0);
    }
    for (size_t i = 0; i < dw.size(); ++i) {
      EXPECT_NEAR(grads[0][i], dw[i], 1e-5) << "kernel " << i;
    }
    for (int64_t k = 0; k < units; ++k) {
      EXPECT_NEAR(grads[1][k], db[k], 1e-5) << "bias " << k;
    }
  }
}

TEST(ModelTest, BuildRejectsMismatchedOutputs) {
  ModelSpec spec = ReferenceModel();
  spec.layers[1].activation = Activation::kLinear;
  EXPECT_THAT(Model::Build(spec, "sparse_categorical_crossentropy", 0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "needs a softmax output layer"));
  EXPECT_THAT(Model::Build(ReferenceModel(), "binary_crossentropy", 0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "needs a sigmoid output layer"));
  EXPECT_THAT(Model::Build(ReferenceModel(), "hinge", 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  STRATA_ASSERT_OK(Model::Build(spec, "mse", 0));
  ModelSpec ends_with_dropout = ReferenceModel();
  ends_with_dropout.layers.push_back(Dropout(0.1));
  EXPECT_THAT(Model::Build(ends_with_dropout, "mse", 0),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "the output layer must be dense"));
  ModelSpec zero_units = ReferenceModel();
  zero_units.layers[0].units = 0;
  EXPECT_THAT(Model::Build(zero_units, "mse", 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Three Gaussian blobs in 2-D, well apart.
Dataset Blobs(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  const float centers[3][2] = {{-3, 0}, {3, 0}, {0, 4}};
  Dataset d;
  d.size = n;
  d.features = 2;
  d.num_classes = 3;
  for (int i = 0; i < n; ++i) {
    const int c = i % 3;
    d.x.push_back(centers[c][0] + noise(rng));
    d.x.push_back(centers[c][1] + noise(rng));
    d.labels.push_back(c);
  }
  return d;
}

TEST(LocalTrainerTest, LearnsSeparableProblem) {
  ModelSpec spec;
  spec.input_shape = {2};
  spec.layers = {Dense(16, Activation::kRelu), Dropout(0.1),
                 Dense(3, Activation::kSoftmax)};
  OptimizerConfig adam;
  adam.type = OptimizerType::kAdam;
  adam.learning_rate = 0.01;
  absl::StatusOr<std::unique_ptr<LocalTrainer>> trainer =
      LocalTrainer::Create(spec, "sparse_categorical_crossentropy", adam, 3);
  STRATA_ASSERT_OK(trainer);
  const Dataset train = Blobs(600, 1);
  const Dataset test = Blobs(300, 2);
  absl::StatusOr<StepStats> before = (*trainer)->Evaluate(test);
  STRATA_ASSERT_OK(before);
  StepStats last;
  for (int epoch = 0; epoch < 5; ++epoch) {
    absl::StatusOr<StepStats> s = (*trainer)->TrainEpoch(train, 32, 7, epoch);
    STRATA_ASSERT_OK(s);
    EXPECT_EQ(s->examples, 600);
    last = *s;
  }
  EXPECT_EQ((*trainer)->iterations(), 5 * StepsPerEpoch(600, 32));
  absl::StatusOr<StepStats> after = (*trainer)->Evaluate(test);
  STRATA_ASSERT_OK(after);
  EXPECT_GT(after->accuracy, 0.9);
  EXPECT_LT(after->loss, before->loss);
  EXPECT_GT(last.accuracy, 0.9);
}

TEST(LocalTrainerTest, LearnsBinaryProblemWithSgd) {
  ModelSpec spec;
  spec.input_shape = {2};
  spec.layers = {Dense(8, Activation::kTanh), Dense(1, Activation::kSigmoid)};
  OptimizerConfig sgd;
  sgd.type = OptimizerType::kSgd;
  sgd.learning_rate = 0.1;
  sgd.momentum = 0.9;
  absl::StatusOr<std::unique_ptr<LocalTrainer>> trainer =
      LocalTrainer::Create(spec, "binary_crossentropy", sgd, 4);
  STRATA_ASSERT_OK(trainer);
  Dataset train = Blobs(400, 3);
  for (int32_t& l : train.labels) l = l == 1 ? 1 : 0;  // class 1 vs the rest
  for (int epoch = 0; epoch < 5; ++epoch) {
    STRATA_ASSERT_OK((*trainer)->TrainEpoch(train, 16, 1, epoch));
  }
  absl::StatusOr<StepStats> eval = (*trainer)->Evaluate(train);
  STRATA_ASSERT_OK(eval);
  EXPECT_GT(eval->accuracy, 0.9);
}

TEST(LocalTrainerTest, StepIsDeterministic) {
  JobSpec job;
  job.model = ReferenceModel();
  job.loss = "sparse_categorical_crossentropy";
  job.optimizer.type = OptimizerType::kAdam;
  job.seed = 9;
  absl::StatusOr<std::unique_ptr<LocalTrainer>> a = LocalTrainer::Create(job);
  absl::StatusOr<std::unique_ptr<LocalTrainer>> b = LocalTrainer::Create(job);
  STRATA_ASSERT_OK(a);
  STRATA_ASSERT_OK(b);
  const std::vector<float> x = RandomVector(16 * 784, 5, 0, 1);
  std::vector<int32_t> y(16);
  for (int i = 0; i < 16; ++i) y[i] = i % 10;
  for (int step = 0; step < 3; ++step) {
    STRATA_ASSERT_OK((*a)->Step(x.data(), y.data(), 16, step));
    STRATA_ASSERT_OK((*b)->Step(x.data(), y.data(), 16, step));
  }
  EXPECT_EQ((*a)->params(), (*b)->params());
  EXPECT_EQ((*a)->iterations(), 3);
  EXPECT_THAT((*a)->Step(x.data(), y.data(), 16, -1),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LocalTrainerTest, FashionMnistReferenceJobLearns) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  struct stat st;
  if (stat((dir + "/train-images-idx3-ubyte.gz").c_str(), &st) != 0) {
    GTEST_SKIP() << dir << " not installed (Debian: dataset-fashion-mnist)";
  }
  JobSpec job;
  job.model = ReferenceModel();
  job.loss = "sparse_categorical_crossentropy";
  job.optimizer.type = OptimizerType::kAdam;
  job.optimizer.learning_rate = 0.001;
  job.seed = 1;
  job.data.format = "idx";
  job.data.train = {dir + "/train-images-idx3-ubyte.gz",
                    dir + "/train-labels-idx1-ubyte.gz"};
  job.data.has_test = true;
  job.data.test = {dir + "/t10k-images-idx3-ubyte.gz",
                   dir + "/t10k-labels-idx1-ubyte.gz"};
  job.data.scale = 255.0;
  job.data.limit_train = 6000;
  job.data.limit_test = 1000;
  absl::StatusOr<Dataset> train = LoadTrain(job);
  absl::StatusOr<Dataset> test = LoadTest(job);
  STRATA_ASSERT_OK(train);
  STRATA_ASSERT_OK(test);
  ASSERT_EQ(train->size, 6000);
  ASSERT_EQ(test->size, 1000);
  absl::StatusOr<std::unique_ptr<LocalTrainer>> trainer =
      LocalTrainer::Create(job);
  STRATA_ASSERT_OK(trainer);
  for (int epoch = 0; epoch < 2; ++epoch) {
    STRATA_ASSERT_OK((*trainer)->TrainEpoch(*train, 128, 42, epoch));
  }
  absl::StatusOr<StepStats> eval = (*trainer)->Evaluate(*test);
  STRATA_ASSERT_OK(eval);
  EXPECT_GT(eval->accuracy, 0.75);
  RecordProperty("test_accuracy", std::to_string(eval->accuracy));
}

}  // namespace
}  // namespace strata

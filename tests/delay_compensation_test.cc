// Delay compensation of stale gradients (DC-ASGD; UpdateMode
// .delay_compensation, kernels/delay_compensation.h): the correction
// against hand-computed examples, through a Variable for every optimizer,
// from the oldest kept version when the base version is gone, dropped when
// it overflows; bad settings refused naming the field; the job fields.
// (Backup equal to the bit under replication: ps_replication_test.)
#include "kernels/delay_compensation.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "job/job.h"
#include "server/variable.h"
#include "tests/test_util.h"
#include "worker/model.h"
#include "worker/ps_worker.h"

namespace strata {
namespace {

constexpr uint64_t kMaxBytes = uint64_t{1} << 20;

TEST(DelayCompensationKernelTest, CorrectsByLambdaTimesGSquaredTimesTheDelta) {
  DelayCompensationConfig c;
  c.lambda = 0.1;
  const float grad[] = {0.5f, -2.0f, 3.0f};
  const float now[] = {1.0f, 1.0f, 4.0f};
  const float then[] = {0.5f, 2.0f, 4.0f};
  float out[3];
  STRATA_ASSERT_OK(DelayCompensate(DType::kFloat32, c, grad, now, then,
                                   nullptr, out, 3));
  // 0.5 + 0.1 * 0.25 * 0.5; -2 + 0.1 * 4 * (-1); unchanged where w is.
  EXPECT_FLOAT_EQ(out[0], 0.5125f);
  EXPECT_FLOAT_EQ(out[1], -2.4f);
  EXPECT_FLOAT_EQ(out[2], 3.0f);
  // No older value: the gradient as it is.
  STRATA_ASSERT_OK(DelayCompensate(DType::kFloat32, c, grad, now, nullptr,
                                   nullptr, out, 3));
  EXPECT_FLOAT_EQ(out[0], 0.5f);
  EXPECT_FLOAT_EQ(out[1], -2.0f);
  // float64 the same, in place.
  double g64[] = {0.5, -2.0};
  const double now64[] = {1.0, 1.0};
  const double then64[] = {0.5, 2.0};
  STRATA_ASSERT_OK(DelayCompensate(DType::kFloat64, c, g64, now64, then64,
                                   nullptr, g64, 2));
  EXPECT_DOUBLE_EQ(g64[0], 0.5125);
  EXPECT_DOUBLE_EQ(g64[1], -2.4);
  const int32_t ints[] = {1};
  absl::Status bad = DelayCompensate(DType::kInt32, c, ints, ints, ints,
                                     nullptr, out, 1);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("float32 or float64 variable, got int32"),
            std::string::npos)
      << bad;
}

TEST(DelayCompensationKernelTest, AdaptiveDividesLambdaByTheRootMeanSquare) {
  DelayCompensationConfig c;
  c.lambda = 2.0;
  c.adaptive = true;
  c.mean_square_decay = 0.9;
  const double grad[] = {0.5, -2.0};
  const double now[] = {1.0, 1.0};
  const double then[] = {0.5, 2.0};
  double ms[] = {0.0, 1.0};
  double out[2];
  STRATA_ASSERT_OK(DelayCompensate(DType::kFloat64, c, grad, now, then, ms,
                                   out, 2));
  // ms = 0.9 * ms + 0.1 * g * g: 0.025 and 0.9 + 0.4 = 1.3.
  EXPECT_DOUBLE_EQ(ms[0], 0.025);
  EXPECT_DOUBLE_EQ(ms[1], 1.3);
  EXPECT_NEAR(out[0], 0.5 + 2.0 / (std::sqrt(0.025) + 1e-7) * 0.25 * 0.5,
              1e-12);
  EXPECT_NEAR(out[1], -2.0 + 2.0 / (std::sqrt(1.3) + 1e-7) * 4.0 * -1.0,
              1e-12);
  // Without an older value the mean square still moves.
  STRATA_ASSERT_OK(DelayCompensate(DType::kFloat64, c, grad, now, nullptr, ms,
                                   out, 2));
  EXPECT_DOUBLE_EQ(ms[0], 0.9 * 0.025 + 0.025);
  EXPECT_DOUBLE_EQ(out[0], 0.5);
  EXPECT_DOUBLE_EQ(out[1], -2.0);
}

v1::VariableSpec Spec(const std::string& optimizer, int64_t n, double lambda,
                      int versions = 0, bool adaptive = false) {
  v1::VariableSpec spec;
  spec.set_name("w");
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(n);
  spec.mutable_initializer()->set_type("random_uniform");
  spec.mutable_initializer()->set_seed(3);
  spec.mutable_optimizer()->set_type(optimizer);
  spec.mutable_optimizer()->set_learning_rate(optimizer == "sgd" ? 1.0 : 0.1);
  if (optimizer == "sgd") spec.mutable_optimizer()->set_momentum(0.5);
  spec.mutable_update_mode()->set_kind(v1::UpdateMode::ASYNC);
  if (lambda > 0) {
    v1::DelayCompensation* dc =
        spec.mutable_update_mode()->mutable_delay_compensation();
    dc->set_lambda(lambda);
    dc->set_versions(versions);
    dc->set_adaptive(adaptive);
  }
  return spec;
}

std::shared_ptr<Variable> Make(const v1::VariableSpec& spec) {
  absl::StatusOr<std::shared_ptr<Variable>> v =
      Variable::Create(spec, kMaxBytes);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : nullptr;
}

std::vector<float> Value(const Variable& v) {
  VariableSnapshot s = v.Snapshot();
  std::vector<float> out(s.value->size() / sizeof(float));
  std::memcpy(out.data(), s.value->data(), s.value->size());
  return out;
}

absl::StatusOr<PushOutcome> Push(Variable* v, int64_t worker, int64_t step,
                                 int64_t base, const std::vector<float>& g) {
  PushMeta meta{"job", worker, step, 0};
  meta.base_version = base;
  return v->PushDense(meta, reinterpret_cast<const char*>(g.data()),
                      g.size() * sizeof(float));
}

// Plain SGD with learning rate 1 from zeros, worked by hand.
TEST(DelayCompensationTest, AStalePushIsCorrectedByHand) {
  v1::VariableSpec spec = Spec("sgd", 2, 0.1);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_momentum(0);
  auto v = Make(spec);
  ASSERT_NE(v, nullptr);
  // Fresh: w = 0 - [1, 1].
  STRATA_ASSERT_OK(Push(v.get(), 0, 0, 0, {1, 1}));
  EXPECT_EQ(Value(*v), (std::vector<float>{-1, -1}));
  // Computed at version 0 (w = [0, 0]), applied at 1 (w = [-1, -1]):
  // g' = [2 + 0.1 * 4 * -1, -1 + 0.1 * 1 * -1] = [1.6, -1.1].
  absl::StatusOr<PushOutcome> out = Push(v.get(), 1, 0, 0, {2, -1});
  STRATA_ASSERT_OK(out);
  EXPECT_EQ(out->staleness, 1);
  std::vector<float> w = Value(*v);
  EXPECT_FLOAT_EQ(w[0], -2.6f);
  EXPECT_FLOAT_EQ(w[1], 0.1f);
  // A fresh push (base = version) and one naming no base: uncorrected.
  STRATA_ASSERT_OK(Push(v.get(), 0, 1, 2, {1, 1}));
  STRATA_ASSERT_OK(Push(v.get(), 0, 2, -1, {1, 1}));
  w = Value(*v);
  EXPECT_FLOAT_EQ(w[0], -4.6f);
  EXPECT_FLOAT_EQ(w[1], -1.9f);
}

// For every optimizer: the stale push lands exactly as the hand-corrected
// gradient pushed fresh to the same variable without compensation.
TEST(DelayCompensationTest, EveryOptimizerAppliesTheCorrectedGradient) {
  for (const char* type : {"sgd", "adam", "adagrad", "rmsprop"}) {
    for (bool adaptive : {false, true}) {
      SCOPED_TRACE(absl::StrCat(type, adaptive ? " adaptive" : ""));
      const int64_t n = 37;
      const double lambda = adaptive ? 0.5 : 0.3;
      auto dc = Make(Spec(type, n, lambda, 0, adaptive));
      auto plain = Make(Spec(type, n, 0));
      ASSERT_NE(dc, nullptr);
      ASSERT_NE(plain, nullptr);
      const std::vector<float> w0 = Value(*dc);
      ASSERT_EQ(w0, Value(*plain));
      std::vector<float> g1(n), g2(n);
      for (int64_t i = 0; i < n; ++i) {
        g1[i] = 0.3f * static_cast<float>(i % 5) - 0.6f;
        g2[i] = 0.7f - 0.2f * static_cast<float>(i % 7);
      }
      STRATA_ASSERT_OK(Push(dc.get(), 0, 0, 0, g1));
      STRATA_ASSERT_OK(Push(plain.get(), 0, 0, 0, g1));
      const std::vector<float> w1 = Value(*dc);
      ASSERT_EQ(w1, Value(*plain));
      // g2 was computed at version 0 (w0) and lands at version 1 (w1).
      std::vector<float> corrected(n);
      for (int64_t i = 0; i < n; ++i) {
        const double g = g2[i];
        double scale = lambda;
        if (adaptive) {
          // Both pushes moved the mean square: 0.95 * 0.05 g1^2 + 0.05 g2^2.
          const double ms = 0.95 * (0.05 * g1[i] * g1[i]) + 0.05 * g * g;
          scale = lambda / (std::sqrt(ms) + 1e-7);
        }
        corrected[i] =
            static_cast<float>(g + scale * g * g * (w1[i] - w0[i]));
      }
      STRATA_ASSERT_OK(Push(dc.get(), 1, 0, 0, g2));
      STRATA_ASSERT_OK(Push(plain.get(), 1, 0, 1, corrected));
      const std::vector<float> a = Value(*dc);
      const std::vector<float> b = Value(*plain);
      int moved = 0;
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << i;
        if (corrected[i] != g2[i]) ++moved;
      }
      EXPECT_GT(moved, n / 2);  // the correction did change most elements
    }
  }
}

// Two versions kept: a push based on a version no longer kept is corrected
// from the oldest kept one (the nearest to its own).
TEST(DelayCompensationTest, AnOlderBaseUsesTheOldestKeptVersion) {
  v1::VariableSpec spec = Spec("sgd", 1, 0.1, /*versions=*/2);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_momentum(0);
  auto v = Make(spec);
  ASSERT_NE(v, nullptr);
  // Versions 0..4 hold 0, -1, -2, -3, -4; kept: versions 2 and 3.
  for (int step = 0; step < 4; ++step) {
    STRATA_ASSERT_OK(Push(v.get(), 0, step, step, {1}));
  }
  ASSERT_EQ(Value(*v)[0], -4.0f);
  // Based on version 0 (gone): corrected from version 2's -2, not 0:
  // g' = 1 + 0.1 * 1 * (-4 - -2) = 0.8.
  absl::StatusOr<PushOutcome> out = Push(v.get(), 1, 0, 0, {1});
  STRATA_ASSERT_OK(out);
  EXPECT_EQ(out->staleness, 4);
  EXPECT_FLOAT_EQ(Value(*v)[0], -4.8f);
  // Based on version 3 (kept): 1 + 0.1 * (-4.8 - -3) = 0.82.
  STRATA_ASSERT_OK(Push(v.get(), 1, 1, 3, {1}));
  EXPECT_FLOAT_EQ(Value(*v)[0], -5.62f);
}

// An assignment is a version too: a gradient computed before it is
// corrected from the value it was computed from.
TEST(DelayCompensationTest, AnAssignmentIsAVersion) {
  v1::VariableSpec spec = Spec("sgd", 1, 0.5);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_momentum(0);
  auto v = Make(spec);
  ASSERT_NE(v, nullptr);
  const float three = 3;
  STRATA_ASSERT_OK(
      v->Assign(reinterpret_cast<const char*>(&three), sizeof three));
  // Computed at version 0 (w = 0), applied at 1 (w = 3): 1 + 0.5 * 3 = 2.5.
  STRATA_ASSERT_OK(Push(v.get(), 0, 0, 0, {1}));
  EXPECT_FLOAT_EQ(Value(*v)[0], 0.5f);
}

// A correction that overflows is dropped: the push applies as it came.
TEST(DelayCompensationTest, AnOverflowingCorrectionIsDropped) {
  v1::VariableSpec spec = Spec("sgd", 2, 0.1);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_momentum(0);
  spec.mutable_optimizer()->set_learning_rate(1e-20);
  auto v = Make(spec);
  ASSERT_NE(v, nullptr);
  STRATA_ASSERT_OK(Push(v.get(), 0, 0, 0, {1e20f, 1e20f}));
  // g * g = 1e40 overflows float32.
  STRATA_ASSERT_OK(Push(v.get(), 1, 0, 0, {1e20f, 1e20f}));
  std::vector<float> w = Value(*v);
  EXPECT_FLOAT_EQ(w[0], -2.0f);
  EXPECT_FLOAT_EQ(w[1], -2.0f);
}

TEST(DelayCompensationTest, BadSettingsAreRefusedNamingTheField) {
  struct Bad {
    v1::VariableSpec spec;
    const char* message;
  };
  std::vector<Bad> bad;
  {
    v1::VariableSpec s = Spec("sgd", 2, 0.1);
    s.mutable_update_mode()->mutable_delay_compensation()->set_lambda(-1);
    bad.push_back({s, "update_mode.delay_compensation.lambda must be finite "
                      "and >= 0, got -1"});
  }
  {
    v1::VariableSpec s = Spec("sgd", 2, 0.1);
    s.mutable_update_mode()->mutable_delay_compensation()->set_lambda(NAN);
    bad.push_back({s, "delay_compensation.lambda must be finite"});
  }
  {
    v1::VariableSpec s = Spec("sgd", 2, 0.1);
    s.mutable_update_mode()
        ->mutable_delay_compensation()
        ->set_mean_square_decay(1);
    bad.push_back(
        {s, "delay_compensation.mean_square_decay must be in [0, 1), got 1"});
  }
  {
    v1::VariableSpec s = Spec("sgd", 2, 0.1);
    s.mutable_update_mode()->mutable_delay_compensation()->set_versions(2000);
    bad.push_back(
        {s, "delay_compensation.versions must be in [0, 1024], got 2000"});
  }
  {
    v1::VariableSpec s = Spec("sgd", 2, 0.1);
    s.mutable_update_mode()->set_kind(v1::UpdateMode::SYNC);
    s.mutable_update_mode()->set_num_replicas(1);
    bad.push_back({s, "delay_compensation.lambda is for ASYNC variables "
                      "only"});
  }
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.message);
    absl::StatusOr<std::shared_ptr<Variable>> v =
        Variable::Create(b.spec, kMaxBytes);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find(b.message), std::string::npos)
        << v.status();
    EXPECT_NE(v.status().message().find("'w'"), std::string::npos)
        << v.status();
  }
}

absl::StatusOr<JobSpec> ParseWithStrategy(const std::string& strategy) {
  return ParseJobString(absl::StrCat(R"({
    "model": {"input_shape": [4],
              "layers": [{"type": "dense", "units": 2,
                          "activation": "softmax"}]},
    "loss": "sparse_categorical_crossentropy",
    "optimizer": {"type": "adam"},
    "data": {"format": "idx",
             "train": {"images": "/x/train-images", "labels": "/x/train-labels"},
             "test": {"images": "/x/test-images", "labels": "/x/test-labels"}},
    "strategy": )", strategy, "}"));
}

TEST(DelayCompensationJobTest, TheJobFieldsReachEveryPsVariable) {
  absl::StatusOr<JobSpec> job = ParseWithStrategy(
      R"({"type": "parameter_server", "staleness_compensation": "dc_adaptive",
          "dc_lambda": 1.5, "dc_mean_square_decay": 0.9,
          "dc_versions": 4})");
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->strategy.staleness_compensation, "dc_adaptive");
  absl::StatusOr<Model> model = BuildModelForJob(*job);
  STRATA_ASSERT_OK(model);
  std::vector<v1::VariableSpec> specs = PsVariableSpecs(*job, *model);
  ASSERT_FALSE(specs.empty());
  for (const v1::VariableSpec& spec : specs) {
    const v1::DelayCompensation& dc =
        spec.update_mode().delay_compensation();
    EXPECT_EQ(dc.lambda(), 1.5);
    EXPECT_TRUE(dc.adaptive());
    EXPECT_EQ(dc.mean_square_decay(), 0.9);
    EXPECT_EQ(dc.versions(), 4);
  }
  // The defaults: the paper's lambda per variant, 8 versions.
  job = ParseWithStrategy(
      R"({"type": "parameter_server", "staleness_compensation": "dc"})");
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->strategy.dc_lambda, 0.04);
  EXPECT_EQ(job->strategy.dc_versions, 8);
  job = ParseWithStrategy(R"({"type": "parameter_server",
                              "staleness_compensation": "dc_adaptive"})");
  STRATA_ASSERT_OK(job);
  EXPECT_EQ(job->strategy.dc_lambda, 2.0);
  EXPECT_EQ(job->strategy.dc_mean_square_decay, 0.95);
  // Off: no correction on the PS.
  job = ParseWithStrategy(R"({"type": "parameter_server"})");
  STRATA_ASSERT_OK(job);
  model = BuildModelForJob(*job);
  STRATA_ASSERT_OK(model);
  for (const v1::VariableSpec& spec : PsVariableSpecs(*job, *model)) {
    EXPECT_EQ(spec.update_mode().delay_compensation().lambda(), 0);
  }
}

TEST(DelayCompensationJobTest, BadFieldsAreRefusedNamingTheField) {
  struct Bad {
    const char* strategy;
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {R"({"type": "parameter_server", "update": "sync",
                "staleness_compensation": "dc"})",
            "job.strategy.staleness_compensation: 'dc' corrects stale "
            "gradients, which only parameter_server with update 'async' "
            "applies"},
           {R"({"type": "central_storage", "staleness_compensation": "dc"})",
            "job.strategy.staleness_compensation"},
           {R"({"type": "multi_worker_mirrored",
                "staleness_compensation": "dc_adaptive"})",
            "job.strategy.staleness_compensation"},
           {R"({"type": "parameter_server",
                "staleness_compensation": "hessian"})",
            "job.strategy.staleness_compensation"},
           {R"({"type": "parameter_server", "dc_lambda": 0.1})",
            "job.strategy.dc_lambda: needs staleness_compensation 'dc' or "
            "'dc_adaptive'"},
           {R"({"type": "parameter_server", "staleness_compensation": "dc",
                "dc_lambda": 0})",
            "job.strategy.dc_lambda: must be > 0"},
           {R"({"type": "parameter_server", "staleness_compensation": "dc",
                "dc_lambda": -2})",
            "job.strategy.dc_lambda"},
           {R"({"type": "parameter_server", "staleness_compensation": "dc",
                "dc_mean_square_decay": 0.9})",
            "job.strategy.dc_mean_square_decay: needs staleness_compensation "
            "'dc_adaptive'"},
           {R"({"type": "parameter_server",
                "staleness_compensation": "dc_adaptive",
                "dc_mean_square_decay": 1})",
            "job.strategy.dc_mean_square_decay: must be in [0, 1)"},
           {R"({"type": "parameter_server", "staleness_compensation": "dc",
                "dc_versions": 0})",
            "job.strategy.dc_versions"},
           {R"({"type": "parameter_server", "staleness_compensation": "dc",
                "dc_versions": 1025})",
            "job.strategy.dc_versions"}}) {
    SCOPED_TRACE(bad.strategy);
    absl::StatusOr<JobSpec> job = ParseWithStrategy(bad.strategy);
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(job.status().message().find(bad.message), std::string::npos)
        << job.status();
  }
}

}  // namespace
}  // namespace strata

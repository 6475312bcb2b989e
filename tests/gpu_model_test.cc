// Model on a CUDA device against Model on the CPU: TrainStep (every loss,
// with dropout), Evaluate, Predict, LocalTrainer, and per-thread
// workspaces. Those tests skip without a device; the errors where no device
// (or no CUDA build) is there run everywhere.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/model_spec_util.h"
#include "tests/test_util.h"
#include "worker/dataset.h"
#include "job/job.h"
#include "worker/model.h"

namespace strata {
namespace {

using testing_util::Dense;
using testing_util::Dropout;
using testing_util::ReferenceModel;

#define STRATA_SKIP_WITHOUT_CUDA()                                   \
  do {                                                               \
    const absl::Status usable = CheckDevice("cuda:0");               \
    if (!usable.ok()) {                                              \
      GTEST_SKIP() << "no CUDA device, skipping: " << usable;        \
    }                                                                \
  } while (0)

// Every activation in a hidden layer, dropout before and between layers,
// and the output layer `loss` needs.
ModelSpec ModelFor(const std::string& loss, int64_t features) {
  ModelSpec spec;
  spec.input_shape = {features};
  const bool binary = loss == "binary_crossentropy";
  spec.layers = {Dropout(0.1),
                 Dense(64, Activation::kRelu),
                 Dropout(0.3),
                 Dense(48, Activation::kTanh),
                 Dense(32, Activation::kSigmoid),
                 Dense(24, Activation::kLinear),
                 binary ? Dense(1, Activation::kSigmoid)
                 : loss == "mse" ? Dense(5, Activation::kSigmoid)
                                 : Dense(7, Activation::kSoftmax)};
  return spec;
}

std::vector<float> RandomVector(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

Dataset RandomData(int64_t size, int64_t features, int classes,
                   uint32_t seed) {
  Dataset d;
  d.size = size;
  d.features = features;
  d.x = RandomVector(static_cast<size_t>(size * features), seed, 0.0f, 1.0f);
  std::mt19937 rng(seed + 1);
  for (int64_t i = 0; i < size; ++i) {
    d.labels.push_back(static_cast<int32_t>(rng() % classes));
  }
  d.num_classes = classes;
  return d;
}

int ClassesFor(const Model& model) {
  return model.num_outputs() > 1 ? static_cast<int>(model.num_outputs()) : 2;
}

// |a - b| within rel of the tensor's largest magnitude. (A ReLU whose input
// rounds to the other side of 0 on one path moves a few gradient entries by
// more than rounding, hence gradients are compared at 5e-4 of the largest.)
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-12;
  for (float w : want) scale = std::max(scale, std::fabs(double{w}));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * scale) << what << " at " << i;
  }
}

// Without a device (or without CUDA) -----------------------------------------

bool CudaUsable() { return CheckDevice("cuda:0").ok(); }

void ExpectNoDeviceMessage(const absl::Status& s, const std::string& prefix) {
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), prefix)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "no usable CUDA device") ||
              absl::StrContains(s.message(), "no CUDA support"))
      << s;
}

TEST(GpuModelNoDeviceTest, BuildForCudaFailsPrecondition) {
  if (CudaUsable()) GTEST_SKIP() << "a CUDA device is present";
  absl::StatusOr<Model> model = Model::Build(
      ReferenceModel(), "sparse_categorical_crossentropy", 1, "cuda");
  ASSERT_FALSE(model.ok());
  ExpectNoDeviceMessage(model.status(), "device cuda:0: ");
}

TEST(GpuModelNoDeviceTest, JobOnCudaFailsPreconditionNamingJobDevice) {
  if (CudaUsable()) GTEST_SKIP() << "a CUDA device is present";
  JobSpec job;
  job.model = ReferenceModel();
  job.loss = "sparse_categorical_crossentropy";
  job.device = "cuda:0";
  job.cuda_device = 0;
  absl::StatusOr<Model> model = BuildModelForJob(job);
  ASSERT_FALSE(model.ok());
  ExpectNoDeviceMessage(model.status(), "job.device cuda:0: ");
  absl::StatusOr<std::unique_ptr<LocalTrainer>> trainer =
      LocalTrainer::Create(job);
  ASSERT_FALSE(trainer.ok());
  ExpectNoDeviceMessage(trainer.status(), "job.device cuda:0: ");
}

TEST(GpuModelNoDeviceTest, MissingDeviceIndexFailsPrecondition) {
  // No machine has 10000 GPUs, so this fails with or without a device.
  const absl::Status s = CheckDevice("cuda:9999", "job.device");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "job.device cuda:9999: ")) << s;
}

TEST(GpuModelNoDeviceTest, MalformedDeviceIsInvalidArgument) {
  EXPECT_EQ(CheckDevice("gpu:0").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Model::Build(ReferenceModel(), "sparse_categorical_crossentropy",
                         1, "cuda:x")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GpuModelNoDeviceTest, CpuDeviceIsTheCpuModelBitForBit) {
  STRATA_ASSERT_OK(CheckDevice("cpu"));
  absl::StatusOr<Model> plain = Model::Build(
      ModelFor("sparse_categorical_crossentropy", 20),
      "sparse_categorical_crossentropy", 3);
  absl::StatusOr<Model> cpu =
      Model::Build(ModelFor("sparse_categorical_crossentropy", 20),
                   "sparse_categorical_crossentropy", 3, "cpu");
  STRATA_ASSERT_OK(plain);
  STRATA_ASSERT_OK(cpu);
  EXPECT_FALSE(cpu->on_gpu());
  EXPECT_EQ(cpu->device(), "cpu");
  std::vector<std::vector<float>> params;
  STRATA_ASSERT_OK(cpu->InitializeParams(&params));
  const Dataset d = RandomData(33, 20, 7, 5);
  std::vector<std::vector<float>> g1, g2;
  absl::StatusOr<StepStats> s1 = plain->TrainStep(
      Model::Views(params), d.x.data(), d.labels.data(), d.size, 9, &g1);
  absl::StatusOr<StepStats> s2 = cpu->TrainStep(
      Model::Views(params), d.x.data(), d.labels.data(), d.size, 9, &g2);
  STRATA_ASSERT_OK(s1);
  STRATA_ASSERT_OK(s2);
  EXPECT_EQ(s1->loss, s2->loss);
  EXPECT_EQ(g1, g2);
}

// On a device ----------------------------------------------------------------

class GpuModelLossTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuModelLossTest, TrainStepEvaluateAndPredictMatchCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  const std::string loss = GetParam();
  const int64_t features = 50;
  absl::StatusOr<Model> cpu = Model::Build(ModelFor(loss, features), loss, 7);
  absl::StatusOr<Model> gpu =
      Model::Build(ModelFor(loss, features), loss, 7, "cuda:0");
  STRATA_ASSERT_OK(cpu);
  STRATA_ASSERT_OK(gpu);
  EXPECT_TRUE(gpu->on_gpu());
  EXPECT_EQ(gpu->device(), "cuda:0");
  std::vector<std::vector<float>> params;
  STRATA_ASSERT_OK(cpu->InitializeParams(&params));
  const auto views = Model::Views(params);
  const Dataset d = RandomData(301, features, ClassesFor(*cpu), 11);

  ModelWorkspace ws;
  // Two batch sizes through one workspace (its buffers grow, then shrink
  // in use).
  for (int64_t batch : {int64_t{256}, int64_t{45}}) {
    std::vector<std::vector<float>> gc, gg;
    absl::StatusOr<StepStats> sc = cpu->TrainStep(
        views, d.x.data(), d.labels.data(), batch, 1234, &gc);
    absl::StatusOr<StepStats> sg = gpu->TrainStep(
        views, d.x.data(), d.labels.data(), batch, 1234, &gg, &ws);
    STRATA_ASSERT_OK(sc);
    STRATA_ASSERT_OK(sg);
    EXPECT_NEAR(sg->loss, sc->loss, 1e-5 * (1 + sc->loss)) << batch;
    // An argmax may flip where two outputs are within rounding.
    EXPECT_NEAR(sg->accuracy, sc->accuracy, 1.5 / batch) << batch;
    EXPECT_EQ(sg->examples, batch);
    ASSERT_EQ(gg.size(), gc.size());
    for (size_t v = 0; v < gc.size(); ++v) {
      ExpectClose(gg[v], gc[v], 5e-4,
                  cpu->variables()[v].name + " batch " + std::to_string(batch));
    }
  }

  absl::StatusOr<StepStats> ec = cpu->Evaluate(views, d, 64);
  absl::StatusOr<StepStats> eg = gpu->Evaluate(views, d, 64, &ws);
  STRATA_ASSERT_OK(ec);
  STRATA_ASSERT_OK(eg);
  EXPECT_NEAR(eg->loss, ec->loss, 1e-5 * (1 + ec->loss));
  EXPECT_NEAR(eg->accuracy, ec->accuracy, 1.5 / d.size);
  EXPECT_EQ(eg->examples, d.size);

  std::vector<float> pc, pg;
  STRATA_ASSERT_OK(cpu->Predict(views, d.x.data(), 17, &pc));
  STRATA_ASSERT_OK(gpu->Predict(views, d.x.data(), 17, &pg, &ws));
  ExpectClose(pg, pc, 1e-5, "predict");
}

INSTANTIATE_TEST_SUITE_P(EveryLoss, GpuModelLossTest,
                         ::testing::Values("sparse_categorical_crossentropy",
                                           "categorical_crossentropy",
                                           "binary_crossentropy", "mse"));

TEST(GpuModelTest, ReferenceModelStepMatchesCpuAndIsReproducible) {
  STRATA_SKIP_WITHOUT_CUDA();
  const std::string loss = "sparse_categorical_crossentropy";
  absl::StatusOr<Model> cpu = Model::Build(ReferenceModel(), loss, 1);
  absl::StatusOr<Model> gpu = Model::Build(ReferenceModel(), loss, 1, "cuda");
  STRATA_ASSERT_OK(cpu);
  STRATA_ASSERT_OK(gpu);
  std::vector<std::vector<float>> params;
  STRATA_ASSERT_OK(cpu->InitializeParams(&params));
  const Dataset d = RandomData(128, 784, 10, 21);
  std::vector<std::vector<float>> gc, g1, g2;
  STRATA_ASSERT_OK(cpu->TrainStep(Model::Views(params), d.x.data(),
                                  d.labels.data(), 128, 5, &gc));
  STRATA_ASSERT_OK(gpu->TrainStep(Model::Views(params), d.x.data(),
                                  d.labels.data(), 128, 5, &g1));
  STRATA_ASSERT_OK(gpu->TrainStep(Model::Views(params), d.x.data(),
                                  d.labels.data(), 128, 5, &g2));
  EXPECT_EQ(g1, g2) << "the GPU step is not deterministic";
  for (size_t v = 0; v < gc.size(); ++v) {
    ExpectClose(g1[v], gc[v], 5e-4, cpu->variables()[v].name);
  }
}

TEST(GpuModelTest, ThreadsWithOwnWorkspacesAgree) {
  STRATA_SKIP_WITHOUT_CUDA();
  const std::string loss = "sparse_categorical_crossentropy";
  absl::StatusOr<Model> gpu = Model::Build(ModelFor(loss, 30), loss, 2, "cuda");
  STRATA_ASSERT_OK(gpu);
  std::vector<std::vector<float>> params;
  STRATA_ASSERT_OK(gpu->InitializeParams(&params));
  const Dataset d = RandomData(200, 30, 7, 31);
  std::vector<std::vector<float>> want;
  STRATA_ASSERT_OK(gpu->TrainStep(Model::Views(params), d.x.data(),
                                  d.labels.data(), 200, 8, &want));
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<float>>> got(kThreads);
  std::vector<absl::Status> status(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ModelWorkspace ws;
      for (int i = 0; i < 5 && status[t].ok(); ++i) {
        status[t] = gpu->TrainStep(Model::Views(params), d.x.data(),
                                   d.labels.data(), 200, 8, &got[t], &ws)
                        .status();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    STRATA_ASSERT_OK(status[t]);
    EXPECT_EQ(got[t], want) << "thread " << t;
  }
}

TEST(GpuModelTest, LocalTrainerOnCudaTracksCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  JobSpec job;
  job.model = ReferenceModel();
  job.loss = "sparse_categorical_crossentropy";
  // Plain SGD: Adam's normalized steps would amplify rounding differences
  // of gradients near zero into whole learning-rate steps.
  job.optimizer.type = OptimizerType::kSgd;
  job.optimizer.learning_rate = 0.05;
  job.seed = 4;
  absl::StatusOr<std::unique_ptr<LocalTrainer>> cpu = LocalTrainer::Create(job);
  job.device = "cuda:0";
  job.cuda_device = 0;
  absl::StatusOr<std::unique_ptr<LocalTrainer>> gpu = LocalTrainer::Create(job);
  STRATA_ASSERT_OK(cpu);
  STRATA_ASSERT_OK(gpu);
  EXPECT_TRUE((*gpu)->model().on_gpu());
  const Dataset d = RandomData(640, 784, 10, 41);
  StepStats last_cpu, last_gpu;
  for (int epoch = 0; epoch < 2; ++epoch) {
    absl::StatusOr<StepStats> c = (*cpu)->TrainEpoch(d, 64, 1, epoch);
    absl::StatusOr<StepStats> g = (*gpu)->TrainEpoch(d, 64, 1, epoch);
    STRATA_ASSERT_OK(c);
    STRATA_ASSERT_OK(g);
    last_cpu = *c;
    last_gpu = *g;
  }
  EXPECT_NEAR(last_gpu.loss, last_cpu.loss, 1e-3 * (1 + last_cpu.loss));
  for (size_t v = 0; v < (*cpu)->params().size(); ++v) {
    ExpectClose((*gpu)->params()[v], (*cpu)->params()[v], 1e-3,
                (*cpu)->model().variables()[v].name);
  }
}

}  // namespace
}  // namespace strata

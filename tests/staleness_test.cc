// Staleness-aware learning rate (UpdateMode.scale_by_staleness): a push
// names the version its gradient was computed from, the PS counts the
// staleness (updates applied since) and scales the learning rate by
// 1 / (1 + max(0, staleness - tolerance)); PsCluster names that version
// from what each lane delivered last, on every path (lane stream, shared
// memory exchange, mirrors); bad values are refused and change nothing.
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ps_client.h"
#include "client/ps_cluster.h"
#include "gtest/gtest.h"
#include "job/job.h"
#include "kernels/optimizers.h"
#include "server/ps_server.h"
#include "server/requests.h"
#include "server/variable.h"
#include "tests/test_util.h"

namespace strata {
namespace {

constexpr uint64_t kMaxBytes = uint64_t{1} << 20;

v1::VariableSpec Spec(const std::string& name, int64_t n, bool scale,
                      int tolerance = 0,
                      v1::UpdateMode::Kind kind = v1::UpdateMode::ASYNC) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(v1::DT_FLOAT32);
  spec.add_shape(n);
  spec.mutable_initializer()->set_type("zeros");
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(1.0);
  spec.mutable_update_mode()->set_kind(kind);
  if (kind != v1::UpdateMode::ASYNC) {
    spec.mutable_update_mode()->set_num_replicas(1);
  }
  spec.mutable_update_mode()->set_scale_by_staleness(scale);
  spec.mutable_update_mode()->set_staleness_tolerance(tolerance);
  return spec;
}

std::shared_ptr<Variable> Make(const v1::VariableSpec& spec) {
  absl::StatusOr<std::shared_ptr<Variable>> v =
      Variable::Create(spec, kMaxBytes);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : nullptr;
}

// Pushes a gradient of ones as step `step`, naming `base` (-1: none).
absl::StatusOr<PushOutcome> PushOnes(Variable* v, int64_t step,
                                     int64_t base) {
  const float grad[2] = {1, 1};
  PushMeta meta{"job", 0, step, 0};
  meta.base_version = base;
  return v->PushDense(meta, reinterpret_cast<const char*>(grad), sizeof grad);
}

float First(const Variable& v) {
  float out;
  std::memcpy(&out, v.Snapshot().value->data(), sizeof out);
  return out;
}

TEST(StalenessTest, LearningRateIsScaledByTheUpdatesSinceTheBaseVersion) {
  auto v = Make(Spec("w", 2, /*scale=*/true));
  ASSERT_NE(v, nullptr);
  // Fresh (staleness 0): the whole step.
  absl::StatusOr<PushOutcome> out = PushOnes(v.get(), 0, 0);
  STRATA_ASSERT_OK(out);
  EXPECT_EQ(out->staleness, 0);
  EXPECT_FLOAT_EQ(First(*v), -1.0f);
  // Computed from version 0, applied at version 1: half the step.
  out = PushOnes(v.get(), 1, 0);
  STRATA_ASSERT_OK(out);
  EXPECT_EQ(out->staleness, 1);
  EXPECT_FLOAT_EQ(First(*v), -1.5f);
  // From version 0 at version 2: a third.
  out = PushOnes(v.get(), 2, 0);
  STRATA_ASSERT_OK(out);
  EXPECT_EQ(out->staleness, 2);
  EXPECT_FLOAT_EQ(First(*v), -1.5f - 1.0f / 3);
  // A push that names no base version is applied whole, staleness unknown.
  out = PushOnes(v.get(), 3, -1);
  STRATA_ASSERT_OK(out);
  EXPECT_EQ(out->staleness, -1);
  EXPECT_FLOAT_EQ(First(*v), -2.5f - 1.0f / 3);
  // A base above the version (the variable was restored to an older
  // checkpoint since) counts as fresh.
  out = PushOnes(v.get(), 4, 100);
  STRATA_ASSERT_OK(out);
  EXPECT_EQ(out->staleness, 0);
  EXPECT_FLOAT_EQ(First(*v), -3.5f - 1.0f / 3);
  // A retried push is a duplicate: not applied, nothing scaled.
  out = PushOnes(v.get(), 4, 0);
  STRATA_ASSERT_OK(out);
  EXPECT_TRUE(out->duplicate);
  EXPECT_EQ(out->staleness, -1);
  EXPECT_FLOAT_EQ(First(*v), -3.5f - 1.0f / 3);
  EXPECT_EQ(v->version(), 5);
}

TEST(StalenessTest, ToleranceAndSwitchedOffScaling) {
  auto tolerant = Make(Spec("w", 2, /*scale=*/true, /*tolerance=*/1));
  auto off = Make(Spec("w", 2, /*scale=*/false));
  ASSERT_NE(tolerant, nullptr);
  ASSERT_NE(off, nullptr);
  for (Variable* v : {tolerant.get(), off.get()}) {
    for (int step = 0; step < 3; ++step) {
      STRATA_ASSERT_OK(PushOnes(v, step, -1));
    }
  }
  // Staleness 1 is tolerated (base 2 at version 3); 3 (base 1 at version
  // 4) gets a third.
  STRATA_ASSERT_OK(PushOnes(tolerant.get(), 3, 2));
  EXPECT_FLOAT_EQ(First(*tolerant), -4.0f);
  absl::StatusOr<PushOutcome> out = PushOnes(tolerant.get(), 4, 1);
  STRATA_ASSERT_OK(out);
  EXPECT_EQ(out->staleness, 3);
  EXPECT_FLOAT_EQ(First(*tolerant), -4.0f - 1.0f / 3);
  // Without scaling the staleness is still counted, the step is whole.
  out = PushOnes(off.get(), 3, 0);
  STRATA_ASSERT_OK(out);
  EXPECT_EQ(out->staleness, 3);
  EXPECT_FLOAT_EQ(First(*off), -4.0f);
}

TEST(StalenessTest, SpecsThatCannotScaleAreRefusedNamingTheField) {
  absl::StatusOr<std::shared_ptr<Variable>> sync = Variable::Create(
      Spec("w", 2, true, 0, v1::UpdateMode::SYNC), kMaxBytes);
  EXPECT_EQ(sync.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(sync.status().message().find("scale_by_staleness is for ASYNC"),
            std::string::npos)
      << sync.status();
  absl::StatusOr<std::shared_ptr<Variable>> negative =
      Variable::Create(Spec("w", 2, true, -1), kMaxBytes);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find(
                "staleness_tolerance must be >= 0, got -1"),
            std::string::npos)
      << negative.status();
}

// ApplyDenseScaled(s) is ApplyDense with the learning rate times s, for
// every optimizer; a scale that is not finite and > 0 changes nothing.
TEST(StalenessTest, EveryOptimizerScalesItsLearningRate) {
  for (const char* type : {"sgd", "adam", "adagrad", "rmsprop"}) {
    SCOPED_TRACE(type);
    OptimizerConfig config;
    config.type = *ParseOptimizerType(type);
    config.learning_rate = 0.2;
    config.momentum = config.type == OptimizerType::kSgd ? 0.9 : 0.0;
    OptimizerConfig quarter = config;
    quarter.learning_rate = 0.05;
    auto scaled = Optimizer::Create(config);
    auto reference = Optimizer::Create(quarter);
    STRATA_ASSERT_OK(scaled);
    STRATA_ASSERT_OK(reference);
    const int64_t n = 67;
    const size_t slots = (*scaled)->SlotNames().size();
    std::vector<std::vector<float>> a_slots(slots), b_slots(slots);
    std::vector<void*> a_ptrs, b_ptrs;
    for (size_t k = 0; k < slots; ++k) {
      const float init =
          static_cast<float>((*scaled)->SlotInitialValue(k));
      a_slots[k].assign(n, init);
      b_slots[k].assign(n, init);
      a_ptrs.push_back(a_slots[k].data());
      b_ptrs.push_back(b_slots[k].data());
    }
    std::vector<float> a(n, 0.5f), b(n, 0.5f), g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = 0.01f * static_cast<float>(i % 9) - 0.04f;
    for (int64_t it = 0; it < 3; ++it) {
      STRATA_ASSERT_OK((*scaled)->ApplyDenseScaled(
          DType::kFloat32, it, 0.25, a.data(), a_ptrs, g.data(), n));
      STRATA_ASSERT_OK((*reference)->ApplyDense(DType::kFloat32, it, b.data(),
                                                b_ptrs, g.data(), n));
    }
    for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(a[i], b[i]) << i;
    const std::vector<float> before = a;
    for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
      absl::Status s = (*scaled)->ApplyDenseScaled(
          DType::kFloat32, 3, bad, a.data(), a_ptrs, g.data(), n);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(s.message().find("learning rate scale"), std::string::npos);
    }
    EXPECT_EQ(a, before);
  }
}

// --- Through a PS server: the wire field, the statistics, and PsCluster.

PsClientOptions ClientOptions(bool shared_memory) {
  PsClientOptions options;
  options.deadline = absl::Seconds(20);
  options.max_attempts = 1;
  options.shared_memory = shared_memory;
  return options;
}

// (Over the wire, with nothing applied: WireContractTest
// .BaseVersionIsCountedAndANegativeOneIsRefused.)
TEST(StalenessServerTest, NotGivenIsLeftOutAndANegativeOneIsRefused) {
  std::ostringstream log;
  Logger logger("ps:test", &log);
  auto server = PsServer::Start(PsServerOptions{}, &logger);
  STRATA_ASSERT_OK(server);
  auto client = PsClient::Connect((*server)->address(), ClientOptions(false));
  STRATA_ASSERT_OK(client->CreateVariable(Spec("w", 2, true)));
  const float grad[2] = {1, 1};
  PushTag tag{"job", 0, 0};
  tag.base_versions = {-1};  // -1 is "not given": applied whole
  STRATA_ASSERT_OK(
      client->PushVariables({"w"}, DType::kFloat32, {{2}}, {grad}, tag));
  // The client leaves a negative version out; a raw header carries it.
  v1::PushVariablesHeader header;
  v1::VariableSlot* slot = header.add_variables();
  slot->set_name("w");
  slot->set_dtype(v1::DT_FLOAT32);
  slot->add_shape(2);
  slot->set_bytes(sizeof grad);
  slot->set_base_version(-7);
  header.set_payload_bytes(sizeof grad);
  header.mutable_tag()->set_job("job");
  header.mutable_tag()->set_step(1);
  uint64_t bytes = 0;
  absl::StatusOr<std::vector<std::shared_ptr<Variable>>> checked =
      ValidatePushVariablesHeader(header, *(*server)->store(), &bytes);
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(checked.status().message().find(
                "gradient for variable 'w': base_version must be >= 0, got -7"),
            std::string::npos)
      << checked.status();
  std::vector<float> value(2);
  STRATA_ASSERT_OK(client->Pull("w", value.data(), sizeof(float) * 2).status());
  EXPECT_EQ(value, (std::vector<float>{-1, -1}));
  auto stats = client->Stats();
  STRATA_ASSERT_OK(stats);
  EXPECT_EQ(stats->pushes_applied(), 1);
  EXPECT_EQ(stats->pushes_with_base_version(), 0);
}

// Lane 0 reads version 0; lane 1 reads it too and pushes (version 1);
// lane 0's push then has staleness 1 and half the learning rate. The same
// through each way PsCluster reads and pushes.
TEST(StalenessServerTest, PsClusterNamesTheVersionEachLaneDelivered) {
  for (bool shared_memory : {false, true}) {
    for (bool latest : {false, true}) {
      SCOPED_TRACE(absl::StrCat(shared_memory ? "shared memory" : "streams",
                                latest ? ", PullLatest" : ", PushPullMany"));
      std::ostringstream log;
      Logger logger("ps:test", &log);
      auto server = PsServer::Start(PsServerOptions{}, &logger);
      STRATA_ASSERT_OK(server);
      auto cluster = PsCluster::Connect({(*server)->address()},
                                        ClientOptions(shared_memory));
      STRATA_ASSERT_OK(cluster->CreateVariable(Spec("w", 4, true), {}));
      std::vector<float> lane0(4), lane1(4), grad(4, 1.0f);
      const std::vector<std::string> names = {"w"};
      auto pull = [&](int lane, std::vector<float>* dst) {
        return latest ? cluster->PullLatest(lane, names, {dst->data()})
                      : cluster->PushPullMany(lane, names, {}, {},
                                              {dst->data()});
      };
      STRATA_ASSERT_OK(pull(0, &lane0));
      STRATA_ASSERT_OK(pull(1, &lane1));
      if (latest && shared_memory) {
        EXPECT_TRUE(cluster->ReadsMirror(0));
      }
      STRATA_ASSERT_OK(cluster->PushPullMany(1, names, {grad.data()},
                                             PushTag{"job", 0, 0}, {}));
      STRATA_ASSERT_OK(cluster->PushPullMany(0, names, {grad.data()},
                                             PushTag{"job", 0, 1}, {}));
      // Lane 0 reads again (version 2) and pushes fresh.
      STRATA_ASSERT_OK(pull(0, &lane0));
      EXPECT_FLOAT_EQ(lane0[0], -1.5f);
      STRATA_ASSERT_OK(cluster->PushPullMany(0, names, {grad.data()},
                                             PushTag{"job", 0, 2},
                                             {lane0.data()}));
      EXPECT_FLOAT_EQ(lane0[0], -2.5f);
      EXPECT_EQ(cluster->UsesSharedMemory(0, 0), shared_memory);
      auto stats = cluster->ps(0)->Stats();
      STRATA_ASSERT_OK(stats);
      EXPECT_EQ(stats->pushes_with_base_version(), 3);
      EXPECT_EQ(stats->staleness_sum(), 1);
      EXPECT_EQ(stats->staleness_max(), 1);
      // The same figures on /metrics.
      const std::string metrics = (*server)->metrics()->Serialize();
      EXPECT_NE(metrics.find("strata_ps_pushes_with_base_version 3"), std::string::npos)
          << metrics;
      EXPECT_NE(metrics.find("strata_ps_staleness_sum 1"), std::string::npos);
      EXPECT_NE(metrics.find("strata_ps_staleness_max 1"), std::string::npos);
    }
  }
}

TEST(StalenessJobTest, TheJobFieldsAreCheckedNamingTheField) {
  auto parse = [](const std::string& strategy) {
    return ParseJobString(absl::StrCat(R"({
      "model": {"input_shape": [4],
                "layers": [{"type": "dense", "units": 2,
                            "activation": "softmax"}]},
      "loss": "sparse_categorical_crossentropy",
      "optimizer": {"type": "sgd"},
      "data": {"format": "idx",
               "train": {"images": "/x/train-images", "labels": "/x/train-labels"},
               "test": {"images": "/x/test-images", "labels": "/x/test-labels"}},
      "strategy": )", strategy, "}"));
  };
  absl::StatusOr<JobSpec> ok = parse(
      R"({"type": "parameter_server", "staleness_lr": "inverse",
          "staleness_tolerance": 2})");
  STRATA_ASSERT_OK(ok);
  EXPECT_EQ(ok->strategy.staleness_lr, "inverse");
  EXPECT_EQ(ok->strategy.staleness_tolerance, 2);
  struct Bad {
    const char* strategy;
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {R"({"type": "parameter_server", "update": "sync",
                "staleness_lr": "inverse"})",
            "job.strategy.staleness_lr: 'inverse' scales the learning rate "
            "of stale gradients, which only parameter_server with update "
            "'async' applies"},
           {R"({"type": "central_storage", "staleness_lr": "inverse"})",
            "job.strategy.staleness_lr"},
           {R"({"type": "parameter_server", "staleness_lr": "half"})",
            "job.strategy.staleness_lr"},
           {R"({"type": "parameter_server", "staleness_tolerance": 1})",
            "job.strategy.staleness_tolerance: needs staleness_lr 'inverse'"},
           {R"({"type": "parameter_server", "staleness_lr": "inverse",
                "staleness_tolerance": -1})",
            "job.strategy.staleness_tolerance"}}) {
    SCOPED_TRACE(bad.strategy);
    absl::StatusOr<JobSpec> job = parse(bad.strategy);
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(job.status().message().find(bad.message), std::string::npos)
        << job.status();
  }
}

}  // namespace
}  // namespace strata

// The PS with GPU-resident variables (--device cuda:0) against the PS on the
// host: the same pushes (dense, rows with duplicate ids, sync steps) and
// assignments give the same values within float tolerance, snapshots held by
// readers never change, checkpoints round-trip between the two devices, and
// the gRPC service serves device variables. Skips without a usable device.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "client/ps_client.h"
#include "gtest/gtest.h"
#include "server/device_state.h"
#include "server/ps_server.h"
#include "server/variable_store.h"
#include "tests/test_util.h"

namespace strata {
namespace {

#define STRATA_SKIP_WITHOUT_CUDA()                                   \
  do {                                                               \
    absl::StatusOr<std::string> d = CheckPsDevice(Cuda0());          \
    if (!d.ok()) {                                                   \
      GTEST_SKIP() << "no CUDA device, skipping: " << d.status();    \
    }                                                                \
  } while (0)

PsDevice Cuda0() {
  PsDevice d;
  d.cuda_index = 0;
  return d;
}

struct OptCase {
  std::string name;
  v1::OptimizerSpec spec;
};

std::vector<OptCase> Optimizers() {
  std::vector<OptCase> out;
  auto add = [&](const std::string& name, auto edit) {
    v1::OptimizerSpec o;
    edit(o);
    out.push_back({name, o});
  };
  add("sgd", [](v1::OptimizerSpec& o) {
    o.set_type("sgd");
    o.set_learning_rate(0.1);
  });
  add("sgd_nesterov", [](v1::OptimizerSpec& o) {
    o.set_type("sgd");
    o.set_momentum(0.9);
    o.set_nesterov(true);
  });
  add("adam", [](v1::OptimizerSpec& o) { o.set_type("adam"); });
  add("adam_amsgrad", [](v1::OptimizerSpec& o) {
    o.set_type("adam");
    o.set_amsgrad(true);
    o.set_learning_rate(0.01);
  });
  add("adagrad", [](v1::OptimizerSpec& o) {
    o.set_type("adagrad");
    o.set_initial_accumulator_value(0.2);
  });
  add("rmsprop_centered_momentum", [](v1::OptimizerSpec& o) {
    o.set_type("rmsprop");
    o.set_centered(true);
    o.set_momentum(0.5);
  });
  add("assign_add", [](v1::OptimizerSpec& o) { o.set_type("assign_add"); });
  add("assign", [](v1::OptimizerSpec& o) { o.set_type("assign"); });
  return out;
}

v1::VariableSpec Spec(const std::string& name, v1::DType dtype, Shape shape,
                      const v1::OptimizerSpec& optimizer) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(dtype);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_type("random_uniform");
  spec.mutable_initializer()->set_seed(42);
  *spec.mutable_optimizer() = optimizer;
  return spec;
}

// Deterministic values in [-1, 1) as `dtype` bytes.
std::vector<char> Values(DType dtype, int64_t n, uint64_t seed) {
  std::vector<char> out(n * DTypeSize(dtype));
  uint64_t x = seed * 2862933555777941757ULL + 3037000493ULL;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const double v = static_cast<double>(x >> 11) /
                         static_cast<double>(uint64_t{1} << 52) -
                     1.0;
    if (dtype == DType::kFloat32) {
      reinterpret_cast<float*>(out.data())[i] = static_cast<float>(v);
    } else {
      reinterpret_cast<double*>(out.data())[i] = v;
    }
  }
  return out;
}

// Element-wise comparison of two buffers of `dtype` within float tolerance.
void ExpectClose(DType dtype, const Buffer& actual, const Buffer& expected,
                 const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  const bool f32 = dtype == DType::kFloat32;
  const size_t n = expected.size() / DTypeSize(dtype);
  for (size_t i = 0; i < n; ++i) {
    const double a = f32 ? actual.span<float>()[i] : actual.span<double>()[i];
    const double e =
        f32 ? expected.span<float>()[i] : expected.span<double>()[i];
    ASSERT_NEAR(a, e, (f32 ? 3e-5 : 1e-11) * (1.0 + std::fabs(e)))
        << what << " at element " << i;
  }
}

PushMeta Meta(int64_t step, int64_t worker = 0) {
  PushMeta m;
  m.job = "job";
  m.worker = worker;
  m.step = step;
  return m;
}

std::shared_ptr<Variable> Get(VariableStore& store, const std::string& name) {
  absl::StatusOr<std::shared_ptr<Variable>> v = store.Get(name);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : nullptr;
}

// Compares value, version, iterations and (through checkpoint entries) the
// slots of variable `name` in both stores.
void ExpectSameVariable(VariableStore& gpu, VariableStore& cpu,
                        const std::string& name, DType dtype,
                        const std::string& what) {
  std::shared_ptr<Variable> g = Get(gpu, name), c = Get(cpu, name);
  ASSERT_TRUE(g && c);
  VariableSnapshot gs = g->Snapshot(), cs = c->Snapshot();
  EXPECT_EQ(gs.version, cs.version) << what;
  EXPECT_EQ(g->iterations(), c->iterations()) << what;
  ExpectClose(dtype, *gs.value, *cs.value, what + " value");
  absl::StatusOr<CheckpointVariable> ge = g->CheckpointEntry();
  absl::StatusOr<CheckpointVariable> ce = c->CheckpointEntry();
  ASSERT_TRUE(ge.ok()) << ge.status();
  ASSERT_TRUE(ce.ok()) << ce.status();
  ASSERT_EQ(ge->slots.size(), ce->slots.size()) << what;
  for (size_t k = 0; k < ce->slots.size(); ++k) {
    EXPECT_EQ(ge->slots[k].first, ce->slots[k].first);
    ExpectClose(dtype, *ge->slots[k].second, *ce->slots[k].second,
                what + " slot " + ce->slots[k].first);
  }
}

class GpuPsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            ("gpu_ps_test_" + std::to_string(getpid())))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static VariableStoreOptions Options(const PsDevice& device) {
    VariableStoreOptions o;
    o.device = device;
    return o;
  }

  std::string dir_;
};

// Every optimizer, both float types: dense pushes, row pushes (duplicate ids
// summed), an assignment, then a checkpoint written from the device and
// restored onto both devices, and more pushes.
TEST_F(GpuPsTest, EveryOptimizerMatchesTheHostStore) {
  STRATA_SKIP_WITHOUT_CUDA();
  const Shape shape = {67, 33};  // 2211 elements: not a multiple of 256
  const int64_t n = 67 * 33, width = 33;
  for (v1::DType wire : {v1::DT_FLOAT32, v1::DT_FLOAT64}) {
    const DType dtype = wire == v1::DT_FLOAT32 ? DType::kFloat32
                                               : DType::kFloat64;
    for (const OptCase& opt : Optimizers()) {
      const std::string what = opt.name + " " + DTypeName(dtype);
      SCOPED_TRACE(what);
      VariableStore gpu(Options(Cuda0())), cpu({});
      const v1::VariableSpec spec = Spec("w", wire, shape, opt.spec);
      STRATA_ASSERT_OK(gpu.Create(spec));
      STRATA_ASSERT_OK(cpu.Create(spec));
      ASSERT_TRUE(Get(gpu, "w")->device().is_cuda());
      ExpectSameVariable(gpu, cpu, "w", dtype, what + " initial");
      int64_t step = 0;
      for (int i = 0; i < 3; ++i, ++step) {
        const std::vector<char> grad = Values(dtype, n, 10 + step);
        for (VariableStore* s : {&gpu, &cpu}) {
          STRATA_ASSERT_OK(
              Get(*s, "w")->PushDense(Meta(step), grad.data(), grad.size()));
        }
      }
      ExpectSameVariable(gpu, cpu, "w", dtype, what + " dense");
      for (int i = 0; i < 2; ++i, ++step) {
        const std::vector<int64_t> ids = {5, 66, 0, 5, 31, 12, 66};
        const std::vector<char> rows =
            Values(dtype, static_cast<int64_t>(ids.size()) * width, 20 + step);
        for (VariableStore* s : {&gpu, &cpu}) {
          STRATA_ASSERT_OK(Get(*s, "w")->PushRows(Meta(step), ids,
                                                  rows.data(), rows.size()));
        }
      }
      ExpectSameVariable(gpu, cpu, "w", dtype, what + " rows");
      const std::vector<char> assigned = Values(dtype, n, 99);
      for (VariableStore* s : {&gpu, &cpu}) {
        STRATA_ASSERT_OK(Get(*s, "w")->Assign(assigned.data(), assigned.size()));
      }
      ExpectSameVariable(gpu, cpu, "w", dtype, what + " assign");

      // Checkpoint from the device; restore onto the device and the host.
      STRATA_ASSERT_OK(gpu.Save(dir_));
      VariableStore gpu2(Options(Cuda0())), cpu2({});
      STRATA_ASSERT_OK(gpu2.Restore(dir_));
      STRATA_ASSERT_OK(cpu2.Restore(dir_));
      ASSERT_TRUE(Get(gpu2, "w")->device().is_cuda());
      ExpectSameVariable(gpu2, cpu, "w", dtype, what + " restored on device");
      ExpectSameVariable(cpu2, cpu, "w", dtype, what + " restored on host");
      const std::vector<char> grad = Values(dtype, n, 77);
      for (VariableStore* s : {&gpu2, &cpu}) {
        STRATA_ASSERT_OK(
            Get(*s, "w")->PushDense(Meta(step), grad.data(), grad.size()));
      }
      ExpectSameVariable(gpu2, cpu, "w", dtype, what + " after restore");
      std::filesystem::remove_all(dir_);
      if (HasFatalFailure()) return;
    }
  }
}

// Larger than one 4 MiB staging chunk, dense and rows; above the size whose
// host copies are page-locked.
TEST_F(GpuPsTest, LargeVariableSpanningSeveralStagingChunks) {
  STRATA_SKIP_WITHOUT_CUDA();
  v1::OptimizerSpec adam;
  adam.set_type("adam");
  const Shape shape = {2500, 1031};  // ~10 MB of float32
  const int64_t n = 2500 * 1031, width = 1031;
  VariableStore gpu(Options(Cuda0())), cpu({});
  const v1::VariableSpec spec = Spec("big", v1::DT_FLOAT32, shape, adam);
  STRATA_ASSERT_OK(gpu.Create(spec));
  STRATA_ASSERT_OK(cpu.Create(spec));
  for (int64_t step = 0; step < 2; ++step) {
    const std::vector<char> grad = Values(DType::kFloat32, n, step);
    for (VariableStore* s : {&gpu, &cpu}) {
      STRATA_ASSERT_OK(
          Get(*s, "big")->PushDense(Meta(step), grad.data(), grad.size()));
    }
  }
  // 1500 rows of 4 KiB: more than one stage of ids and rows.
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < 1500; ++r) ids.push_back((r * 7) % 2500);
  const std::vector<char> rows = Values(
      DType::kFloat32, static_cast<int64_t>(ids.size()) * width, 5);
  for (VariableStore* s : {&gpu, &cpu}) {
    STRATA_ASSERT_OK(
        Get(*s, "big")->PushRows(Meta(2), ids, rows.data(), rows.size()));
  }
  ExpectSameVariable(gpu, cpu, "big", DType::kFloat32, "big");
}

// A snapshot taken before a push keeps its bytes while pushes run (the host
// copy is never written under a reader), whether the variable is small or
// page-locked, across several pushes (recycled host copies).
TEST_F(GpuPsTest, SnapshotsHeldByReadersNeverChange) {
  STRATA_SKIP_WITHOUT_CUDA();
  v1::OptimizerSpec sgd;
  sgd.set_type("sgd");
  sgd.set_learning_rate(0.5);
  for (const Shape& shape : {Shape{10, 10}, Shape{512, 256}}) {
    VariableStore gpu(Options(Cuda0()));
    STRATA_ASSERT_OK(gpu.Create(Spec("w", v1::DT_FLOAT32, shape, sgd)));
    std::shared_ptr<Variable> v = Get(gpu, "w");
    const int64_t n = NumElements(shape);
    std::vector<VariableSnapshot> held;
    std::vector<std::vector<char>> bytes;
    for (int64_t step = 0; step < 5; ++step) {
      held.push_back(v->Snapshot());
      bytes.emplace_back(held.back().value->data(),
                         held.back().value->data() + held.back().value->size());
      if (step == 2) {  // release some, so that their buffers are recycled
        held.erase(held.begin());
        bytes.erase(bytes.begin());
      }
      const std::vector<char> grad = Values(DType::kFloat32, n, step);
      STRATA_ASSERT_OK(v->PushDense(Meta(step), grad.data(), grad.size()));
      const std::vector<int64_t> ids = {1, 3};
      const std::vector<char> rows =
          Values(DType::kFloat32, 2 * shape[1], 50 + step);
      STRATA_ASSERT_OK(
          v->PushRows(Meta(100 + step), ids, rows.data(), rows.size()));
      for (size_t i = 0; i < held.size(); ++i) {
        ASSERT_EQ(std::memcmp(held[i].value->data(), bytes[i].data(),
                              bytes[i].size()),
                  0)
            << "snapshot " << i << " changed at step " << step;
      }
    }
    EXPECT_EQ(v->Snapshot().version, 10);
  }
}

// SYNC: the mean of the replicas' gradients is applied once per step.
TEST_F(GpuPsTest, SyncStepsMatchTheHostStore) {
  STRATA_SKIP_WITHOUT_CUDA();
  v1::OptimizerSpec adam;
  adam.set_type("adam");
  v1::VariableSpec spec = Spec("s", v1::DT_FLOAT32, {40, 9}, adam);
  spec.mutable_update_mode()->set_kind(v1::UpdateMode::SYNC);
  spec.mutable_update_mode()->set_num_replicas(2);
  VariableStore gpu(Options(Cuda0())), cpu({});
  STRATA_ASSERT_OK(gpu.Create(spec));
  STRATA_ASSERT_OK(cpu.Create(spec));
  for (int64_t step = 0; step < 3; ++step) {
    for (int64_t worker = 0; worker < 2; ++worker) {
      const std::vector<char> grad =
          Values(DType::kFloat32, 360, step * 2 + worker);
      for (VariableStore* s : {&gpu, &cpu}) {
        STRATA_ASSERT_OK(Get(*s, "s")->PushDense(Meta(step, worker),
                                                 grad.data(), grad.size()));
      }
    }
  }
  EXPECT_EQ(Get(gpu, "s")->version(), 3);
  ExpectSameVariable(gpu, cpu, "s", DType::kFloat32, "sync");
}

// Integer variables (assign_add wraps, assign copies) give exactly the host
// store's values.
TEST_F(GpuPsTest, IntegerAssignAddAndAssignAreExact) {
  STRATA_SKIP_WITHOUT_CUDA();
  for (const char* type : {"assign_add", "assign"}) {
    SCOPED_TRACE(type);
    v1::OptimizerSpec o;
    o.set_type(type);
    v1::VariableSpec spec = Spec("i", v1::DT_INT64, {50, 3}, o);
    spec.mutable_initializer()->set_type("ones");
    VariableStore gpu(Options(Cuda0())), cpu({});
    STRATA_ASSERT_OK(gpu.Create(spec));
    STRATA_ASSERT_OK(cpu.Create(spec));
    std::vector<int64_t> grad(150);
    for (int64_t i = 0; i < 150; ++i) {
      grad[i] = i % 3 == 0 ? INT64_MAX : i * 1000 - 7;
    }
    const char* bytes = reinterpret_cast<const char*>(grad.data());
    const std::vector<int64_t> ids = {49, 2, 2};
    for (VariableStore* s : {&gpu, &cpu}) {
      STRATA_ASSERT_OK(Get(*s, "i")->PushDense(Meta(0), bytes, 1200));
      STRATA_ASSERT_OK(Get(*s, "i")->PushRows(Meta(1), ids, bytes, 72));
    }
    VariableSnapshot g = Get(gpu, "i")->Snapshot();
    VariableSnapshot c = Get(cpu, "i")->Snapshot();
    ASSERT_EQ(g.value->size(), c.value->size());
    EXPECT_EQ(std::memcmp(g.value->data(), c.value->data(), c.value->size()),
              0);
  }
}

// strata-ps's code path: PsServer with --device cuda:0, reached over gRPC.
TEST_F(GpuPsTest, ServerOnTheDeviceServesPushesAndPulls) {
  STRATA_SKIP_WITHOUT_CUDA();
  Logger logger("gpu_ps_test");
  PsServerOptions options;
  options.device = Cuda0();
  options.checkpoint_dir = dir_;
  absl::StatusOr<std::unique_ptr<PsServer>> server =
      PsServer::Start(options, &logger);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_NE((*server)->device_description().find("cuda:0"), std::string::npos);
  std::unique_ptr<PsClient> client = PsClient::Connect((*server)->address());
  v1::OptimizerSpec sgd;
  sgd.set_type("sgd");
  sgd.set_momentum(0.9);
  const v1::VariableSpec spec = Spec("w", v1::DT_FLOAT32, {300, 7}, sgd);
  STRATA_ASSERT_OK(client->CreateVariable(spec));
  VariableStore cpu({});
  STRATA_ASSERT_OK(cpu.Create(spec));
  for (int64_t step = 0; step < 3; ++step) {
    const std::vector<char> grad = Values(DType::kFloat32, 2100, step);
    PushTag tag;
    tag.job = "job";
    tag.step = step;
    STRATA_ASSERT_OK(
        client->Push("w", DType::kFloat32, {300, 7}, grad.data(), tag));
    STRATA_ASSERT_OK(
        Get(cpu, "w")->PushDense(Meta(step), grad.data(), grad.size()));
  }
  std::shared_ptr<Buffer> pulled = Buffer::Allocate(2100 * sizeof(float));
  absl::StatusOr<PullResult> r =
      client->Pull("w", pulled->data(), pulled->size());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version, 3);
  ExpectClose(DType::kFloat32, *pulled, *Get(cpu, "w")->Snapshot().value,
              "pulled");
  STRATA_ASSERT_OK(client->Save("ckpt"));
  STRATA_ASSERT_OK(client->Restore("ckpt"));
  r = client->Pull("w", pulled->data(), pulled->size());
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectClose(DType::kFloat32, *pulled, *Get(cpu, "w")->Snapshot().value,
              "pulled after restore");
  client.reset();
  (*server)->Shutdown(absl::Seconds(5));
}

}  // namespace
}  // namespace strata

// The CUDA optimizer kernels against the CPU optimizers (kernels/optimizers.h)
// for every optimizer and option, float32 and float64, dense and sparse,
// over several steps and sizes that are not multiples of the block size.
// The argument checks run everywhere; the rest skip without a device.
#include "kernels/cuda/optimizer_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/device.h"
#include "kernels/optimizers.h"

namespace strata {
namespace {


#define ASSERT_OK(expr)                             \
  do {                                              \
    const absl::Status assert_ok_status_ = (expr);  \
    ASSERT_TRUE(assert_ok_status_.ok()) << assert_ok_status_; \
  } while (0)

struct Case {
  std::string name;
  OptimizerConfig config;
};

// Every optimizer and option combination the PS serves.
std::vector<Case> AllCases() {
  std::vector<Case> cases;
  auto add = [&](std::string name, auto edit) {
    OptimizerConfig c;
    edit(c);
    cases.push_back({std::move(name), c});
  };
  add("sgd", [](OptimizerConfig& c) { c.type = OptimizerType::kSgd; });
  add("sgd_momentum", [](OptimizerConfig& c) {
    c.type = OptimizerType::kSgd;
    c.momentum = 0.9;
  });
  add("sgd_nesterov", [](OptimizerConfig& c) {
    c.type = OptimizerType::kSgd;
    c.momentum = 0.9;
    c.nesterov = true;
    c.learning_rate = 0.05;
  });
  add("adam", [](OptimizerConfig& c) { c.type = OptimizerType::kAdam; });
  add("adam_amsgrad", [](OptimizerConfig& c) {
    c.type = OptimizerType::kAdam;
    c.amsgrad = true;
    c.learning_rate = 0.01;
    c.beta_1 = 0.8;
  });
  add("adagrad", [](OptimizerConfig& c) {
    c.type = OptimizerType::kAdagrad;
    c.learning_rate = 0.05;
  });
  add("adagrad_initial_0.5", [](OptimizerConfig& c) {
    c.type = OptimizerType::kAdagrad;
    c.initial_accumulator_value = 0.5;
  });
  add("rmsprop", [](OptimizerConfig& c) { c.type = OptimizerType::kRmsprop; });
  add("rmsprop_momentum", [](OptimizerConfig& c) {
    c.type = OptimizerType::kRmsprop;
    c.momentum = 0.5;
  });
  add("rmsprop_centered", [](OptimizerConfig& c) {
    c.type = OptimizerType::kRmsprop;
    c.centered = true;
    c.rho = 0.8;
  });
  add("rmsprop_centered_momentum", [](OptimizerConfig& c) {
    c.type = OptimizerType::kRmsprop;
    c.centered = true;
    c.momentum = 0.3;
  });
  add("assign_add", [](OptimizerConfig& c) {
    c.type = OptimizerType::kAssignAdd;
  });
  add("assign", [](OptimizerConfig& c) { c.type = OptimizerType::kAssign; });
  return cases;
}

// Deterministic values in [-1, 1).
template <typename T>
std::vector<T> Values(int64_t n, uint64_t seed) {
  std::vector<T> out(n);
  uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out[i] = static_cast<T>(static_cast<double>(x >> 11) /
                                static_cast<double>(uint64_t{1} << 52) -
                            1.0);
  }
  return out;
}

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  return DType::kInt64;
}

// A host array mirrored in device memory.
template <typename T>
struct Mirrored {
  std::vector<T> host;
  DeviceArray device;
};

template <typename T>
absl::Status Upload(const std::vector<T>& host, DeviceArray* device,
                    const CudaStream& stream) {
  absl::StatusOr<DeviceArray> a = DeviceArray::Allocate(host.size() * sizeof(T));
  if (!a.ok()) return a.status();
  *device = std::move(*a);
  absl::Status s = CudaCopyToDevice(device->get(), host.data(),
                                    host.size() * sizeof(T), stream.get());
  if (!s.ok()) return s;
  return stream.Synchronize();
}

template <typename T>
absl::StatusOr<std::vector<T>> Download(const DeviceArray& device, int64_t n,
                                        const CudaStream& stream) {
  std::vector<T> out(n);
  absl::Status s =
      CudaCopyToHost(out.data(), device.get(), n * sizeof(T), stream.get());
  if (!s.ok()) return s;
  s = stream.Synchronize();
  if (!s.ok()) return s;
  return out;
}

template <typename T>
double Tolerance(T expected) {
  // Float: a few ulps of the update terms (the device fuses multiply-adds);
  // double: the same in double precision.
  const double scale = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  return scale * (1.0 + std::fabs(static_cast<double>(expected)));
}

template <typename T>
void ExpectNear(const std::vector<T>& actual, const std::vector<T>& expected,
                const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    if constexpr (std::is_integral_v<T>) {
      ASSERT_EQ(actual[i], expected[i]) << what << " at " << i;
    } else {
      ASSERT_NEAR(actual[i], expected[i], Tolerance(expected[i]))
          << what << " at " << i;
    }
  }
}

// The CPU optimizer and the device copies of one variable.
template <typename T>
class Pair {
 public:
  absl::Status Init(const OptimizerConfig& config, int64_t n, uint64_t seed) {
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(config);
    if (!opt.ok()) return opt.status();
    optimizer_ = std::move(*opt);
    config_ = config;
    n_ = n;
    absl::StatusOr<CudaStream> stream = CudaStream::Create();
    if (!stream.ok()) return stream.status();
    stream_ = std::move(*stream);
    var_.host = Values<T>(n, seed);
    absl::Status s = Upload(var_.host, &var_.device, stream_);
    if (!s.ok()) return s;
    const size_t num_slots = optimizer_->SlotNames().size();
    slots_.resize(num_slots);
    for (size_t k = 0; k < num_slots; ++k) {
      slots_[k].host.assign(
          n, static_cast<T>(optimizer_->SlotInitialValue(k)));
      s = Upload(slots_[k].host, &slots_[k].device, stream_);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // One dense step on both sides with gradient `grad`.
  absl::Status StepDense(int64_t iterations, const std::vector<T>& grad) {
    DeviceArray g;
    absl::Status s = Upload(grad, &g, stream_);
    if (!s.ok()) return s;
    s = optimizer_->ApplyDense(DTypeOf<T>(), iterations, var_.host.data(),
                               HostSlots(), grad.data(), n_);
    if (!s.ok()) return s;
    const std::vector<void*> slots = DeviceSlots();
    s = CudaApplyDense(config_, DTypeOf<T>(), iterations, var_.device.get(),
                       slots, g.get(), n_, stream_.get());
    if (!s.ok()) return s;
    return stream_.Synchronize();
  }

  // One sparse step: rows `ids` of a [n / width, width] variable.
  absl::Status StepSparse(int64_t iterations, const std::vector<int64_t>& ids,
                          const std::vector<T>& rows, int64_t width) {
    DeviceArray g, d_ids;
    absl::Status s = Upload(rows, &g, stream_);
    if (!s.ok()) return s;
    s = Upload(ids, &d_ids, stream_);
    if (!s.ok()) return s;
    s = optimizer_->ApplySparse(DTypeOf<T>(), iterations, var_.host.data(),
                                HostSlots(), ids, rows.data(), width);
    if (!s.ok()) return s;
    const std::vector<void*> slots = DeviceSlots();
    s = CudaApplySparse(config_, DTypeOf<T>(), iterations, var_.device.get(),
                        slots, static_cast<const int64_t*>(d_ids.get()),
                        static_cast<int64_t>(ids.size()), g.get(), width,
                        stream_.get());
    if (!s.ok()) return s;
    return stream_.Synchronize();
  }

  void ExpectEqual(const std::string& what) {
    absl::StatusOr<std::vector<T>> var = Download<T>(var_.device, n_, stream_);
    ASSERT_TRUE(var.ok()) << var.status();
    ExpectNear(*var, var_.host, what + " var");
    for (size_t k = 0; k < slots_.size(); ++k) {
      absl::StatusOr<std::vector<T>> slot =
          Download<T>(slots_[k].device, n_, stream_);
      ASSERT_TRUE(slot.ok()) << slot.status();
      ExpectNear(*slot, slots_[k].host,
                 what + " slot " + optimizer_->SlotNames()[k]);
    }
  }

  const CudaStream& stream() const { return stream_; }
  const DeviceArray& device_var() const { return var_.device; }
  const std::vector<T>& host_var() const { return var_.host; }

 private:
  std::vector<void*> HostSlots() {
    std::vector<void*> p;
    for (auto& s : slots_) p.push_back(s.host.data());
    return p;
  }
  std::vector<void*> DeviceSlots() const {
    std::vector<void*> p;
    for (const auto& s : slots_) p.push_back(s.device.get());
    return p;
  }

  std::unique_ptr<Optimizer> optimizer_;
  OptimizerConfig config_;
  int64_t n_ = 0;
  CudaStream stream_;
  Mirrored<T> var_;
  std::vector<Mirrored<T>> slots_;
};

template <typename T>
void DenseMatchesCpu(int64_t n, int steps) {
  for (const Case& c : AllCases()) {
    SCOPED_TRACE(c.name);
    Pair<T> pair;
    ASSERT_OK(pair.Init(c.config, n, 7));
    for (int step = 0; step < steps; ++step) {
      ASSERT_OK(pair.StepDense(step, Values<T>(n, 100 + step)));
    }
    pair.ExpectEqual(c.name);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

template <typename T>
void SparseMatchesCpu() {
  const int64_t rows = 301, width = 37;  // neither a multiple of 256
  for (const Case& c : AllCases()) {
    SCOPED_TRACE(c.name);
    Pair<T> pair;
    ASSERT_OK(pair.Init(c.config, rows * width, 11));
    for (int step = 0; step < 4; ++step) {
      // Unique ids in a scrambled order; each step a different subset, so
      // that some rows are updated several times and some never.
      std::vector<int64_t> ids;
      for (int64_t r = step; r < rows; r += 3 + step) ids.push_back(r);
      std::reverse(ids.begin(), ids.end());
      std::rotate(ids.begin(), ids.begin() + ids.size() / 3, ids.end());
      const std::vector<T> grad =
          Values<T>(static_cast<int64_t>(ids.size()) * width, 200 + step);
      ASSERT_OK(pair.StepSparse(step, ids, grad, width));
    }
    pair.ExpectEqual(c.name);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// --- Argument checks: no device needed. ------------------------------------

TEST(CudaOptimizerArgsTest, WrongSlotCountIsInvalidArgument) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  float dummy = 0;
  void* one_slot[] = {&dummy};
  absl::Status s = CudaApplyDense(c, DType::kFloat32, 0, &dummy, one_slot,
                                  &dummy, 1, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("expects 2 slot"), absl::string_view::npos) << s;
}

TEST(CudaOptimizerArgsTest, IntegerDtypeOnlyForAssignAddAndAssign) {
  OptimizerConfig c;
  c.type = OptimizerType::kSgd;
  int32_t dummy = 0;
  absl::Status s =
      CudaApplyDense(c, DType::kInt32, 0, &dummy, {}, &dummy, 1, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("int32"), absl::string_view::npos) << s;
}

TEST(CudaOptimizerArgsTest, BadConfigAndCountsAreInvalidArgument) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  c.beta_1 = 1.5;
  float dummy = 0;
  void* slots[] = {&dummy, &dummy};
  absl::Status s =
      CudaApplyDense(c, DType::kFloat32, 0, &dummy, slots, &dummy, 1, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("beta_1"), absl::string_view::npos) << s;

  c.beta_1 = 0.9;
  s = CudaApplyDense(c, DType::kFloat32, 0, &dummy, slots, &dummy, -1,
                     nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = CudaApplyDense(c, DType::kFloat32, -1, &dummy, slots, &dummy, 1,
                     nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = CudaApplyDense(c, DType::kFloat32, 0, nullptr, slots, &dummy, 1,
                     nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = CudaApplySparse(c, DType::kFloat32, 0, &dummy, slots, nullptr, 3,
                      &dummy, 4, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(CudaOptimizerArgsTest, EmptyIsNoOpWithoutTouchingTheDevice) {
  OptimizerConfig c;
  c.type = OptimizerType::kSgd;
  EXPECT_TRUE(
      CudaApplyDense(c, DType::kFloat32, 0, nullptr, {}, nullptr, 0, nullptr)
          .ok());
  EXPECT_TRUE(CudaApplySparse(c, DType::kFloat64, 0, nullptr, {}, nullptr, 0,
                              nullptr, 8, nullptr)
                  .ok());
  absl::StatusOr<DeviceArray> empty = DeviceArray::Allocate(0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->get(), nullptr);
}

TEST(CudaOptimizerArgsTest, ProbeWithoutDeviceIsFailedPrecondition) {
  absl::StatusOr<int> count = CudaDeviceCount();
  absl::StatusOr<CudaDeviceInfo> info = CudaProbeDevice(0);
  if (count.ok()) {
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_NE(info->Description().find("cuda:0"), std::string::npos);
    absl::StatusOr<CudaDeviceInfo> beyond = CudaProbeDevice(*count);
    EXPECT_EQ(beyond.status().code(), absl::StatusCode::kFailedPrecondition);
  } else {
    EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(info.status().message().find("no usable CUDA device"),
              absl::string_view::npos)
        << info.status();
  }
}

// --- Equivalence: needs a device. --------------------------------------------

TEST(CudaOptimizerTest, DenseFloat32MatchesCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  DenseMatchesCpu<float>(256 * 37 + 13, 5);
}

TEST(CudaOptimizerTest, DenseFloat64MatchesCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  DenseMatchesCpu<double>(256 * 37 + 13, 5);
}

TEST(CudaOptimizerTest, SmallSizesMatchCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  for (int64_t n : {1, 2, 255, 257}) {
    SCOPED_TRACE(n);
    DenseMatchesCpu<float>(n, 3);
    if (HasFatalFailure()) return;
  }
}

TEST(CudaOptimizerTest, LargerThanOneGridPassMatchesCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  // More elements than 65535 blocks x 256 threads cover in one pass: the
  // grid-stride loop runs twice for some threads.
  const int64_t n = int64_t{256} * 65535 + 777;
  for (OptimizerType type : {OptimizerType::kAdam, OptimizerType::kSgd}) {
    OptimizerConfig c;
    c.type = type;
    c.momentum = type == OptimizerType::kSgd ? 0.9 : 0.0;
    Pair<float> pair;
    ASSERT_OK(pair.Init(c, n, 3));
    for (int step = 0; step < 2; ++step) {
      ASSERT_OK(pair.StepDense(step, Values<float>(n, 300 + step)));
    }
    pair.ExpectEqual(OptimizerTypeName(type));
  }
}

TEST(CudaOptimizerTest, SparseFloat32MatchesCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  SparseMatchesCpu<float>();
}

TEST(CudaOptimizerTest, SparseFloat64MatchesCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  SparseMatchesCpu<double>();
}

template <typename T>
void IntegerAssignAddWraps() {
  const int64_t n = 1000;
  std::vector<T> var(n), grad(n);
  for (int64_t i = 0; i < n; ++i) {
    var[i] = i % 2 == 0 ? std::numeric_limits<T>::max() - static_cast<T>(i)
                        : static_cast<T>(i * 3);
    grad[i] = static_cast<T>(i + 1);
  }
  for (OptimizerType type : {OptimizerType::kAssignAdd, OptimizerType::kAssign}) {
    SCOPED_TRACE(OptimizerTypeName(type));
    OptimizerConfig c;
    c.type = type;
    absl::StatusOr<CudaStream> stream = CudaStream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status();
    DeviceArray d_var, d_grad;
    ASSERT_OK(Upload(var, &d_var, *stream));
    ASSERT_OK(Upload(grad, &d_grad, *stream));
    std::vector<T> expected = var;
    auto optimizer = Optimizer::Create(c);
    ASSERT_TRUE(optimizer.ok());
    ASSERT_OK((*optimizer)->ApplyDense(DTypeOf<T>(), 0, expected.data(), {},
                                       grad.data(), n));
    ASSERT_OK(CudaApplyDense(c, DTypeOf<T>(), 0, d_var.get(), {}, d_grad.get(),
                             n, stream->get()));
    absl::StatusOr<std::vector<T>> got = Download<T>(d_var, n, *stream);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectNear(*got, expected, "int");
  }
}

TEST(CudaOptimizerTest, Int32AssignAddWrapsAndAssignCopies) {
  STRATA_SKIP_WITHOUT_CUDA();
  IntegerAssignAddWraps<int32_t>();
}

TEST(CudaOptimizerTest, Int64AssignAddWrapsAndAssignCopies) {
  STRATA_SKIP_WITHOUT_CUDA();
  IntegerAssignAddWraps<int64_t>();
}

TEST(CudaOptimizerTest, GatherRowsCopiesTheNamedRows) {
  STRATA_SKIP_WITHOUT_CUDA();
  const int64_t rows = 50, width = 7;
  std::vector<double> var = Values<double>(rows * width, 5);
  const std::vector<int64_t> ids = {49, 0, 17, 3};
  absl::StatusOr<CudaStream> stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  DeviceArray d_var, d_ids;
  ASSERT_OK(Upload(var, &d_var, *stream));
  ASSERT_OK(Upload(ids, &d_ids, *stream));
  absl::StatusOr<DeviceArray> out =
      DeviceArray::Allocate(ids.size() * width * sizeof(double));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_OK(CudaGatherRows(DType::kFloat64, d_var.get(),
                           static_cast<const int64_t*>(d_ids.get()),
                           static_cast<int64_t>(ids.size()), width, out->get(),
                           stream->get()));
  absl::StatusOr<std::vector<double>> got =
      Download<double>(*out, static_cast<int64_t>(ids.size()) * width, *stream);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t j = 0; j < width; ++j) {
      EXPECT_EQ((*got)[i * width + j], var[ids[i] * width + j]);
    }
  }
}

TEST(CudaOptimizerTest, PinnedBufferAndRegistrationRoundTrip) {
  STRATA_SKIP_WITHOUT_CUDA();
  absl::StatusOr<PinnedHostBuffer> pinned = PinnedHostBuffer::Allocate(4096);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  std::vector<char> pageable(1 << 20, 'x');
  absl::StatusOr<HostRegistration> reg =
      HostRegistration::Register(pageable.data(), pageable.size());
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_TRUE(reg->registered());
  absl::StatusOr<CudaStream> stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<DeviceArray> d = DeviceArray::Allocate(4096);
  ASSERT_TRUE(d.ok()) << d.status();
  std::memset(pinned->data(), 7, 4096);
  ASSERT_OK(CudaCopyToDevice(d->get(), pinned->data(), 4096, stream->get()));
  ASSERT_OK(CudaCopyToHost(pageable.data(), d->get(), 4096, stream->get()));
  ASSERT_OK(stream->Synchronize());
  EXPECT_EQ(pageable[0], 7);
  EXPECT_EQ(pageable[4095], 7);
  EXPECT_EQ(pageable[4096], 'x');
}

}  // namespace
}  // namespace strata

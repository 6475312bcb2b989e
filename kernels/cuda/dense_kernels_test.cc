// CPU-versus-GPU equivalence of the dense-layer kernels. The references
// below repeat worker/model.cc's arithmetic (in double where that is the
// more precise reference). Every test that needs a device skips without
// one; the others check the errors that come back where none is usable.
#include "kernels/cuda/dense_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "common/hash.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

// Skips the current test when no CUDA device can be used on this machine.
#define STRATA_SKIP_WITHOUT_CUDA()                                      \
  do {                                                                  \
    absl::Status usable = CudaCheckDevice(0);                           \
    if (!usable.ok()) {                                                 \
      GTEST_SKIP() << "no CUDA device, skipping: " << usable;           \
    }                                                                   \
  } while (0)

#define ASSERT_OK(expr)                                   \
  do {                                                    \
    const absl::Status strata_test_status_ = (expr);      \
    ASSERT_TRUE(strata_test_status_.ok()) << strata_test_status_; \
  } while (0)

std::vector<float> Random(int64_t n, uint32_t seed, float lo = -1.0f,
                          float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                float rel, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * (1.0f + std::fabs(want[i])))
        << what << " at " << i;
  }
}

// A stream and helpers that move vectors to and from the device.
class DenseKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    STRATA_SKIP_WITHOUT_CUDA();
    absl::StatusOr<std::unique_ptr<GpuStream>> stream = GpuStream::Create(0);
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = std::move(*stream);
  }

  // Device copy of `host` (kept alive by the fixture).
  template <typename T>
  T* Upload(const std::vector<T>& host) {
    buffers_.emplace_back();
    DeviceMemory& m = buffers_.back();
    EXPECT_TRUE(m.Reserve(std::max<size_t>(1, host.size() * sizeof(T))).ok());
    EXPECT_TRUE(CopyToDevice(*stream_, m.get(), host.data(),
                             host.size() * sizeof(T))
                    .ok());
    return static_cast<T*>(m.get());
  }
  template <typename T>
  T* Alloc(int64_t n) {
    return Upload(std::vector<T>(static_cast<size_t>(n)));
  }
  template <typename T>
  std::vector<T> Download(const T* device, int64_t n) {
    std::vector<T> host(static_cast<size_t>(n));
    EXPECT_TRUE(CopyToHost(*stream_, host.data(), device, n * sizeof(T)).ok());
    const absl::Status s = stream_->Synchronize();
    EXPECT_TRUE(s.ok()) << s;
    return host;
  }

  std::unique_ptr<GpuStream> stream_;
  std::vector<DeviceMemory> buffers_;
};

// Runs without a device ------------------------------------------------------

TEST(DenseKernelsNoDeviceTest, CheckDeviceIsOkOrFailedPrecondition) {
  const absl::Status s = CudaCheckDevice(0);
  if (!s.ok()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("CUDA device"), absl::string_view::npos) << s;
  }
}

TEST(DenseKernelsNoDeviceTest, NegativeDeviceIsInvalid) {
  EXPECT_EQ(CudaCheckDevice(-1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(DenseKernelsNoDeviceTest, FarDeviceIsFailedPrecondition) {
  const absl::Status s = CudaCheckDevice(9999);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

TEST(DenseKernelsNoDeviceTest, StreamWithoutDeviceFailsPrecondition) {
  if (CudaCheckDevice(0).ok()) GTEST_SKIP() << "a device is present";
  absl::StatusOr<std::unique_ptr<GpuStream>> stream = GpuStream::Create(0);
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(stream.status().message().find("no usable CUDA device"),
            absl::string_view::npos)
      << stream.status();
}

// GEMM -----------------------------------------------------------------------

// Row-major reference: c = op(a) op(b) + beta c, in double.
std::vector<float> RefGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                           const std::vector<float>& a,
                           const std::vector<float>& b, float beta,
                           const std::vector<float>& c) {
  std::vector<float> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const float av = ta ? a[p * m + i] : a[i * k + p];
        const float bv = tb ? b[j * k + p] : b[p * n + j];
        sum += static_cast<double>(av) * bv;
      }
      out[i * n + j] = static_cast<float>(sum + beta * c[i * n + j]);
    }
  }
  return out;
}

TEST_F(DenseKernelsTest, GemmMatchesCpuForEveryTransposition) {
  const int64_t m = 37, n = 29, k = 131;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 1.0f}) {
        const std::vector<float> a = Random(m * k, 1), b = Random(k * n, 2),
                                 c = Random(m * n, 3);
        float* dc = Upload(c);
        ASSERT_OK(GpuGemm(*stream_, ta, tb, m, n, k, Upload(a), Upload(b),
                          beta, dc));
        ExpectNear(Download(dc, m * n), RefGemm(ta, tb, m, n, k, a, b, beta, c),
                   1e-4f, "gemm");
      }
    }
  }
}

TEST_F(DenseKernelsTest, GemmRejectsNegativeSizes) {
  EXPECT_EQ(GpuGemm(*stream_, false, false, -1, 2, 3, nullptr, nullptr, 0.0f,
                    nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The three products of a dense layer's forward and backward pass, at the
// reference model's shapes.
TEST_F(DenseKernelsTest, DenseForwardAndBackwardProductsMatchCpu) {
  const int64_t batch = 128, in = 784, out = 128;
  const std::vector<float> x = Random(batch * in, 4, 0.0f, 1.0f);
  const std::vector<float> w = Random(in * out, 5, -0.08f, 0.08f);
  const std::vector<float> dz = Random(batch * out, 6, -0.01f, 0.01f);
  float* dx = Upload(x);
  float* dw = Upload(w);
  float* ddz = Upload(dz);
  float* z = Alloc<float>(batch * out);
  float* gw = Alloc<float>(in * out);
  float* gx = Alloc<float>(batch * in);
  ASSERT_OK(GpuGemm(*stream_, false, false, batch, out, in, dx, dw, 0.0f, z));
  ASSERT_OK(GpuGemm(*stream_, true, false, in, out, batch, dx, ddz, 0.0f, gw));
  ASSERT_OK(GpuGemm(*stream_, false, true, batch, in, out, ddz, dw, 0.0f, gx));
  const std::vector<float> zero_z(batch * out), zero_w(in * out),
      zero_x(batch * in);
  ExpectNear(Download(z, batch * out),
             RefGemm(false, false, batch, out, in, x, w, 0, zero_z), 1e-4f,
             "forward");
  ExpectNear(Download(gw, in * out),
             RefGemm(true, false, in, out, batch, x, dz, 0, zero_w), 1e-4f,
             "kernel gradient");
  ExpectNear(Download(gx, batch * in),
             RefGemm(false, true, batch, in, out, dz, w, 0, zero_x), 1e-4f,
             "input gradient");
}

// Bias -----------------------------------------------------------------------

TEST_F(DenseKernelsTest, BiasAddAndGradMatchCpu) {
  const int64_t rows = 1000, cols = 77;
  const std::vector<float> z = Random(rows * cols, 7), bias = Random(cols, 8);
  float* dz = Upload(z);
  ASSERT_OK(GpuBiasAdd(*stream_, dz, Upload(bias), rows, cols));
  std::vector<float> want(z);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) want[r * cols + j] += bias[j];
  }
  // Exact: one float add per element, as the CPU does.
  EXPECT_EQ(Download(dz, rows * cols), want);

  float* db = Alloc<float>(cols);
  ASSERT_OK(GpuBiasGrad(*stream_, Upload(z), rows, cols, db));
  std::vector<float> sums(cols);
  for (int64_t j = 0; j < cols; ++j) {
    float s = z[j];
    for (int64_t r = 1; r < rows; ++r) s += z[r * cols + j];
    sums[j] = s;
  }
  // Row by row, as worker/model.cc sums: the same float adds in the same
  // order, so bit for bit.
  EXPECT_EQ(Download(db, cols), sums);
}

// Activations ----------------------------------------------------------------

std::vector<float> RefActivation(GpuActivation act, std::vector<float> z,
                                 int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = z.data() + r * cols;
    if (act == GpuActivation::kSoftmax) {
      const float max = *std::max_element(row, row + cols);
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) {
        row[j] = std::exp(row[j] - max);
        sum += row[j];
      }
      for (int64_t j = 0; j < cols; ++j) row[j] /= static_cast<float>(sum);
      continue;
    }
    for (int64_t j = 0; j < cols; ++j) {
      const float v = row[j];
      switch (act) {
        case GpuActivation::kRelu:
          row[j] = std::max(v, 0.0f);
          break;
        case GpuActivation::kSigmoid:
          row[j] = 1.0f / (std::exp(-v) + 1.0f);
          break;
        case GpuActivation::kTanh:
          row[j] = std::tanh(v);
          break;
        default:
          break;
      }
    }
  }
  return z;
}

std::vector<float> RefActivationBackward(GpuActivation act,
                                         const std::vector<float>& a,
                                         std::vector<float> g, int64_t rows,
                                         int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* ar = a.data() + r * cols;
    float* gr = g.data() + r * cols;
    if (act == GpuActivation::kSoftmax) {
      double dot = 0;
      for (int64_t j = 0; j < cols; ++j) dot += gr[j] * ar[j];
      for (int64_t j = 0; j < cols; ++j) {
        gr[j] = ar[j] * (gr[j] - static_cast<float>(dot));
      }
      continue;
    }
    for (int64_t j = 0; j < cols; ++j) {
      switch (act) {
        case GpuActivation::kRelu:
          gr[j] *= ar[j] > 0.0f ? 1.0f : 0.0f;
          break;
        case GpuActivation::kSigmoid:
          gr[j] *= ar[j] * (1.0f - ar[j]);
          break;
        case GpuActivation::kTanh:
          gr[j] *= 1.0f - ar[j] * ar[j];
          break;
        default:
          break;
      }
    }
  }
  return g;
}

class ActivationTest
    : public DenseKernelsTest,
      public ::testing::WithParamInterface<GpuActivation> {};

TEST_P(ActivationTest, ForwardAndBackwardMatchCpu) {
  const GpuActivation act = GetParam();
  const int64_t rows = 300, cols = 10;
  const std::vector<float> z = Random(rows * cols, 9, -4.0f, 4.0f);
  float* dz = Upload(z);
  ASSERT_OK(GpuActivationForward(*stream_, act, dz, rows, cols));
  const std::vector<float> a = Download(dz, rows * cols);
  const std::vector<float> want = RefActivation(act, z, rows, cols);
  ExpectNear(a, want, 1e-5f, "forward");

  const std::vector<float> g = Random(rows * cols, 10);
  float* dg = Upload(g);
  ASSERT_OK(GpuActivationBackward(*stream_, act, Upload(want), dg, rows, cols));
  ExpectNear(Download(dg, rows * cols),
             RefActivationBackward(act, want, g, rows, cols), 1e-5f,
             "backward");
}

INSTANTIATE_TEST_SUITE_P(Each, ActivationTest,
                         ::testing::Values(GpuActivation::kLinear,
                                           GpuActivation::kRelu,
                                           GpuActivation::kSigmoid,
                                           GpuActivation::kTanh,
                                           GpuActivation::kSoftmax));

TEST_F(DenseKernelsTest, SoftmaxRowsSumToOneForLargeLogits) {
  const int64_t rows = 4, cols = 1000;
  std::vector<float> z = Random(rows * cols, 11, -50.0f, 50.0f);
  z[3] = 1e4f;  // would overflow exp() without the max shift
  float* dz = Upload(z);
  ASSERT_OK(GpuActivationForward(*stream_, GpuActivation::kSoftmax, dz, rows,
                                 cols));
  const std::vector<float> a = Download(dz, rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += a[r * cols + j];
    EXPECT_NEAR(sum, 1.0, 1e-4) << "row " << r;
  }
  EXPECT_NEAR(a[3], 1.0f, 1e-6f);
}

// Dropout --------------------------------------------------------------------

// worker/model.cc's FillDropoutMask, repeated.
std::vector<float> RefMask(uint64_t seed, uint64_t layer, double rate,
                           int64_t n) {
  const uint64_t key = Mix64(seed ^ Mix64(layer + 0x5bd1e995ULL));
  const float keep_scale = static_cast<float>(1.0 / (1.0 - rate));
  const uint64_t threshold =
      static_cast<uint64_t>(std::ceil(rate * 16777216.0));
  std::vector<float> mask(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    const uint64_t bits =
        Mix64(key + static_cast<uint64_t>(e) * 0xd1b54a32d192ed03ULL) >> 40;
    mask[e] = bits >= threshold ? keep_scale : 0.0f;
  }
  return mask;
}

TEST_F(DenseKernelsTest, DropoutMaskEqualsCpuBitForBit) {
  const int64_t n = 256 * 65535 + 999;  // more than one grid pass
  for (double rate : {0.0, 0.2, 0.5, 0.9}) {
    float* mask = Alloc<float>(n);
    ASSERT_OK(GpuDropoutMask(*stream_, 12345, 3, rate, mask, n));
    EXPECT_EQ(Download(mask, n), RefMask(12345, 3, rate, n)) << rate;
  }
}

TEST_F(DenseKernelsTest, DropoutMaskRejectsRateOne) {
  EXPECT_EQ(GpuDropoutMask(*stream_, 1, 0, 1.0, nullptr, 4).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DenseKernelsTest, MultiplyMatchesCpu) {
  const int64_t n = 5000;
  const std::vector<float> a = Random(n, 12), b = Random(n, 13);
  float* out = Alloc<float>(n);
  ASSERT_OK(GpuMultiply(*stream_, Upload(a), Upload(b), out, n));
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] * b[i];
  EXPECT_EQ(Download(out, n), want);
}

// Losses ---------------------------------------------------------------------

struct RefLossResult {
  std::vector<double> loss;
  std::vector<int32_t> correct;
  std::vector<float> grad;
};

RefLossResult RefLoss(GpuLoss kind, const std::vector<float>& p,
                      const std::vector<int32_t>& y, int64_t batch,
                      int64_t c) {
  constexpr double kEps = 1e-7;
  RefLossResult r;
  r.grad.resize(p.size());
  const float inv = 1.0f / static_cast<float>(batch);
  for (int64_t b = 0; b < batch; ++b) {
    const float* row = p.data() + b * c;
    int32_t right;
    if (c > 1) {
      right = (std::max_element(row, row + c) - row) == y[b] ? 1 : 0;
    } else {
      right = (row[0] > 0.5f ? 1 : 0) == y[b] ? 1 : 0;
    }
    r.correct.push_back(right);
    double loss = 0;
    if (kind == GpuLoss::kCrossEntropy) {
      loss = -std::log(std::clamp<double>(row[y[b]], kEps, 1 - kEps));
      for (int64_t k = 0; k < c; ++k) {
        r.grad[b * c + k] = row[k] * inv - (k == y[b] ? inv : 0.0f);
      }
    } else if (kind == GpuLoss::kBinaryCrossEntropy) {
      const double q = std::clamp<double>(row[0], kEps, 1 - kEps);
      loss = y[b] == 1 ? -std::log(q) : -std::log(1 - q);
      r.grad[b] = (row[0] - static_cast<float>(y[b])) * inv;
    } else {
      const float scale = 2.0f * inv / static_cast<float>(c);
      for (int64_t k = 0; k < c; ++k) {
        const double t = c > 1 ? (k == y[b] ? 1.0 : 0.0) : y[b];
        loss += (row[k] - t) * (row[k] - t);
        float g = row[k] * scale;
        if (c > 1) {
          if (k == y[b]) g -= scale;
        } else {
          g -= scale * static_cast<float>(y[b]);
        }
        r.grad[b * c + k] = g;
      }
      loss /= static_cast<double>(c);
    }
    r.loss.push_back(loss);
  }
  return r;
}

struct LossCase {
  GpuLoss kind;
  int64_t classes;
};

class LossTest : public DenseKernelsTest,
                 public ::testing::WithParamInterface<LossCase> {};

TEST_P(LossTest, LossGradientAndAccuracyMatchCpu) {
  const LossCase lc = GetParam();
  const int64_t batch = 1000, c = lc.classes;
  std::vector<float> p = Random(batch * c, 14, 0.0f, 1.0f);
  if (lc.kind == GpuLoss::kCrossEntropy) {
    p = RefActivation(GpuActivation::kSoftmax, p, batch, c);
    p[0] = 0.0f;  // clipped to epsilon
  }
  std::vector<int32_t> y(batch);
  std::mt19937 gen(15);
  for (int32_t& label : y) {
    label = static_cast<int32_t>(gen() % (c > 1 ? c : 2));
  }
  if (c > 1) {
    // A tie: the first maximum wins, as Eigen's maxCoeff picks it.
    p[c * 7 + 1] = p[c * 7 + 2] = 2.0f;
    y[7] = 1;
  }
  float* grad = Alloc<float>(batch * c);
  double* example_loss = Alloc<double>(batch);
  int32_t* example_correct = Alloc<int32_t>(batch);
  double* sums = Upload(std::vector<double>{1.5, 2.0});  // added to
  ASSERT_OK(GpuLossForward(*stream_, lc.kind, Upload(p), Upload(y), batch, c,
                           batch, grad, example_loss, example_correct, sums));
  const RefLossResult want = RefLoss(lc.kind, p, y, batch, c);
  const std::vector<double> got_loss = Download(example_loss, batch);
  double loss_sum = 0;
  int64_t correct_sum = 0;
  for (int64_t b = 0; b < batch; ++b) {
    ASSERT_NEAR(got_loss[b], want.loss[b], 1e-9 * (1 + want.loss[b])) << b;
    loss_sum += want.loss[b];
    correct_sum += want.correct[b];
  }
  EXPECT_EQ(Download(example_correct, batch), want.correct);
  ExpectNear(Download(grad, batch * c), want.grad, 1e-6f, "gradient");
  const std::vector<double> got_sums = Download(sums, 2);
  EXPECT_NEAR(got_sums[0], 1.5 + loss_sum, 1e-9 * loss_sum);
  EXPECT_EQ(got_sums[1], 2.0 + static_cast<double>(correct_sum));

  // Without a gradient buffer (evaluation) the sums are the same.
  double* sums2 = Upload(std::vector<double>{0.0, 0.0});
  ASSERT_OK(GpuLossForward(*stream_, lc.kind, Upload(p), Upload(y), batch, c,
                           batch, nullptr, example_loss, example_correct,
                           sums2));
  const std::vector<double> got2 = Download(sums2, 2);
  EXPECT_NEAR(got2[0], loss_sum, 1e-9 * loss_sum);
  EXPECT_EQ(got2[1], static_cast<double>(correct_sum));
}

INSTANTIATE_TEST_SUITE_P(
    Each, LossTest,
    ::testing::Values(LossCase{GpuLoss::kCrossEntropy, 10},
                      LossCase{GpuLoss::kBinaryCrossEntropy, 1},
                      LossCase{GpuLoss::kMse, 10}, LossCase{GpuLoss::kMse, 1}));

}  // namespace
}  // namespace strata

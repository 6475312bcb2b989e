// NCCL all-reduce (collective/nccl.h) against the CPU ring all-reduce over
// in-process transports: 1..(visible GPUs) ranks as threads, every dtype,
// uneven counts, sum and mean, host and device buffers; its errors and its
// timeout. Every test that needs a GPU skips where none is usable.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "collective/collective.h"
#include "collective/in_process.h"
#include "collective/nccl.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/nccl_status.h"

namespace strata {
namespace collective {
namespace {


int Gpus() {
  absl::StatusOr<int> count = CudaDeviceCount();
  return count.ok() ? *count : 0;
}

std::vector<int> FirstGpus(int n) {
  std::vector<int> d;
  for (int i = 0; i < n; ++i) d.push_back(i);
  return d;
}

template <typename T>
DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  return DType::kInt64;
}

// Rank r's input. Small integers, so float sums are exact in any order;
// `fractional` adds non-integral parts (then sums may round differently).
template <typename T>
std::vector<T> Input(int rank, int64_t count, bool fractional) {
  std::vector<T> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = (i * 7 + rank * 13) % 61 - 30;
    if constexpr (std::is_floating_point_v<T>) {
      v[static_cast<size_t>(i)] =
          static_cast<T>(k) +
          (fractional ? static_cast<T>(std::sin(0.37 * i + rank)) : T(0));
    } else {
      // Large magnitudes, so that int64 sums exercise the upper bits.
      v[static_cast<size_t>(i)] =
          static_cast<T>(k) *
          (std::is_same_v<T, int64_t> ? static_cast<T>(1) << 40 : T(1));
    }
  }
  return v;
}

// The CPU ring all-reduce of every rank's input: the reference.
template <typename T>
std::vector<std::vector<T>> CpuReduce(std::vector<std::vector<T>> data,
                                      NcclReduce op) {
  const int n = static_cast<int>(data.size());
  auto transports = NewInProcessGroup(n);
  std::vector<absl::Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto& d = data[static_cast<size_t>(r)];
      Transport* t = transports[static_cast<size_t>(r)].get();
      results[static_cast<size_t>(r)] =
          op == NcclReduce::kMean
              ? AllReduceMean(t, DTypeOf<T>(), d.data(),
                              static_cast<int64_t>(d.size()), "ref", {})
              : AllReduceSum(t, DTypeOf<T>(), d.data(),
                             static_cast<int64_t>(d.size()), "ref", {});
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
  return data;
}

// Every rank's all-reduce through `group`, each rank on its own thread, on
// host buffers or (on_device) device buffers of the rank's GPU.
template <typename T>
std::vector<absl::Status> NcclReduceAll(NcclGroup* group,
                                        std::vector<std::vector<T>>* data,
                                        NcclReduce op, bool on_device) {
  const int n = group->size();
  std::vector<absl::Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto& d = (*data)[static_cast<size_t>(r)];
      const size_t bytes = d.size() * sizeof(T);
      absl::Status& result = results[static_cast<size_t>(r)];
      if (!on_device || d.empty()) {
        result = group->AllReduce(r, DTypeOf<T>(), d.data(),
                                  static_cast<int64_t>(d.size()), op);
        return;
      }
      void* dev = nullptr;
      if (cudaSetDevice(group->device(r)) != cudaSuccess ||
          cudaMalloc(&dev, bytes) != cudaSuccess ||
          cudaMemcpy(dev, d.data(), bytes, cudaMemcpyHostToDevice) !=
              cudaSuccess) {
        result = absl::InternalError("test setup: device buffer");
        group->Abort(result);
      } else {
        result = group->AllReduce(r, DTypeOf<T>(), dev,
                                  static_cast<int64_t>(d.size()), op);
        if (result.ok() && cudaMemcpy(d.data(), dev, bytes,
                                      cudaMemcpyDeviceToHost) != cudaSuccess) {
          result = absl::InternalError("test: copy back");
        }
      }
      if (dev != nullptr) cudaFree(dev);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

template <typename T>
void ExpectMatchesCpu(int ranks, int64_t count, NcclReduce op, bool on_device,
                      bool fractional) {
  SCOPED_TRACE(::testing::Message()
               << "ranks " << ranks << ", " << DTypeName(DTypeOf<T>())
               << " x " << count
               << (op == NcclReduce::kMean ? ", mean" : ", sum")
               << (on_device ? ", device buffers" : ", host buffers"));
  std::vector<std::vector<T>> data;
  for (int r = 0; r < ranks; ++r) data.push_back(Input<T>(r, count, fractional));
  const std::vector<std::vector<T>> expected = CpuReduce(data, op);

  absl::StatusOr<std::unique_ptr<NcclGroup>> group =
      NcclGroup::Create(FirstGpus(ranks));
  ASSERT_TRUE(group.ok()) << group.status();
  for (const absl::Status& s : NcclReduceAll(group->get(), &data, op,
                                             on_device)) {
    ASSERT_TRUE(s.ok()) << s;
  }
  for (int r = 0; r < ranks; ++r) {
    for (int64_t i = 0; i < count; ++i) {
      const T got = data[static_cast<size_t>(r)][static_cast<size_t>(i)];
      const T want = expected[static_cast<size_t>(r)][static_cast<size_t>(i)];
      if constexpr (std::is_floating_point_v<T>) {
        // Exact sums of integers; a mean (NCCL scales before it sums) and
        // non-integral sums round differently from the ring's order.
        const bool exact = op == NcclReduce::kSum && !fractional;
        const double eps = std::is_same_v<T, float> ? 1e-6 : 1e-14;
        const double tolerance =
            exact ? 0.0 : eps * ranks * (1.0 + std::fabs(double(want)));
        ASSERT_NEAR(double(got), double(want), tolerance)
            << "rank " << r << ", element " << i;
      } else {
        ASSERT_EQ(got, want) << "rank " << r << ", element " << i;
      }
    }
  }
}

const int64_t kCounts[] = {1, 7, 1000, (1 << 20) + 3};

TEST(NcclStatusTest, ErrorNamesExpressionCodeAndLocation) {
  // 4 == ncclInvalidArgument.
  const absl::Status s = NcclErrorToStatus(4, "ncclAllReduce(x)", "f.cc", 9);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ncclAllReduce(x)"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("f.cc:9"), absl::string_view::npos) << s;
  // 1 == ncclUnhandledCudaError.
  EXPECT_EQ(NcclErrorToStatus(1, "e", "f", 1).code(),
            absl::StatusCode::kInternal);
}

TEST(NcclGroupTest, SumMatchesCpuForEveryDtypeAndRankCount) {
  STRATA_SKIP_WITHOUT_CUDA();
  for (int ranks = 1; ranks <= Gpus(); ++ranks) {
    for (int64_t count : kCounts) {
      ExpectMatchesCpu<float>(ranks, count, NcclReduce::kSum, false, false);
      ExpectMatchesCpu<double>(ranks, count, NcclReduce::kSum, false, false);
      ExpectMatchesCpu<int32_t>(ranks, count, NcclReduce::kSum, false, false);
      ExpectMatchesCpu<int64_t>(ranks, count, NcclReduce::kSum, false, false);
    }
  }
}

TEST(NcclGroupTest, MeanMatchesCpuForFloatTypes) {
  STRATA_SKIP_WITHOUT_CUDA();
  for (int ranks = 1; ranks <= Gpus(); ++ranks) {
    for (int64_t count : kCounts) {
      ExpectMatchesCpu<float>(ranks, count, NcclReduce::kMean, false, true);
      ExpectMatchesCpu<double>(ranks, count, NcclReduce::kMean, false, true);
    }
  }
}

TEST(NcclGroupTest, NonIntegralSumsMatchCpuWithinRounding) {
  STRATA_SKIP_WITHOUT_CUDA();
  for (int ranks = 1; ranks <= Gpus(); ++ranks) {
    ExpectMatchesCpu<float>(ranks, 100003, NcclReduce::kSum, false, true);
    ExpectMatchesCpu<double>(ranks, 100003, NcclReduce::kSum, false, true);
  }
}

TEST(NcclGroupTest, DeviceBuffersAreReducedInPlace) {
  STRATA_SKIP_WITHOUT_CUDA();
  for (int ranks = 1; ranks <= Gpus(); ++ranks) {
    for (int64_t count : {int64_t{5}, int64_t{(1 << 18) + 1}}) {
      ExpectMatchesCpu<float>(ranks, count, NcclReduce::kSum, true, false);
      ExpectMatchesCpu<int64_t>(ranks, count, NcclReduce::kSum, true, false);
      ExpectMatchesCpu<double>(ranks, count, NcclReduce::kMean, true, true);
    }
  }
}

TEST(NcclGroupTest, ManyCallsInARowReuseTheGroup) {
  STRATA_SKIP_WITHOUT_CUDA();
  const int ranks = Gpus();
  auto group = NcclGroup::Create(FirstGpus(ranks));
  ASSERT_TRUE(group.ok()) << group.status();
  for (int step = 0; step < 50; ++step) {
    // Growing and shrinking sizes: staging buffers are reused and regrown.
    const int64_t count = 1 + (step * 7919) % 20000;
    std::vector<std::vector<float>> data;
    for (int r = 0; r < ranks; ++r) data.push_back(Input<float>(r, count, false));
    const auto expected = CpuReduce(data, NcclReduce::kSum);
    for (const auto& s :
         NcclReduceAll(group->get(), &data, NcclReduce::kSum, false)) {
      ASSERT_TRUE(s.ok()) << s;
    }
    ASSERT_EQ(data, expected) << "step " << step;
  }
}

TEST(NcclGroupTest, EmptyReduceIsANoOp) {
  STRATA_SKIP_WITHOUT_CUDA();
  auto group = NcclGroup::Create({0});
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_TRUE((*group)->AllReduce(0, DType::kFloat32, nullptr, 0,
                                  NcclReduce::kSum)
                  .ok());
}

TEST(NcclGroupTest, BadCallsAreInvalidArgumentAndAbortTheGroup) {
  STRATA_SKIP_WITHOUT_CUDA();
  auto group = NcclGroup::Create({0});
  ASSERT_TRUE(group.ok()) << group.status();
  int32_t x = 1;
  EXPECT_EQ((*group)->AllReduce(1, DType::kInt32, &x, 1, NcclReduce::kSum)
                .code(),
            absl::StatusCode::kInvalidArgument);  // not a rank: no abort
  EXPECT_EQ((*group)->AllReduce(0, DType::kInt32, &x, 1, NcclReduce::kMean)
                .code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status after =
      (*group)->AllReduce(0, DType::kInt32, &x, 1, NcclReduce::kSum);
  EXPECT_EQ(after.code(), absl::StatusCode::kAborted) << after;
  EXPECT_NE(after.message().find("mean"), absl::string_view::npos) << after;
}

TEST(NcclGroupTest, CreateRefusesDevicesItCannotUse) {
  STRATA_SKIP_WITHOUT_CUDA();
  EXPECT_EQ(NcclGroup::Create({}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclGroup::Create({0, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const auto too_many = NcclGroup::Create({Gpus()});
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(too_many.status().message().find(std::to_string(Gpus())),
            absl::string_view::npos)
      << too_many.status();
}

// Blocks the legacy default stream of the current device until `release` is
// notified (at most 5 s), so that every blocking stream of the device waits.
void CUDART_CB BlockStream(void* release) {
  static_cast<absl::Notification*>(release)->WaitForNotificationWithTimeout(
      absl::Seconds(5));
}

TEST(NcclGroupTest, StuckGpuWorkIsDeadlineExceededThenTheGroupIsAborted) {
  STRATA_SKIP_WITHOUT_CUDA();
  CollectiveOptions options;
  options.timeout = absl::Milliseconds(300);
  {
    auto group = NcclGroup::Create({0}, options);
    ASSERT_TRUE(group.ok()) << group.status();
    std::vector<float> x(1000, 1.0f);
    // Warm up: the staging buffers exist before the stream is blocked.
    ASSERT_TRUE((*group)->AllReduce(0, DType::kFloat32, x.data(), 1000,
                                    NcclReduce::kSum)
                    .ok());
    absl::Notification release;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaLaunchHostFunc(cudaStreamLegacy, BlockStream, &release),
              cudaSuccess);
    const auto start = std::chrono::steady_clock::now();
    const absl::Status stuck = (*group)->AllReduce(
        0, DType::kFloat32, x.data(), 1000, NcclReduce::kSum);
    const auto took = std::chrono::steady_clock::now() - start;
    release.Notify();
    EXPECT_EQ(stuck.code(), absl::StatusCode::kDeadlineExceeded) << stuck;
    EXPECT_NE(stuck.message().find("cuda:0"), absl::string_view::npos) << stuck;
    // Bounded: the timeout, plus at most the blocked stream's own limit if
    // tearing the communicator down waits for the device.
    EXPECT_LT(took, std::chrono::seconds(30));
    const absl::Status after = (*group)->AllReduce(
        0, DType::kFloat32, x.data(), 1000, NcclReduce::kSum);
    EXPECT_EQ(after.code(), absl::StatusCode::kAborted) << after;
    ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  }
  // The device is usable again by a new group.
  auto fresh = NcclGroup::Create({0});
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  std::vector<double> y = {1.5, -2.0};
  ASSERT_TRUE(
      (*fresh)->AllReduce(0, DType::kFloat64, y.data(), 2, NcclReduce::kSum)
          .ok());
  EXPECT_EQ(y, (std::vector<double>{1.5, -2.0}));
}

TEST(NcclGroupTest, MissingRankIsDeadlineExceededNamingIt) {
  STRATA_SKIP_WITHOUT_CUDA();
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << Gpus();
  CollectiveOptions options;
  options.timeout = absl::Milliseconds(300);
  auto group = NcclGroup::Create({0, 1}, options);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<float> x(10, 1.0f);
  const absl::Status s =
      (*group)->AllReduce(0, DType::kFloat32, x.data(), 10, NcclReduce::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("rank(s) 1"), absl::string_view::npos) << s;
  EXPECT_EQ((*group)
                ->AllReduce(1, DType::kFloat32, x.data(), 10, NcclReduce::kSum)
                .code(),
            absl::StatusCode::kAborted);
}

TEST(NcclGroupTest, MismatchedCallsFailEveryRank) {
  STRATA_SKIP_WITHOUT_CUDA();
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << Gpus();
  auto group = NcclGroup::Create({0, 1});
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<float> a(10, 1.0f), b(11, 1.0f);
  absl::Status sa, sb;
  std::thread t([&] {
    sb = (*group)->AllReduce(1, DType::kFloat32, b.data(), 11,
                             NcclReduce::kSum);
  });
  sa = (*group)->AllReduce(0, DType::kFloat32, a.data(), 10, NcclReduce::kSum);
  t.join();
  EXPECT_FALSE(sa.ok());
  EXPECT_FALSE(sb.ok());
  EXPECT_TRUE(sa.code() == absl::StatusCode::kInvalidArgument ||
              sb.code() == absl::StatusCode::kInvalidArgument)
      << sa << " / " << sb;
}

TEST(NcclGroupTest, AbortEndsAWaitingRank) {
  STRATA_SKIP_WITHOUT_CUDA();
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << Gpus();
  auto group = NcclGroup::Create({0, 1});  // 30 s timeout
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<float> x(10, 1.0f);
  absl::Status s;
  std::thread t([&] {
    s = (*group)->AllReduce(0, DType::kFloat32, x.data(), 10,
                            NcclReduce::kSum);
  });
  (*group)->Abort(absl::CancelledError("replica 1 failed"));
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("replica 1 failed"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace collective
}  // namespace strata

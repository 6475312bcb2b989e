// Helpers shared by the collective tests: ranks as threads, deterministic
// inputs per (rank, element), and the all-reduce check against a reference
// sum (exact for integers, double precision for floats).
#ifndef STRATA_TESTS_COLLECTIVE_TEST_UTIL_H_
#define STRATA_TESTS_COLLECTIVE_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/collective.h"
#include "common/tensor.h"
#include "gtest/gtest.h"

namespace strata {
namespace collective {
namespace testing_util {

// Runs fn(0..n-1) on n threads and joins them.
inline void RunRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// A deterministic pseudo-random 64-bit value of (rank, index).
inline uint64_t Mix(int rank, int64_t i) {
  uint64_t x = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull +
               static_cast<uint64_t>(rank + 1) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

// Input of element i on `rank`. Integers stay far from overflow when summed
// over 8 ranks; int64 values need more than 32 bits; floats span several
// magnitudes and signs.
template <typename T>
T InputValue(int rank, int64_t i) {
  const uint64_t m = Mix(rank, i);
  if constexpr (std::is_same_v<T, int32_t>) {
    return static_cast<int32_t>(m % 2000001) - 1000000;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return (static_cast<int64_t>(m % 2000001) - 1000000) * (int64_t{1} << 30) +
           static_cast<int64_t>(m >> 60);
  } else {
    const double unit = static_cast<double>(m >> 11) / 9007199254740992.0;
    const double scale = std::pow(10.0, static_cast<int>((m >> 3) % 5) - 2);
    return static_cast<T>((unit * 2 - 1) * scale);
  }
}

template <typename T>
std::vector<T> Input(int rank, int64_t count) {
  std::vector<T> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = InputValue<T>(rank, i);
  return v;
}

// Checks rank results `out` (one vector per rank) against the sum of the
// ranks' inputs: integers exactly, floats within a bound on the rounding
// error of any summation order; and every rank holds the same bytes.
template <typename T>
void ExpectSums(const std::vector<std::vector<T>>& out, int64_t count,
                bool mean = false) {
  const int n = static_cast<int>(out.size());
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(static_cast<int64_t>(out[r].size()), count) << "rank " << r;
    if (r > 0 && count > 0) {
      ASSERT_EQ(std::memcmp(out[r].data(), out[0].data(), count * sizeof(T)),
                0)
          << "rank " << r << " differs from rank 0";
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    if constexpr (std::is_integral_v<T>) {
      int64_t sum = 0;
      for (int r = 0; r < n; ++r) sum += InputValue<T>(r, i);
      ASSERT_EQ(static_cast<int64_t>(out[0][i]), sum) << "element " << i;
    } else {
      double sum = 0, abs_sum = 0;
      for (int r = 0; r < n; ++r) {
        const double v = static_cast<double>(InputValue<T>(r, i));
        sum += v;
        abs_sum += std::fabs(v);
      }
      double tol = 2.0 * n * std::numeric_limits<T>::epsilon() * abs_sum;
      if (mean) {
        sum /= n;
        tol = tol / n + 2 * std::numeric_limits<T>::epsilon() * std::fabs(sum);
      }
      tol += std::numeric_limits<T>::denorm_min();
      ASSERT_NEAR(static_cast<double>(out[0][i]), sum, tol)
          << "element " << i;
    }
  }
}

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  return DType::kInt64;
}

// Runs AllReduceSum (or Mean) of `count` elements of T on every transport,
// one thread per rank, and checks the results.
template <typename T>
void CheckAllReduce(const std::vector<Transport*>& ts, int64_t count,
                    const CollectiveOptions& options, const std::string& op,
                    bool mean = false) {
  const int n = static_cast<int>(ts.size());
  std::vector<std::vector<T>> data(n);
  std::vector<absl::Status> status(n);
  for (int r = 0; r < n; ++r) data[r] = Input<T>(r, count);
  RunRanks(n, [&](int r) {
    status[r] = mean ? AllReduceMean(ts[r], DTypeOf<T>(), data[r].data(),
                                     count, op, options)
                     : AllReduceSum(ts[r], DTypeOf<T>(), data[r].data(), count,
                                    op, options);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  }
  ExpectSums(data, count, mean);
}

// Runs CheckAllReduce for every dtype.
inline void CheckAllReduceAllTypes(const std::vector<Transport*>& ts,
                                   int64_t count,
                                   const CollectiveOptions& options,
                                   const std::string& op) {
  {
    SCOPED_TRACE("float32");
    CheckAllReduce<float>(ts, count, options, op + "/f32");
  }
  {
    SCOPED_TRACE("float64");
    CheckAllReduce<double>(ts, count, options, op + "/f64");
  }
  {
    SCOPED_TRACE("int32");
    CheckAllReduce<int32_t>(ts, count, options, op + "/i32");
  }
  {
    SCOPED_TRACE("int64");
    CheckAllReduce<int64_t>(ts, count, options, op + "/i64");
  }
}

// Broadcast of `bytes` bytes from `root`; every rank must end with root's.
inline void CheckBroadcast(const std::vector<Transport*>& ts, int root,
                           size_t bytes, const CollectiveOptions& options,
                           const std::string& op) {
  const int n = static_cast<int>(ts.size());
  std::vector<std::string> data(n);
  std::vector<absl::Status> status(n);
  for (int r = 0; r < n; ++r) {
    data[r].resize(bytes);
    for (size_t i = 0; i < bytes; ++i) {
      data[r][i] = static_cast<char>(Mix(r, static_cast<int64_t>(i)));
    }
  }
  const std::string expected = data[root];
  RunRanks(n, [&](int r) {
    status[r] = Broadcast(ts[r], root, data[r].data(), bytes, op, options);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    ASSERT_TRUE(data[r] == expected) << "rank " << r;
  }
}

}  // namespace testing_util
}  // namespace collective
}  // namespace strata

#endif  // STRATA_TESTS_COLLECTIVE_TEST_UTIL_H_

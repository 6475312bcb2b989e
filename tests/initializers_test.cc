#include "kernels/initializers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  return DType::kInt64;
}

InitializerSpec Spec(InitializerType type, uint64_t seed = 42) {
  InitializerSpec spec;
  spec.type = type;
  spec.seed = seed;
  return spec;
}

// Fills all of `shape`; fails the test on error.
template <typename T>
std::vector<T> Fill(const InitializerSpec& spec, const std::string& name,
                    const Shape& shape) {
  std::vector<T> out(NumElements(shape));
  absl::Status s = FillInitializer(spec, name, DTypeOf<T>(), shape, 0,
                                   out.data(), NumElements(shape));
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

struct Stats {
  double mean;
  double stddev;
  double min;
  double max;
};

template <typename T>
Stats Summarize(const std::vector<T>& v) {
  double sum = 0;
  double lo = v[0];
  double hi = v[0];
  for (T x : v) {
    sum += x;
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
  }
  const double mean = sum / v.size();
  double sq = 0;
  for (T x : v) sq += (x - mean) * (x - mean);
  return Stats{mean, std::sqrt(sq / v.size()), lo, hi};
}

const InitializerType kRandomFloatTypes[] = {
    InitializerType::kRandomUniform,   InitializerType::kRandomNormal,
    InitializerType::kTruncatedNormal, InitializerType::kGlorotUniform,
    InitializerType::kGlorotNormal,    InitializerType::kHeNormal,
    InitializerType::kHeUniform};

TEST(InitializerTest, SameInputsGiveSameBytes) {
  for (InitializerType type : kRandomFloatTypes) {
    const std::vector<float> a =
        Fill<float>(Spec(type), "dense/kernel", {8, 5});
    const std::vector<float> b =
        Fill<float>(Spec(type), "dense/kernel", {8, 5});
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << InitializerTypeName(type);
  }
}

TEST(InitializerTest, SeedAndNameChangeTheValues) {
  const InitializerSpec spec = Spec(InitializerType::kRandomNormal, 1);
  const std::vector<double> base = Fill<double>(spec, "w", {100});
  EXPECT_NE(base,
            Fill<double>(Spec(InitializerType::kRandomNormal, 2), "w", {100}));
  EXPECT_NE(base, Fill<double>(spec, "w2", {100}));
  // Elements are not all the same draw either.
  EXPECT_GT(std::set<double>(base.begin(), base.end()).size(), 95u);
}

TEST(InitializerTest, Float32IsFloat64Rounded) {
  // A value depends on (seed, name, index) only, not on the dtype.
  for (InitializerType type : kRandomFloatTypes) {
    const std::vector<double> d = Fill<double>(Spec(type), "v", {6, 7});
    const std::vector<float> f = Fill<float>(Spec(type), "v", {6, 7});
    for (size_t i = 0; i < d.size(); ++i) {
      EXPECT_EQ(f[i], static_cast<float>(d[i])) << InitializerTypeName(type);
    }
  }
}

// Fills `full_shape` whole, then as shards of `rows` rows each starting at the
// running offset, and expects the concatenation to match byte for byte.
template <typename T>
void ExpectShardsConcatenateToWhole(const InitializerSpec& spec,
                                    const Shape& full_shape,
                                    const std::vector<int64_t>& rows) {
  SCOPED_TRACE(InitializerTypeName(spec.type) + " " + DTypeName(DTypeOf<T>()) +
               " " + ShapeString(full_shape));
  const std::vector<T> whole = Fill<T>(spec, "emb", full_shape);
  const int64_t row_width = NumElements(full_shape) / full_shape[0];
  std::vector<T> joined;
  int64_t offset = 0;
  for (int64_t n : rows) {
    std::vector<T> shard(n * row_width);
    absl::Status s = FillInitializer(spec, "emb", DTypeOf<T>(), full_shape,
                                     offset, shard.data(), n * row_width);
    ASSERT_TRUE(s.ok()) << s;
    joined.insert(joined.end(), shard.begin(), shard.end());
    offset += n;
  }
  ASSERT_EQ(offset, full_shape[0]);
  ASSERT_EQ(joined.size(), whole.size());
  EXPECT_EQ(std::memcmp(joined.data(), whole.data(), whole.size() * sizeof(T)),
            0);
}

TEST(InitializerTest, ShardsConcatenateToWholeVariable) {
  for (InitializerType type : kRandomFloatTypes) {
    ExpectShardsConcatenateToWhole<float>(Spec(type), {10, 7}, {4, 1, 5});
    ExpectShardsConcatenateToWhole<double>(Spec(type), {10, 7}, {4, 1, 5});
    ExpectShardsConcatenateToWhole<float>(Spec(type), {9, 3, 4}, {2, 6, 1});
  }
  InitializerSpec constant = Spec(InitializerType::kConstant);
  constant.value = 2.5;
  ExpectShardsConcatenateToWhole<float>(constant, {10, 7}, {4, 1, 5});
  InitializerSpec ints = Spec(InitializerType::kRandomUniform);
  ints.minval = -1000;
  ints.maxval = 1000;
  ExpectShardsConcatenateToWhole<int32_t>(ints, {10, 7}, {4, 1, 5});
  ExpectShardsConcatenateToWhole<int64_t>(ints, {10, 7}, {3, 3, 4});
  // A 1-D variable shards element by element.
  ExpectShardsConcatenateToWhole<double>(Spec(InitializerType::kHeNormal), {11},
                                         {5, 0, 6});
}

TEST(InitializerTest, GlorotUniformStaysWithinLimit) {
  const Shape shape = {400, 250};  // 100k samples
  const double limit = std::sqrt(6.0 / (400 + 250));
  const std::vector<float> v =
      Fill<float>(Spec(InitializerType::kGlorotUniform), "k", shape);
  const Stats st = Summarize(v);
  EXPECT_GE(st.min, -limit);
  EXPECT_LE(st.max, limit);
  EXPECT_LT(st.min, -0.99 * limit);
  EXPECT_GT(st.max, 0.99 * limit);
  EXPECT_NEAR(st.mean, 0.0, 0.01 * limit);
  EXPECT_NEAR(st.stddev, limit / std::sqrt(3.0), 0.02 * limit);
}

TEST(InitializerTest, HeUniformStaysWithinLimit) {
  const Shape shape = {3, 3, 64, 64};  // fan_in = 3 * 3 * 64 = 576
  const double limit = std::sqrt(6.0 / 576);
  const Stats st =
      Summarize(Fill<double>(Spec(InitializerType::kHeUniform), "k", shape));
  EXPECT_GE(st.min, -limit);
  EXPECT_LE(st.max, limit);
  EXPECT_NEAR(st.stddev, limit / std::sqrt(3.0), 0.02 * limit);
}

TEST(InitializerTest, RandomUniformUsesMinvalMaxval) {
  InitializerSpec spec = Spec(InitializerType::kRandomUniform);
  spec.minval = 2.0;
  spec.maxval = 5.0;
  const Stats st = Summarize(Fill<double>(spec, "u", {100000}));
  EXPECT_GE(st.min, 2.0);
  EXPECT_LT(st.max, 5.0);
  EXPECT_NEAR(st.mean, 3.5, 0.02);
  EXPECT_NEAR(st.stddev, 3.0 / std::sqrt(12.0), 0.02);
}

TEST(InitializerTest, RandomNormalHasMeanAndStddev) {
  InitializerSpec spec = Spec(InitializerType::kRandomNormal);
  spec.mean = -1.0;
  spec.stddev = 3.0;
  const Stats st = Summarize(Fill<float>(spec, "n", {100000}));
  EXPECT_NEAR(st.mean, -1.0, 0.05);
  EXPECT_NEAR(st.stddev, 3.0, 0.05);
  EXPECT_LT(st.min, -1.0 - 3 * 3.0);  // tails beyond 3 stddev exist
  EXPECT_GT(st.max, -1.0 + 3 * 3.0);
}

TEST(InitializerTest, TruncatedNormalStaysWithinTwoStddev) {
  InitializerSpec spec = Spec(InitializerType::kTruncatedNormal);
  spec.mean = 1.0;
  spec.stddev = 2.0;
  const Stats st = Summarize(Fill<double>(spec, "t", {100000}));
  EXPECT_GE(st.min, 1.0 - 2 * 2.0);
  EXPECT_LE(st.max, 1.0 + 2 * 2.0);
  EXPECT_LT(st.min, 1.0 - 1.99 * 2.0);
  EXPECT_GT(st.max, 1.0 + 1.99 * 2.0);
  EXPECT_NEAR(st.mean, 1.0, 0.03);
  // A standard normal truncated to [-2, 2] has stddev 0.8796.
  EXPECT_NEAR(st.stddev, 2.0 * 0.87962566103423978, 0.03);
}

TEST(InitializerTest, HeNormalAndGlorotNormalHaveKerasVariance) {
  // Keras divides the stddev by 0.8796 so the truncated draw keeps
  // variance scale / fan.
  const Shape shape = {500, 200};
  const Stats he =
      Summarize(Fill<float>(Spec(InitializerType::kHeNormal), "h", shape));
  EXPECT_NEAR(he.stddev, std::sqrt(2.0 / 500), 0.02 * std::sqrt(2.0 / 500));
  EXPECT_LE(he.max, 2 * std::sqrt(2.0 / 500) / 0.87962566103423978 + 1e-6);
  EXPECT_NEAR(he.mean, 0.0, 0.01 * std::sqrt(2.0 / 500));
  const Stats gl =
      Summarize(Fill<float>(Spec(InitializerType::kGlorotNormal), "g", shape));
  EXPECT_NEAR(gl.stddev, std::sqrt(2.0 / 700), 0.02 * std::sqrt(2.0 / 700));
  EXPECT_LE(gl.max, 2 * std::sqrt(2.0 / 700) / 0.87962566103423978 + 1e-6);
}

TEST(InitializerTest, ComputeFansFollowsKeras) {
  double in = 0;
  double out = 0;
  ComputeFans({}, &in, &out);
  EXPECT_EQ(in, 1);
  EXPECT_EQ(out, 1);
  ComputeFans({7}, &in, &out);
  EXPECT_EQ(in, 7);
  EXPECT_EQ(out, 7);
  ComputeFans({784, 128}, &in, &out);
  EXPECT_EQ(in, 784);
  EXPECT_EQ(out, 128);
  ComputeFans({3, 5, 16, 32}, &in, &out);  // receptive field 15
  EXPECT_EQ(in, 16 * 15);
  EXPECT_EQ(out, 32 * 15);
}

TEST(InitializerTest, ShardsUseFansOfFullShape) {
  // glorot_uniform on a shard of [1000, 10] must use fans 1000 and 10, not
  // the shard's row count: every value stays within sqrt(6 / 1010).
  std::vector<double> shard(2 * 10);
  ASSERT_TRUE(FillInitializer(Spec(InitializerType::kGlorotUniform), "k",
                              DType::kFloat64, {1000, 10}, 500, shard.data(),
                              20)
                  .ok());
  const double limit = std::sqrt(6.0 / 1010);
  for (double x : shard) EXPECT_LE(std::fabs(x), limit);
}

TEST(InitializerTest, ConstantOnesZeros) {
  InitializerSpec spec = Spec(InitializerType::kConstant);
  spec.value = -3.75;
  EXPECT_THAT(Fill<float>(spec, "c", {3, 2}), Each(-3.75f));
  EXPECT_THAT(Fill<double>(spec, "c", {4}), Each(-3.75));
  EXPECT_THAT(Fill<int32_t>(spec, "c", {4}), Each(-3));  // truncated
  spec.value = 3.9;
  EXPECT_THAT(Fill<int64_t>(spec, "c", {4}), Each(3));
  EXPECT_THAT(Fill<float>(Spec(InitializerType::kOnes), "o", {5}), Each(1.0f));
  EXPECT_THAT(Fill<int64_t>(Spec(InitializerType::kOnes), "o", {5}), Each(1));
  EXPECT_THAT(Fill<double>(Spec(InitializerType::kZeros), "z", {5}), Each(0.0));
  EXPECT_THAT(Fill<int32_t>(Spec(InitializerType::kZeros), "z", {5}), Each(0));
  // A scalar is one element.
  EXPECT_THAT(Fill<double>(Spec(InitializerType::kOnes), "s", {}), Each(1.0));
}

template <typename T>
void ExpectIntegerUniformRange() {
  SCOPED_TRACE(DTypeName(DTypeOf<T>()));
  InitializerSpec spec = Spec(InitializerType::kRandomUniform);
  spec.minval = -3;
  spec.maxval = 4;
  const std::vector<T> v = Fill<T>(spec, "i", {10000});
  std::set<T> seen(v.begin(), v.end());
  EXPECT_EQ(seen, (std::set<T>{-3, -2, -1, 0, 1, 2, 3}));  // maxval excluded
  const Stats st = Summarize(v);
  EXPECT_NEAR(st.mean, 0.0, 0.1);
}

TEST(InitializerTest, IntegerRandomUniformRange) {
  ExpectIntegerUniformRange<int32_t>();
  ExpectIntegerUniformRange<int64_t>();
}

TEST(InitializerTest, IntegerRandomUniformCoversWideRange) {
  InitializerSpec spec = Spec(InitializerType::kRandomUniform);
  spec.minval = -2147483648.0;  // all of int32
  spec.maxval = 2147483647.0;
  const std::vector<int32_t> v = Fill<int32_t>(spec, "i", {1000});
  const Stats st = Summarize(v);
  EXPECT_LT(st.min, -1e9);
  EXPECT_GT(st.max, 1e9);
}

absl::Status FillStatus(const InitializerSpec& spec, DType dtype,
                        const Shape& full_shape, int64_t row_offset,
                        int64_t elements) {
  std::vector<int64_t> buf(std::max<int64_t>(elements, 1));
  return FillInitializer(spec, "v", dtype, full_shape, row_offset, buf.data(),
                         elements);
}

TEST(InitializerTest, RandomInitializersOtherThanUniformRejectIntegers) {
  for (InitializerType type : kRandomFloatTypes) {
    if (type == InitializerType::kRandomUniform) continue;
    absl::Status s = FillStatus(Spec(type), DType::kInt32, {4, 4}, 0, 16);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(InitializerTypeName(type)));
    EXPECT_THAT(s.message(), HasSubstr("int32"));
  }
  absl::Status s = FillStatus(Spec(InitializerType::kRandomNormal),
                              DType::kInt64, {4}, 0, 4);
  EXPECT_THAT(s.message(), HasSubstr("int64"));
}

TEST(InitializerTest, RejectsShardsOutsideFullShape) {
  const InitializerSpec spec = Spec(InitializerType::kRandomNormal);
  // Negative offset.
  absl::Status s = FillStatus(spec, DType::kFloat32, {10, 4}, -1, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("row_offset -1"));
  // Runs past the last row: rows [8, 11) of 10.
  s = FillStatus(spec, DType::kFloat32, {10, 4}, 8, 12);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("[8, 11)"));
  // Not whole rows.
  s = FillStatus(spec, DType::kFloat32, {10, 4}, 0, 6);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("multiple of the row width 4"));
  // Offset beyond the rows.
  s = FillStatus(spec, DType::kFloat32, {10, 4}, 11, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // A scalar cannot be sharded.
  s = FillStatus(spec, DType::kFloat32, {}, 1, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // Negative dimension.
  s = FillStatus(spec, DType::kFloat32, {10, -4}, 0, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // The last rows exactly and an empty shard at the end are fine.
  EXPECT_TRUE(FillStatus(spec, DType::kFloat32, {10, 4}, 7, 12).ok());
  EXPECT_TRUE(FillStatus(spec, DType::kFloat32, {10, 4}, 10, 0).ok());
}

TEST(InitializerTest, RejectsBadParameters) {
  InitializerSpec spec = Spec(InitializerType::kRandomNormal);
  spec.stddev = -0.1;
  absl::Status s = FillStatus(spec, DType::kFloat32, {4}, 0, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("stddev"));
  spec.type = InitializerType::kTruncatedNormal;
  EXPECT_EQ(FillStatus(spec, DType::kFloat64, {4}, 0, 4).code(),
            absl::StatusCode::kInvalidArgument);

  spec = Spec(InitializerType::kRandomUniform);
  spec.minval = 1.0;
  spec.maxval = 1.0;
  s = FillStatus(spec, DType::kFloat32, {4}, 0, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("minval"));
  // Integer bounds truncate: the default [-0.05, 0.05) is empty.
  s = FillStatus(Spec(InitializerType::kRandomUniform), DType::kInt32, {4}, 0,
                 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("maxval"));

  spec = Spec(InitializerType::kConstant);
  spec.value = 1e12;
  s = FillStatus(spec, DType::kInt32, {4}, 0, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("int32"));

  s = FillStatus(Spec(InitializerType::kZeros), DType::kInvalid, {4}, 0, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST(InitializerTest, ParseAndNameRoundTrip) {
  for (const char* name :
       {"zeros", "ones", "constant", "random_uniform", "random_normal",
        "truncated_normal", "glorot_uniform", "glorot_normal", "he_normal",
        "he_uniform"}) {
    absl::StatusOr<InitializerType> type = ParseInitializerType(name);
    ASSERT_TRUE(type.ok()) << name;
    EXPECT_EQ(InitializerTypeName(*type), name);
  }
  absl::StatusOr<InitializerType> bad = ParseInitializerType("xavier");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("xavier"));
  EXPECT_THAT(bad.status().message(), HasSubstr("glorot_uniform"));
  EXPECT_THAT(bad.status().message(), HasSubstr("he_uniform"));
}

}  // namespace
}  // namespace strata

#include "common/tensor.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kFloat64), 8u);
  EXPECT_EQ(DTypeSize(DType::kInt32), 4u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  EXPECT_EQ(DTypeSize(DType::kInvalid), 0u);

  EXPECT_EQ(DTypeName(DType::kFloat32), "float32");
  EXPECT_EQ(DTypeName(DType::kFloat64), "float64");
  EXPECT_EQ(DTypeName(DType::kInt32), "int32");
  EXPECT_EQ(DTypeName(DType::kInt64), "int64");
  EXPECT_EQ(DTypeName(DType::kInvalid), "invalid");

  EXPECT_TRUE(IsFloating(DType::kFloat32));
  EXPECT_TRUE(IsFloating(DType::kFloat64));
  EXPECT_FALSE(IsFloating(DType::kInt32));
  EXPECT_FALSE(IsFloating(DType::kInt64));
  EXPECT_FALSE(IsFloating(DType::kInvalid));
}

TEST(DTypeTest, ParseRoundTripsNames) {
  for (DType d :
       {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    absl::StatusOr<DType> parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(ParseDType("float").value(), DType::kFloat32);
  EXPECT_EQ(ParseDType("double").value(), DType::kFloat64);
}

TEST(DTypeTest, ParseRejectsUnknown) {
  for (const char* name : {"", "invalid", "float16", "Float32", "int8"}) {
    absl::StatusOr<DType> parsed = ParseDType(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()),
                HasSubstr("allowed: float32, float64, int32, int64"));
  }
}

TEST(ShapeTest, NumElementsAndString) {
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({0}), 0);
  EXPECT_EQ(NumElements({784, 128}), 100352);
  EXPECT_EQ(NumElements({2, 0, 5}), 0);
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_EQ(ShapeString({784, 128}), "[784, 128]");
}

TEST(ShapeTest, ValidateAcceptsWithinLimit) {
  EXPECT_TRUE(ValidateShape({}, 4, 4).ok());
  EXPECT_TRUE(ValidateShape({784, 128}, 4, 784 * 128 * 4).ok());
  EXPECT_TRUE(ValidateShape({0, 1000000}, 8, 0).ok());
}

TEST(ShapeTest, ValidateRejectsNegativeDimension) {
  absl::Status s = ValidateShape({3, -1}, 4, 1 << 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "shape [3, -1] has negative dimension 1");
}

TEST(ShapeTest, ValidateRejectsOversize) {
  absl::Status s = ValidateShape({1024, 1024}, 4, 1024 * 1024 * 4 - 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "shape [1024, 1024] needs 4194304 bytes, above the limit of "
            "4194303");
}

TEST(ShapeTest, ValidateRejectsOverflow) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  absl::Status s =
      ValidateShape({big, big}, 8, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("overflows"));
}

TEST(BufferTest, AllocateIsAlignedAndZeroed) {
  for (size_t bytes : {0u, 1u, 63u, 64u, 65u, 4096u, 100000u}) {
    auto b = Buffer::Allocate(bytes);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u) << bytes;
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(b->data()[i], 0) << i;
  }
}

TEST(BufferTest, CopyIsDeepAndEqual) {
  auto a = Buffer::Allocate(10 * sizeof(float));
  auto span = a->span<float>();
  ASSERT_EQ(span.size(), 10u);
  for (size_t i = 0; i < span.size(); ++i) span[i] = static_cast<float>(i);

  auto b = Buffer::Copy(*a);
  ASSERT_EQ(b->size(), a->size());
  EXPECT_NE(b->data(), a->data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u);
  EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size()), 0);
  a->span<float>()[0] = 42;
  EXPECT_EQ(b->span<float>()[0], 0.0f);

  auto empty = Buffer::Copy(*Buffer::Allocate(0));
  EXPECT_EQ(empty->size(), 0u);
}

TEST(BufferTest, ConstSpan) {
  auto a = Buffer::Allocate(3 * sizeof(int64_t));
  a->span<int64_t>()[2] = -7;
  const Buffer& c = *a;
  absl::Span<const int64_t> s = c.span<int64_t>();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[2], -7);
}

TEST(TensorTest, Zeros) {
  Tensor t = Tensor::Zeros(DType::kFloat64, {3, 4});
  EXPECT_EQ(t.dtype, DType::kFloat64);
  EXPECT_EQ(t.shape, (Shape{3, 4}));
  EXPECT_EQ(t.num_elements(), 12);
  EXPECT_EQ(t.byte_size(), 96u);
  for (double v : t.buffer->span<double>()) EXPECT_EQ(v, 0.0);

  Tensor scalar = Tensor::Zeros(DType::kInt32, {});
  EXPECT_EQ(scalar.num_elements(), 1);
  EXPECT_EQ(scalar.byte_size(), 4u);

  Tensor none;
  EXPECT_EQ(none.byte_size(), 0u);
}

TEST(CheckFiniteTest, AcceptsFiniteValues) {
  std::vector<float> f = {0, -1.5f, 3e38f};
  EXPECT_TRUE(CheckFinite(DType::kFloat32, f.data(), 3, "grad").ok());
  std::vector<double> d = {0, 1e308};
  EXPECT_TRUE(CheckFinite(DType::kFloat64, d.data(), 2, "grad").ok());
  EXPECT_TRUE(CheckFinite(DType::kFloat32, nullptr, 0, "grad").ok());
}

TEST(CheckFiniteTest, NamesFirstBadElement) {
  std::vector<float> f = {1, 2, std::nanf(""), INFINITY};
  absl::Status s = CheckFinite(DType::kFloat32, f.data(), 4, "gradient 'w'");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("gradient 'w'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("at element 2"));

  std::vector<double> d = {1, -INFINITY};
  s = CheckFinite(DType::kFloat64, d.data(), 2, "value");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("at element 1"));
}

// The scan runs in blocks of 64 with a scalar tail: one bad value is found
// wherever it is, in either dtype, and the largest finite values and
// subnormals pass.
TEST(CheckFiniteTest, FindsOneBadValueAtEveryPosition) {
  for (int64_t n : {1, 63, 64, 65, 130}) {
    std::vector<float> f(static_cast<size_t>(n), -std::numeric_limits<float>::max());
    f[0] = std::numeric_limits<float>::denorm_min();
    std::vector<double> d(static_cast<size_t>(n), std::numeric_limits<double>::max());
    EXPECT_TRUE(CheckFinite(DType::kFloat32, f.data(), n, "g").ok()) << n;
    EXPECT_TRUE(CheckFinite(DType::kFloat64, d.data(), n, "g").ok()) << n;
    for (int64_t at = 0; at < n; ++at) {
      const size_t i = static_cast<size_t>(at);
      const float keep_f = f[i];
      const double keep_d = d[i];
      f[i] = at % 2 == 0 ? std::nanf("") : -INFINITY;
      d[i] = at % 2 == 0 ? INFINITY : std::nan("");
      EXPECT_THAT(std::string(CheckFinite(DType::kFloat32, f.data(), n, "g").message()),
                  HasSubstr(absl::StrCat("at element ", at)));
      EXPECT_THAT(std::string(CheckFinite(DType::kFloat64, d.data(), n, "g").message()),
                  HasSubstr(absl::StrCat("at element ", at)));
      f[i] = keep_f;
      d[i] = keep_d;
    }
  }
}

TEST(CheckFiniteTest, IntegersAlwaysPass) {
  std::vector<int32_t> i = {std::numeric_limits<int32_t>::min(), 0};
  EXPECT_TRUE(CheckFinite(DType::kInt32, i.data(), 2, "ids").ok());
  std::vector<int64_t> l = {std::numeric_limits<int64_t>::max()};
  EXPECT_TRUE(CheckFinite(DType::kInt64, l.data(), 1, "ids").ok());
}

}  // namespace
}  // namespace strata

#include "common/crc32c.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

uint32_t Crc(const std::string& s) { return Crc32c(s.data(), s.size()); }

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc(""), 0u);
  EXPECT_EQ(Crc("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(Crc(ascending), 0x46DD794Eu);
  std::string descending(32, '\0');
  for (int i = 0; i < 32; ++i) descending[i] = static_cast<char>(31 - i);
  EXPECT_EQ(Crc(descending), 0x113FDB5Cu);
}

TEST(Crc32cTest, SoftwareKnownVectors) {
  const std::string s = "123456789";
  EXPECT_EQ(Crc32cSoftware(s.data(), s.size()), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32cSoftware(zeros.data(), zeros.size()), 0x8A9136AAu);
}

TEST(Crc32cTest, NullWithZeroLength) {
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  EXPECT_EQ(Crc32c(nullptr, 0, 0x12345678u), 0x12345678u);
  EXPECT_EQ(Crc32cSoftware(nullptr, 0, 0x12345678u), 0x12345678u);
}

TEST(Crc32cTest, ExtendMatchesWholeAtEverySplit) {
  std::mt19937 rng(42);
  std::vector<uint8_t> data(300);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t split = 0; split <= data.size(); ++split) {
    uint32_t first = Crc32c(data.data(), split);
    EXPECT_EQ(Crc32c(data.data() + split, data.size() - split, first), whole)
        << "split " << split;
    uint32_t first_sw = Crc32cSoftware(data.data(), split);
    EXPECT_EQ(
        Crc32cSoftware(data.data() + split, data.size() - split, first_sw),
        whole)
        << "split " << split;
  }
}

TEST(Crc32cTest, HardwareAndSoftwareAgree) {
  if (!Crc32cHardwareAvailable()) {
    GTEST_SKIP() << "CPU lacks SSE4.2; only the software path runs";
  }
  std::mt19937 rng(7);
  std::vector<uint8_t> data(4096 + 16);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  // Every small length at every alignment, then a few large ones.
  for (size_t offset = 0; offset < 16; ++offset) {
    for (size_t n = 0; n < 100; ++n) {
      uint32_t seed = static_cast<uint32_t>(rng());
      ASSERT_EQ(Crc32cHardware(data.data() + offset, n, seed),
                Crc32cSoftware(data.data() + offset, n, seed))
          << "offset " << offset << " n " << n;
    }
  }
  for (size_t n : {1000u, 4095u, 4096u}) {
    EXPECT_EQ(Crc32cHardware(data.data() + 3, n),
              Crc32cSoftware(data.data() + 3, n));
  }
}

TEST(Crc32cTest, DetectsSingleBitFlips) {
  std::string s(64, 'a');
  const uint32_t base = Crc(s);
  for (size_t i = 0; i < s.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string t = s;
      t[i] = static_cast<char>(t[i] ^ (1 << bit));
      EXPECT_NE(Crc(t), base) << "byte " << i << " bit " << bit;
    }
  }
}

}  // namespace
}  // namespace strata

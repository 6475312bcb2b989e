// Helpers shared by the fuzz targets in tests/fuzz/: a reader that cuts the
// fuzzer's bytes into fields and length-prefixed records, and an invariant
// check that aborts (a finding) with a message.
//
// Each target defines LLVMFuzzerTestOneInput. Built with clang and
// -fsanitize=fuzzer it is a libFuzzer binary (`make fuzz`); built with the
// project's compiler and regression_main.cc it replays every file of its
// seed corpus and regression inputs (a ctest test in `make test`).
#ifndef STRATA_TESTS_FUZZ_FUZZ_UTIL_H_
#define STRATA_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

// An invariant the code under test must keep for every input.
#define FUZZ_CHECK(cond, msg)                                              \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, \
                   __LINE__, #cond, std::string(msg).c_str());             \
      std::abort();                                                        \
    }                                                                      \
  } while (0)

// With STRATA_FUZZ_TRACE set in the environment, targets print what each
// operation of an input returned (to see what a seed or a finding reaches).
#define FUZZ_TRACE(...)                                         \
  do {                                                          \
    if (::strata::fuzz::TraceEnabled()) {                       \
      std::fprintf(stderr, __VA_ARGS__);                        \
      std::fputc('\n', stderr);                                 \
    }                                                           \
  } while (0)

namespace strata {
namespace fuzz {

inline bool TraceEnabled() {
  static const bool on = std::getenv("STRATA_FUZZ_TRACE") != nullptr;
  return on;
}

// Reads fields off the front of the input. Past the end every read returns
// zero or empty, so a target never has to check lengths.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return size_ - pos_; }

  uint8_t Byte() { return empty() ? 0 : data_[pos_++]; }

  uint32_t U16() {
    uint32_t lo = Byte();
    return lo | (static_cast<uint32_t>(Byte()) << 8);
  }

  // Up to n bytes.
  std::string Bytes(size_t n) {
    if (n > remaining()) n = remaining();
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }

  // A record: a 16-bit little-endian length, then that many bytes (fewer
  // at the end of the input).
  std::string Record() { return Bytes(U16()); }

  std::string Rest() { return Bytes(remaining()); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace fuzz
}  // namespace strata

#endif  // STRATA_TESTS_FUZZ_FUZZ_UTIL_H_

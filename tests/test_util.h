// Helpers shared by the server tests.
#ifndef STRATA_TESTS_TEST_UTIL_H_
#define STRATA_TESTS_TEST_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace strata {

// Matches an absl::Status or StatusOr with the given code.
MATCHER_P(StatusIs, code,
          "has status code " + absl::StatusCodeToString(code)) {
  absl::Status s;
  if constexpr (std::is_same_v<std::decay_t<arg_type>, absl::Status>) {
    s = arg;
  } else {
    s = arg.status();
  }
  *result_listener << "status is " << s.ToString();
  return s.code() == code;
}

// Matches a status with the code and a message containing `substr`.
MATCHER_P2(StatusIsWithMessage, code, substr,
           "has status code " + absl::StatusCodeToString(code) +
               " and message containing \"" + std::string(substr) + "\"") {
  absl::Status s;
  if constexpr (std::is_same_v<std::decay_t<arg_type>, absl::Status>) {
    s = arg;
  } else {
    s = arg.status();
  }
  *result_listener << "status is " << s.ToString();
  return s.code() == code &&
         std::string(s.message()).find(substr) != std::string::npos;
}

inline absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

#define STRATA_ASSERT_OK(expr)                                    \
  do {                                                            \
    auto strata_s_ = ::strata::StatusOf(expr);                    \
    ASSERT_TRUE(strata_s_.ok()) << #expr << ": " << strata_s_;    \
  } while (0)

}  // namespace strata

#endif  // STRATA_TESTS_TEST_UTIL_H_

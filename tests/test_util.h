// Helpers shared by the server tests.
#ifndef STRATA_TESTS_TEST_UTIL_H_
#define STRATA_TESTS_TEST_UTIL_H_

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

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


// Removes, once the test process's tests ran, what it left under the test
// temp dir: the entries named `prefix`..._<pid> or `prefix`..._<pid>.ext of
// this process (ctest runs one process per test). Register it at namespace
// scope: `const auto* const kCleanup = RemoveTempEntriesAtExit("name_");`.
class RemoveTempEntries : public ::testing::Environment {
 public:
  explicit RemoveTempEntries(std::string prefix) : prefix_(std::move(prefix)) {}
  void TearDown() override {
    const std::string suffix = "_" + std::to_string(getpid());
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(
             ::testing::TempDir(), ec)) {
      const std::string name = entry.path().filename().string();
      const bool ends_with_pid =
          name.size() >= suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) ==
              0;
      if (name.rfind(prefix_, 0) == 0 &&
          (ends_with_pid || name.find(suffix + ".") != std::string::npos)) {
        std::filesystem::remove_all(entry.path(), ec);
      }
    }
  }

 private:
  const std::string prefix_;
};
inline ::testing::Environment* RemoveTempEntriesAtExit(std::string prefix) {
  return ::testing::AddGlobalTestEnvironment(
      new RemoveTempEntries(std::move(prefix)));
}

}  // namespace strata

#endif  // STRATA_TESTS_TEST_UTIL_H_

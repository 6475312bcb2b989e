// Structured logging: one JSON object per line, e.g.
//   {"ts":"2024-05-01T12:00:00.123Z","level":"info","task":"ps:0",
//    "event":"variable_created","name":"dense/kernel","bytes":401408}
#ifndef STRATA_COMMON_LOGGING_H_
#define STRATA_COMMON_LOGGING_H_

#include <atomic>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <ostream>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace strata {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// "debug", "info", "warning", "error".
absl::string_view LogLevelName(LogLevel level);
// Parses a name as printed by LogLevelName (also "warn"); INVALID_ARGUMENT
// otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);

using LogField = std::pair<absl::string_view, nlohmann::json>;

// Writes structured log lines for one task. Thread-safe: each line is written
// whole under a mutex. Does not own the output stream, which must outlive it.
class Logger {
 public:
  using Clock = std::function<absl::Time()>;

  // `task` identifies this process in every line, e.g. "ps:0". `clock`
  // stamps lines (absl::Now when empty); tests pass a fixed one.
  explicit Logger(std::string task, FILE* out = stderr, Clock clock = {});
  Logger(std::string task, std::ostream* out, Clock clock = {});

  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  // Lines below `level` are dropped. Default kInfo.
  void set_min_level(LogLevel level) {
    min_level_.store(level, std::memory_order_relaxed);
  }
  LogLevel min_level() const {
    return min_level_.load(std::memory_order_relaxed);
  }
  bool Enabled(LogLevel level) const { return level >= min_level(); }

  // Writes {"ts","level","task","event", then `fields` in order} as one
  // line. A field named like one of the four fixed keys is written with a
  // leading underscore ("_task"). Strings that are not valid UTF-8 have the
  // bad bytes replaced by U+FFFD; non-finite numbers print as null.
  void Log(LogLevel level, absl::string_view event,
           std::initializer_list<LogField> fields = {});

  void Debug(absl::string_view event,
             std::initializer_list<LogField> fields = {}) {
    Log(LogLevel::kDebug, event, fields);
  }
  void Info(absl::string_view event,
            std::initializer_list<LogField> fields = {}) {
    Log(LogLevel::kInfo, event, fields);
  }
  void Warning(absl::string_view event,
               std::initializer_list<LogField> fields = {}) {
    Log(LogLevel::kWarning, event, fields);
  }
  void Error(absl::string_view event,
             std::initializer_list<LogField> fields = {}) {
    Log(LogLevel::kError, event, fields);
  }

  const std::string& task() const { return task_; }

 private:
  const std::string task_;
  const Clock clock_;
  std::atomic<LogLevel> min_level_{LogLevel::kInfo};
  absl::Mutex mu_;
  FILE* const file_ ABSL_PT_GUARDED_BY(mu_);
  std::ostream* const stream_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_COMMON_LOGGING_H_

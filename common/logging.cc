#include "common/logging.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace strata {
namespace {

std::string Dump(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool IsFixedKey(absl::string_view key) {
  return key == "ts" || key == "level" || key == "task" || key == "event";
}

}  // namespace

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning" || name == "warn") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level '", name, "'; allowed: debug, info, warning, error"));
}

Logger::Logger(std::string task, FILE* out, Clock clock)
    : task_(std::move(task)),
      clock_(std::move(clock)),
      file_(out),
      stream_(nullptr) {}

Logger::Logger(std::string task, std::ostream* out, Clock clock)
    : task_(std::move(task)),
      clock_(std::move(clock)),
      file_(nullptr),
      stream_(out) {}

void Logger::Log(LogLevel level, absl::string_view event,
                 std::initializer_list<LogField> fields) {
  if (!Enabled(level)) return;
  const absl::Time now = clock_ ? clock_() : absl::Now();
  std::string line = absl::StrCat(
      "{\"ts\":\"",
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", now, absl::UTCTimeZone()),
      "\",\"level\":\"", LogLevelName(level), "\",\"task\":", Dump(task_),
      ",\"event\":", Dump(std::string(event)));
  for (const LogField& field : fields) {
    std::string key(field.first);
    if (IsFixedKey(key)) key.insert(0, "_");
    absl::StrAppend(&line, ",", Dump(key), ":", Dump(field.second));
  }
  line += "}\n";

  absl::MutexLock lock(&mu_);
  if (file_ != nullptr) {
    std::fwrite(line.data(), 1, line.size(), file_);
    std::fflush(file_);
  } else if (stream_ != nullptr) {
    stream_->write(line.data(), static_cast<std::streamsize>(line.size()));
    stream_->flush();
  }
}

}  // namespace strata

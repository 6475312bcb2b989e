#include "job/job_limits.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata {

namespace {

// Characters of `s` as UTF-8 (a byte that is no continuation byte starts
// one).
size_t CountChars(absl::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

// OK when `s` holds at most `max` characters, else INVALID_ARGUMENT
// "PATH: WHAT<N> characters, at most MAX".
absl::Status CheckChars(absl::string_view s, size_t max,
                               absl::string_view path,
                               absl::string_view what) {
  if (s.size() <= max) return absl::OkStatus();  // bytes >= characters
  const size_t chars = CountChars(s);
  if (chars <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": ", what, chars, " characters, at most ", max));
}

// `value` (a container at nesting `depth`) at `path`; `layer`: it is an
// element of job.model.layers.
absl::Status CheckValueLimits(const nlohmann::json& value,
                                     const std::string& path, int depth,
                                     bool layer) {
  if (depth > kMaxJobDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": more than ", kMaxJobDepth, " nested arrays or objects"));
  }
  // Strings are checked here without building their path unless refused;
  // containers recurse (at most kMaxJobDepth deep).
  auto check_child = [&](const nlohmann::json& child, size_t max,
                         auto&& child_path, bool child_layer) {
    if (child.is_string()) {
      const std::string& s = child.get_ref<const std::string&>();
      if (s.size() <= max) return absl::OkStatus();
      return CheckChars(s, max, child_path(), "");
    }
    if (child.is_object() || child.is_array()) {
      return CheckValueLimits(child, child_path(), depth + 1, child_layer);
    }
    return absl::OkStatus();
  };
  if (value.is_array()) {
    const bool layers = path == "job.model.layers";
    for (size_t i = 0; i < value.size(); ++i) {
      absl::Status s = check_child(
          value[i], kMaxJobStringChars,
          [&] { return absl::StrCat(path, "[", i, "]"); }, layers);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  const bool root = path == "job";
  for (const auto& item : value.items()) {
    const std::string& key = item.key();
    absl::Status s = CheckChars(key, kMaxJobStringChars, path, "a key of ");
    if (!s.ok()) return s;
    const bool name = key == "name" && (root || layer);
    s = check_child(
        item.value(), name ? kMaxJobNameChars : kMaxJobStringChars,
        [&] {
          // Known keys are short: a long one is shortened in the path.
          return key.size() <= 64
                     ? absl::StrCat(path, ".", key)
                     : absl::StrCat(path, ".", key.substr(0, 61), "...");
        },
        false);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckJobTextLimits(absl::string_view text) {
  if (text.size() > kMaxJobBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job: ", text.size(), " bytes, at most ", kMaxJobBytes, " (1 MiB)"));
  }
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJobDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat("job: more than ", kMaxJobDepth,
                         " nested arrays or objects (at byte ", i, ")"));
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckJobValueLimits(const nlohmann::json& job) {
  if (job.is_string()) {
    return CheckChars(job.get_ref<const std::string&>(),
                                    kMaxJobStringChars, "job", "");
  }
  if (!job.is_object() && !job.is_array()) return absl::OkStatus();
  return CheckValueLimits(job, "job", 1, false);
}

}  // namespace strata

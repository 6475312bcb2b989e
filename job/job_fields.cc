// Error helpers of the job parser.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "job/job.h"
#include "job/job_internal.h"

namespace strata {
namespace job_internal {

// `s` cut to at most `max` bytes (at a character boundary, "..." marking
// the cut), for error messages.
std::string Shorten(absl::string_view s, size_t max) {
  if (s.size() <= max) return std::string(s);
  size_t cut = max - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) {
    --cut;
  }
  return absl::StrCat(s.substr(0, cut), "...");
}

// A JSON value as it appeared, shortened for error messages.
std::string Show(const json& value) {
  return Shorten(value.dump(-1, ' ', false, json::error_handler_t::replace));
}

// A string in quotes, shortened for error messages: 'relu'.
std::string Quote(absl::string_view s) {
  return absl::StrCat("'", Shorten(s), "'");
}

absl::Status PathError(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::Status CheckKnownLoss(absl::string_view loss) {
  const std::string canonical = CanonicalLoss(std::string(loss));
  if (canonical == "sparse_categorical_crossentropy" ||
      canonical == "categorical_crossentropy" ||
      canonical == "binary_crossentropy" || IsRegressionLoss(canonical)) {
    return absl::OkStatus();
  }
  return PathError("job.loss",
                   absl::StrCat(Quote(loss), " is not one of "
                                "sparse_categorical_crossentropy, "
                                "categorical_crossentropy, "
                                "binary_crossentropy, mse, mae, huber"));
}

std::string Join(std::initializer_list<const char*> names) {
  return absl::StrJoin(names, ", ");
}

}  // namespace job_internal
}  // namespace strata

#include "worker/progress.h"

#include "absl/strings/str_format.h"

namespace strata {

std::string FormatEpochLine(const EpochProgress& p,
                            absl::string_view seconds_suffix) {
  std::string line = absl::StrFormat(
      "Epoch %d/%d - %d steps - loss: %.4f - accuracy: %.4f", p.epoch,
      p.epochs, p.steps, p.loss, p.accuracy);
  if (p.evaluated) {
    absl::StrAppendFormat(&line, " - test_loss: %.4f - test_accuracy: %.4f",
                          p.test_loss, p.test_accuracy);
    if (p.has_test_auc) {
      absl::StrAppendFormat(&line, " - test_auc: %.4f", p.test_auc);
    }
  }
  absl::StrAppendFormat(&line, " - %.0f examples/s - %.1f%s",
                        p.examples_per_second, p.seconds, seconds_suffix);
  return line;
}

}  // namespace strata

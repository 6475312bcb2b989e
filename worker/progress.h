// The one-line summary of a finished epoch that the trainers and launchers
// print (Keras's progress line):
//   Epoch 3/10 - 469 steps - loss: 0.4123 - accuracy: 0.8512
//     [- test_loss: 0.4400 - test_accuracy: 0.8421] - 51234 examples/s - 1.2s
// sdk/internal.h's ParseEpochLine reads it back.
//
// Pure functions; thread-safe.
#ifndef STRATA_WORKER_PROGRESS_H_
#define STRATA_WORKER_PROGRESS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace strata {

struct EpochProgress {
  int epoch = 0;  // 1-based
  int epochs = 0;
  int64_t steps = 0;
  double loss = 0;
  double accuracy = 0;
  bool evaluated = false;  // test_* are set
  double test_loss = 0;
  double test_accuracy = 0;
  bool has_test_auc = false;  // binary models with embeddings
  double test_auc = 0;
  double examples_per_second = 0;
  double seconds = 0;
};

// The line for `p`, without a newline; `seconds_suffix` follows the seconds
// ("s", "s elapsed", " s").
std::string FormatEpochLine(const EpochProgress& p,
                            absl::string_view seconds_suffix = "s");

}  // namespace strata

#endif  // STRATA_WORKER_PROGRESS_H_

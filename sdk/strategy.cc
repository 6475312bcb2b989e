// Strategy scopes, OneDeviceStrategy, and the progress lines.
#include <iostream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "sdk/internal.h"
#include "sdk/strata.h"
#include "worker/dataset.h"
#include "worker/job.h"
#include "worker/model.h"

namespace strata::sdk {
namespace {

// The strategy of the innermost Scope on this thread; null outside any.
thread_local std::shared_ptr<const Strategy> tls_current_strategy;

double SecondsSince(absl::Time start) {
  return absl::ToDoubleSeconds(absl::Now() - start);
}

}  // namespace

// Scopes ---------------------------------------------------------------------

StrategyScope Strategy::Scope() const {
  return StrategyScope(std::shared_ptr<const Strategy>(Clone()));
}

StrategyScope::StrategyScope(std::shared_ptr<const Strategy> strategy)
    : previous_(std::move(tls_current_strategy)) {
  tls_current_strategy = std::move(strategy);
}

StrategyScope::~StrategyScope() {
  tls_current_strategy = std::move(previous_);
}

std::shared_ptr<const Strategy> GetStrategy() {
  if (tls_current_strategy != nullptr) return tls_current_strategy;
  static const std::shared_ptr<const Strategy>* const kDefault =
      new std::shared_ptr<const Strategy>(
          std::make_shared<OneDeviceStrategy>());
  return *kDefault;
}

bool HasStrategy() { return tls_current_strategy != nullptr; }

// OneDeviceStrategy ----------------------------------------------------------

std::unique_ptr<Strategy> OneDeviceStrategy::Clone() const {
  return std::make_unique<OneDeviceStrategy>(*this);
}

absl::StatusOr<History> OneDeviceStrategy::Fit(internal::ModelState& m,
                                                const Dataset& train,
                                                const FitOptions& options)
    const {
  // The job validates the options (epochs, batch size, ...) with the same
  // messages as a job file; the data stays in this process, so its section
  // is a placeholder and any dataset (in memory too) works.
  const nlohmann::json data = {{"format", "csv"},
                               {"train", {{"path", "(in-process)"}}}};
  STRATA_ASSIGN_OR_RETURN(
      JobSpec job, ParseJob(m.JobJson(options, data, {{"type", name()}})));
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const ::strata::Dataset> train_data,
                          train.Load());
  STRATA_RETURN_IF_ERROR(
      internal::CheckFeatures(*train_data, m.model(), "training data"));
  if (train_data->size == 0) {
    return absl::InvalidArgumentError("training data: no examples");
  }
  std::shared_ptr<const ::strata::Dataset> test;
  if (options.validation.has_value()) {
    STRATA_ASSIGN_OR_RETURN(test, options.validation->Load());
    STRATA_RETURN_IF_ERROR(
        internal::CheckFeatures(*test, m.model(), "validation data"));
  }

  internal::ProgressStream progress(options);
  const int64_t steps = StepsPerEpoch(train_data->size, job.batch_size);
  History history;
  for (int e = 0; e < job.epochs; ++e) {
    if (options.stop != nullptr && options.stop->load()) {
      return absl::CancelledError(
          absl::StrCat("Fit: stopped after ", e, " of ", job.epochs,
                       " epochs"));
    }
    const absl::Time start = absl::Now();
    // Epochs of earlier Fit calls count, so each epoch gets a new order.
    STRATA_ASSIGN_OR_RETURN(
        StepStats stats, m.trainer->TrainEpoch(*train_data, job.batch_size,
                                               job.shuffle_seed,
                                               m.epochs_trained));
    ++m.epochs_trained;
    const double train_seconds = SecondsSince(start);
    EpochResult r;
    r.epoch = e + 1;
    r.steps = steps;
    r.loss = stats.loss;
    r.accuracy = stats.accuracy;
    r.examples_per_second =
        train_seconds > 0 ? static_cast<double>(stats.examples) / train_seconds
                          : 0.0;
    const int freq = job.evaluation.every_epochs;
    if (test != nullptr &&
        ((freq > 0 && (e + 1) % freq == 0) || e + 1 == job.epochs)) {
      STRATA_ASSIGN_OR_RETURN(StepStats t, m.trainer->Evaluate(*test));
      r.evaluated = true;
      r.test_loss = t.loss;
      r.test_accuracy = t.accuracy;
    }
    r.seconds = SecondsSince(start);
    progress.stream() << internal::EpochLine(r, job.epochs) << std::endl;
    history.epochs.push_back(r);
  }
  return history;
}

// Progress lines -------------------------------------------------------------

namespace internal {

ProgressStream::ProgressStream(const FitOptions& options)
    : stream_(options.verbose <= 0     ? &sink_
              : options.out != nullptr ? options.out
                                       : &std::cout) {}

std::string EpochLine(const EpochResult& e, int epochs) {
  std::string line = absl::StrFormat(
      "Epoch %d/%d - %d steps - loss: %.4f - accuracy: %.4f", e.epoch, epochs,
      e.steps, e.loss, e.accuracy);
  if (e.evaluated) {
    absl::StrAppendFormat(&line, " - test_loss: %.4f - test_accuracy: %.4f",
                          e.test_loss, e.test_accuracy);
  }
  absl::StrAppendFormat(&line, " - %.0f examples/s - %.1fs",
                        e.examples_per_second, e.seconds);
  return line;
}

std::optional<EpochResult> ParseEpochLine(absl::string_view line) {
  line = absl::StripAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&line, "Epoch ")) return std::nullopt;
  std::vector<absl::string_view> parts = absl::StrSplit(line, " - ");
  EpochResult r;
  const std::vector<absl::string_view> counter =
      absl::StrSplit(parts[0], '/');
  if (counter.size() != 2 || !absl::SimpleAtoi(counter[0], &r.epoch)) {
    return std::nullopt;
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    absl::string_view p = parts[i];
    const size_t colon = p.find(": ");
    if (colon != absl::string_view::npos) {
      const absl::string_view key = p.substr(0, colon);
      double value = 0;
      if (!absl::SimpleAtod(p.substr(colon + 2), &value)) return std::nullopt;
      if (key == "loss") {
        r.loss = value;
      } else if (key == "accuracy") {
        r.accuracy = value;
      } else if (key == "test_loss") {
        r.test_loss = value;
        r.evaluated = true;
      } else if (key == "test_accuracy") {
        r.test_accuracy = value;
        r.evaluated = true;
      }
    } else if (absl::ConsumeSuffix(&p, " steps")) {
      if (!absl::SimpleAtoi(p, &r.steps)) return std::nullopt;
    } else if (absl::ConsumeSuffix(&p, " examples/s")) {
      if (!absl::SimpleAtod(p, &r.examples_per_second)) return std::nullopt;
    } else if (absl::ConsumeSuffix(&p, "s elapsed") ||
               absl::ConsumeSuffix(&p, "s")) {
      if (!absl::SimpleAtod(p, &r.seconds)) return std::nullopt;
    }
  }
  return r;
}

}  // namespace internal
}  // namespace strata::sdk

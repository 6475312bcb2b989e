// Strategy scopes, the replica API (Run, Reduce, DistributeDataset),
// OneDeviceStrategy and the epoch loop it shares with MirroredStrategy, and
// the progress lines.
#include <algorithm>
#include <iostream>
#include <thread>
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
#include "strategies/placement_policy.h"
#include "worker/criteo_data.h"
#include "worker/dataset.h"
#include "worker/embedding_model.h"
#include "job/job.h"
#include "worker/model.h"
#include "worker/progress.h"

namespace strata::sdk {
namespace {

// The strategy of the innermost Scope on this thread; null outside any.
thread_local std::shared_ptr<const Strategy> tls_current_strategy;

double SecondsSince(absl::Time start) {
  return absl::ToDoubleSeconds(absl::Now() - start);
}

// Starts epoch `e` (0-based) of the progress another thread reads.
void BeginEpoch(FitProgress* bar, int e) {
  if (bar == nullptr) return;
  bar->step = 0;
  bar->loss = 0;
  bar->accuracy = 0;
  bar->epoch = e + 1;
}

// Whether epoch `e` (0-based) of `job` ends with an evaluation.
bool EvaluationDue(const JobSpec& job, int e) {
  const int freq = job.evaluation.every_epochs;
  return (freq > 0 && (e + 1) % freq == 0) || e + 1 == job.epochs;
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

// Replicas -------------------------------------------------------------------

void Strategy::RunReplicas(
    const std::function<void(const ReplicaContext&)>& fn) const {
  const int local = num_local_replicas();
  const int in_sync = num_replicas_in_sync();
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(std::max(0, local - 1)));
  for (int r = 1; r < local; ++r) {
    threads.emplace_back([&fn, r, in_sync] { fn(ReplicaContext(r, in_sync)); });
  }
  fn(ReplicaContext(0, in_sync));
  for (std::thread& t : threads) t.join();
}

namespace {

template <typename T>
T ReduceScalars(ReduceOp op, const std::vector<T>& values) {
  double sum = 0;
  for (const T& v : values) sum += static_cast<double>(v);
  if (op == ReduceOp::kMean && !values.empty()) {
    sum /= static_cast<double>(values.size());
  }
  return static_cast<T>(sum);
}

}  // namespace

float Strategy::Reduce(ReduceOp op, const PerReplica<float>& value) const {
  return ReduceScalars(op, value.values());
}

double Strategy::Reduce(ReduceOp op, const PerReplica<double>& value) const {
  return ReduceScalars(op, value.values());
}

absl::StatusOr<std::vector<float>> Strategy::Reduce(
    ReduceOp op, const PerReplica<std::vector<float>>& value) const {
  const std::vector<std::vector<float>>& values = value.values();
  if (values.empty()) {
    return absl::InvalidArgumentError("Reduce: no replica values");
  }
  const size_t n = values[0].size();
  for (size_t r = 1; r < values.size(); ++r) {
    if (values[r].size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Reduce: replica ", r, " has ", values[r].size(),
          " values, replica 0 has ", n));
    }
  }
  std::vector<double> sum(n, 0.0);
  for (const std::vector<float>& v : values) {
    for (size_t i = 0; i < n; ++i) sum[i] += v[i];
  }
  const double scale =
      op == ReduceOp::kMean ? 1.0 / static_cast<double>(values.size()) : 1.0;
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(sum[i] * scale);
  return out;
}

absl::StatusOr<DistributedDataset> Strategy::DistributeDataset(
    const Dataset& data, int64_t global_batch_size) const {
  if (global_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributeDataset: global_batch_size must be >= 1, got ",
        global_batch_size));
  }
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const ::strata::Dataset> loaded,
                          data.Load());
  return DistributedDataset(std::move(loaded), global_batch_size,
                            num_replicas_in_sync());
}

int64_t DistributedDataset::num_examples() const { return data_->size; }

int64_t DistributedDataset::num_batches() const {
  return StepsPerEpoch(data_->size, global_batch_size_);
}

DistributedDataset::ReplicaBatch DistributedDataset::Batch(
    int64_t batch, const ReplicaContext& replica) const {
  ReplicaBatch out;
  out.features = data_->features;
  const int r = replica.replica_id_in_sync_group();
  if (batch < 0 || batch >= num_batches() || r < 0 || r >= num_replicas_) {
    return out;
  }
  const int64_t first = batch * global_batch_size_;
  out.global_examples = std::min(global_batch_size_, data_->size - first);
  const auto [begin, end] = ReplicaRows(out.global_examples, r, num_replicas_);
  const int64_t f = data_->features;
  out.x = absl::MakeConstSpan(data_->x).subspan(
      static_cast<size_t>((first + begin) * f),
      static_cast<size_t>((end - begin) * f));
  out.labels = absl::MakeConstSpan(data_->labels)
                   .subspan(static_cast<size_t>(first + begin),
                            static_cast<size_t>(end - begin));
  return out;
}

// Training in this process ---------------------------------------------------

namespace internal {

absl::StatusOr<LocalFit> PrepareLocalFit(const ModelState& m,
                                         const Dataset& train,
                                         const FitOptions& options,
                                         nlohmann::json strategy) {
  // The job validates the options (epochs, batch size, ...) with the same
  // messages as a job file; the data stays in this process, so its section
  // is a placeholder and any dataset (in memory too) works.
  const nlohmann::json data = {{"format", "csv"},
                               {"train", {{"path", "(in-process)"}}}};
  if (m.inputs.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job.model.embeddings: strategy ",
        strategy.value("type", std::string()),
        " does not train embedding tables yet (parameter_server and "
        "one_device do)"));
  }
  LocalFit fit;
  STRATA_ASSIGN_OR_RETURN(
      fit.job, ParseJob(m.JobJson(options, data, std::move(strategy))));
  STRATA_ASSIGN_OR_RETURN(fit.train, train.Load());
  STRATA_RETURN_IF_ERROR(
      CheckFeatures(*fit.train, m.model(), "training data"));
  if (fit.train->size == 0) {
    return absl::InvalidArgumentError("training data: no examples");
  }
  if (options.validation.has_value()) {
    STRATA_ASSIGN_OR_RETURN(fit.test, options.validation->Load());
    STRATA_RETURN_IF_ERROR(
        CheckFeatures(*fit.test, m.model(), "validation data"));
  }
  return fit;
}

absl::StatusOr<History> RunLocalEpochs(
    ModelState& m, const LocalFit& fit, const FitOptions& options,
    const std::function<absl::StatusOr<StepStats>(
        int epoch, const StepObserver& on_step)>& train_epoch) {
  const JobSpec& job = fit.job;
  ProgressStream progress(options);
  const int64_t steps = StepsPerEpoch(fit.train->size, job.batch_size);
  FitProgress* const bar = options.progress;
  StepObserver on_step;
  if (bar != nullptr) {
    bar->epochs = job.epochs;
    bar->steps = steps;
    on_step = [bar](int64_t done, const StepStats& so_far) {
      bar->loss = so_far.loss;
      bar->accuracy = so_far.accuracy;
      bar->step = done;  // last: a reader seeing the step sees its figures
    };
  }
  History history;
  for (int e = 0; e < job.epochs; ++e) {
    if (options.stop != nullptr && options.stop->load()) {
      return absl::CancelledError(
          absl::StrCat("Fit: stopped after ", e, " of ", job.epochs,
                       " epochs"));
    }
    BeginEpoch(bar, e);
    const absl::Time start = absl::Now();
    // Epochs of earlier Fit calls count, so each epoch gets a new order.
    STRATA_ASSIGN_OR_RETURN(StepStats stats,
                            train_epoch(m.epochs_trained, on_step));
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
    if (fit.test != nullptr && EvaluationDue(job, e)) {
      STRATA_ASSIGN_OR_RETURN(
          StepStats t, m.model().Evaluate(Model::Views(m.params()), *fit.test,
                                          1024, m.local_layers().workspace()));
      r.evaluated = true;
      r.test_loss = t.loss;
      r.test_accuracy = t.accuracy;
    }
    r.seconds = SecondsSince(start);
    progress.stream() << EpochLine(r, job.epochs) << std::endl;
    history.epochs.push_back(r);
    if (options.on_epoch_end) options.on_epoch_end(r);
  }
  return history;
}

absl::StatusOr<History> FitEmbeddingsHere(ModelState& m, const Dataset& train,
                                          const FitOptions& options,
                                          nlohmann::json strategy) {
  // The files are read here; the job validates the options.
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<CriteoReader> train_reader,
                          OpenCriteo(train, "training data"));
  std::unique_ptr<CriteoReader> test_reader;
  if (options.validation.has_value()) {
    STRATA_ASSIGN_OR_RETURN(test_reader,
                            OpenCriteo(*options.validation, "validation data"));
  }
  STRATA_ASSIGN_OR_RETURN(nlohmann::json data,
                          DataJson(train, options.validation));
  STRATA_ASSIGN_OR_RETURN(
      JobSpec job,
      ParseJob(m.JobJson(options, std::move(data), std::move(strategy))));
  const bool auc = std::find(m.metrics.begin(), m.metrics.end(), "auc") !=
                   m.metrics.end();
  EmbeddingTrainer& trainer = *m.embedding;
  ProgressStream progress(options);
  FitProgress* const bar = options.progress;
  if (bar != nullptr) {
    bar->epochs = job.epochs;
    bar->steps = 0;  // streamed: the steps of an epoch are not known ahead
  }
  History history;
  CriteoBatch batch;
  for (int e = 0; e < job.epochs; ++e) {
    if (options.stop != nullptr && options.stop->load()) {
      return absl::CancelledError(absl::StrCat(
          "Fit: stopped after ", e, " of ", job.epochs, " epochs"));
    }
    BeginEpoch(bar, e);
    const absl::Time start = absl::Now();
    STRATA_RETURN_IF_ERROR(train_reader->Rewind());
    double loss_sum = 0, correct = 0;
    int64_t examples = 0, steps = 0;
    while (true) {
      absl::StatusOr<bool> more = train_reader->Next(&batch, job.batch_size);
      if (!more.ok()) {
        return absl::Status(more.status().code(),
                            absl::StrCat("epoch ", e + 1, ": ",
                                         more.status().message()));
      }
      if (!*more) break;
      STRATA_ASSIGN_OR_RETURN(StepStats st,
                              trainer.Step(batch, trainer.iterations()));
      loss_sum += st.loss * static_cast<double>(batch.size);
      correct += st.accuracy * static_cast<double>(batch.size);
      examples += batch.size;
      ++steps;
      if (bar != nullptr) {
        bar->loss = loss_sum / static_cast<double>(examples);
        bar->accuracy = correct / static_cast<double>(examples);
        bar->step = steps;
      }
    }
    if (examples == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training data: ", train.DebugString(), " holds no examples"));
    }
    ++m.epochs_trained;
    const double train_seconds = SecondsSince(start);
    EpochResult r;
    r.epoch = e + 1;
    r.steps = steps;
    r.loss = loss_sum / static_cast<double>(examples);
    r.accuracy = correct / static_cast<double>(examples);
    r.examples_per_second =
        train_seconds > 0 ? static_cast<double>(examples) / train_seconds : 0;
    if (test_reader != nullptr && EvaluationDue(job, e)) {
      STRATA_ASSIGN_OR_RETURN(BinaryEvaluation t,
                              trainer.Evaluate(*test_reader));
      r.evaluated = true;
      r.test_loss = t.loss;
      r.test_accuracy = t.accuracy;
      if (auc) r.test_auc = t.auc;
    }
    r.seconds = SecondsSince(start);
    progress.stream() << EpochLine(r, job.epochs) << std::endl;
    history.epochs.push_back(r);
    if (options.on_epoch_end) options.on_epoch_end(r);
  }
  return history;
}

}  // namespace internal

// OneDeviceStrategy ----------------------------------------------------------

std::unique_ptr<Strategy> OneDeviceStrategy::Clone() const {
  return std::make_unique<OneDeviceStrategy>(*this);
}

absl::StatusOr<History> OneDeviceStrategy::Fit(internal::ModelState& m,
                                                const Dataset& train,
                                                const FitOptions& options)
    const {
  if (m.inputs.has_value()) {
    return internal::FitEmbeddingsHere(m, train, options, {{"type", name()}});
  }
  STRATA_ASSIGN_OR_RETURN(
      internal::LocalFit fit,
      internal::PrepareLocalFit(m, train, options, {{"type", name()}}));
  return internal::RunLocalEpochs(
      m, fit, options,
      [&](int epoch,
          const internal::StepObserver& on_step) -> absl::StatusOr<StepStats> {
        return m.trainer->TrainEpoch(*fit.train, fit.job.batch_size,
                                     fit.job.shuffle_seed, epoch, on_step);
      });
}

// Progress lines -------------------------------------------------------------

namespace internal {

ProgressStream::ProgressStream(const FitOptions& options)
    : stream_(options.verbose <= 0     ? &sink_
              : options.out != nullptr ? options.out
                                       : &std::cout) {}

std::string EpochLine(const EpochResult& e, int epochs) {
  EpochProgress p;
  p.epoch = e.epoch;
  p.epochs = epochs;
  p.steps = e.steps;
  p.loss = e.loss;
  p.accuracy = e.accuracy;
  p.evaluated = e.evaluated;
  p.test_loss = e.test_loss;
  p.test_accuracy = e.test_accuracy;
  p.has_test_auc = e.evaluated && e.test_auc.has_value();
  p.test_auc = e.test_auc.value_or(0.0);
  p.examples_per_second = e.examples_per_second;
  p.seconds = e.seconds;
  return FormatEpochLine(p, "s");
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
      } else if (key == "test_auc") {
        r.test_auc = value;
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

// The cluster strategies (ParameterServer, CentralStorage,
// MultiWorkerMirrored ::Local): one local cluster per Fit
// (tools/launcher.h), launched by the same code for each, and the trained
// variables read back from wherever the strategy keeps them.
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <streambuf>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint.h"
#include "client/coordinator_client.h"
#include "client/ps_client.h"
#include "client/ps_cluster.h"
#include "common/status_macros.h"
#include "job/job.h"
#include "sdk/internal.h"
#include "sdk/strata.h"
#include "strata/v1/worker_service.pb.h"
#include "tables/table_store.h"
#include "tools/launcher.h"
#include "tools/submit.h"
#include "worker/embedding_model.h"
#include "worker/model.h"
#include "worker/ps_embedding_tables.h"
#include "worker/ps_worker.h"

namespace strata::sdk {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The directory of the running executable ("" when unknown).
std::string ExecutableDir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.parent_path().string();
}

// Forwards what the launcher prints to `out` (when not null) and keeps the
// complete lines, from which the history is read.
class LineTee : public std::streambuf {
 public:
  explicit LineTee(std::ostream* out) : out_(out) {}
  const std::vector<std::string>& lines() const { return lines_; }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    const char ch = static_cast<char>(c);
    Put(&ch, 1);
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    Put(s, static_cast<size_t>(n));
    return n;
  }
  int sync() override {
    if (out_ != nullptr) out_->flush();
    return 0;
  }

 private:
  void Put(const char* s, size_t n) {
    if (out_ != nullptr) out_->write(s, static_cast<std::streamsize>(n));
    for (size_t i = 0; i < n; ++i) {
      if (s[i] == '\n') {
        lines_.push_back(std::move(line_));
        line_.clear();
      } else {
        line_ += s[i];
      }
    }
  }

  std::ostream* const out_;
  std::string line_;
  std::vector<std::string> lines_;
};

// Reads the weights of `model` from the state the first worker exported
// (a serialized strata.v1.WorkerState, tensors named as the model's
// variables), checking that it is the state after `steps` steps when
// `steps` >= 0. Errors: NOT_FOUND without the file, DATA_LOSS for a file
// that does not hold the model's final weights.
absl::Status ReadExportedWeights(const std::string& path, int64_t steps,
                                 const Model& model,
                                 std::vector<std::vector<float>>* params) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(absl::StrCat(
        "the first worker did not export its final state to ", path));
  }
  const std::string bytes{std::istreambuf_iterator<char>(f),
                          std::istreambuf_iterator<char>()};
  v1::WorkerState state;
  if (!state.ParseFromString(bytes)) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a serialized strata.v1.WorkerState"));
  }
  if (steps >= 0 && state.step() != steps) {
    return absl::DataLossError(absl::StrCat(
        path, ": the exported state is after step ", state.step(),
        ", the job ran ", steps));
  }
  std::map<std::string, const v1::NamedTensor*> by_name;
  for (const v1::NamedTensor& t : state.tensors()) by_name[t.name()] = &t;
  params->assign(model.variables().size(), {});
  for (size_t i = 0; i < model.variables().size(); ++i) {
    const VariableDef& v = model.variables()[i];
    const size_t n = static_cast<size_t>(NumElements(v.shape));
    auto it = by_name.find(v.name);
    if (it == by_name.end()) {
      return absl::DataLossError(
          absl::StrCat(path, ": no tensor '", v.name, "'"));
    }
    const v1::NamedTensor& t = *it->second;
    if (t.dtype() != v1::DT_FLOAT32 || t.data().size() != n * sizeof(float)) {
      return absl::DataLossError(absl::StrCat(
          path, ": tensor '", v.name, "' has ", t.data().size(),
          " bytes; the model's variable is ", n, " float32 values"));
    }
    (*params)[i].resize(n);
    std::memcpy((*params)[i].data(), t.data().data(), n * sizeof(float));
  }
  return absl::OkStatus();
}

// An epoch of the coordinator's job status as Fit reports it.
EpochResult FromProto(const v1::EpochResult& e) {
  EpochResult r;
  r.epoch = e.epoch() + 1;
  r.steps = e.steps();
  r.loss = e.loss();
  r.accuracy = e.accuracy();
  r.evaluated = e.evaluated() && !e.evaluation_missing();
  r.test_loss = e.test_loss();
  r.test_accuracy = e.test_accuracy();
  if (r.evaluated && e.has_test_auc()) r.test_auc = e.test_auc();
  r.examples_per_second = e.examples_per_second();
  r.seconds = e.elapsed_seconds();
  return r;
}

// Tables read back from the PS tasks' checkpoints, in this process.
class StoreTables final : public EmbeddingTables {
 public:
  explicit StoreTables(std::unique_ptr<TableStore> store)
      : store_(std::move(store)) {}

  absl::Status Lookup(const std::string& table, absl::Span<const int64_t> ids,
                      bool train, absl::Span<float> out) override {
    STRATA_RETURN_IF_ERROR(store_->Lookup(table, ids, train, &buffer_));
    if (buffer_.size() != out.size()) {
      return absl::InternalError(absl::StrCat(
          "table ", table, ": ", buffer_.size(), " values for ", out.size()));
    }
    std::copy(buffer_.begin(), buffer_.end(), out.begin());
    return absl::OkStatus();
  }
  absl::Status Push(const std::string& table, absl::Span<const int64_t> ids,
                    absl::Span<const float> gradients, int64_t step) override {
    PushMeta meta;
    meta.step = step;
    meta.tagged = false;
    return store_->Push(table, meta, ids, gradients).status();
  }

 private:
  std::unique_ptr<TableStore> store_;
  std::vector<float> buffer_;
};

// The job's final per-epoch results from its coordinator, whose address
// the launcher lists in `cluster_file`; nullopt when they cannot be read.
std::optional<History> HistoryFromCoordinator(
    const std::string& cluster_file) {
  std::ifstream f(cluster_file);
  const json cluster = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!cluster.is_array()) return std::nullopt;
  for (const json& task : cluster) {
    if (!task.is_object() || task.value("name", "") != "coordinator") {
      continue;
    }
    std::unique_ptr<CoordinatorClient> client = CoordinatorClient::Connect(
        task.value("address", ""), absl::Seconds(5));
    absl::StatusOr<v1::JobStatus> status = client->GetJob();
    if (!status.ok()) return std::nullopt;
    History history;
    for (const v1::EpochResult& e : status->epochs()) {
      history.epochs.push_back(FromProto(e));
    }
    return history;
  }
  return std::nullopt;
}

// The per-epoch results: from the summary's "epochs_detail" when the launcher
// writes them, else from the coordinator (read while the cluster ran), else
// from the epoch lines the launcher printed.
History HistoryFrom(const json& summary,
                    const std::optional<History>& from_coordinator,
                    const std::vector<std::string>& lines) {
  History history;
  if (summary.is_object() && summary.contains("epochs_detail") &&
      summary["epochs_detail"].is_array()) {
    for (const json& e : summary["epochs_detail"]) {
      EpochResult r;
      r.epoch = e.value("epoch", 0);
      r.steps = e.value("steps", int64_t{0});
      r.loss = e.value("loss", 0.0);
      r.accuracy = e.value("accuracy", 0.0);
      r.evaluated = e.contains("test_loss");
      r.test_loss = e.value("test_loss", 0.0);
      r.test_accuracy = e.value("test_accuracy", 0.0);
      if (e.contains("test_auc") && e["test_auc"].is_number()) {
        r.test_auc = e["test_auc"].get<double>();
      }
      r.examples_per_second = e.value("examples_per_second", 0.0);
      r.seconds = e.value("elapsed_seconds", 0.0);
      history.epochs.push_back(r);
    }
    return history;
  }
  if (from_coordinator.has_value()) return *from_coordinator;
  for (const std::string& line : lines) {
    if (std::optional<EpochResult> r = internal::ParseEpochLine(line)) {
      history.epochs.push_back(*r);
    }
  }
  return history;
}

// Shows the newest epoch of `status` (a job of `epochs` epochs) in
// *progress (when not null).
void ShowProgress(const v1::JobStatus& status, int epochs,
                  FitProgress* progress) {
  if (progress == nullptr || status.epochs().empty() || epochs < 1) return;
  const v1::EpochResult& e = *status.epochs().rbegin();
  progress->epochs = epochs;
  progress->steps = status.steps_scheduled() / epochs;
  progress->loss = e.loss();
  progress->accuracy = e.accuracy();
  progress->step = e.steps();
  progress->epoch = e.epoch() + 1;
}

// The PS tasks' addresses in task order, from a submit summary's cluster.
std::vector<std::string> PsAddresses(const json& summary) {
  std::vector<std::string> out;
  const json& cluster = summary.value("cluster", json::object());
  if (cluster.is_object() && cluster.contains("ps") &&
      cluster["ps"].is_array()) {
    for (const json& a : cluster["ps"]) {
      if (a.is_string()) out.push_back(a.get<std::string>());
    }
  }
  return out;
}

absl::Status CheckOptions(const LocalClusterOptions& o, int min_ps) {
  if (o.num_ps < min_ps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LocalClusterOptions.num_ps: must be >= ", min_ps, ", got ",
        o.num_ps));
  }
  if (o.num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LocalClusterOptions.num_workers: must be >= 1, got ",
        o.num_workers));
  }
  if (o.num_shards < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LocalClusterOptions.num_shards: must be >= 0, got ", o.num_shards));
  }
  return absl::OkStatus();
}

// FAILED_PRECONDITION unless the daemons are executables in `bin_dir`.
absl::Status CheckDaemons(const std::string& bin_dir) {
  for (const char* daemon :
       {"strata-coordinator", "strata-ps", "strata-worker"}) {
    const std::string path = absl::StrCat(bin_dir, "/", daemon);
    if (access(path.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " is not an executable; set LocalClusterOptions.bin_dir to "
                "the directory of the Strata daemons (build/bin)"));
    }
  }
  return absl::OkStatus();
}

// One example of `data` fits the model (checked before any process starts).
absl::Status CheckFirstExample(const Dataset& data, const Model& model,
                               absl::string_view what) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const ::strata::Dataset> one,
                          data.Take(1).Load());
  return internal::CheckFeatures(*one, model, what);
}

}  // namespace

// LocalClusterStrategy -------------------------------------------------------

// Validates everything it can before any process starts, writes the job
// into the run directory, launches and supervises the cluster (or submits
// the job to the running one and follows it), and reads the trained
// weights back into m.cluster_params.
absl::StatusOr<History> LocalClusterStrategy::Fit(
    internal::ModelState& m, const Dataset& train,
    const FitOptions& options) const {
  const LocalClusterOptions& c = options_;
  internal::ClusterPlan how = Plan();
  const bool running = !c.coordinator.empty();
  STRATA_RETURN_IF_ERROR(CheckOptions(c, how.min_ps));
  if (!c.strategy_json.empty()) {
    const json extra =
        json::parse(c.strategy_json, nullptr, /*allow_exceptions=*/false);
    if (!extra.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LocalClusterOptions.strategy_json: expected a JSON object, got ",
          c.strategy_json));
    }
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (it.key() == "type") {
        return absl::InvalidArgumentError(
            "LocalClusterOptions.strategy_json: 'type' is the strategy's own");
      }
      how.strategy[it.key()] = it.value();
    }
  }
  if (running && !how.read_from_ps && c.export_dir.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "LocalClusterOptions.export_dir: ",
        how.strategy.value("type", std::string()),
        " keeps the weights on the workers; on a running cluster, start its "
        "workers with --export-dir=DIR (a directory readable here) and set "
        "export_dir to DIR"));
  }
  if (m.weights_set) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Fit: ", how.strategy.value("type", std::string()),
        " starts each Fit from the initializers, so the weights SetWeights "
        "gave cannot be trained on a local cluster; Compile again to start "
        "over"));
  }
  if (m.cluster_params.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Fit: this model was already fit on a local cluster, and ",
        how.strategy.value("type", std::string()),
        " starts each Fit from the initial weights; train in one Fit (more "
        "epochs), or Compile again to start over"));
  }
  const bool in_memory =
      train.in_memory() ||
      (options.validation.has_value() && options.validation->in_memory());
  if (!in_memory) {
    // Splits the job cannot hold together, before any file is read.
    STRATA_RETURN_IF_ERROR(
        internal::DataJson(train, options.validation).status());
  }
  if (!m.inputs.has_value()) {
    // (Criteo files are checked by the job: their format against the
    // model's columns.)
    STRATA_RETURN_IF_ERROR(
        CheckFirstExample(train, m.model(), "training data"));
    if (options.validation.has_value()) {
      STRATA_RETURN_IF_ERROR(CheckFirstExample(*options.validation, m.model(),
                                               "validation data"));
    }
  }
  const std::string bin_dir = c.bin_dir.empty() ? ExecutableDir() : c.bin_dir;
  if (!running) STRATA_RETURN_IF_ERROR(CheckDaemons(bin_dir));

  // The run directory: the job file and the cluster's logs and state (and,
  // for a running cluster, data its workers read: an absolute path).
  std::string dir = c.run_dir;
  if (!dir.empty()) {
    std::error_code abs_ec;
    const fs::path absolute = fs::absolute(dir, abs_ec);
    if (!abs_ec) dir = absolute.string();
  }
  const bool temporary = dir.empty();
  std::error_code ec;
  if (temporary) {
    std::string tmpl =
        (fs::temp_directory_path(ec) / "strata-fit-XXXXXX").string();
    if (ec || mkdtemp(tmpl.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot create a run directory like ", tmpl));
    }
    dir = tmpl;
  } else {
    fs::create_directories(dir, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat(
          "cannot create the run directory ", dir, ": ", ec.message()));
    }
  }
  // In-memory examples go to the cluster as IDX files in the run directory
  // (both splits then, as a job holds one format and scale).
  const auto fail = [&](absl::Status s) {
    if (temporary) fs::remove_all(dir, ec);
    return s;
  };
  Dataset train_files = train;
  std::optional<Dataset> validation_files = options.validation;
  if (in_memory) {
    fs::create_directories(dir + "/data", ec);
    absl::StatusOr<Dataset> written =
        internal::WriteAsIdx(train, dir + "/data/train");
    if (!written.ok()) return fail(written.status());
    train_files = *std::move(written);
    if (options.validation.has_value()) {
      written = internal::WriteAsIdx(*options.validation, dir + "/data/test");
      if (!written.ok()) return fail(written.status());
      validation_files = *std::move(written);
    }
  }
  absl::StatusOr<json> data =
      internal::DataJson(train_files, validation_files);
  if (!data.ok()) return fail(data.status());
  const json job_json = m.JobJson(options, *std::move(data), how.strategy);
  absl::StatusOr<JobSpec> parsed = ParseJob(job_json);
  if (!parsed.ok()) return fail(parsed.status());
  const JobSpec job = *std::move(parsed);
  const std::string job_path = dir + "/job.json";
  {
    std::ofstream f(job_path);
    f << job_json.dump(2) << "\n";
    f.close();
    if (!f) {
      return absl::InternalError(absl::StrCat("cannot write ", job_path));
    }
  }

  internal::ProgressStream progress(options);
  LineTee tee(&progress.stream());
  std::ostream out(&tee);
  std::vector<std::vector<float>> pulled;
  absl::Status read = absl::UnknownError("the job did not succeed");
  size_t epochs_ended = 0;
  // Epochs end before the progress shows the next one (as in process).
  const auto on_status = [&](const v1::JobStatus& status) {
    for (; options.on_epoch_end &&
           epochs_ended < static_cast<size_t>(status.epochs_size()) &&
           EpochComplete(status, job.epochs, epochs_ended);
         ++epochs_ended) {
      options.on_epoch_end(FromProto(status.epochs(epochs_ended)));
    }
    ShowProgress(status, job.epochs, options.progress);
  };
  const std::string where =
      running ? absl::StrCat("Fit on the cluster at ", c.coordinator)
              : std::string("Fit on a local cluster");
  absl::StatusOr<json> summary;
  std::optional<History> from_coordinator;
  std::string export_dir;
  if (running) {
    SubmitOptions submit;
    submit.coordinator = c.coordinator;
    submit.job_path = job_path;
    submit.wait_ps = how.min_ps > 0 ? c.num_ps : 0;
    submit.wait_workers = c.num_workers;
    submit.register_timeout = absl::Seconds(c.register_timeout_seconds);
    submit.wait = true;
    submit.on_status = on_status;
    summary = Submit(submit, out, options.stop);
    if (summary.ok() && how.read_from_ps) {
      const std::vector<std::string> addresses = PsAddresses(*summary);
      read = addresses.empty()
                 ? absl::FailedPreconditionError(
                       "the coordinator lists no PS task to read the trained "
                       "variables from")
                 : how.read_from_ps(addresses, job, m.model(), &pulled);
      if (read.ok() && m.inputs.has_value()) {
        read = internal::ReadTablesFromPs(m, addresses, job, dir + "/tables");
      }
    }
    export_dir = c.export_dir;
  } else {
    LaunchOptions launch;
    launch.job_path = job_path;
    launch.num_ps = c.num_ps;
    launch.num_workers = c.num_workers;
    launch.run_dir = dir + "/cluster";
    launch.bin_dir = bin_dir;
    launch.restart_servers = c.restart_servers;
    if (!how.read_from_ps) launch.export_dir = dir + "/export";
    export_dir = launch.export_dir;
    launch.on_status = on_status;
    launch.on_finished = [&](const std::vector<std::string>& addresses) {
      from_coordinator =
          HistoryFromCoordinator(launch.run_dir + "/cluster.json");
      if (!how.read_from_ps) return absl::OkStatus();
      if (addresses.empty()) {
        read = absl::FailedPreconditionError(
            "the cluster has no PS task to read the trained variables from");
      } else {
        read = how.read_from_ps(addresses, job, m.model(), &pulled);
        if (read.ok() && m.inputs.has_value()) {
          read = internal::ReadTablesFromPs(m, addresses, job,
                                            dir + "/tables");
        }
      }
      return read;
    };
    summary = Launch(launch, out, options.stop);
  }
  out.flush();
  if (!summary.ok()) {
    return absl::Status(summary.status().code(),
                        absl::StrCat(where, ": ", summary.status().message(),
                                     " (job and logs in ", dir, ")"));
  }
  if (!how.read_from_ps) {
    // A local cluster's workers have stopped, so the export is complete. A
    // running cluster's first worker writes it as it leaves the job, which
    // may be just after the coordinator reported the job done: wait for it
    // (bounded).
    const json& total = (*summary)["steps_scheduled"];
    const absl::Time give_up = absl::Now() + absl::Seconds(running ? 60 : 0);
    while (true) {
      read = ReadExportedWeights(export_dir + "/final_state.pb",
                                 total.is_number_integer()
                                     ? total.get<int64_t>()
                                     : int64_t{-1},
                                 m.model(), &pulled);
      if (read.ok() || absl::Now() >= give_up ||
          (options.stop != nullptr && options.stop->load())) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  if (!read.ok()) {
    return absl::InternalError(absl::StrCat(
        where, ": the job succeeded but its variables were not read back: ",
        read.message(), " (job and logs in ", dir, ")"));
  }
  const size_t num_weights = m.model().variables().size();
  if (pulled.size() > num_weights) {
    // The state the PS held: where Evaluate and Predict read it.
    std::vector<std::vector<float>> state(
        std::make_move_iterator(pulled.begin() + num_weights),
        std::make_move_iterator(pulled.end()));
    pulled.resize(num_weights);
    STRATA_RETURN_IF_ERROR(m.model().SetState(m.local_layers().workspace(),
                                              std::move(state)));
  }
  m.cluster_params = std::move(pulled);
  m.epochs_trained += job.epochs;
  if (temporary && !c.keep_run_dir) fs::remove_all(dir, ec);
  return HistoryFrom(*summary, from_coordinator, tee.lines());
}

namespace internal {

absl::Status ReadTablesFromPs(ModelState& m,
                              const std::vector<std::string>& addresses,
                              const JobSpec& job, const std::string& dir) {
  std::vector<Checkpoint> checkpoints;
  for (size_t i = 0; i < addresses.size(); ++i) {
    std::unique_ptr<PsClient> ps = PsClient::Connect(addresses[i]);
    const std::string path = absl::StrCat(dir, "/ps-", i);
    absl::StatusOr<v1::SaveResponse> saved = ps->Save(path);
    if (!saved.ok()) {
      return absl::Status(saved.status().code(),
                          absl::StrCat("saving the tables of PS task ", i,
                                       " to ", path, ": ",
                                       saved.status().message()));
    }
    STRATA_ASSIGN_OR_RETURN(Checkpoint checkpoint,
                            ReadCheckpoint(saved->path()));
    checkpoints.push_back(std::move(checkpoint));
  }
  auto store = std::make_unique<TableStore>();
  for (const v1::TableSpec& spec : TableSpecsFor(job.model, job.seed, 0, 1)) {
    STRATA_RETURN_IF_ERROR(store->Create(spec).status());
  }
  STRATA_RETURN_IF_ERROR(store->Reshard(checkpoints).status());
  STRATA_ASSIGN_OR_RETURN(std::vector<v1::TableInfo> infos, store->Stats(""));
  m.cluster_table_rows.clear();
  for (const v1::TableInfo& info : infos) {
    m.cluster_table_rows.emplace_back(info.spec().name(), info.rows());
  }
  m.cluster_tables = std::make_unique<StoreTables>(std::move(store));
  return absl::OkStatus();
}

}  // namespace internal

// ParameterServerStrategy ----------------------------------------------------

std::unique_ptr<ParameterServerStrategy> ParameterServerStrategy::Local(
    LocalClusterOptions options) {
  return std::make_unique<ParameterServerStrategy>(std::move(options));
}

std::unique_ptr<Strategy> ParameterServerStrategy::Clone() const {
  return std::make_unique<ParameterServerStrategy>(*this);
}

internal::ClusterPlan ParameterServerStrategy::Plan() const {
  const LocalClusterOptions& c = options();
  internal::ClusterPlan plan;
  plan.strategy = {
      {"type", name()},
      {"update", c.update},
      {"partitioner",
       {{"type", "fixed"},
        {"num_shards", c.num_shards > 0 ? c.num_shards : c.num_ps}}}};
  plan.read_from_ps = internal::PullShardedWeights;
  return plan;
}

// CentralStorageStrategy -----------------------------------------------------

std::unique_ptr<CentralStorageStrategy> CentralStorageStrategy::Local(
    LocalClusterOptions options) {
  return std::make_unique<CentralStorageStrategy>(std::move(options));
}

std::unique_ptr<Strategy> CentralStorageStrategy::Clone() const {
  return std::make_unique<CentralStorageStrategy>(*this);
}

internal::ClusterPlan CentralStorageStrategy::Plan() const {
  internal::ClusterPlan plan;
  plan.strategy = {{"type", name()}};
  plan.read_from_ps = internal::PullWholeWeights;
  return plan;
}

// MultiWorkerMirroredStrategy ------------------------------------------------

std::unique_ptr<MultiWorkerMirroredStrategy>
MultiWorkerMirroredStrategy::Local(LocalClusterOptions options) {
  return std::make_unique<MultiWorkerMirroredStrategy>(std::move(options));
}

std::unique_ptr<Strategy> MultiWorkerMirroredStrategy::Clone() const {
  return std::make_unique<MultiWorkerMirroredStrategy>(*this);
}

internal::ClusterPlan MultiWorkerMirroredStrategy::Plan() const {
  internal::ClusterPlan plan;
  plan.strategy = {{"type", name()}, {"collective", options().collective}};
  // The "ps" collective sums gradients through a PS task; "ring" needs none.
  plan.min_ps = options().collective == "ps" ? 1 : 0;
  return plan;
}

}  // namespace strata::sdk

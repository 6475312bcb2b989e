#include "tools/submit.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/coordinator_client.h"
#include "client/ps_client.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "job/job.h"
#include "rpc/grpc_status.h"
#include "worker/dataset.h"
#include "worker/progress.h"
#include "worker/ps_worker.h"

namespace strata {

void AddTrainThroughput(const v1::JobStatus& status, nlohmann::json* summary) {
  double seconds = 0;
  int64_t examples = 0;
  for (const auto& e : status.epochs()) {
    seconds += e.elapsed_seconds();
    examples += e.examples();
  }
  (*summary)["train_seconds"] = seconds;
  (*summary)["train_examples_per_second"] =
      seconds > 0 ? static_cast<double>(examples) / seconds : 0.0;
}
nlohmann::json EpochRow(const v1::EpochResult& e) {
  nlohmann::json row = {{"epoch", e.epoch() + 1},
                        {"steps", e.steps()},
                        {"loss", e.loss()},
                        {"accuracy", e.accuracy()},
                        {"examples_per_second", e.examples_per_second()},
                        {"elapsed_seconds", e.elapsed_seconds()}};
  if (e.evaluated() && !e.evaluation_missing()) {
    row["test_loss"] = e.test_loss();
    row["test_accuracy"] = e.test_accuracy();
    if (e.has_test_auc()) row["test_auc"] = e.test_auc();
  }
  if (e.evaluation_missing()) row["evaluation_missing"] = true;
  return row;
}

void AddJobResult(int64_t epochs, int64_t batch_size,
                  const v1::JobStatus& status, nlohmann::json* summary) {
  double test_accuracy = 0, test_loss = 0;
  std::optional<double> test_auc;
  nlohmann::json detail = nlohmann::json::array();
  for (const auto& e : status.epochs()) {
    if (e.evaluated() && !e.evaluation_missing()) {
      test_accuracy = e.test_accuracy();
      test_loss = e.test_loss();
      if (e.has_test_auc()) test_auc = e.test_auc();
    }
    detail.push_back(EpochRow(e));
  }
  nlohmann::json& s = *summary;
  s["epochs"] = epochs;
  s["batch_size"] = batch_size;
  s["test_accuracy"] = test_accuracy;
  s["test_loss"] = test_loss;
  s["test_auc"] = test_auc ? nlohmann::json(*test_auc) : nlohmann::json();
  s["steps_scheduled"] = status.steps_scheduled();
  s["steps_applied"] = status.steps_completed();
  s["lost_steps"] = status.lost_steps();
  s["wall_seconds"] = status.wall_seconds();
  s["examples_per_second"] =
      status.wall_seconds() > 0
          ? static_cast<double>(status.examples()) / status.wall_seconds()
          : 0.0;
  s["epochs_detail"] = std::move(detail);
  AddTrainThroughput(status, summary);
  AddCheckpointSummary(status, summary);
}

void AddCheckpointSummary(const v1::JobStatus& status,
                          nlohmann::json* summary) {
  (*summary)["checkpoints"] = {
      {"saved", status.checkpoints_saved()},
      {"failed", status.checkpoints_failed()},
      {"failures_in_a_row", status.checkpoint_failures_in_a_row()},
      {"last_error", status.last_checkpoint_error()},
      {"last", status.last_checkpoint()},
      {"last_step", status.last_checkpoint_step()},
      {"skipped", std::vector<std::string>(status.checkpoints_skipped().begin(),
                                           status.checkpoints_skipped().end())}};
}

namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(200);

// The coordinator's cluster spec (TF_CONFIG form) as JSON; {} when absent.
nlohmann::json ClusterOf(const v1::GetClusterSpecResponse& spec) {
  auto j = nlohmann::json::parse(spec.tf_config(), nullptr, false);
  if (!j.is_object() || !j.contains("cluster") || !j["cluster"].is_object()) {
    return nlohmann::json::object();
  }
  return j["cluster"];
}

// The members the coordinator counts ALIVE, by role: the first message of
// a WatchCluster stream (the current state). Workers register without an
// address, so the cluster spec does not list them.
absl::StatusOr<std::map<std::string, int>> AliveMembersAt(
    const std::string& target, const ClientSecurity& security) {
  auto stub =
      v1::CoordinatorService::NewStub(CreateChannel(target, security));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub->WatchCluster(&ctx, v1::WatchClusterRequest());
  v1::ClusterState state;
  const bool got = stream->Read(&state);
  ctx.TryCancel();
  absl::Status finished = FromGrpcStatus(stream->Finish());
  if (!got) {
    return finished.ok() ? absl::UnavailableError("WatchCluster sent nothing")
                         : finished;
  }
  std::map<std::string, int> alive;
  for (const v1::Member& m : state.members()) {
    if (m.state() == v1::Member::ALIVE) alive[m.task().role()]++;
  }
  return alive;
}

// AliveMembersAt the first of the comma-separated coordinators that
// answers (the leader: a standby answers UNAVAILABLE).
absl::StatusOr<std::map<std::string, int>> AliveMembers(
    const std::string& targets, const ClientSecurity& security) {
  absl::StatusOr<std::map<std::string, int>> alive =
      absl::UnavailableError("no coordinator address");
  for (absl::string_view target :
       absl::StrSplit(targets, ',', absl::SkipWhitespace())) {
    alive = AliveMembersAt(std::string(target), security);
    if (alive.ok() || alive.status().code() != absl::StatusCode::kUnavailable) {
      return alive;
    }
  }
  return alive;
}

size_t Tasks(const nlohmann::json& cluster, const char* job) {
  return cluster.contains(job) && cluster[job].is_array() ? cluster[job].size()
                                                          : 0;
}

// Applied steps as the PS tasks count them: the smallest version over all
// variables (each step pushes every shard once); -1 when a task cannot be
// asked.
int64_t PsAppliedSteps(const nlohmann::json& cluster,
                       const ClientSecurity& security) {
  if (Tasks(cluster, "ps") == 0) return -1;
  int64_t applied = -1;
  for (const auto& address : cluster["ps"]) {
    if (!address.is_string()) return -1;
    PsClientOptions client_options;
    client_options.security = security;
    auto client = PsClient::Connect(address.get<std::string>(), client_options);
    auto list = client->ListVariables();
    if (!list.ok()) return -1;
    for (const auto& v : list->variables()) {
      if (applied < 0 || v.version() < applied) applied = v.version();
    }
  }
  return applied < 0 ? 0 : applied;
}

}  // namespace

absl::Status WriteSummary(const std::string& path,
                          const nlohmann::json& summary) {
  if (path.empty()) return absl::OkStatus();
  std::ofstream f(path);
  f << summary.dump(2) << "\n";
  if (!f) {
    return absl::InternalError(
        absl::StrCat("cannot write the summary to ", path));
  }
  return absl::OkStatus();
}

bool EpochComplete(const v1::JobStatus& status, int epochs, size_t index) {
  if (index >= static_cast<size_t>(status.epochs_size())) return false;
  const int64_t spe = epochs > 0 ? status.steps_scheduled() / epochs : 0;
  const v1::EpochResult& e = status.epochs(static_cast<int>(index));
  return e.steps() >= spe &&
         (e.evaluated() || status.epochs_size() > static_cast<int>(index) + 1 ||
          status.state() != v1::JobStatus::RUNNING);
}

void PrintCompletedEpochs(const v1::JobStatus& status, int epochs,
                          size_t* printed, std::ostream& out) {
  for (; *printed < static_cast<size_t>(status.epochs_size()); ++*printed) {
    const v1::EpochResult& e = status.epochs(*printed);
    if (!EpochComplete(status, epochs, *printed)) break;
    EpochProgress p;
    p.epoch = static_cast<int>(e.epoch()) + 1;
    p.epochs = epochs;
    p.steps = e.steps();
    p.loss = e.loss();
    p.accuracy = e.accuracy();
    p.evaluated = e.evaluated() && !e.evaluation_missing();
    p.test_loss = e.test_loss();
    p.test_accuracy = e.test_accuracy();
    p.has_test_auc = e.has_test_auc();
    p.test_auc = e.test_auc();
    p.examples_per_second = e.examples_per_second();
    p.seconds = e.elapsed_seconds();
    out << FormatEpochLine(p, "s elapsed");
    if (e.evaluation_missing()) {
      out << "  [evaluation lost: the epoch's model was gone]";
    }
    if (status.checkpoints_failed() > 0) {
      // A PS restart now loses more than one checkpoint interval.
      out << absl::StrFormat(
          "  [CHECKPOINTS FAILING: %d failed, %d in a row, newest kept %s; "
          "last error: %s]",
          status.checkpoints_failed(), status.checkpoint_failures_in_a_row(),
          status.last_checkpoint().empty() ? "none" : status.last_checkpoint(),
          status.last_checkpoint_error());
    }
    out << std::endl;
  }
}

void PrintSkippedCheckpoints(const v1::JobStatus& status, size_t* printed,
                             std::ostream& out) {
  for (; *printed < static_cast<size_t>(status.checkpoints_skipped_size());
       ++*printed) {
    out << "restore skipped checkpoint "
        << status.checkpoints_skipped(static_cast<int>(*printed)) << std::endl;
  }
}

absl::StatusOr<nlohmann::json> Submit(const SubmitOptions& options,
                                      std::ostream& out,
                                      const std::atomic<bool>* stop) {
  auto stopped = [stop] { return stop != nullptr && stop->load(); };
  if (options.coordinator.empty()) {
    return absl::InvalidArgumentError("--coordinator HOST:PORT is required");
  }
  STRATA_ASSIGN_OR_RETURN(JobSpec job, LoadJobFile(options.job_path));
  if (job.strategy.type == "parameter_server") {
    STRATA_RETURN_IF_ERROR(CheckPsJob(job));
  }
  STRATA_ASSIGN_OR_RETURN(int64_t train_examples, CountTrainExamples(job));

  auto coord = CoordinatorClient::Connect(
      options.coordinator, options.register_timeout, options.security);
  const absl::Time deadline = absl::Now() + options.register_timeout;
  std::map<std::string, int> alive;
  while (true) {
    if (stopped()) return absl::CancelledError("interrupted before submitting");
    auto members = AliveMembers(options.coordinator, options.security);
    if (members.ok()) {
      alive = *members;
      if (alive["ps"] >= options.wait_ps &&
          alive["worker"] >= options.wait_workers) {
        break;
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "waited %s for %d ps and %d worker tasks to register with the "
            "coordinator at %s; %d and %d did",
            absl::FormatDuration(options.register_timeout), options.wait_ps,
            options.wait_workers, options.coordinator, alive["ps"],
            alive["worker"]));
      }
    } else if (members.status().code() != absl::StatusCode::kUnavailable &&
               members.status().code() != absl::StatusCode::kDeadlineExceeded) {
      return absl::Status(members.status().code(),
                          absl::StrCat("coordinator ", options.coordinator,
                                       ": ", members.status().message()));
    } else if (absl::Now() > deadline) {
      return absl::UnavailableError(absl::StrCat(
          "the coordinator at ", options.coordinator, " did not answer in ",
          absl::FormatDuration(options.register_timeout), ": ",
          members.status().message()));
    }
    absl::SleepFor(kPoll);
  }

  v1::SubmitJobRequest submit;
  submit.set_job_json(job.json);
  submit.set_train_examples(train_examples);
  auto submitted = coord->SubmitJob(submit);
  std::string job_id;
  if (submitted.ok()) {
    job_id = submitted->job_id();
    out << "strata submit: job '" << job.name << "' submitted as " << job_id
          << " to " << options.coordinator << " (" << alive["ps"] << " ps, "
        << alive["worker"] << " workers registered)" << std::endl;
  } else if (submitted.status().code() ==
             absl::StatusCode::kFailedPrecondition) {
    // A job is running. When it is this very job (a retried submit whose
    // first attempt got through), follow it rather than fail.
    auto running = coord->GetJob();
    if (!running.ok() || running->state() != v1::JobStatus::RUNNING ||
        running->job_json() != job.json) {
      return submitted.status();
    }
    job_id = running->job_id();
    out << "strata submit: job '" << job.name << "' is already running as "
        << job_id << " on " << options.coordinator << std::endl;
  } else {
    return submitted.status();
  }
  nlohmann::json result = {{"job_id", job_id}};
  if (!options.wait) return result;

  // Follow the job until it ends.
  size_t printed = 0;
  size_t skipped_printed = 0;
  v1::JobStatus status;
  while (true) {
    if (stopped()) {
      return absl::CancelledError(
          absl::StrCat("interrupted; job ", job_id, " goes on"));
    }
    STRATA_ASSIGN_OR_RETURN(status, coord->GetJob());
    if (status.job_id() != job_id) {
      return absl::AbortedError(absl::StrCat("the coordinator now runs job '",
                                             status.job_id(), "', not ",
                                             job_id));
    }
    if (options.on_status) options.on_status(status);
    PrintCompletedEpochs(status, job.epochs, &printed, out);
    PrintSkippedCheckpoints(status, &skipped_printed, out);
    if (status.state() == v1::JobStatus::FAILED) {
      return absl::AbortedError(absl::StrCat("job ", status.job_id(),
                                             " failed: ", status.error()));
    }
    if (status.state() == v1::JobStatus::SUCCEEDED) break;
    absl::SleepFor(kPoll);
  }

  nlohmann::json cluster = nlohmann::json::object();
  if (auto spec = coord->GetClusterSpec(); spec.ok()) cluster = ClusterOf(*spec);
  int64_t ps_applied = PsAppliedSteps(cluster, options.security);
  if (ps_applied >= 0 && job.strategy.update == "sync") {
    // Versions count aggregated steps of sync_replicas steps each.
    ps_applied = std::min<int64_t>(ps_applied * job.strategy.sync_replicas,
                                   status.steps_scheduled());
  }
  result = {
      {"job", job.name},
      {"job_id", status.job_id()},
      {"strategy", job.strategy.type},
      {"coordinator", options.coordinator},
      {"cluster", cluster},
      {"registered_at_submit",
       {{"ps", alive["ps"]}, {"worker", alive["worker"]}}},
      {"steps_applied_ps", ps_applied}};
  AddJobResult(job.epochs, job.batch_size, status, &result);
  const double test_accuracy = result["test_accuracy"];
  const double test_loss = result["test_loss"];
  out << absl::StrFormat("Test accuracy: %.4f (test loss %.4f)", test_accuracy,
                         test_loss)
      << std::endl;
  STRATA_RETURN_IF_ERROR(WriteSummary(options.summary_path, result));
  return result;
}

}  // namespace strata

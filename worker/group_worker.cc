#include "worker/group_worker.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/ps_cluster.h"
#include "collective/nccl.h"
#include "collective/worker_service.h"
#include "common/gradient_encoding.h"
#include "common/status_macros.h"
#include "common/tf_config.h"
#include "nlohmann/json.hpp"
#include "worker/group_trainer_internal.h"
#include "job/job.h"
#include "worker/nccl_reducer.h"
#include "worker/ps_reducer.h"
#include "worker/ps_worker.h"
#include "worker/replica_state.h"
#include "worker/ring_reducer.h"
#include "worker/transport_reducer.h"

namespace strata {
namespace worker_internal {
namespace {

// How long a group's reports may take to reach the coordinator before the
// next group is asked for anyway (a coordinator that is down answers
// JoinGroup no sooner).
constexpr absl::Duration kReportFlushTimeout = absl::Seconds(10);

}  // namespace

absl::Status GroupTrainer::Setup(const v1::JobStatus& status) {
  STRATA_ASSIGN_OR_RETURN(job_, ParseJobString(status.job_json()));
  STRATA_ASSIGN_OR_RETURN(policy_, PolicyFor(job_));
  if (policy_->loop() != TrainingLoop::kSyncGroup) {
    return absl::FailedPreconditionError(absl::StrCat(
        "strategy ", policy_->name(), " does not train in groups"));
  }
  STRATA_RETURN_IF_ERROR(ChooseGpus());
  // The model computes on the job's device; mirrored over several GPUs
  // gives replica i a model on its own GPU, gpus_[i].
  STRATA_ASSIGN_OR_RETURN(Model model, BuildModelForJob(job_));
  model_ = std::make_unique<Model>(std::move(model));
  replica_models_.clear();
  for (int gpu : gpus_) {
    STRATA_ASSIGN_OR_RETURN(
        Model m, Model::Build(job_.model, job_.loss, job_.seed,
                              absl::StrCat("cuda:", gpu)));
    replica_models_.push_back(std::make_unique<Model>(std::move(m)));
  }
  STRATA_ASSIGN_OR_RETURN(optimizer_, Optimizer::Create(job_.optimizer));
  STRATA_ASSIGN_OR_RETURN(train_, LoadTrain(job_));
  if (job_.data.has_test) {
    STRATA_ASSIGN_OR_RETURN(test_, LoadTest(job_));
    has_test_ = true;
  }
  steps_per_epoch_ = StepsPerEpoch(train_.size, job_.batch_size);
  total_steps_ = steps_per_epoch_ * job_.epochs;
  num_params_ = 0;
  for (const VariableDef& def : model_->variables()) {
    layout_.names.push_back(def.name);
    layout_.sizes.push_back(NumElements(def.shape));
    offsets_.push_back(num_params_);
    num_params_ += layout_.sizes.back();
  }
  num_state_ = 0;
  state_names_.clear();
  for (const VariableDef& def : model_->state_variables()) {
    num_state_ += NumElements(def.shape);
    state_names_.push_back(def.name);
  }
  layout_.slot_names = optimizer_->SlotNames();
  collective_options_.pack_bytes = policy_->config().pack_bytes;
  collective_options_.timeout = policy_->config().collective_timeout;
  replicas_.resize(gpus_.empty()
                       ? static_cast<size_t>(std::max(1, policy_->local_replicas()))
                       : gpus_.size());
  for (Replica& rep : replicas_) {
    rep.flat.assign(static_cast<size_t>(num_params_ + 2 + num_state_), 0.0f);
    for (int64_t size : layout_.sizes) {
      rep.params.emplace_back(static_cast<size_t>(size));
      rep.grads.emplace_back(static_cast<size_t>(size));
    }
    for (const VariableDef& def : model_->state_variables()) {
      rep.state.emplace_back(static_cast<size_t>(NumElements(def.shape)));
      rep.state_deltas.emplace_back(
          static_cast<size_t>(NumElements(def.shape)));
    }
  }

  if (policy_->variable_home() == VariableHome::kPsTasks ||
      policy_->backend() == CollectiveBackend::kPs) {
    STRATA_RETURN_IF_ERROR(ConnectPs());
  }
  if (policy_->variable_home() == VariableHome::kReplicas &&
      policy_->multi_worker()) {
    // Serves the ring all-reduce and copies of this task's state.
    collective::WorkerServerOptions server_options;
    server_options.host = options_.host;
    server_options.port = options_.worker_port;
    server_options.tls = options_.worker_tls;
    server_options.peer_security = options_.ps_security;
    STRATA_ASSIGN_OR_RETURN(server_,
                            collective::WorkerServer::Start(server_options,
                                                            logger_));
    server_->SetStateProvider(
        [this](const v1::GetStateRequest& request)
            -> absl::StatusOr<v1::WorkerState> {
          absl::MutexLock lock(&state_mu_);
          if (snapshot_group_ != request.group()) {
            return absl::UnavailableError(absl::StrCat(
                "no state for group ", request.group(), " (this task is at "
                "group ", snapshot_group_, ")"));
          }
          return snapshot_;
        });
  }
  logger_->Log(LogLevel::kInfo, "group_job_setup",
               {{"job", status.job_id()},
                {"strategy", policy_->name()},
                {"replicas_here", static_cast<int64_t>(replicas_.size())},
                {"device", job_.device},
                {"nccl_gpus", static_cast<int64_t>(gpus_.size())},
                {"worker_service", server_ ? server_->address() : ""},
                {"train_examples", train_.size},
                {"parameters", num_params_}});
  return absl::OkStatus();
}

absl::Status GroupTrainer::ConnectPs() {
  STRATA_ASSIGN_OR_RETURN(v1::GetClusterSpecResponse spec,
                          coordinator_->GetClusterSpec());
  nlohmann::json cluster =
      nlohmann::json::parse(spec.tf_config(), nullptr, false);
  std::vector<std::string> ps;
  if (cluster.is_object() && cluster.contains("cluster") &&
      cluster["cluster"].contains("ps")) {
    for (const auto& a : cluster["cluster"]["ps"]) ps.push_back(a);
  }
  if (ps.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the cluster has no ps task; ", policy_->name(),
        policy_->backend() == CollectiveBackend::kPs ? " with collective 'ps'"
                                                     : "",
        " needs one"));
  }
  PsClientOptions ps_options;
  // Waits for the group's other replicas happen in bounded slices (see
  // PullAtLeast); a single call never waits longer than this.
  ps_options.deadline = absl::Seconds(2);
  ps_options.security = options_.ps_security;
  // The job parser accepted the name (job.strategy.gradient_compression).
  ps_options.gradient_encoding =
      ParseGradientEncoding(job_.strategy.gradient_compression)
          .value_or(GradientEncoding::kNone);
  cluster_ = PsCluster::Connect(ps, ps_options);
  // The "ps" collective's reduction variable is created by each group at
  // its start step (RunGroup): created here at step 0, a restarted ps task
  // would keep it at version 0 while the groups start later.
  if (policy_->variable_home() != VariableHome::kPsTasks) {
    return absl::OkStatus();
  }
  // A ps task restarting meanwhile is waited for.
  return RetrySetup(
      "creating the job's ps variables", [this] { return CreatePsVariables(0); },
      kSetupRetryLimit, [this] { return Stopping(); }, logger_);
}

absl::Status GroupTrainer::CreatePsVariables(int64_t start_step) {
  if (policy_->variable_home() != VariableHome::kPsTasks) {
    return CreateReductionVariable(cluster_.get(),
                                   num_params_ + 2 + num_state_, start_step);
  }
  if (start_step > 0) return absl::OkStatus();
  std::vector<v1::VariableSpec> specs = PsVariableSpecs(job_, *model_);
  // The state (moving statistics) on the store too: every replica pushes
  // its step's change, averaged as the gradients are.
  for (v1::VariableSpec& spec : PsStateVariableSpecs(job_, *model_)) {
    specs.push_back(std::move(spec));
  }
  for (v1::VariableSpec var : specs) {
    var.mutable_update_mode()->set_kind(v1::UpdateMode::SYNC);
    var.mutable_update_mode()->set_num_replicas(1);
    Shape shape(var.shape().begin(), var.shape().end());
    STRATA_ASSIGN_OR_RETURN(
        std::vector<PlacementPolicy::Shard> shards,
        policy_->Place(shape, DType::kFloat32, cluster_->num_ps()));
    STRATA_RETURN_IF_ERROR(cluster_->CreateVariableOn(var, shards).status());
  }
  return absl::OkStatus();
}

absl::Status GroupTrainer::ChooseGpus() {
  if (job_.cuda_device < 0 ||
      policy_->backend() != CollectiveBackend::kInProcess) {
    return absl::OkStatus();
  }
  const bool replicas_given = job_.strategy.options.is_object() &&
                              job_.strategy.options.contains("replicas");
  // A policy with one fixed replica (one_device) has nothing to all-reduce.
  if (!replicas_given && policy_->local_replicas() <= 1) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<int>> gpus = collective::LocalGpus(
      job_.cuda_device, replicas_given ? policy_->local_replicas() : -1);
  if (!gpus.ok()) {
    return absl::Status(
        gpus.status().code(),
        absl::StrCat("strategy ", policy_->name(), " on job.device ",
                     job_.device,
                     replicas_given
                         ? absl::StrCat(" with job.strategy.replicas ",
                                        policy_->local_replicas())
                         : std::string(),
                     ": ", gpus.status().message()));
  }
  gpus_ = *std::move(gpus);
  return absl::OkStatus();
}

absl::StatusOr<v1::GroupAssignment> GroupTrainer::Join(int64_t after_group) {
  v1::JoinGroupRequest req;
  *req.mutable_task() = agent_->task();
  req.set_incarnation(agent_->incarnation());
  req.set_after_group(after_group);
  {
    absl::MutexLock lock(&state_mu_);
    // Variables on ps tasks: the newest version this task pulled in its
    // last group (steps below it are in the store, reported or not).
    req.set_next_step(policy_->variable_home() == VariableHome::kReplicas
                          ? (have_state_ ? next_step_ : -1)
                          : ps_pulled_);
  }
  req.set_address(server_ == nullptr ? ""
                  : options_.advertise_host.empty()
                      ? server_->address()
                      : JoinHostPort(options_.advertise_host, server_->port()));
  while (true) {
    if (Stopping()) return absl::CancelledError("stopped");
    {
      // Measured afresh for each call: the coordinator dates the ends by
      // its own clock at the call.
      absl::MutexLock lock(&state_mu_);
      req.clear_epoch_ends();
      const absl::Time now = absl::Now();
      for (const auto& [epoch, ended] : epoch_ended_) {
        v1::EpochEnd* e = req.add_epoch_ends();
        e->set_epoch(epoch);
        e->set_ago_ms(
            std::max<int64_t>(0, absl::ToInt64Milliseconds(now - ended)));
      }
    }
    absl::StatusOr<v1::GroupAssignment> a = coordinator_->JoinGroup(req);
    if (!a.ok()) {
      if (a.status().code() != absl::StatusCode::kNotFound) return a.status();
      // Declared failed (or the coordinator restarted): the agent
      // re-registers with the same incarnation.
      Pause(absl::Milliseconds(100));
      continue;
    }
    if (a->state() != v1::GroupAssignment::WAIT) return a;
    Pause(absl::Milliseconds(std::max<int64_t>(5, a->retry_after_ms())));
  }
}

absl::Status GroupTrainer::Run(const v1::JobStatus& status) {
  STRATA_RETURN_IF_ERROR(Setup(status));
  reporter_ = std::make_unique<GroupReporter>(
      coordinator_, logger_, [this](int64_t group) { NoteGroup(group); });
  int64_t group = 0;
  // After a failed group, the next is asked for after this pause (doubling
  // up to a second while groups keep failing: a ps task that is down or
  // not yet restored fails each at once).
  absl::Duration backoff = absl::ZeroDuration();
  while (true) {
    if (backoff > absl::ZeroDuration()) Pause(backoff);
    // The last group's reports first: the next group starts at the first
    // step the coordinator has no report of (and a checkpoint taken at
    // its barrier records the reported steps).
    if (!reporter_->Flush(kReportFlushTimeout)) {
      logger_->Log(LogLevel::kWarning, "reports_pending",
                   {{"group", group},
                    {"waited_ms",
                     absl::ToInt64Milliseconds(kReportFlushTimeout)}});
    }
    STRATA_ASSIGN_OR_RETURN(v1::GroupAssignment a, Join(group));
    if (a.state() == v1::GroupAssignment::DONE) {
      logger_->Log(LogLevel::kInfo, "job_done", {});
      if (server_) server_->Shutdown(absl::Seconds(1));
      return absl::OkStatus();
    }
    group = a.group();
    logger_->Log(LogLevel::kInfo, "group_joined",
                 {{"group", a.group()},
                  {"rank", a.rank()},
                  {"size", a.size()},
                  {"start_step", a.start_step()},
                  {"source_rank", a.source_rank()}});
    finished_ = false;
    {
      absl::MutexLock lock(&state_mu_);
      ps_pulled_ = -1;  // claims are of this group's pulls only
    }
    absl::Status s = RunGroup(a);
    if (Stopping()) return absl::CancelledError("stopped");
    if (!s.ok()) {
      backoff = std::min(absl::Seconds(1),
                         std::max(absl::Milliseconds(50), backoff * 2));
      logger_->Log(LogLevel::kWarning, "group_failed",
                   {{"group", a.group()},
                    {"error", s.ToString()},
                    {"next_in_ms", absl::ToInt64Milliseconds(backoff)}});
      continue;
    }
    backoff = absl::ZeroDuration();
    if (finished_) {
      // Every step ran: wait (bounded) for the job to end before asking
      // for another group, which would only re-run missing steps.
      // Once every report was answered, a coordinator that still lacks
      // steps lost their reports (it restarted): the next group, formed
      // at once, counts them from this task's pulls (or state).
      const bool reported = reporter_->Flush(kReportFlushTimeout);
      const absl::Time until = absl::Now() + absl::Seconds(5);
      while (absl::Now() < until && !Stopping()) {
        absl::StatusOr<v1::JobStatus> job = coordinator_->GetJob();
        if (job.ok() && job->state() != v1::JobStatus::RUNNING) break;
        if (job.ok() && reported && job->steps_completed() < total_steps_) {
          break;
        }
        Pause(absl::Milliseconds(50));
      }
    }
  }
}

void GroupTrainer::InitializeState() {
  Replica& rep = replicas_[0];
  (void)model_->InitializeParams(&rep.params);
  rep.slots.assign(layout_.names.size(), {});
  for (size_t i = 0; i < layout_.names.size(); ++i) {
    for (size_t j = 0; j < layout_.slot_names.size(); ++j) {
      rep.slots[i].emplace_back(
          static_cast<size_t>(layout_.sizes[i]),
          static_cast<float>(optimizer_->SlotInitialValue(j)));
    }
  }
}

v1::WorkerState GroupTrainer::SnapshotLocked(int64_t step) const {
  return SnapshotReplicaState(layout_, step, replicas_[0].params,
                              replicas_[0].slots);
}

absl::Status GroupTrainer::PrepareState(const v1::GroupAssignment& a) {
  if (policy_->variable_home() != VariableHome::kReplicas) return absl::OkStatus();
  bool copy = false;
  {
    absl::MutexLock lock(&state_mu_);
    if (a.rank() == a.source_rank()) {
      if (!have_state_) {
        InitializeState();
        have_state_ = true;
        next_step_ = a.start_step();
      }
      snapshot_ = SnapshotLocked(next_step_);
      snapshot_group_ = a.group();
    } else {
      copy = !have_state_ || next_step_ != a.start_step();
      snapshot_group_ = a.group();
      snapshot_ = have_state_ ? SnapshotLocked(next_step_) : v1::WorkerState();
    }
  }
  if (copy) STRATA_RETURN_IF_ERROR(CopyState(a));
  // Local replicas (mirrored) start from replica 0's state.
  for (size_t r = 1; r < replicas_.size(); ++r) {
    replicas_[r].params = replicas_[0].params;
    replicas_[r].slots = replicas_[0].slots;
  }
  return absl::OkStatus();
}

absl::Status GroupTrainer::CopyState(const v1::GroupAssignment& a) {
  const std::string& source = a.members(a.source_rank()).address();
  v1::GetStateRequest req;
  req.set_group(a.group());
  req.set_from_rank(a.rank());
  const absl::Time until = absl::Now() + collective_options_.timeout;
  absl::StatusOr<v1::WorkerState> state;
  while (true) {
    state = collective::FetchState(source, req, absl::Seconds(10),
                                   options_.ps_security);
    if (state.ok() || absl::Now() >= until || Stopping() ||
        NewerGroup(a.group())) {
      break;
    }
    // The source may not have taken its snapshot for this group yet.
    Pause(absl::Milliseconds(20));
  }
  if (!state.ok()) {
    return absl::Status(state.status().code(),
                        absl::StrCat("copying the state of rank ",
                                     a.source_rank(), " (", source,
                                     "): ", state.status().message()));
  }
  if (state->step() != a.start_step()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", a.source_rank(), " state is at step ",
                     state->step(), ", the group starts at ",
                     a.start_step()));
  }
  absl::MutexLock lock(&state_mu_);
  STRATA_RETURN_IF_ERROR(LoadReplicaState(*state, layout_, &replicas_[0].params,
                                          &replicas_[0].slots));
  have_state_ = true;
  next_step_ = a.start_step();
  logger_->Log(LogLevel::kInfo, "state_copied",
               {{"group", a.group()},
                {"from_rank", a.source_rank()},
                {"step", a.start_step()}});
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GradientReducer>> GroupTrainer::MakeReducer(
    const v1::GroupAssignment& a) {
  if (policy_->variable_home() == VariableHome::kPsTasks) {
    return std::unique_ptr<GradientReducer>();
  }
  const int local = static_cast<int>(replicas_.size());
  const int64_t group = a.group();
  switch (policy_->backend()) {
    case CollectiveBackend::kRing:
      // A newer group (announced by heartbeats and reports) ends this one
      // at once.
      return OpenRingReducer(
          server_.get(), a, collective_options_,
          [this, group] { return NewerGroup(group) || Stopping(); });
    case CollectiveBackend::kPs: {
      PsReducerOptions ps;
      ps.tag_job = absl::StrCat(a.job_id(), "/g", group);
      ps.group = group;
      ps.first_rank = a.rank() * local;
      ps.world = a.size() * local;
      ps.timeout = collective_options_.timeout;
      ps.stopping = [this] { return Stopping(); };
      ps.replaced = [this, group] { return NewerGroup(group); };
      return std::unique_ptr<GradientReducer>(
          std::make_unique<PsReducer>(cluster_.get(), std::move(ps)));
    }
    case CollectiveBackend::kInProcess:
      if (gpus_.empty()) return NewInProcessReducer(local, collective_options_);
      return NewNcclReducer(gpus_, collective_options_);
    case CollectiveBackend::kNone:
      break;
  }
  return absl::InternalError(absl::StrCat(
      "strategy ", policy_->name(), " keeps variables on the replicas but "
      "has no collective backend"));
}

absl::Status GroupTrainer::RunGroup(const v1::GroupAssignment& a) {
  if (cluster_ != nullptr) {
    // A restarted ps task lost what lives there: re-created here.
    STRATA_RETURN_IF_ERROR(CreatePsVariables(a.start_step()));
  }
  STRATA_RETURN_IF_ERROR(PrepareState(a));
  if (a.rank() == 0) STRATA_RETURN_IF_ERROR(EvaluateMissedEpochs(a));
  const int local = static_cast<int>(replicas_.size());
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<GradientReducer> reducer,
                          MakeReducer(a));
  std::vector<absl::Status> results(static_cast<size_t>(local));
  std::vector<std::thread> threads;
  for (int r = 1; r < local; ++r) {
    threads.emplace_back([this, &a, &results, &reducer, r] {
      results[r] = ReplicaLoop(a, r, reducer.get());
    });
  }
  results[0] = ReplicaLoop(a, 0, reducer.get());
  for (auto& t : threads) t.join();
  reducer.reset();
  for (const absl::Status& s : results) STRATA_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::Status GroupTrainer::ExportState() {
  v1::WorkerState state;
  {
    absl::MutexLock lock(&state_mu_);
    state = SnapshotLocked(next_step_);
  }
  return ExportFinalState(file_system_, logger_, options_.export_dir, state);
}

}  // namespace worker_internal

absl::Status RunGroupTraining(Coordinator* coordinator, Logger* logger,
                              MembershipAgent* agent,
                              const v1::JobStatus& status,
                              const GroupWorkerOptions& options) {
  worker_internal::GroupTrainer trainer(coordinator, logger, agent, options);
  return trainer.Run(status);
}

}  // namespace strata

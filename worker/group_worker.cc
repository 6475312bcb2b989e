#include "worker/group_worker.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/ps_cluster.h"
#include "collective/collective.h"
#include "collective/in_process.h"
#include "collective/nccl.h"
#include "collective/worker_service.h"
#include "common/status_macros.h"
#include "common/tf_config.h"
#include "kernels/optimizers.h"
#include "nlohmann/json.hpp"
#include "worker/dataset.h"
#include "worker/job.h"
#include "worker/model.h"
#include "worker/ps_worker.h"

namespace strata {
namespace {

using collective::Transport;

// The PS variable through which the "ps" collective backend sums a step's
// gradients (all variables flattened, then loss and accuracy).
constexpr char kReductionVariable[] = "_allreduce/gradients";

class GroupTrainer {
 public:
  GroupTrainer(CoordinatorClient* coordinator, Logger* logger,
               MembershipAgent* agent, GroupWorkerOptions options)
      : coordinator_(coordinator),
        logger_(logger),
        agent_(agent),
        options_(std::move(options)) {}

  absl::Status Run(const v1::JobStatus& status);

 private:
  // One replica's model state and step buffers.
  struct Replica {
    std::vector<std::vector<float>> params;
    std::vector<std::vector<std::vector<float>>> slots;  // [variable][slot]
    std::vector<std::vector<float>> grads;
    std::vector<float> flat;  // P gradients, then loss and accuracy
    ModelWorkspace workspace;
    int cached_epoch = -1;
    std::vector<int64_t> permutation;
    std::vector<float> x;
    std::vector<int32_t> y;
  };

  absl::Status Setup(const v1::JobStatus& status);
  // Mirrored with job.device cuda[:N]: one replica per GPU from N on (or
  // job.strategy.replicas of them), checked before anything is loaded.
  absl::Status ChooseGpus();
  absl::StatusOr<v1::GroupAssignment> Join(int64_t after_group);
  // Trains the steps of one group. OK when the job's steps are done or a
  // newer group was announced (regroup_ set); an error when a collective,
  // the PS or the state copy failed (the caller forms a new group).
  absl::Status RunGroup(const v1::GroupAssignment& a);
  absl::Status ReplicaLoop(const v1::GroupAssignment& a, int local,
                           Transport* transport);
  absl::Status PrepareState(const v1::GroupAssignment& a);
  void InitializeState() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  v1::WorkerState SnapshotLocked(int64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  absl::Status LoadState(const v1::WorkerState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  absl::Status ApplyLocal(Replica* rep, int64_t step);
  // Writes replica 0's state to options_.export_dir/final_state.pb.
  absl::Status ExportState();
  // Pulls the PS variables at version >= `version` (central_storage),
  // giving up early when a newer group is announced.
  absl::Status PullAtLeast(const v1::GroupAssignment& a, Replica* rep,
                           int64_t version);
  void Report(const v1::GroupAssignment& a, int64_t step, double loss,
              double accuracy, int64_t examples);
  absl::Status EvaluateAndReport(const v1::GroupAssignment& a, int epoch,
                                 Replica* rep);
  absl::Status EvaluateMissedEpochs(const v1::GroupAssignment& a);
  bool EvalDue(int epoch) const;
  bool NewerGroup(int64_t group) const {
    return std::max(newest_group_.load(), agent_->group()) > group;
  }
  bool Stopping() const {
    return options_.stop != nullptr && options_.stop->load();
  }
  void Pause(absl::Duration d) const { absl::SleepFor(d); }

  CoordinatorClient* const coordinator_;
  Logger* const logger_;
  MembershipAgent* const agent_;
  const GroupWorkerOptions options_;

  JobSpec job_;
  std::unique_ptr<PlacementPolicy> policy_;
  std::unique_ptr<Model> model_;
  // Mirrored on GPUs: replica i's model, on GPU gpus_[i] (empty otherwise).
  std::vector<std::unique_ptr<Model>> replica_models_;
  // The model replica `rep` computes with.
  const Model& ModelOf(const Replica& rep) const {
    const size_t i = static_cast<size_t>(&rep - replicas_.data());
    return i < replica_models_.size() ? *replica_models_[i] : *model_;
  }
  std::unique_ptr<Optimizer> optimizer_;
  Dataset train_;
  Dataset test_;
  bool has_test_ = false;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  std::vector<std::string> names_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> offsets_;
  int64_t num_params_ = 0;
  collective::CollectiveOptions collective_options_;

  std::unique_ptr<PsCluster> cluster_;
  std::unique_ptr<collective::WorkerServer> server_;
  // Mirrored on GPUs (job.device cuda): replica i all-reduces on GPU
  // gpus_[i] through nccl_, which exists while a group's replicas run (set
  // before their threads start, reset after they joined).
  std::vector<int> gpus_;
  std::unique_ptr<collective::NcclGroup> nccl_;
  std::vector<Replica> replicas_;

  // Replica 0's state (the one others copy), guarded for the state server.
  mutable absl::Mutex state_mu_;
  // Replicas hold model state.
  bool have_state_ ABSL_GUARDED_BY(state_mu_) = false;
  // The first step the state has not applied.
  int64_t next_step_ ABSL_GUARDED_BY(state_mu_) = -1;
  // The group the snapshot below was taken for.
  int64_t snapshot_group_ ABSL_GUARDED_BY(state_mu_) = 0;
  v1::WorkerState snapshot_ ABSL_GUARDED_BY(state_mu_);

  std::atomic<int64_t> newest_group_{0};
  bool finished_ = false;
};

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
    names_.push_back(def.name);
    sizes_.push_back(NumElements(def.shape));
    offsets_.push_back(num_params_);
    num_params_ += sizes_.back();
  }
  collective_options_.pack_bytes = policy_->config().pack_bytes;
  collective_options_.timeout = policy_->config().collective_timeout;
  replicas_.resize(gpus_.empty()
                       ? static_cast<size_t>(std::max(1, policy_->local_replicas()))
                       : gpus_.size());
  for (Replica& rep : replicas_) {
    rep.flat.assign(static_cast<size_t>(num_params_ + 2), 0.0f);
    for (int64_t size : sizes_) {
      rep.params.emplace_back(static_cast<size_t>(size));
      rep.grads.emplace_back(static_cast<size_t>(size));
    }
  }

  const bool uses_ps = policy_->variable_home() == VariableHome::kPsTasks ||
                       policy_->backend() == CollectiveBackend::kPs;
  if (uses_ps) {
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
    cluster_ = PsCluster::Connect(ps, ps_options);
    if (policy_->variable_home() == VariableHome::kPsTasks) {
      for (v1::VariableSpec spec : PsVariableSpecs(job_, *model_)) {
        spec.mutable_update_mode()->set_kind(v1::UpdateMode::SYNC);
        spec.mutable_update_mode()->set_num_replicas(1);
        Shape shape(spec.shape().begin(), spec.shape().end());
        STRATA_ASSIGN_OR_RETURN(
            std::vector<PlacementPolicy::Shard> shards,
            policy_->Place(shape, DType::kFloat32, cluster_->num_ps()));
        std::vector<ShardSlice> slices;
        for (const auto& s : shards) slices.push_back(s.slice);
        STRATA_RETURN_IF_ERROR(cluster_->CreateVariable(spec, slices).status());
      }
    } else {
      v1::VariableSpec spec;
      spec.set_name(kReductionVariable);
      spec.set_dtype(v1::DT_FLOAT32);
      spec.add_shape(num_params_ + 2);
      spec.mutable_initializer()->set_type("zeros");
      spec.mutable_optimizer()->set_type("assign");
      spec.mutable_update_mode()->set_kind(v1::UpdateMode::SYNC);
      spec.mutable_update_mode()->set_num_replicas(1);
      STRATA_RETURN_IF_ERROR(cluster_->CreateVariable(spec, {}).status());
    }
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
    req.set_next_step(policy_->variable_home() == VariableHome::kReplicas &&
                              have_state_
                          ? next_step_
                          : -1);
  }
  req.set_address(server_ == nullptr ? ""
                  : options_.advertise_host.empty()
                      ? server_->address()
                      : JoinHostPort(options_.advertise_host, server_->port()));
  while (true) {
    if (Stopping()) return absl::CancelledError("stopped");
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
  int64_t group = 0;
  while (true) {
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
    absl::Status s = RunGroup(a);
    if (Stopping()) return absl::CancelledError("stopped");
    if (!s.ok()) {
      logger_->Log(LogLevel::kWarning, "group_failed",
                   {{"group", a.group()}, {"error", s.ToString()}});
      continue;
    }
    if (finished_) {
      // Every step ran: wait (bounded) for the job to end before asking
      // for another group, which would only re-run missing steps.
      const absl::Time until = absl::Now() + absl::Seconds(5);
      while (absl::Now() < until && !Stopping()) {
        absl::StatusOr<v1::JobStatus> job = coordinator_->GetJob();
        if (job.ok() && job->state() != v1::JobStatus::RUNNING) break;
        Pause(absl::Milliseconds(50));
      }
    }
  }
}

void GroupTrainer::InitializeState() {
  Replica& rep = replicas_[0];
  (void)model_->InitializeParams(&rep.params);
  const std::vector<std::string> slot_names = optimizer_->SlotNames();
  rep.slots.assign(names_.size(), {});
  for (size_t i = 0; i < names_.size(); ++i) {
    for (size_t j = 0; j < slot_names.size(); ++j) {
      rep.slots[i].emplace_back(
          static_cast<size_t>(sizes_[i]),
          static_cast<float>(optimizer_->SlotInitialValue(j)));
    }
  }
}

v1::WorkerState GroupTrainer::SnapshotLocked(int64_t step) const {
  const Replica& rep = replicas_[0];
  const std::vector<std::string> slot_names = optimizer_->SlotNames();
  v1::WorkerState state;
  state.set_step(step);
  auto add = [&](const std::string& name, const std::vector<float>& values) {
    v1::NamedTensor* t = state.add_tensors();
    t->set_name(name);
    t->set_dtype(v1::DT_FLOAT32);
    t->add_shape(static_cast<int64_t>(values.size()));
    t->set_data(values.data(), values.size() * sizeof(float));
  };
  for (size_t i = 0; i < names_.size(); ++i) {
    add(names_[i], rep.params[i]);
    for (size_t j = 0; j < slot_names.size(); ++j) {
      add(absl::StrCat(names_[i], "/", slot_names[j]), rep.slots[i][j]);
    }
  }
  return state;
}

absl::Status GroupTrainer::LoadState(const v1::WorkerState& state) {
  Replica& rep = replicas_[0];
  const std::vector<std::string> slot_names = optimizer_->SlotNames();
  rep.slots.assign(names_.size(), {});
  for (auto& s : rep.slots) s.resize(slot_names.size());
  std::map<std::string, const v1::NamedTensor*> by_name;
  for (const v1::NamedTensor& t : state.tensors()) by_name[t.name()] = &t;
  auto load = [&](const std::string& name,
                  std::vector<float>* out, int64_t size) -> absl::Status {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::DataLossError(
          absl::StrCat("copied state lacks tensor '", name, "'"));
    }
    const std::string& data = it->second->data();
    if (it->second->dtype() != v1::DT_FLOAT32 ||
        data.size() != static_cast<size_t>(size) * sizeof(float)) {
      return absl::DataLossError(absl::StrCat(
          "copied tensor '", name, "' has ", data.size(), " bytes, expected ",
          size * 4, " of float32"));
    }
    out->resize(static_cast<size_t>(size));
    std::memcpy(out->data(), data.data(), data.size());
    return absl::OkStatus();
  };
  for (size_t i = 0; i < names_.size(); ++i) {
    STRATA_RETURN_IF_ERROR(load(names_[i], &rep.params[i], sizes_[i]));
    for (size_t j = 0; j < slot_names.size(); ++j) {
      STRATA_RETURN_IF_ERROR(load(absl::StrCat(names_[i], "/", slot_names[j]),
                                  &rep.slots[i][j], sizes_[i]));
    }
  }
  return absl::OkStatus();
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
  if (copy) {
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
    STRATA_RETURN_IF_ERROR(LoadState(*state));
    have_state_ = true;
    next_step_ = a.start_step();
    logger_->Log(LogLevel::kInfo, "state_copied",
                 {{"group", a.group()},
                  {"from_rank", a.source_rank()},
                  {"step", a.start_step()}});
  }
  // Local replicas (mirrored) start from replica 0's state.
  for (size_t r = 1; r < replicas_.size(); ++r) {
    replicas_[r].params = replicas_[0].params;
    replicas_[r].slots = replicas_[0].slots;
  }
  return absl::OkStatus();
}

absl::Status GroupTrainer::RunGroup(const v1::GroupAssignment& a) {
  STRATA_RETURN_IF_ERROR(PrepareState(a));
  if (a.rank() == 0) STRATA_RETURN_IF_ERROR(EvaluateMissedEpochs(a));
  const int local = static_cast<int>(replicas_.size());
  std::vector<std::unique_ptr<Transport>> transports;
  if (policy_->backend() == CollectiveBackend::kRing) {
    std::vector<std::string> peers;
    for (const v1::GroupMember& m : a.members()) peers.push_back(m.address());
    STRATA_ASSIGN_OR_RETURN(
        std::unique_ptr<Transport> t,
        server_->OpenGroup(a.group(), a.rank(), peers, collective_options_));
    transports.push_back(std::move(t));
  } else if (policy_->backend() == CollectiveBackend::kInProcess) {
    if (gpus_.empty()) {
      transports = collective::NewInProcessGroup(local);
    } else {
      STRATA_ASSIGN_OR_RETURN(
          nccl_, collective::NcclGroup::Create(gpus_, collective_options_));
    }
  }
  // A newer group (announced by heartbeats and reports) ends this one at
  // once: waits in a collective stop instead of running into its deadline
  // (a stuck peer is alive to the OS but not to its lease).
  absl::Notification done;
  std::thread monitor;
  if (!transports.empty() && policy_->multi_worker()) {
    monitor = std::thread([this, &a, &done, &transports] {
      while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
        if (NewerGroup(a.group()) || Stopping()) {
          for (auto& t : transports) {
            t->Abort(absl::AbortedError(absl::StrCat(
                "group ", a.group(), " replaced by a newer group")));
          }
          return;
        }
      }
    });
  }
  std::vector<absl::Status> results(static_cast<size_t>(local));
  std::vector<std::thread> threads;
  for (int r = 1; r < local; ++r) {
    threads.emplace_back([this, &a, &results, &transports, r] {
      results[r] = ReplicaLoop(
          a, r,
          transports.empty() ? nullptr
                             : transports[static_cast<size_t>(r)].get());
    });
  }
  results[0] = ReplicaLoop(a, 0, transports.empty() ? nullptr
                                                   : transports[0].get());
  for (auto& t : threads) t.join();
  done.Notify();
  if (monitor.joinable()) monitor.join();
  nccl_.reset();
  for (const absl::Status& s : results) STRATA_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

bool GroupTrainer::EvalDue(int epoch) const {
  const int every = job_.evaluation.every_epochs;
  return every > 0 && ((epoch + 1) % every == 0 || epoch + 1 == job_.epochs);
}

absl::Status GroupTrainer::EvaluateMissedEpochs(const v1::GroupAssignment& a) {
  // Epochs whose steps all completed but whose evaluation was lost with a
  // member: evaluated now, with the current model.
  STRATA_ASSIGN_OR_RETURN(v1::JobStatus job, coordinator_->GetJob());
  for (const v1::EpochResult& e : job.epochs()) {
    if (e.steps() == steps_per_epoch_ && !e.evaluated() && EvalDue(e.epoch())) {
      Replica& rep = replicas_[0];
      if (policy_->variable_home() == VariableHome::kPsTasks) {
        STRATA_RETURN_IF_ERROR(PullAtLeast(a, &rep, a.start_step()));
      }
      STRATA_RETURN_IF_ERROR(EvaluateAndReport(a, e.epoch(), &rep));
    }
  }
  return absl::OkStatus();
}

absl::Status GroupTrainer::PullAtLeast(const v1::GroupAssignment& a,
                                       Replica* rep, int64_t version) {
  std::vector<void*> dsts;
  for (auto& p : rep->params) dsts.push_back(p.data());
  PullOptions pull;
  pull.min_version = version;
  const absl::Time until = absl::Now() + collective_options_.timeout;
  while (true) {
    absl::Status s = cluster_->PullMany(names_, dsts, pull);
    if (s.ok()) return s;
    const bool waiting = s.code() == absl::StatusCode::kAborted ||
                         s.code() == absl::StatusCode::kDeadlineExceeded;
    if (!waiting || absl::Now() >= until) return s;
    if (Stopping()) return absl::CancelledError("stopped");
    if (NewerGroup(a.group())) {
      return absl::AbortedError(absl::StrCat(
          "group ", a.group(), " replaced while waiting for version ", version));
    }
  }
}

absl::Status GroupTrainer::ApplyLocal(Replica* rep, int64_t step) {
  for (size_t i = 0; i < names_.size(); ++i) {
    std::vector<void*> slots;
    for (auto& s : rep->slots[i]) slots.push_back(s.data());
    STRATA_RETURN_IF_ERROR(optimizer_->ApplyDense(
        DType::kFloat32, step, rep->params[i].data(), slots,
        rep->flat.data() + offsets_[i], sizes_[i]));
  }
  return absl::OkStatus();
}

void GroupTrainer::Report(const v1::GroupAssignment& a, int64_t step,
                          double loss, double accuracy, int64_t examples) {
  v1::ReportWorkRequest req;
  *req.mutable_task() = agent_->task();
  req.set_incarnation(agent_->incarnation());
  v1::WorkItem* item = req.mutable_item();
  item->set_kind(v1::WorkItem::TRAIN);
  item->set_step(step);
  item->set_epoch(static_cast<int>(step / steps_per_epoch_));
  item->set_batch(step % steps_per_epoch_);
  item->set_job_id(a.job_id());
  item->set_generation(agent_->generation());
  req.set_loss(loss);
  req.set_accuracy(accuracy);
  req.set_examples(examples);
  absl::StatusOr<v1::ReportWorkResponse> resp = coordinator_->ReportWork(req);
  if (resp.ok()) {
    int64_t seen = newest_group_.load();
    while (resp->group() > seen &&
           !newest_group_.compare_exchange_weak(seen, resp->group())) {
    }
  } else if (resp.status().code() != absl::StatusCode::kNotFound) {
    logger_->Log(LogLevel::kWarning, "report_failed",
                 {{"step", step}, {"error", resp.status().ToString()}});
  }
}

absl::Status GroupTrainer::EvaluateAndReport(const v1::GroupAssignment& a,
                                             int epoch, Replica* rep) {
  double loss = 0, accuracy = 0;
  if (has_test_) {
    STRATA_ASSIGN_OR_RETURN(
        StepStats stats, ModelOf(*rep).Evaluate(Model::Views(rep->params),
                                                test_, 1024, &rep->workspace));
    loss = stats.loss;
    accuracy = stats.accuracy;
  }
  v1::ReportWorkRequest req;
  *req.mutable_task() = agent_->task();
  req.set_incarnation(agent_->incarnation());
  v1::WorkItem* item = req.mutable_item();
  item->set_kind(v1::WorkItem::EVALUATE);
  item->set_epoch(epoch);
  item->set_job_id(a.job_id());
  item->set_generation(agent_->generation());
  req.set_test_loss(loss);
  req.set_test_accuracy(accuracy);
  absl::StatusOr<v1::ReportWorkResponse> resp = coordinator_->ReportWork(req);
  if (!resp.ok()) return resp.status();
  logger_->Log(LogLevel::kInfo, "evaluated",
               {{"epoch", epoch}, {"test_loss", loss},
                {"test_accuracy", accuracy}});
  return absl::OkStatus();
}

absl::Status GroupTrainer::ReplicaLoop(const v1::GroupAssignment& a, int local,
                                       Transport* transport) {
  Replica& rep = replicas_[static_cast<size_t>(local)];
  const int num_local = static_cast<int>(replicas_.size());
  const int world = a.size() * num_local;
  const int rank = a.rank() * num_local + local;
  const bool reporter = local == 0;
  const bool evaluator = rank == 0;
  const bool ps_home = policy_->variable_home() == VariableHome::kPsTasks;
  const std::string tag_job = absl::StrCat(a.job_id(), "/g", a.group());
  StepStats last{};
  int64_t last_examples = 0;
  auto leave = [&](const char* why) {
    const absl::Status reason = absl::AbortedError(
        absl::StrCat("rank ", rank, " left group ", a.group(), ": ", why));
    if (transport != nullptr) transport->Abort(reason);
    if (nccl_ != nullptr) nccl_->Abort(reason);
  };
  for (int64_t step = a.start_step(); step < total_steps_; ++step) {
    if (Stopping()) {
      leave("stopping");
      return absl::CancelledError("stopped");
    }
    if (num_local == 1 && NewerGroup(a.group())) {
      leave("a newer group was announced");
      return absl::OkStatus();
    }
    const int epoch = static_cast<int>(step / steps_per_epoch_);
    if (epoch != rep.cached_epoch) {
      rep.permutation = EpochPermutation(train_.size, job_.shuffle_seed, epoch);
      rep.cached_epoch = epoch;
    }
    GatherBatch(train_, rep.permutation, step % steps_per_epoch_,
                job_.batch_size, &rep.x, &rep.y);
    const int64_t batch = static_cast<int64_t>(rep.y.size());
    const auto [begin, end] = ReplicaRows(batch, rank, world);
    const int64_t n = end - begin;

    if (ps_home) {
      // Version `step` means every step before it was applied by the store.
      absl::Status pulled = PullAtLeast(a, &rep, step);
      if (!pulled.ok()) {
        if (NewerGroup(a.group())) return absl::OkStatus();
        return pulled;
      }
      if (step > a.start_step() && reporter) {
        Report(a, step - 1, last.loss, last.accuracy, last_examples);
        if (evaluator && step % steps_per_epoch_ == 0 &&
            EvalDue(static_cast<int>((step - 1) / steps_per_epoch_))) {
          STRATA_RETURN_IF_ERROR(EvaluateAndReport(
              a, static_cast<int>((step - 1) / steps_per_epoch_), &rep));
        }
      }
    }

    StepStats stats{};
    if (n > 0) {
      STRATA_ASSIGN_OR_RETURN(
          stats,
          ModelOf(rep).TrainStep(Model::Views(rep.params),
                            rep.x.data() + begin * model_->num_features(),
                            rep.y.data() + begin, n,
                            job_.seed * 1000003 +
                                static_cast<uint64_t>(step) * 4096 +
                                static_cast<uint64_t>(rank),
                            &rep.grads, &rep.workspace));
    } else {
      for (auto& g : rep.grads) std::fill(g.begin(), g.end(), 0.0f);
    }
    // Each replica's mean gradient weighted by its share of the batch: the
    // sum over replicas is the global batch's mean gradient.
    const float share = static_cast<float>(n) / static_cast<float>(batch);

    if (ps_home) {
      // The store averages group_size pushes: scale so that the average is
      // the share-weighted sum.
      const float scale = share * static_cast<float>(world);
      std::vector<const void*> grads;
      for (auto& g : rep.grads) {
        for (float& v : g) v *= scale;
        grads.push_back(g.data());
      }
      absl::StatusOr<int64_t> pushed = cluster_->PushMany(
          names_, grads, PushTag{tag_job, rank, step, a.group(), world});
      // ABORTED: the store already applied this step (a re-run after a
      // regroup) or a newer group owns it; the next pull tells.
      if (!pushed.ok() && pushed.status().code() != absl::StatusCode::kAborted) {
        return pushed.status();
      }
      last = stats;
      last_examples = batch;
      continue;
    }

    // All-reduce, then every replica applies the same update.
    float* flat = rep.flat.data();
    for (size_t i = 0; i < names_.size(); ++i) {
      const float* g = rep.grads[i].data();
      float* dst = flat + offsets_[i];
      for (int64_t k = 0; k < sizes_[i]; ++k) dst[k] = g[k] * share;
    }
    flat[num_params_] = static_cast<float>(stats.loss) * share;
    flat[num_params_ + 1] = static_cast<float>(stats.accuracy) * share;
    if (policy_->backend() == CollectiveBackend::kPs) {
      const float scale = static_cast<float>(world);
      for (int64_t k = 0; k < num_params_ + 2; ++k) flat[k] *= scale;
      absl::StatusOr<int64_t> pushed = cluster_->PushMany(
          {kReductionVariable}, {flat},
          PushTag{tag_job, rank, step, a.group(), world});
      if (!pushed.ok() && pushed.status().code() != absl::StatusCode::kAborted) {
        return pushed.status();
      }
      std::vector<void*> dst{flat};
      PullOptions pull;
      pull.min_version = step + 1;
      const absl::Time until = absl::Now() + collective_options_.timeout;
      while (true) {
        absl::Status s = cluster_->PullMany({kReductionVariable}, dst, pull);
        if (s.ok()) break;
        const bool waiting = s.code() == absl::StatusCode::kAborted ||
                             s.code() == absl::StatusCode::kDeadlineExceeded;
        if (!waiting || absl::Now() >= until || Stopping()) return s;
        if (NewerGroup(a.group())) return absl::OkStatus();
      }
    } else if (nccl_ != nullptr) {
      // Mirrored on GPUs: replica `local` is rank `local` of the NCCL group.
      STRATA_RETURN_IF_ERROR(nccl_->AllReduce(local, DType::kFloat32, flat,
                                              num_params_ + 2,
                                              collective::NcclReduce::kSum));
    } else {
      STRATA_RETURN_IF_ERROR(collective::AllReduceSum(
          transport, DType::kFloat32, flat, num_params_ + 2,
          absl::StrCat("step", step), collective_options_));
    }
    if (local == 0) {
      // Replica 0's state is what others copy: update it under the lock.
      absl::MutexLock lock(&state_mu_);
      STRATA_RETURN_IF_ERROR(ApplyLocal(&rep, step));
      next_step_ = step + 1;
    } else {
      STRATA_RETURN_IF_ERROR(ApplyLocal(&rep, step));
    }
    if (reporter) {
      Report(a, step, flat[num_params_], flat[num_params_ + 1], batch);
      if (evaluator && (step + 1) % steps_per_epoch_ == 0 &&
          EvalDue(static_cast<int>(step / steps_per_epoch_))) {
        STRATA_RETURN_IF_ERROR(EvaluateAndReport(
            a, static_cast<int>(step / steps_per_epoch_), &rep));
      }
    }
  }
  if (ps_home && total_steps_ > a.start_step()) {
    // The last step is done once the store applied it.
    absl::Status pulled = PullAtLeast(a, &rep, total_steps_);
    if (!pulled.ok()) {
      if (NewerGroup(a.group())) return absl::OkStatus();
      return pulled;
    }
    if (reporter) {
      Report(a, total_steps_ - 1, last.loss, last.accuracy, last_examples);
      if (evaluator && EvalDue(job_.epochs - 1)) {
        STRATA_RETURN_IF_ERROR(EvaluateAndReport(a, job_.epochs - 1, &rep));
      }
    }
  }
  if (local == 0) finished_ = true;
  if (local == 0 && rank == 0 && !ps_home && !options_.export_dir.empty()) {
    STRATA_RETURN_IF_ERROR(ExportState());
  }
  return absl::OkStatus();
}

absl::Status GroupTrainer::ExportState() {
  std::string bytes;
  {
    absl::MutexLock lock(&state_mu_);
    bytes = SnapshotLocked(next_step_).SerializeAsString();
  }
  std::error_code ec;
  std::filesystem::create_directories(options_.export_dir, ec);
  const std::string path = options_.export_dir + "/final_state.pb";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", ec.message()));
  }
  logger_->Log(LogLevel::kInfo, "state_exported", {{"path", path}});
  return absl::OkStatus();
}

}  // namespace

absl::Status RunGroupTraining(CoordinatorClient* coordinator, Logger* logger,
                              MembershipAgent* agent,
                              const v1::JobStatus& status,
                              const GroupWorkerOptions& options) {
  GroupTrainer trainer(coordinator, logger, agent, options);
  return trainer.Run(status);
}

}  // namespace strata

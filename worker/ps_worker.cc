#include "worker/ps_worker.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "codec/spec_codec.h"
#include "common/gradient_encoding.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/group_worker.h"

namespace strata {

namespace {

// A PS variable of `def` with `optimizer`: SYNC over the job's sync
// replicas when the job's update is sync, else ASYNC.
v1::VariableSpec BaseSpec(const JobSpec& job, const VariableDef& def,
                          const OptimizerConfig& optimizer) {
  v1::VariableSpec spec;
  spec.set_name(def.name);
  spec.set_dtype(v1::DT_FLOAT32);
  for (int64_t d : def.shape) spec.add_shape(d);
  *spec.mutable_initializer() = InitializerToProto(def.init);
  *spec.mutable_optimizer() = OptimizerToProto(optimizer);
  if (job.strategy.update == "sync") {
    spec.mutable_update_mode()->set_kind(v1::UpdateMode::SYNC);
    spec.mutable_update_mode()->set_num_replicas(job.strategy.sync_replicas);
  }
  return spec;
}

}  // namespace

std::vector<v1::VariableSpec> PsVariableSpecs(const JobSpec& job,
                                              const Model& model) {
  std::vector<v1::VariableSpec> specs;
  for (const VariableDef& def : model.variables()) {
    v1::VariableSpec spec = BaseSpec(job, def, job.optimizer);
    if (job.strategy.update != "sync") {
      v1::UpdateMode* mode = spec.mutable_update_mode();
      if (job.strategy.staleness_lr == "inverse") {
        mode->set_scale_by_staleness(true);
        mode->set_staleness_tolerance(job.strategy.staleness_tolerance);
      }
      if (job.strategy.staleness_compensation != "none") {
        v1::DelayCompensation* dc = mode->mutable_delay_compensation();
        dc->set_lambda(job.strategy.dc_lambda);
        dc->set_adaptive(job.strategy.staleness_compensation == "dc_adaptive");
        dc->set_mean_square_decay(job.strategy.dc_mean_square_decay);
        dc->set_versions(job.strategy.dc_versions);
      }
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::vector<v1::VariableSpec> PsStateVariableSpecs(const JobSpec& job,
                                                   const Model& model) {
  std::vector<v1::VariableSpec> specs;
  OptimizerConfig add;
  add.type = OptimizerType::kAssignAdd;
  for (const VariableDef& def : model.state_variables()) {
    specs.push_back(BaseSpec(job, def, add));
  }
  return specs;
}

absl::Status LoadPulledState(const Model& model,
                             const std::vector<std::vector<float>>& pulled,
                             ModelWorkspace* workspace) {
  if (model.state_variables().empty()) return absl::OkStatus();
  return model.SetState(workspace, pulled);
}

absl::Status StateDeltas(const Model& model,
                         const std::vector<std::vector<float>>& pulled,
                         ModelWorkspace* workspace,
                         std::vector<std::vector<float>>* deltas) {
  if (model.state_variables().empty()) return absl::OkStatus();
  STRATA_ASSIGN_OR_RETURN(std::vector<std::vector<float>> now,
                          model.GetState(workspace));
  deltas->resize(now.size());
  for (size_t i = 0; i < now.size(); ++i) {
    (*deltas)[i].resize(now[i].size());
    for (size_t k = 0; k < now[i].size(); ++k) {
      (*deltas)[i][k] = now[i][k] - pulled[i][k];
    }
  }
  return absl::OkStatus();
}

absl::Status RetrySetup(absl::string_view what,
                        const std::function<absl::Status()>& attempt,
                        absl::Duration limit,
                        const std::function<bool()>& stopping,
                        Logger* logger) {
  const absl::Time give_up = absl::Now() + limit;
  absl::Duration pause = absl::Milliseconds(50);
  for (int tries = 1;; ++tries) {
    absl::Status s = attempt();
    const bool transient = s.code() == absl::StatusCode::kUnavailable ||
                           s.code() == absl::StatusCode::kDeadlineExceeded ||
                           s.code() == absl::StatusCode::kAborted;
    if (!transient || absl::Now() + pause >= give_up ||
        (stopping && stopping())) {
      return s;
    }
    logger->Log(LogLevel::kWarning, "setup_retry",
                {{"what", std::string(what)},
                 {"attempt", tries},
                 {"error", s.ToString()},
                 {"retry_in_ms", absl::ToInt64Milliseconds(pause)}});
    absl::SleepFor(pause);
    pause = std::min(absl::Seconds(1), pause * 2);
  }
}

absl::Status CheckPsJob(const JobSpec& job) {
  if (job.strategy.update == "sync" &&
      (job.checkpoint.every_steps > 0 || job.checkpoint.every_seconds > 0)) {
    return absl::FailedPreconditionError(
        "job.strategy.update: 'sync' with job.checkpoint is not supported yet "
        "by parameter_server (set checkpoint.every_steps and every_seconds "
        "to 0, or use 'async')");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PlacementPolicy::Shard>> PlaceFor(
    const JobSpec& job, const Shape& shape, int num_ps) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> policy,
                          PolicyFor(job));
  return policy->Place(shape, DType::kFloat32, num_ps);
}

PsWorker::PsWorker(Coordinator* coordinator, Logger* logger,
                   PsWorkerOptions options)
    : coordinator_(coordinator), logger_(logger), options_(std::move(options)) {}

bool PsWorker::Stopping() const {
  return options_.stop != nullptr && options_.stop->load();
}

absl::Status PsWorker::Run() {
  task_.set_role(options_.role);
  task_.set_index(options_.task_index);
  agent_ = std::make_unique<MembershipAgent>(coordinator_, task_, "",
                                             NewIncarnation(), logger_);
  STRATA_RETURN_IF_ERROR(agent_->Start());

  // Wait for a running job.
  v1::JobStatus job;
  while (true) {
    if (Stopping()) return absl::CancelledError("stopped");
    STRATA_ASSIGN_OR_RETURN(job, coordinator_->GetJob());
    if (job.state() == v1::JobStatus::RUNNING) break;
    if (job.state() == v1::JobStatus::SUCCEEDED ||
        job.state() == v1::JobStatus::FAILED) {
      // A finished job and no new one: nothing to do.
      agent_->Stop();
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (!options_.device.empty()) {
    // This worker's --device replaces the job's.
    nlohmann::json parsed =
        nlohmann::json::parse(job.job_json(), nullptr, false);
    if (parsed.is_object()) {
      parsed["device"] = options_.device;
      job.set_job_json(parsed.dump());
    }
  }
  {
    // Synchronous strategies train in groups (worker/group_worker.h).
    STRATA_ASSIGN_OR_RETURN(JobSpec spec, ParseJobString(job.job_json()));
    // A device this machine cannot use fails here, before any training.
    if (absl::Status usable = CheckDevice(
            spec.device,
            options_.device.empty() ? "job.device" : "--device");
        !usable.ok()) {
      agent_->Stop();
      return usable;
    }
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> policy,
                            PolicyFor(spec));
    if (policy->loop() == TrainingLoop::kSyncGroup) {
      GroupWorkerOptions group_options;
      group_options.host = options_.host;
      group_options.worker_port = options_.worker_port;
      group_options.advertise_host = options_.advertise_host;
      group_options.stop = options_.stop;
      group_options.export_dir = options_.export_dir;
      group_options.ps_security = options_.ps_security;
      group_options.worker_tls = options_.worker_tls;
      absl::Status s = RunGroupTraining(coordinator_, logger_, agent_.get(),
                                        job, group_options);
      agent_->Stop();
      return s;
    }
  }
  STRATA_RETURN_IF_ERROR(Setup(job));

  const int n = std::max(1, options_.steps_in_flight);
  // Async: a lease of four items per step thread, refilled below two;
  // reports go back after every step thread finished one (evaluations and
  // failures at once). Sync: one item queued at most and every report at
  // once, as one step at a time per thread: a step of a later aggregated
  // step can only wait (and time out) until the earlier ones are pushed,
  // and a dead worker's leases hold those back until its lease expires.
  WorkFeedOptions feed_options;
  if (job_.strategy.update == "sync") {
    feed_options.lease = 1;
    feed_options.report_every = 1;
    feed_options.low_water = 1;
  } else {
    feed_options.lease = std::min(64, 4 * n);
    feed_options.report_every = n;
    feed_options.low_water = 2 * n;
  }
  feed_ = std::make_unique<WorkFeed>(coordinator_, task_,
                                     agent_->incarnation(), feed_options);
  std::vector<StepContext> contexts(n);
  for (int i = 0; i < n; ++i) contexts[i].lane = i;
  for (StepContext& ctx : contexts) {
    for (size_t i = 0; i < sizes_.size(); ++i) {
      (i < num_trainable_ ? ctx.params : ctx.state).emplace_back(sizes_[i]);
      (i < num_trainable_ ? ctx.grads : ctx.state_deltas)
          .emplace_back(sizes_[i]);
    }
  }
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) {
    threads.emplace_back(
        [this, &contexts, &results, i] { results[i] = WorkLoop(&contexts[i]); });
  }
  results[0] = WorkLoop(&contexts[0]);
  for (auto& t : threads) t.join();
  feed_.reset();
  agent_->Stop();
  for (const absl::Status& r : results) STRATA_RETURN_IF_ERROR(r);
  return absl::OkStatus();
}

absl::Status PsWorker::WorkLoop(StepContext* ctx) {
  std::optional<v1::ReportWorkRequest> done;
  while (!Stopping()) {
    absl::StatusOr<v1::WorkItem> item = feed_->Next(std::move(done));
    done.reset();
    if (!item.ok()) {
      if (item.status().code() == absl::StatusCode::kNotFound) {
        // Declared failed or unknown after a coordinator restart: the agent
        // re-registers; ask again shortly (the reports stay queued).
        absl::SleepFor(absl::Milliseconds(200));
        continue;
      }
      return item.status();
    }
    v1::ReportWorkRequest report;
    *report.mutable_task() = task_;
    report.set_incarnation(agent_->incarnation());
    *report.mutable_item() = *item;
    // Values prefetched with a push serve only the step right after it.
    if (item->kind() != v1::WorkItem::TRAIN) ctx->prefetched = false;
    switch (item->kind()) {
      case v1::WorkItem::WAIT:
        // The feed already waited (WorkFeedOptions::max_wait).
        continue;
      case v1::WorkItem::DONE:
        logger_->Log(LogLevel::kInfo, "job_done", {});
        return absl::OkStatus();
      case v1::WorkItem::TRAIN: {
        absl::Status s = Train(*item, ctx);
        if (!s.ok()) {
          logger_->Log(LogLevel::kWarning, "step_failed",
                       {{"step", item->step()}, {"error", s.ToString()}});
          report.set_error(s.ToString());
          if (s.code() == absl::StatusCode::kNotFound) {
            // A PS restarted without a checkpoint: create the variables again.
            (void)CreateVariables();
          } else {
            absl::SleepFor(absl::Milliseconds(100));
          }
        } else {
          report.set_loss(ctx->stats.loss);
          report.set_accuracy(ctx->stats.accuracy);
          report.set_examples(ctx->stats.examples);
        }
        break;
      }
      case v1::WorkItem::EVALUATE: {
        double loss = 0, accuracy = 0;
        std::optional<double> auc;
        absl::Status s = EvaluateEpoch(*item, ctx, &loss, &accuracy, &auc);
        if (!s.ok()) {
          report.set_error(s.ToString());
          absl::SleepFor(absl::Milliseconds(100));
        } else {
          report.set_test_loss(loss);
          report.set_test_accuracy(accuracy);
          if (auc.has_value()) {
            report.set_has_test_auc(true);
            report.set_test_auc(*auc);
          }
        }
        break;
      }
      default:
        continue;
    }
    // Sent with the next call for more work (WorkFeed).
    done = std::move(report);
  }
  return absl::CancelledError("stopped");
}

absl::Status PsWorker::Setup(const v1::JobStatus& status) {
  STRATA_ASSIGN_OR_RETURN(job_, ParseJobString(status.job_json()));
  STRATA_RETURN_IF_ERROR(CheckPsJob(job_));
  STRATA_ASSIGN_OR_RETURN(Model model, BuildModelForJob(job_));
  model_ = std::make_unique<Model>(std::move(model));
  if (!job_.model.embeddings.empty()) {
    // Any batch of an epoch may come here: the splits are held in memory
    // (about 260 bytes an example), read once.
    STRATA_ASSIGN_OR_RETURN(EmbeddingModel embedding,
                            EmbeddingModel::Create(job_.model));
    embedding_ = std::make_unique<EmbeddingModel>(std::move(embedding));
    STRATA_ASSIGN_OR_RETURN(
        sparse_train_, LoadCriteo(job_.data.train.path, CriteoOptionsFor(job_),
                                  job_.data.limit_train));
    if (job_.data.has_test) {
      STRATA_ASSIGN_OR_RETURN(
          sparse_test_, LoadCriteo(job_.data.test.path, CriteoOptionsFor(job_),
                                   job_.data.limit_test));
      has_test_ = true;
    }
  } else {
    STRATA_ASSIGN_OR_RETURN(train_, LoadTrain(job_));
    if (job_.data.has_test) {
      STRATA_ASSIGN_OR_RETURN(test_, LoadTest(job_));
      has_test_ = true;
    }
  }
  STRATA_ASSIGN_OR_RETURN(v1::GetClusterSpecResponse spec,
                          coordinator_->GetClusterSpec());
  nlohmann::json cluster = nlohmann::json::parse(spec.tf_config(), nullptr,
                                                 false);
  std::vector<std::string> ps;
  if (cluster.is_object() && cluster.contains("cluster") &&
      cluster["cluster"].contains("ps")) {
    for (const auto& a : cluster["cluster"]["ps"]) ps.push_back(a);
  }
  if (ps.empty()) {
    return absl::FailedPreconditionError(
        "the cluster has no ps task; ParameterServerStrategy needs one");
  }
  PsClientOptions ps_options;
  ps_options.security = options_.ps_security;
  ps_options.shared_memory = options_.ps_shared_memory;
  // The job parser accepted the name (job.strategy.gradient_compression).
  ps_options.gradient_encoding =
      ParseGradientEncoding(job_.strategy.gradient_compression)
          .value_or(GradientEncoding::kNone);
  if (job_.strategy.update == "sync") {
    // A sync pull waits for earlier aggregated steps; if one of them is held
    // by a worker that died, give up soon and take other work, so that this
    // thread can run the re-queued step once the lease expires.
    ps_options.deadline = absl::Seconds(2);
  }
  cluster_ = PsCluster::Connect(ps, ps_options);
  specs_ = PsVariableSpecs(job_, *model_);
  num_trainable_ = specs_.size();
  for (v1::VariableSpec& spec : PsStateVariableSpecs(job_, *model_)) {
    specs_.push_back(std::move(spec));
  }
  names_.clear();
  sizes_.clear();
  for (const v1::VariableSpec& spec : specs_) {
    names_.push_back(spec.name());
    sizes_.push_back(
        NumElements(Shape(spec.shape().begin(), spec.shape().end())));
  }
  // A ps task restarting meanwhile is waited for.
  STRATA_RETURN_IF_ERROR(RetrySetup(
      "creating the job's variables", [this] { return CreateVariables(); },
      kSetupRetryLimit, [this] { return Stopping(); }, logger_));
  logger_->Log(LogLevel::kInfo, "job_setup",
               {{"job", status.job_id()},
                {"ps", ps},
                {"train_examples", train_size()},
                {"embeddings", static_cast<int64_t>(job_.model.embeddings.size())},
                {"device", model_->device()},
                {"parameters", model_->num_parameters()}});
  return absl::OkStatus();
}

absl::Status PsWorker::CreateVariables() {
  for (const v1::VariableSpec& spec : specs_) {
    Shape shape(spec.shape().begin(), spec.shape().end());
    STRATA_ASSIGN_OR_RETURN(std::vector<PlacementPolicy::Shard> shards,
                            PlaceFor(job_, shape, cluster_->num_ps()));
    STRATA_RETURN_IF_ERROR(cluster_->CreateVariableOn(spec, shards).status());
  }
  if (embedding_ != nullptr) {
    STRATA_RETURN_IF_ERROR(
        PsEmbeddingTables::CreateTables(*cluster_, job_.model, job_.seed));
  }
  return absl::OkStatus();
}

absl::Status PsWorker::Train(const v1::WorkItem& item, StepContext* ctx) {
  if (item.epoch() != ctx->cached_epoch) {
    ctx->permutation =
        EpochPermutation(train_size(), job_.shuffle_seed, item.epoch());
    ctx->cached_epoch = item.epoch();
  }
  // Async: every step is its own update. Sync: step s is replica
  // s % R of aggregated step s / R, which reads the variables after every
  // earlier aggregated step was applied.
  const bool sync = job_.strategy.update == "sync";
  const int64_t replicas = sync ? job_.strategy.sync_replicas : 1;
  const int64_t group = item.step() / replicas;
  PullOptions pull;
  if (sync) pull.min_version = group;
  std::vector<void*> dsts;
  for (auto& p : ctx->params) dsts.push_back(p.data());
  for (auto& p : ctx->state) dsts.push_back(p.data());
  // The newest values: from the PS tasks' mirrors in shared memory where
  // they are on this host, else pulled (or, async, came back with this
  // context's previous push).
  if (!ctx->prefetched) {
    STRATA_RETURN_IF_ERROR(cluster_->PullLatest(ctx->lane, names_, dsts, pull));
  }
  ctx->prefetched = false;
  STRATA_RETURN_IF_ERROR(LoadPulledState(*model_, ctx->state, &ctx->workspace));
  if (embedding_ != nullptr) {
    STRATA_RETURN_IF_ERROR(SparseStep(item, ctx));
  } else {
    GatherBatch(train_, ctx->permutation, item.batch(), job_.batch_size,
                &ctx->batch_x, &ctx->batch_y);
    const int64_t batch = static_cast<int64_t>(ctx->batch_y.size());
    STRATA_ASSIGN_OR_RETURN(
        ctx->stats,
        model_->TrainStep(
            Model::Views(ctx->params), ctx->batch_x.data(),
            ctx->batch_y.data(), batch,
            job_.seed * 1000003 + static_cast<uint64_t>(item.step()),
            &ctx->grads, &ctx->workspace));
  }
  STRATA_RETURN_IF_ERROR(
      StateDeltas(*model_, ctx->state, &ctx->workspace, &ctx->state_deltas));
  std::vector<const void*> grads;
  for (auto& g : ctx->grads) grads.push_back(g.data());
  for (auto& g : ctx->state_deltas) grads.push_back(g.data());
  // Tagged by step, not by worker: whoever runs a step, it is applied once.
  if (!sync) {
    // Where no task is read through mirrors, the push brings the values
    // back in the same frame (one round trip per step, not two).
    bool mirrors = false;
    for (int ps = 0; ps < cluster_->num_ps(); ++ps) {
      mirrors = mirrors || cluster_->ReadsMirror(ps);
    }
    STRATA_RETURN_IF_ERROR(cluster_->PushPullMany(
        ctx->lane, names_, grads, PushTag{item.job_id(), 0, item.step()},
        mirrors ? std::vector<void*>() : dsts));
    ctx->prefetched = !mirrors;
    return absl::OkStatus();
  }
  const int64_t replica = item.step() % replicas;
  STRATA_RETURN_IF_ERROR(
      cluster_->PushMany(names_, grads, PushTag{item.job_id(), replica, group})
          .status());
  // The job's last step may end a partial group: it stands in for the
  // missing replicas so that the group is applied.
  const int64_t total = static_cast<int64_t>(job_.epochs) *
                        StepsPerEpoch(train_size(), job_.batch_size);
  if (item.step() == total - 1) {
    for (int64_t r = replica + 1; r < replicas; ++r) {
      STRATA_RETURN_IF_ERROR(
          cluster_->PushMany(names_, grads, PushTag{item.job_id(), r, group})
              .status());
    }
  }
  return absl::OkStatus();
}

absl::Status PsWorker::SparseStep(const v1::WorkItem& item,
                                  StepContext* ctx) {
  const CriteoBatch& data = sparse_train_;
  const int64_t first = item.batch() * job_.batch_size;
  const int64_t n = std::max<int64_t>(
      0, std::min(job_.batch_size, data.size - first));
  constexpr int64_t kDense = kCriteoDenseColumns;
  constexpr int64_t kIds = kCriteoCategoricalColumns;
  const bool multi_hot = !data.categorical_offsets.empty();
  ctx->dense.resize(static_cast<size_t>(n * kDense));
  ctx->batch_y.resize(static_cast<size_t>(n));
  if (multi_hot) {
    ctx->ids.clear();
    ctx->id_offsets.assign(1, 0);
  } else {
    ctx->ids.resize(static_cast<size_t>(n * kIds));
  }
  for (int64_t k = 0; k < n; ++k) {
    const int64_t e = ctx->permutation[static_cast<size_t>(first + k)];
    std::copy_n(data.dense.begin() + e * kDense, kDense,
                ctx->dense.begin() + k * kDense);
    if (multi_hot) {
      // The example's fields' ids, their offsets rebased onto ctx->ids.
      const int64_t* o = data.categorical_offsets.data() + e * kIds;
      const int64_t base = static_cast<int64_t>(ctx->ids.size()) - o[0];
      ctx->ids.insert(ctx->ids.end(), data.categorical.begin() + o[0],
                      data.categorical.begin() + o[kIds]);
      for (int64_t c = 1; c <= kIds; ++c) {
        ctx->id_offsets.push_back(base + o[c]);
      }
    } else {
      std::copy_n(data.categorical.begin() + e * kIds, kIds,
                  ctx->ids.begin() + k * kIds);
    }
    ctx->batch_y[static_cast<size_t>(k)] =
        static_cast<int32_t>(data.labels[static_cast<size_t>(e)]);
  }
  CategoricalIds ids;
  ids.ids = ctx->ids.data();
  if (multi_hot) ids.offsets = ctx->id_offsets.data();
  if (ctx->tables == nullptr) {
    ctx->tables =
        std::make_unique<PsEmbeddingTables>(cluster_.get(), item.job_id());
  }
  STRATA_RETURN_IF_ERROR(embedding_->Gather(*ctx->tables, ctx->dense.data(),
                                            ids, n, /*train=*/true,
                                            &ctx->batch_x, &ctx->plan));
  ctx->x_grad.resize(ctx->batch_x.size());
  STRATA_ASSIGN_OR_RETURN(
      ctx->stats,
      model_->TrainStep(Model::Views(ctx->params), ctx->batch_x.data(),
                        ctx->batch_y.data(), n,
                        job_.seed * 1000003 + static_cast<uint64_t>(item.step()),
                        &ctx->grads, &ctx->workspace, ctx->x_grad.data()));
  embedding_->Scatter(ctx->plan, ctx->x_grad.data(), &ctx->table_grads);
  // Row updates apply as they arrive (under sync too: the aggregation is
  // the dense variables'), once per step.
  return ctx->tables->PushAll(ctx->table_grads, item.step());
}

absl::Status PsWorker::EvaluateEpoch(const v1::WorkItem& item,
                                     StepContext* ctx, double* loss,
                                     double* accuracy,
                                     std::optional<double>* auc) {
  if (!has_test_) {
    *loss = 0;
    *accuracy = 0;
    return absl::OkStatus();
  }
  std::vector<void*> dsts;
  for (auto& p : ctx->params) dsts.push_back(p.data());
  for (auto& p : ctx->state) dsts.push_back(p.data());
  STRATA_RETURN_IF_ERROR(cluster_->PullLatest(ctx->lane, names_, dsts));
  // The moving statistics as the PS holds them (every worker's updates).
  STRATA_RETURN_IF_ERROR(LoadPulledState(*model_, ctx->state, &ctx->workspace));
  if (embedding_ != nullptr) {
    if (ctx->tables == nullptr) {
      ctx->tables =
          std::make_unique<PsEmbeddingTables>(cluster_.get(), item.job_id());
    }
    const CriteoBatch& data = sparse_test_;
    BinaryMetrics metrics;
    double loss_sum = 0, correct = 0;
    std::vector<float> probabilities;
    constexpr int64_t kBatch = 4096;
    for (int64_t first = 0; first < data.size; first += kBatch) {
      const int64_t n = std::min(kBatch, data.size - first);
      STRATA_RETURN_IF_ERROR(embedding_->Gather(
          *ctx->tables, data.dense.data() + first * kCriteoDenseColumns,
          data.Categorical(first), n,
          /*train=*/false, &ctx->batch_x, &ctx->plan));
      STRATA_RETURN_IF_ERROR(model_->Predict(Model::Views(ctx->params),
                                             ctx->batch_x.data(), n,
                                             &probabilities, &ctx->workspace));
      const absl::Span<const float> labels =
          absl::MakeConstSpan(data.labels).subspan(
              static_cast<size_t>(first), static_cast<size_t>(n));
      STRATA_RETURN_IF_ERROR(metrics.Add(probabilities, labels));
      for (int64_t i = 0; i < n; ++i) {
        const double p = std::clamp<double>(
            probabilities[static_cast<size_t>(i)], 1e-7, 1 - 1e-7);
        const double y = labels[static_cast<size_t>(i)];
        loss_sum += -(y * std::log(p) + (1 - y) * std::log(1 - p));
        correct += (p >= 0.5) == (y >= 0.5) ? 1 : 0;
      }
    }
    const double count = static_cast<double>(std::max<int64_t>(data.size, 1));
    *loss = loss_sum / count;
    *accuracy = correct / count;
    *auc = metrics.Auc();
    logger_->Log(LogLevel::kInfo, "evaluated",
                 {{"epoch", item.epoch()},
                  {"test_loss", *loss},
                  {"test_accuracy", *accuracy},
                  {"test_auc", **auc}});
    return absl::OkStatus();
  }
  STRATA_ASSIGN_OR_RETURN(
      StepStats stats,
      model_->Evaluate(Model::Views(ctx->params), test_, 1024,
                       &ctx->workspace));
  *loss = stats.loss;
  *accuracy = stats.accuracy;
  logger_->Log(LogLevel::kInfo, "evaluated",
               {{"epoch", item.epoch()},
                {"test_loss", stats.loss},
                {"test_accuracy", stats.accuracy}});
  return absl::OkStatus();
}

}  // namespace strata

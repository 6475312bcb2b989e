// GroupTrainer's training steps (worker/group_trainer_internal.h).
#include "worker/group_trainer_internal.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker/ps_worker.h"

namespace strata {
namespace worker_internal {

bool GroupTrainer::EvalDue(int epoch) const {
  const int every = job_.evaluation.every_epochs;
  return every > 0 && ((epoch + 1) % every == 0 || epoch + 1 == job_.epochs);
}

absl::Status GroupTrainer::EvaluateMissedEpochs(const v1::GroupAssignment& a) {
  // Epochs whose steps all completed but whose evaluation the coordinator
  // lacks (lost with a member, or with a coordinator restart, which may
  // also ignore a report that came before the epoch's steps were on record
  // again): the result this task computed is sent again; else the epoch
  // is evaluated if the model is still that epoch's (the group starts at
  // its end), else reported as missing, never with a later model's figures.
  // Epochs past the group's start were rewound (a restore): their figures
  // here are of a run that no longer counts.
  for (auto it = evaluations_.begin(); it != evaluations_.end();) {
    if ((static_cast<int64_t>(it->first) + 1) * steps_per_epoch_ >
        a.start_step()) {
      it = evaluations_.erase(it);
    } else {
      ++it;
    }
  }
  STRATA_ASSIGN_OR_RETURN(v1::JobStatus job, coordinator_->GetJob());
  for (const v1::EpochResult& e : job.epochs()) {
    if (e.steps() != steps_per_epoch_ || e.evaluated() ||
        !EvalDue(e.epoch())) {
      continue;
    }
    const int epoch = e.epoch();
    auto kept = evaluations_.find(epoch);
    if (kept != evaluations_.end()) {
      STRATA_RETURN_IF_ERROR(SendEvaluation(a, epoch, kept->second.first,
                                            kept->second.second,
                                            /*missing=*/false));
      continue;
    }
    const bool model_of_epoch =
        a.start_step() == (static_cast<int64_t>(epoch) + 1) * steps_per_epoch_;
    if (!model_of_epoch) {
      logger_->Log(LogLevel::kWarning, "evaluation_missing",
                   {{"epoch", epoch}, {"group_start_step", a.start_step()}});
      STRATA_RETURN_IF_ERROR(SendEvaluation(a, epoch, 0, 0, /*missing=*/true));
      continue;
    }
    Replica& rep = replicas_[0];
    if (policy_->variable_home() == VariableHome::kPsTasks) {
      STRATA_RETURN_IF_ERROR(PullAtLeast(a, &rep, a.start_step()));
    }
    STRATA_RETURN_IF_ERROR(EvaluateAndReport(a, epoch, &rep));
  }
  return absl::OkStatus();
}

absl::Status GroupTrainer::PullAtLeast(const v1::GroupAssignment& a,
                                       Replica* rep, int64_t version) {
  std::vector<void*> dsts;
  for (auto& p : rep->params) dsts.push_back(p.data());
  std::vector<std::string> names = layout_.names;
  for (size_t i = 0; i < state_names_.size(); ++i) {
    names.push_back(state_names_[i]);
    dsts.push_back(rep->state[i].data());
  }
  PullOptions pull;
  pull.min_version = version;
  const absl::Time until = absl::Now() + collective_options_.timeout;
  while (true) {
    absl::Status s = cluster_->PullMany(names, dsts, pull);
    if (s.ok()) {
      // The store's moving statistics for the next step or evaluation.
      return LoadPulledState(ModelOf(*rep), rep->state, &rep->workspace);
    }
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

void GroupTrainer::NotePulled(int64_t version) {
  absl::MutexLock lock(&state_mu_);
  ps_pulled_ = std::max(ps_pulled_, version);
  if (version > 0 && version % steps_per_epoch_ == 0) {
    const int epoch = static_cast<int>(version / steps_per_epoch_ - 1);
    if (epoch_ended_.count(epoch) == 0) NoteEpochEndedLocked(epoch);
  }
}

void GroupTrainer::NoteEpochEndedLocked(int epoch) {
  epoch_ended_[epoch] = absl::Now();
  if (epoch_ended_.size() > kEpochEndsKept) {
    epoch_ended_.erase(epoch_ended_.begin());
  }
}

absl::Status GroupTrainer::ApplyLocal(Replica* rep, int64_t step) {
  for (size_t i = 0; i < layout_.names.size(); ++i) {
    std::vector<void*> slots;
    for (auto& s : rep->slots[i]) slots.push_back(s.data());
    STRATA_RETURN_IF_ERROR(optimizer_->ApplyDense(
        DType::kFloat32, step, rep->params[i].data(), slots,
        rep->flat.data() + offsets_[i], layout_.sizes[i]));
  }
  return absl::OkStatus();
}

int64_t GroupTrainer::ReportGeneration(const v1::GroupAssignment& a) const {
  // The group's own generation: the membership agent's is refreshed by
  // heartbeats only, and lagged up to a second behind a group formed after
  // a PS restore, whose reports were then dropped as from before it.
  return a.generation() > 0 ? a.generation() : agent_->generation();
}

void GroupTrainer::NoteGroup(int64_t group) {
  int64_t seen = newest_group_.load();
  while (group > seen && !newest_group_.compare_exchange_weak(seen, group)) {
  }
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
  item->set_generation(ReportGeneration(a));
  req.set_loss(loss);
  req.set_accuracy(accuracy);
  req.set_examples(examples);
  // Sent by the reporter's thread: the step does not wait for it.
  reporter_->Add(std::move(req));
}

v1::ReportWorkRequest GroupTrainer::EvaluationReport(
    const v1::GroupAssignment& a, int epoch, double loss, double accuracy,
    bool missing) const {
  v1::ReportWorkRequest req;
  *req.mutable_task() = agent_->task();
  req.set_incarnation(agent_->incarnation());
  v1::WorkItem* item = req.mutable_item();
  item->set_kind(v1::WorkItem::EVALUATE);
  item->set_epoch(epoch);
  item->set_job_id(a.job_id());
  item->set_generation(ReportGeneration(a));
  req.set_test_loss(loss);
  req.set_test_accuracy(accuracy);
  req.set_evaluation_missing(missing);
  return req;
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
  // Kept: sent again by EvaluateMissedEpochs when the coordinator lacks it.
  evaluations_[epoch] = {loss, accuracy};
  // Behind the epoch's step reports, on the reporter's thread.
  reporter_->Add(EvaluationReport(a, epoch, loss, accuracy, false));
  logger_->Log(LogLevel::kInfo, "evaluated",
               {{"epoch", epoch}, {"test_loss", loss},
                {"test_accuracy", accuracy}});
  return absl::OkStatus();
}

absl::Status GroupTrainer::SendEvaluation(const v1::GroupAssignment& a,
                                          int epoch, double loss,
                                          double accuracy, bool missing) {
  absl::StatusOr<v1::ReportWorkResponse> resp = coordinator_->ReportWork(
      EvaluationReport(a, epoch, loss, accuracy, missing));
  if (!resp.ok()) return resp.status();
  return absl::OkStatus();
}

absl::Status GroupTrainer::ReplicaLoop(const v1::GroupAssignment& a, int local,
                                       GradientReducer* reducer) {
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
    if (reducer == nullptr) return;
    reducer->Abort(absl::AbortedError(
        absl::StrCat("rank ", rank, " left group ", a.group(), ": ", why)));
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
      NotePulled(step);
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
      std::vector<std::string> names = layout_.names;
      if (!state_names_.empty()) {
        if (n > 0) {
          STRATA_RETURN_IF_ERROR(StateDeltas(ModelOf(rep), rep.state,
                                             &rep.workspace,
                                             &rep.state_deltas));
        } else {
          for (auto& d : rep.state_deltas) std::fill(d.begin(), d.end(), 0.0f);
        }
        for (size_t i = 0; i < state_names_.size(); ++i) {
          for (float& v : rep.state_deltas[i]) v *= scale;
          names.push_back(state_names_[i]);
          grads.push_back(rep.state_deltas[i].data());
        }
      }
      absl::StatusOr<int64_t> pushed = cluster_->PushMany(
          names, grads, PushTag{tag_job, rank, step, a.group(), world});
      // ABORTED: the store already applied this step (a re-run after a
      // regroup) or a newer group owns it; the next pull tells.
      if (!pushed.ok() && pushed.status().code() != absl::StatusCode::kAborted) {
        return pushed.status();
      }
      last = stats;
      last_examples = batch;
      continue;
    }

    // Sum over the group, then every replica applies the same update.
    float* flat = rep.flat.data();
    for (size_t i = 0; i < layout_.names.size(); ++i) {
      const float* g = rep.grads[i].data();
      float* dst = flat + offsets_[i];
      for (int64_t k = 0; k < layout_.sizes[i]; ++k) dst[k] = g[k] * share;
    }
    flat[num_params_] = static_cast<float>(stats.loss) * share;
    flat[num_params_ + 1] = static_cast<float>(stats.accuracy) * share;
    if (num_state_ > 0) {
      // The moving statistics this replica's batch gave, share-weighted:
      // their sum over the group is the update of the global batch.
      STRATA_ASSIGN_OR_RETURN(std::vector<std::vector<float>> state,
                              ModelOf(rep).GetState(&rep.workspace));
      float* dst = flat + num_params_ + 2;
      for (const std::vector<float>& v : state) {
        for (float x : v) *dst++ = x * share;
      }
    }
    STRATA_ASSIGN_OR_RETURN(
        const GradientReducer::Outcome outcome,
        reducer->Reduce(local, step, absl::MakeSpan(rep.flat)));
    if (outcome == GradientReducer::Outcome::kGroupReplaced) {
      return absl::OkStatus();
    }
    if (num_state_ > 0) {
      std::vector<std::vector<float>> state;
      const float* src = flat + num_params_ + 2;
      for (const VariableDef& def : ModelOf(rep).state_variables()) {
        const int64_t n = NumElements(def.shape);
        state.emplace_back(src, src + n);
        src += n;
      }
      STRATA_RETURN_IF_ERROR(
          ModelOf(rep).SetState(&rep.workspace, std::move(state)));
    }
    if (local == 0) {
      // Replica 0's state is what others copy: update it under the lock.
      absl::MutexLock lock(&state_mu_);
      STRATA_RETURN_IF_ERROR(ApplyLocal(&rep, step));
      next_step_ = step + 1;
      if (next_step_ % steps_per_epoch_ == 0) {
        NoteEpochEndedLocked(static_cast<int>(step / steps_per_epoch_));
      }
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
    NotePulled(total_steps_);
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

}  // namespace worker_internal
}  // namespace strata

// The group trainer behind RunGroupTraining (worker/group_worker.h), shared
// by its two source files: group_worker.cc (setup, joining groups, the
// replicas' state and its copies, the gradient reducer of each group) and
// group_replica_loop.cc (a replica's training steps, evaluations and
// reports to the coordinator).
//
// Thread-safety: Run is called once, from one thread; it runs a group's
// local replicas on threads of their own (ReplicaLoop), which share the
// immutable job setup and touch replica 0's state only under state_mu_
// (read by the WorkerService's state provider on gRPC threads).
// Ownership: borrows the coordinator, logger and agent; owns the rest.
#ifndef STRATA_WORKER_GROUP_TRAINER_INTERNAL_H_
#define STRATA_WORKER_GROUP_TRAINER_INTERNAL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "client/ps_cluster.h"
#include "collective/collective.h"
#include "collective/worker_service.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "kernels/optimizers.h"
#include "strata/v1/coordinator.pb.h"
#include "worker/dataset.h"
#include "worker/gradient_reducer.h"
#include "worker/group_reporter.h"
#include "worker/group_worker.h"
#include "worker/model.h"
#include "worker/replica_state.h"

namespace strata {
namespace worker_internal {

// Trains one job in groups (see RunGroupTraining).
class GroupTrainer {
 public:
  GroupTrainer(Coordinator* coordinator, Logger* logger,
               MembershipAgent* agent, GroupWorkerOptions options)
      : coordinator_(coordinator),
        logger_(logger),
        agent_(agent),
        options_(std::move(options)),
        file_system_(options_.file_system != nullptr ? options_.file_system
                                                     : LocalFileSystem()) {}

  absl::Status Run(const v1::JobStatus& status);

 private:
  // One replica's model state and step buffers.
  struct Replica {
    std::vector<std::vector<float>> params;
    std::vector<std::vector<std::vector<float>>> slots;  // [variable][slot]
    std::vector<std::vector<float>> grads;
    // P gradients, then loss and accuracy, then the model's new state
    // (BatchNormalization's moving statistics), each weighted by the
    // replica's share of the batch.
    std::vector<float> flat;
    // Variables on PS tasks (central_storage): the model's state as pulled
    // and the changes a step made to it.
    std::vector<std::vector<float>> state;
    std::vector<std::vector<float>> state_deltas;
    ModelWorkspace workspace;
    int cached_epoch = -1;
    std::vector<int64_t> permutation;
    std::vector<float> x;
    std::vector<int32_t> y;
  };

  absl::Status Setup(const v1::JobStatus& status);
  // Connects to the cluster's PS tasks and creates what the policy keeps
  // there (the variables, or the gradient-sum variable of the "ps"
  // collective).
  absl::Status ConnectPs();
  // Creates what the policy keeps on the PS tasks for a group starting at
  // `start_step` (idempotent): the reduction variable of the "ps"
  // collective (at that step), or the model's variables when the group
  // starts from the beginning (a restarted ps task restored without a
  // checkpoint: the coordinator rewound the job to step 0).
  absl::Status CreatePsVariables(int64_t start_step);
  // Mirrored with job.device cuda[:N]: one replica per GPU from N on (or
  // job.strategy.replicas of them), checked before anything is loaded.
  absl::Status ChooseGpus();
  absl::StatusOr<v1::GroupAssignment> Join(int64_t after_group);
  // Trains the steps of one group. OK when the job's steps are done or a
  // newer group was announced (NewerGroup); an error when a collective,
  // the PS or the state copy failed (the caller forms a new group).
  absl::Status RunGroup(const v1::GroupAssignment& a);
  // The group's gradient reducer as the policy's backend says; null when
  // the variables live on PS tasks (the store applies the gradients).
  absl::StatusOr<std::unique_ptr<GradientReducer>> MakeReducer(
      const v1::GroupAssignment& a);
  absl::Status ReplicaLoop(const v1::GroupAssignment& a, int local,
                           GradientReducer* reducer);
  absl::Status PrepareState(const v1::GroupAssignment& a);
  // Copies the state of the group's source rank into replica 0.
  absl::Status CopyState(const v1::GroupAssignment& a);
  void InitializeState() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  v1::WorkerState SnapshotLocked(int64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  absl::Status ApplyLocal(Replica* rep, int64_t step);
  // Writes replica 0's state to options_.export_dir/final_state.pb.
  absl::Status ExportState();
  // Pulls the PS variables at version >= `version` (central_storage),
  // giving up early when a newer group is announced.
  absl::Status PullAtLeast(const v1::GroupAssignment& a, Replica* rep,
                           int64_t version);
  // Variables on ps tasks: the store reached `version` (ps_pulled_, and
  // when an epoch's last step was seen applied).
  void NotePulled(int64_t version);
  // Records that the state finished `epoch` now (epoch_ended_).
  void NoteEpochEndedLocked(int epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  // The generation a report of group `a` carries.
  int64_t ReportGeneration(const v1::GroupAssignment& a) const;
  // Queues step `step`'s report (sent by reporter_).
  void Report(const v1::GroupAssignment& a, int64_t step, double loss,
              double accuracy, int64_t examples);
  // Records a newer group id seen in an answer.
  void NoteGroup(int64_t group);
  v1::ReportWorkRequest EvaluationReport(const v1::GroupAssignment& a,
                                         int epoch, double loss,
                                         double accuracy, bool missing) const;
  absl::Status EvaluateAndReport(const v1::GroupAssignment& a, int epoch,
                                 Replica* rep);
  absl::Status EvaluateMissedEpochs(const v1::GroupAssignment& a);
  // Reports epoch `epoch`'s evaluation (or that it is missing) and waits
  // for the answer.
  absl::Status SendEvaluation(const v1::GroupAssignment& a, int epoch,
                              double loss, double accuracy, bool missing);
  bool EvalDue(int epoch) const;
  bool NewerGroup(int64_t group) const {
    return std::max(newest_group_.load(), agent_->group()) > group;
  }
  bool Stopping() const {
    return options_.stop != nullptr && options_.stop->load();
  }
  void Pause(absl::Duration d) const { absl::SleepFor(d); }

  Coordinator* const coordinator_;
  Logger* const logger_;
  MembershipAgent* const agent_;
  const GroupWorkerOptions options_;
  FileSystem* const file_system_;

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
  // The variables' names and sizes, and the optimizer's slot names.
  StateLayout layout_;
  std::vector<int64_t> offsets_;
  int64_t num_params_ = 0;
  // Floats of the model's non-trainable state, reduced after the loss and
  // accuracy (the replicas' moving statistics averaged every step, as
  // tf.distribute's mirrored strategies average them).
  int64_t num_state_ = 0;
  // Variables on PS tasks: the state variables' names (after layout_'s).
  std::vector<std::string> state_names_;
  collective::CollectiveOptions collective_options_;

  std::unique_ptr<PsCluster> cluster_;
  std::unique_ptr<collective::WorkerServer> server_;
  // Mirrored on GPUs (job.device cuda): replica i all-reduces on GPU
  // gpus_[i] (through a NCCL reducer per group).
  std::vector<int> gpus_;
  std::vector<Replica> replicas_;

  // Replica 0's state (the one others copy), guarded for the state server.
  mutable absl::Mutex state_mu_;
  // Replicas hold model state.
  bool have_state_ ABSL_GUARDED_BY(state_mu_) = false;
  // The first step the state has not applied.
  int64_t next_step_ ABSL_GUARDED_BY(state_mu_) = -1;
  // When the state finished its newest epochs (sent with JoinGroup: an
  // epoch whose reports were lost is dated by it), at most kEpochEndsKept.
  static constexpr size_t kEpochEndsKept = 8;
  std::map<int, absl::Time> epoch_ended_ ABSL_GUARDED_BY(state_mu_);
  // Variables on ps tasks: the newest version pulled in the current group
  // (-1: none), sent as JoinGroupRequest.next_step.
  int64_t ps_pulled_ ABSL_GUARDED_BY(state_mu_) = -1;
  // The group the snapshot below was taken for.
  int64_t snapshot_group_ ABSL_GUARDED_BY(state_mu_) = 0;
  v1::WorkerState snapshot_ ABSL_GUARDED_BY(state_mu_);

  // The evaluations computed here, each with its epoch's model (epoch ->
  // test loss, accuracy). Touched by the evaluating replica's thread and by
  // Run's between groups, never at once.
  std::map<int, std::pair<double, double>> evaluations_;

  std::atomic<int64_t> newest_group_{0};
  bool finished_ = false;
  // Step and evaluation reports, sent in order by a thread of its own (made
  // in Run; destroyed first: its thread updates newest_group_).
  std::unique_ptr<GroupReporter> reporter_;
};

}  // namespace worker_internal
}  // namespace strata

#endif  // STRATA_WORKER_GROUP_TRAINER_INTERNAL_H_

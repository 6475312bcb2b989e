// The worker's training loop under ParameterServerStrategy: take a step from
// the coordinator, pull the variables from the PS tasks, compute the batch
// gradient, push it (tagged with the step, so a step re-run after a failure
// is applied once), report.
#ifndef STRATA_WORKER_PS_WORKER_H_
#define STRATA_WORKER_PS_WORKER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "client/ps_cluster.h"
#include "common/logging.h"
#include "worker/dataset.h"
#include "job/job.h"
#include "worker/criteo_data.h"
#include "worker/embedding_model.h"
#include "worker/model.h"
#include "worker/ps_embedding_tables.h"
#include "worker/work_feed.h"

namespace strata {

struct PsWorkerOptions {
  int task_index = 0;
  std::string role = "worker";
  // Ends Run() early when set (signal handlers, tests).
  const std::atomic<bool>* stop = nullptr;
  // Steps this worker runs concurrently (each on its own thread with its
  // own buffers), so that one step's RPCs overlap another's compute, as
  // ClusterCoordinator keeps several closures in flight per worker.
  int steps_in_flight = 2;
  // Exchange bytes with PS tasks on this host through shared memory
  // (PsCluster::PushPullMany).
  bool ps_shared_memory = true;
  // Synchronous strategies: where this task's WorkerService listens.
  std::string host = "127.0.0.1";
  int worker_port = 0;
  // See GroupWorkerOptions::advertise_host.
  std::string advertise_host;
  // See GroupWorkerOptions::export_dir.
  std::string export_dir;
  // See GroupWorkerOptions::ps_security and worker_tls.
  ClientSecurity ps_security;
  TlsOptions worker_tls;
  // Where to compute ("cpu", "cuda", "cuda:N"); empty: the job's "device".
  // When set it replaces the job's device for this worker.
  std::string device;
};

// The variable specs a job places on the PS tasks: one per model variable,
// with the job's optimizer and update mode.
std::vector<v1::VariableSpec> PsVariableSpecs(const JobSpec& job,
                                              const Model& model);
// The specs of the model's non-trainable state (BatchNormalization's moving
// statistics), held on the PS tasks as tf.distribute's
// ParameterServerStrategy holds them: an assign_add variable each, to which
// a worker pushes the change its step made (new - pulled value); sync
// updates average the changes of a step's replicas. Checkpointed and
// restored with the other variables.
std::vector<v1::VariableSpec> PsStateVariableSpecs(const JobSpec& job,
                                                   const Model& model);
// Pulled state values (views) into `workspace` before a step; the step's
// changes (new - pulled) into *deltas after it.
absl::Status LoadPulledState(const Model& model,
                             const std::vector<std::vector<float>>& pulled,
                             ModelWorkspace* workspace);
absl::Status StateDeltas(const Model& model,
                         const std::vector<std::vector<float>>& pulled,
                         ModelWorkspace* workspace,
                         std::vector<std::vector<float>>* deltas);

// Checks what ParameterServerStrategy supports of a valid job. Errors:
// FAILED_PRECONDITION for sync updates combined with checkpoints (the
// coordinator's checkpoint drain can wait on a pull that waits for a step
// not yet handed out).
absl::Status CheckPsJob(const JobSpec& job);

// The job's policy's placement of a variable over `num_ps` tasks: its
// axis-0 slices and the task of each (PlacementPolicy::Place).
absl::StatusOr<std::vector<PlacementPolicy::Shard>> PlaceFor(
    const JobSpec& job, const Shape& shape, int num_ps);

// How long a worker's set-up waits for a restarting ps task.
inline constexpr absl::Duration kSetupRetryLimit = absl::Seconds(120);

// Runs `attempt` (a set-up call to the PS tasks, e.g. creating the job's
// variables) again while it fails as a ps task that is restarting does
// (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED), pausing between tries (50 ms
// doubling to 1 s), for up to `limit` or until `stopping` says so. Returns
// its last status; `what` names it in the log lines of the retries.
absl::Status RetrySetup(absl::string_view what,
                        const std::function<absl::Status()>& attempt,
                        absl::Duration limit,
                        const std::function<bool()>& stopping, Logger* logger);

// Runs one worker task until the coordinator says DONE. Not thread-safe
// (one per task); several may run as threads in one process.
class PsWorker {
 public:
  PsWorker(Coordinator* coordinator, Logger* logger,
           PsWorkerOptions options);

  // Registers, waits for a job, trains, returns when the job is over.
  // Errors include FAILED_PRECONDITION when the job's device (or
  // options.device) is a CUDA device this machine cannot use; the job is
  // not started then.
  absl::Status Run();

 private:
  // Buffers of one in-flight step.
  struct StepContext {
    // This context's lane in PsCluster::PushPullMany and PullLatest.
    int lane = 0;
    std::vector<std::vector<float>> params;
    // `params` came back with this context's last push (async, no task
    // read through shared-memory mirrors): its next step, when it follows
    // at once, uses them instead of pulling.
    bool prefetched = false;
    std::vector<std::vector<float>> grads;
    // The model's state as pulled (after params in the pull) and the
    // changes a step made to it (pushed after the gradients).
    std::vector<std::vector<float>> state;
    std::vector<std::vector<float>> state_deltas;
    ModelWorkspace workspace;
    int cached_epoch = -1;
    std::vector<int64_t> permutation;
    std::vector<float> batch_x;
    std::vector<int32_t> batch_y;
    StepStats stats;
    // Models with embeddings: the batch's examples, its rows' plan, the
    // gradient of the layers' input and the tables' gradient rows.
    std::unique_ptr<PsEmbeddingTables> tables;
    std::vector<float> dense;
    std::vector<int64_t> ids;
    std::vector<int64_t> id_offsets;  // multi-hot columns: as CategoricalIds
    GatherPlan plan;
    std::vector<float> x_grad;
    std::vector<TableGradients> table_grads;
  };

  absl::Status Setup(const v1::JobStatus& job);
  absl::Status CreateVariables();
  // Takes and runs work items until DONE or stop.
  absl::Status WorkLoop(StepContext* ctx);
  absl::Status Train(const v1::WorkItem& item, StepContext* ctx);
  // Train's computation for a model with embeddings: the batch's rows
  // looked up, the layers' step, the rows' gradients pushed (tagged by the
  // step). ctx->params hold the layers' values.
  absl::Status SparseStep(const v1::WorkItem& item, StepContext* ctx);
  // The test split's metrics; `auc` is set for a model with embeddings.
  absl::Status EvaluateEpoch(const v1::WorkItem& item, StepContext* ctx,
                             double* loss, double* accuracy,
                             std::optional<double>* auc);
  // Examples of the training split.
  int64_t train_size() const {
    return embedding_ != nullptr ? sparse_train_.size : train_.size;
  }
  bool Stopping() const;

  Coordinator* const coordinator_;
  Logger* const logger_;
  const PsWorkerOptions options_;
  std::unique_ptr<MembershipAgent> agent_;
  v1::TaskId task_;
  // The step threads' shared queue of leased items.
  std::unique_ptr<WorkFeed> feed_;

  // Set up once by Setup(); read-only while steps run.
  JobSpec job_;
  std::unique_ptr<Model> model_;
  Dataset train_;
  Dataset test_;
  bool has_test_ = false;
  // Models with embeddings: the splits (criteo data) in memory instead.
  std::unique_ptr<EmbeddingModel> embedding_;
  CriteoBatch sparse_train_;
  CriteoBatch sparse_test_;
  std::unique_ptr<PsCluster> cluster_;
  // Every PS variable: the model's trainable ones, then its state.
  std::vector<v1::VariableSpec> specs_;
  std::vector<std::string> names_;
  std::vector<int64_t> sizes_;
  size_t num_trainable_ = 0;
};

}  // namespace strata

#endif  // STRATA_WORKER_PS_WORKER_H_

// The worker's training loop under ParameterServerStrategy: take a step from
// the coordinator, pull the variables from the PS tasks, compute the batch
// gradient, push it (tagged with the step, so a step re-run after a failure
// is applied once), report.
#ifndef STRATA_WORKER_PS_WORKER_H_
#define STRATA_WORKER_PS_WORKER_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/coordinator_client.h"
#include "client/ps_cluster.h"
#include "common/logging.h"
#include "worker/dataset.h"
#include "worker/job.h"
#include "worker/model.h"

namespace strata {

struct PsWorkerOptions {
  int task_index = 0;
  std::string role = "worker";
  // Ends Run() early when set (signal handlers, tests).
  const std::atomic<bool>* stop = nullptr;
};

// The variable specs a job places on the PS tasks: one per model variable,
// with the job's optimizer and update mode.
std::vector<v1::VariableSpec> PsVariableSpecs(const JobSpec& job,
                                              const Model& model);

// Axis-0 slices of a variable under the job's partitioner.
absl::StatusOr<std::vector<ShardSlice>> PartitionFor(const JobSpec& job,
                                                     const Shape& shape);

// Runs one worker task until the coordinator says DONE. Not thread-safe
// (one per task); several may run as threads in one process.
class PsWorker {
 public:
  PsWorker(CoordinatorClient* coordinator, Logger* logger,
           PsWorkerOptions options);

  // Registers, waits for a job, trains, returns when the job is over.
  absl::Status Run();

 private:
  absl::Status Setup(const v1::JobStatus& job);
  absl::Status CreateVariables();
  absl::Status Train(const v1::WorkItem& item);
  absl::Status EvaluateEpoch(const v1::WorkItem& item, double* loss,
                             double* accuracy);
  bool Stopping() const;

  CoordinatorClient* const coordinator_;
  Logger* const logger_;
  const PsWorkerOptions options_;
  std::unique_ptr<MembershipAgent> agent_;

  JobSpec job_;
  std::unique_ptr<Model> model_;
  Dataset train_;
  Dataset test_;
  bool has_test_ = false;
  std::unique_ptr<PsCluster> cluster_;
  std::vector<std::string> names_;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<float>> grads_;
  ModelWorkspace workspace_;
  int cached_epoch_ = -1;
  std::vector<int64_t> permutation_;
  std::vector<float> batch_x_;
  std::vector<int32_t> batch_y_;
  double last_loss_ = 0;
  double last_accuracy_ = 0;
  int64_t last_examples_ = 0;
};

}  // namespace strata

#endif  // STRATA_WORKER_PS_WORKER_H_

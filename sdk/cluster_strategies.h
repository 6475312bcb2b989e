// The SDK's cluster strategies: ParameterServerStrategy,
// CentralStorageStrategy and MultiWorkerMirroredStrategy, which start a
// local cluster for each Fit (or submit to a running one) and read the
// trained weights back, and their LocalClusterOptions. Part of the SDK that
// sdk/strata.h includes whole.
#ifndef STRATA_SDK_CLUSTER_STRATEGIES_H_
#define STRATA_SDK_CLUSTER_STRATEGIES_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "sdk/data.h"
#include "sdk/model.h"
#include "sdk/strategy.h"

namespace strata::sdk {

namespace internal {
struct ModelState;
struct ClusterPlan;
}  // namespace internal

// A local cluster started for each Fit (tools/launcher.h Launch): the
// coordinator, `num_ps` PS tasks and `num_workers` workers as processes on
// 127.0.0.1; or, with `coordinator` set, a cluster already running.
struct LocalClusterOptions {
  // >= 1 where the strategy needs PS tasks (parameter_server,
  // central_storage, multi_worker_mirrored with collective "ps"); ignored
  // by multi_worker_mirrored with collective "ring".
  int num_ps = 2;
  int num_workers = 2;   // >= 1
  // parameter_server: "async" or "sync" (num_workers replicas a step). The
  // other cluster strategies are synchronous and ignore it.
  std::string update = "async";
  // parameter_server: axis-0 shards per variable (a fixed partitioner),
  // placed round-robin over the PS tasks. 0: num_ps.
  int num_shards = 0;
  // More of the job's "strategy" object, as a JSON object merged over the
  // strategy's own fields: "partitioner" (parameter_server; replaces
  // num_shards' fixed one), "pack_bytes" and "timeout_seconds"
  // (multi_worker_mirrored's collective), ... Checked as job fields: an
  // unknown or bad one is INVALID_ARGUMENT naming "job.strategy.<field>".
  std::string strategy_json;
  // Where strata-coordinator, strata-ps and strata-worker live. Empty: the
  // directory of the running executable (/proc/self/exe), as in build/bin.
  std::string bin_dir;
  // The job file and the cluster's logs, state and checkpoints. Empty: a
  // new temporary directory per Fit, removed after a successful one (kept,
  // and named in the error, after a failure).
  std::string run_dir;
  bool keep_run_dir = false;
  // Restart a PS task or the coordinator that dies (as Kubernetes would).
  bool restart_servers = true;
  // multi_worker_mirrored: how gradients are all-reduced, "ring" (between
  // the workers) or "ps" (summed through a PS task).
  std::string collective = "ring";

  // A running cluster instead of a local one: its coordinator's host:port
  // (where strata-ps and strata-worker daemons started by hand or by
  // Kubernetes registered; TF_CONFIG's chief). Fit then submits the job
  // there (tools/submit.h), waits until num_ps PS tasks and num_workers
  // workers are registered, follows the job (the same epoch lines) and
  // reads the trained weights back from the PS tasks the coordinator lists.
  // The workers read the job's data files at the same paths; in-memory data
  // is written under run_dir (a temporary directory when empty), so it must
  // be a directory they can read. bin_dir and restart_servers do not apply.
  std::string coordinator;
  // multi_worker_mirrored on a running cluster: the directory its first
  // worker writes its final state to (strata-worker --export-dir), readable
  // here. Required there: the weights live on the workers.
  std::string export_dir;
  // How long Fit on a running cluster waits for the tasks to register.
  int register_timeout_seconds = 600;
};

// The strategies that start a local cluster for each Fit, or submit to a
// running one (below): the options, the replicas in sync (the workers), and
// the Fit they share (launch and supervise, or submit and follow; then read
// the trained weights back). Options are checked by Fit (INVALID_ARGUMENT
// naming the field; FAILED_PRECONDITION when a daemon is not in bin_dir, or
// for multi_worker_mirrored on a running cluster without export_dir).
class LocalClusterStrategy : public Strategy {
 public:
  int num_replicas_in_sync() const override { return options_.num_workers; }
  const LocalClusterOptions& options() const { return options_; }

 protected:
  explicit LocalClusterStrategy(LocalClusterOptions options)
      : options_(std::move(options)) {}

 private:
  absl::StatusOr<History> Fit(internal::ModelState& model,
                              const Dataset& train,
                              const FitOptions& options) const final;
  // What this strategy's job says and where its weights are read from.
  virtual internal::ClusterPlan Plan() const = 0;

  LocalClusterOptions options_;
};

// Variables split over the PS tasks of a local cluster per Fit
// (tf.distribute's ParameterServerStrategy): each step is one worker's
// batch, applied by the PS (async, or sync: num_workers steps averaged).
// After Fit the weights are pulled from the PS shards.
class ParameterServerStrategy : public LocalClusterStrategy {
 public:
  static std::unique_ptr<ParameterServerStrategy> Local(
      LocalClusterOptions options = {});
  explicit ParameterServerStrategy(LocalClusterOptions options)
      : LocalClusterStrategy(std::move(options)) {}
  std::string name() const override { return "parameter_server"; }
  std::unique_ptr<Strategy> Clone() const override;

 private:
  internal::ClusterPlan Plan() const override;
};

// Every variable whole on PS task 0 of a local cluster per Fit
// (tf.distribute's CentralStorageStrategy with workers as its replicas):
// every worker runs every step on its share of the global batch, the store
// averages the workers' gradients of a step, applies them once, and every
// worker reads the new version. After Fit the weights are read from PS task
// 0. LocalClusterOptions' update and num_shards do not apply.
class CentralStorageStrategy : public LocalClusterStrategy {
 public:
  static std::unique_ptr<CentralStorageStrategy> Local(
      LocalClusterOptions options = {});
  explicit CentralStorageStrategy(LocalClusterOptions options)
      : LocalClusterStrategy(std::move(options)) {}
  std::string name() const override { return "central_storage"; }
  std::unique_ptr<Strategy> Clone() const override;

 private:
  internal::ClusterPlan Plan() const override;
};

// A full copy of the model on every worker of a local cluster per Fit
// (tf.distribute's MultiWorkerMirroredStrategy): every worker runs every
// step on its share of the global batch, the gradients are all-reduced
// (options.collective: "ring" between the workers, or "ps" through a PS
// task) and every worker applies the same update. The first worker exports
// its final state, from which the weights are read after Fit.
class MultiWorkerMirroredStrategy : public LocalClusterStrategy {
 public:
  static std::unique_ptr<MultiWorkerMirroredStrategy> Local(
      LocalClusterOptions options = {});
  explicit MultiWorkerMirroredStrategy(LocalClusterOptions options)
      : LocalClusterStrategy(std::move(options)) {}
  std::string name() const override { return "multi_worker_mirrored"; }
  std::unique_ptr<Strategy> Clone() const override;

 private:
  internal::ClusterPlan Plan() const override;
};

}  // namespace strata::sdk

#endif  // STRATA_SDK_CLUSTER_STRATEGIES_H_

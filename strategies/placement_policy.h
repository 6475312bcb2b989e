// Strategies as placement policies (DESIGN.md §2): a PlacementPolicy says
// where each variable lives and how the replicas' gradients meet. The PS,
// the coordinator, the worker and the SDK ask the policy these questions and
// never branch on a strategy's name. No gRPC here.
#ifndef STRATA_STRATEGIES_PLACEMENT_POLICY_H_
#define STRATA_STRATEGIES_PLACEMENT_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/tensor.h"
#include "strategies/partitioner.h"

namespace strata {

// The strategy part of a job, as parsed from job.strategy.
struct PolicyConfig {
  // parameter_server | central_storage | multi_worker_mirrored | mirrored |
  // one_device.
  std::string type = "parameter_server";
  // async | sync (parameter_server and one_device may be async).
  std::string update = "async";
  // parameter_server with sync: consecutive steps averaged per update.
  int sync_replicas = 2;
  // Axis-0 partitioner for variables on PS tasks (parameter_server).
  std::string partitioner = "fixed";  // fixed | min_size | max_size
  int num_shards = 1;
  int64_t min_shard_bytes = 256 << 10;
  int64_t max_shard_bytes = 0;
  int max_shards = 0;
  // multi_worker_mirrored: "ring" (workers reduce among themselves) or "ps"
  // (gradients summed through a PS task).
  std::string collective = "ring";
  // mirrored: replicas in one process.
  int replicas = 2;
  // Collective communication options (TF's CommunicationOptions).
  int64_t pack_bytes = 1 << 20;
  absl::Duration collective_timeout = absl::Seconds(30);
};

// How the training loop is driven.
enum class TrainingLoop {
  // Independent steps taken from the coordinator's queue (each step one
  // replica's batch); the PS applies every push (ClusterCoordinator).
  kStepQueue,
  // Every replica of the group runs every step on its share of the global
  // batch; the group meets once per step (synchronous training).
  kSyncGroup,
};

// Where the trainable variables live.
enum class VariableHome {
  kPsTasks,   // on parameter servers; replicas pull them each step
  kReplicas,  // a full copy on every replica, kept identical
};

// How the replicas' gradients of one step meet.
enum class GradientMeeting {
  // Each push goes to the PS, whose optimizer applies it (async, or
  // averaged over sync_replicas steps).
  kPsApplies,
  // Every replica pushes step t; the store averages the group's gradients,
  // applies once, and every replica reads version t+1.
  kPsAveragesGroup,
  // All-reduce (sum) among the replicas, then every replica applies the
  // same optimizer to its own copy.
  kAllReduce,
};

// Where an all-reduce runs (kAllReduce only).
enum class CollectiveBackend {
  kNone,
  kRing,       // between worker processes over WorkerService
  kPs,         // summed through a PS task
  kInProcess,  // replicas are threads of one process
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;

  const PolicyConfig& config() const { return config_; }
  const std::string& name() const { return config_.type; }

  virtual TrainingLoop loop() const = 0;
  virtual VariableHome variable_home() const = 0;
  virtual GradientMeeting gradient_meeting() const = 0;
  virtual CollectiveBackend backend() const { return CollectiveBackend::kNone; }
  // Replicas each worker process runs (threads); the group is the workers'
  // replicas together.
  virtual int local_replicas() const { return 1; }
  // The job cannot start without a ps task.
  virtual bool needs_ps() const = 0;
  // A group of more than one worker task is allowed (mirrored: no).
  virtual bool multi_worker() const { return true; }
  // Coordinated PS checkpoints make sense: the model state is on PS tasks
  // (parameter_server; central_storage, whose group saves at a barrier).
  virtual bool supports_checkpoints() const { return false; }
  // Whether ps task `ps_task` holds any of a job's variables under this
  // policy (central_storage: only task 0; a restart of another loses
  // nothing).
  virtual bool task_holds_variables(int ps_task) const {
    return variable_home() == VariableHome::kPsTasks;
  }
  // A dead member's place is taken by regrouping the survivors.
  bool elastic() const { return loop() == TrainingLoop::kSyncGroup; }

  // Where the shards of a variable of `shape` go over `num_ps` tasks: the
  // axis-0 slices and, for each, the task index. Errors: INVALID_ARGUMENT
  // (bad shape or partitioner), FAILED_PRECONDITION when variables do not
  // live on PS tasks or num_ps < 1.
  struct Shard {
    ShardSlice slice;
    int ps = 0;
  };
  virtual absl::StatusOr<std::vector<Shard>> Place(const Shape& shape,
                                                   DType dtype,
                                                   int num_ps) const;

  // Where the gradient-sum buffer of variable number `index` lives when
  // gradients are summed through a PS (CollectiveBackend::kPs): its task.
  int ReductionTask(int index, int num_ps) const;

 protected:
  explicit PlacementPolicy(PolicyConfig config) : config_(std::move(config)) {}

 private:
  PolicyConfig config_;
};

// The policy for `config`. Errors: INVALID_ARGUMENT naming the field
// ("job.strategy.collective: 'x' is not one of ring, ps") for unknown types
// and bad combinations (async with a synchronous strategy, replicas < 1).
absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePlacementPolicy(
    const PolicyConfig& config);

// The policy names MakePlacementPolicy accepts, comma separated.
const char* PlacementPolicyNames();
// Whether MakePlacementPolicy knows a policy named `type`.
bool IsPlacementPolicyName(absl::string_view type);

// Rows [begin, end) of a global batch of `batch` examples that replica
// `rank` of `size` computes: contiguous, as even as possible, the first
// batch % size replicas one example more.
std::pair<int64_t, int64_t> ReplicaRows(int64_t batch, int rank, int size);

}  // namespace strata

#endif  // STRATA_STRATEGIES_PLACEMENT_POLICY_H_

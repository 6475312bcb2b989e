#include "strategies/placement_policy.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// The registry: every policy MakePlacementPolicy makes, by name.
constexpr const char* kPolicyNames[] = {"parameter_server", "central_storage",
                                        "multi_worker_mirrored", "mirrored",
                                        "one_device"};
constexpr char kNames[] =
    "parameter_server, central_storage, multi_worker_mirrored, mirrored, "
    "one_device";

absl::StatusOr<std::vector<ShardSlice>> Partition(const PolicyConfig& c,
                                                  const Shape& shape,
                                                  DType dtype) {
  if (c.partitioner == "fixed") return FixedShardsPartition(shape, c.num_shards);
  if (c.partitioner == "min_size") {
    return MinSizePartition(shape, dtype, c.min_shard_bytes,
                            c.max_shards > 0 ? c.max_shards : 1);
  }
  if (c.partitioner == "max_size") {
    return MaxSizePartition(shape, dtype, c.max_shard_bytes, c.max_shards);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("job.strategy.partitioner.type: '", c.partitioner,
                   "' is not one of fixed, min_size, max_size"));
}

// The strategies whose variables live on the PS tasks (and so are in
// their checkpoints).
class PsHostedPolicy : public PlacementPolicy {
 public:
  explicit PsHostedPolicy(PolicyConfig c) : PlacementPolicy(std::move(c)) {}
  VariableHome variable_home() const override { return VariableHome::kPsTasks; }
  bool needs_ps() const override { return true; }
  bool supports_checkpoints() const override { return true; }
};

// ParameterServerStrategy: variables split over the PS tasks; each step is
// one replica's batch, applied by the PS (async, or averaged over
// sync_replicas consecutive steps).
class ParameterServerPolicy : public PsHostedPolicy {
 public:
  explicit ParameterServerPolicy(PolicyConfig c)
      : PsHostedPolicy(std::move(c)) {}
  TrainingLoop loop() const override { return TrainingLoop::kStepQueue; }
  GradientMeeting gradient_meeting() const override {
    return GradientMeeting::kPsApplies;
  }
  absl::StatusOr<std::vector<Shard>> Place(const Shape& shape, DType dtype,
                                           int num_ps) const override {
    if (num_ps < 1) {
      return absl::FailedPreconditionError(
          "parameter_server places variables on ps tasks; the cluster has "
          "none");
    }
    STRATA_ASSIGN_OR_RETURN(std::vector<ShardSlice> slices,
                            Partition(config(), shape, dtype));
    std::vector<Shard> out;
    for (size_t i = 0; i < slices.size(); ++i) {
      out.push_back({slices[i], PlaceShard(static_cast<int>(i), num_ps)});
    }
    return out;
  }
};

// CentralStorageStrategy: every variable whole on one PS task; all replicas
// run every step and the store averages their gradients.
class CentralStoragePolicy : public PsHostedPolicy {
 public:
  explicit CentralStoragePolicy(PolicyConfig c)
      : PsHostedPolicy(std::move(c)) {}
  TrainingLoop loop() const override { return TrainingLoop::kSyncGroup; }
  GradientMeeting gradient_meeting() const override {
    return GradientMeeting::kPsAveragesGroup;
  }
  bool task_holds_variables(int ps_task) const override {
    return ps_task == 0;
  }
  absl::StatusOr<std::vector<Shard>> Place(const Shape& shape, DType dtype,
                                           int num_ps) const override {
    if (num_ps < 1) {
      return absl::FailedPreconditionError(
          "central_storage keeps variables on ps task 0; the cluster has no "
          "ps task");
    }
    if (shape.empty()) {
      return absl::InvalidArgumentError("a variable needs rank >= 1");
    }
    return std::vector<Shard>{{ShardSlice{0, shape[0]}, 0}};
  }
};

// The mirrored strategies: a copy of every variable per replica, every
// replica in every step, gradients all-reduced.
class ReplicatedPolicy : public PlacementPolicy {
 public:
  explicit ReplicatedPolicy(PolicyConfig c) : PlacementPolicy(std::move(c)) {}
  TrainingLoop loop() const override { return TrainingLoop::kSyncGroup; }
  VariableHome variable_home() const override {
    return VariableHome::kReplicas;
  }
  GradientMeeting gradient_meeting() const override {
    return GradientMeeting::kAllReduce;
  }
};

// MultiWorkerMirroredStrategy: a copy per worker, gradients all-reduced.
class MultiWorkerMirroredPolicy : public ReplicatedPolicy {
 public:
  explicit MultiWorkerMirroredPolicy(PolicyConfig c)
      : ReplicatedPolicy(std::move(c)) {}
  CollectiveBackend backend() const override {
    return config().collective == "ps" ? CollectiveBackend::kPs
                                       : CollectiveBackend::kRing;
  }
  bool needs_ps() const override { return backend() == CollectiveBackend::kPs; }
};

// MirroredStrategy: N replicas as threads of one worker process.
class MirroredPolicy : public ReplicatedPolicy {
 public:
  explicit MirroredPolicy(PolicyConfig c) : ReplicatedPolicy(std::move(c)) {}
  CollectiveBackend backend() const override {
    return CollectiveBackend::kInProcess;
  }
  int local_replicas() const override { return config().replicas; }
  bool needs_ps() const override { return false; }
  bool multi_worker() const override { return false; }
};

// OneDeviceStrategy: one replica, its own copy.
class OneDevicePolicy : public MirroredPolicy {
 public:
  explicit OneDevicePolicy(PolicyConfig c) : MirroredPolicy(std::move(c)) {}
  int local_replicas() const override { return 1; }
};

}  // namespace

absl::StatusOr<std::vector<PlacementPolicy::Shard>> PlacementPolicy::Place(
    const Shape& shape, DType dtype, int num_ps) const {
  return absl::FailedPreconditionError(absl::StrCat(
      name(), " keeps a copy of every variable on each replica; none is "
              "placed on ps tasks"));
}

int PlacementPolicy::ReductionTask(int index, int num_ps) const {
  return num_ps < 1 ? 0 : index % num_ps;
}

const char* PlacementPolicyNames() { return kNames; }

bool IsPlacementPolicyName(absl::string_view type) {
  for (const char* name : kPolicyNames) {
    if (type == name) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePlacementPolicy(
    const PolicyConfig& config) {
  const std::string& t = config.type;
  const bool synchronous_only = t == "central_storage" ||
                                t == "multi_worker_mirrored" ||
                                t == "mirrored";
  if (synchronous_only && config.update != "sync") {
    return absl::InvalidArgumentError(
        absl::StrCat("job.strategy.update: '", config.update,
                     "' is not supported by ", t,
                     " (it is synchronous); use 'sync'"));
  }
  if (config.update != "sync" && config.update != "async") {
    return absl::InvalidArgumentError(absl::StrCat(
        "job.strategy.update: '", config.update, "' is not one of async, sync"));
  }
  if (config.collective != "ring" && config.collective != "ps") {
    return absl::InvalidArgumentError(
        absl::StrCat("job.strategy.collective: '", config.collective,
                     "' is not one of ring, ps"));
  }
  if (config.replicas < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job.strategy.replicas: must be >= 1, got ", config.replicas));
  }
  if (config.pack_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job.strategy.pack_bytes: must be >= 1, got ", config.pack_bytes));
  }
  if (config.collective_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "job.strategy.timeout_seconds: must be > 0");
  }
  if (t == "parameter_server") {
    return std::unique_ptr<PlacementPolicy>(new ParameterServerPolicy(config));
  }
  if (t == "central_storage") {
    return std::unique_ptr<PlacementPolicy>(new CentralStoragePolicy(config));
  }
  if (t == "multi_worker_mirrored") {
    return std::unique_ptr<PlacementPolicy>(
        new MultiWorkerMirroredPolicy(config));
  }
  if (t == "mirrored") {
    return std::unique_ptr<PlacementPolicy>(new MirroredPolicy(config));
  }
  if (t == "one_device") {
    return std::unique_ptr<PlacementPolicy>(new OneDevicePolicy(config));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "job.strategy.type: '", t, "' is not one of ", kNames));
}

std::pair<int64_t, int64_t> ReplicaRows(int64_t batch, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) return {0, 0};
  const int64_t base = batch / size;
  const int64_t extra = batch % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace strata

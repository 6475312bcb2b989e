// The SDK's strategies (tf.distribute): the Strategy interface with its
// scope and replica API (Run, Reduce, DistributeDataset, ReplicaContext,
// PerReplica, DistributedDataset), and the in-process strategies
// OneDeviceStrategy and MirroredStrategy. The cluster strategies are in
// sdk/cluster_strategies.h. Part of the SDK that sdk/strata.h includes whole.
#ifndef STRATA_SDK_STRATEGY_H_
#define STRATA_SDK_STRATEGY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdk/data.h"
#include "sdk/model.h"

namespace strata {
struct Dataset;  // worker/dataset.h: examples in memory
}  // namespace strata

namespace strata::sdk {

namespace internal {
struct ModelState;
}  // namespace internal

class StrategyScope;

// How Strategy::Reduce combines the replicas' values.
enum class ReduceOp { kSum, kMean };

// The replica a function given to Strategy::Run runs as (tf.distribute's
// ReplicaContext).
class ReplicaContext {
 public:
  ReplicaContext(int replica_id_in_sync_group, int num_replicas_in_sync)
      : replica_id_(replica_id_in_sync_group),
        num_replicas_(num_replicas_in_sync) {}
  // 0 .. num_replicas_in_sync() - 1.
  int replica_id_in_sync_group() const { return replica_id_; }
  int num_replicas_in_sync() const { return num_replicas_; }

 private:
  int replica_id_;
  int num_replicas_;
};

// One value per replica that ran in this process, in replica order
// (tf.distribute's PerReplica; values() is its experimental_local_results).
template <typename T>
class PerReplica {
 public:
  explicit PerReplica(std::vector<T> values) : values_(std::move(values)) {}
  int num_replicas() const { return static_cast<int>(values_.size()); }
  const T& operator[](int replica) const {
    return values_[static_cast<size_t>(replica)];
  }
  const std::vector<T>& values() const { return values_; }

 private:
  std::vector<T> values_;
};

// A dataset split between a strategy's replicas (tf.distribute's
// DistributedDataset), from Strategy::DistributeDataset. Global batch b holds
// examples [b * global_batch_size, (b + 1) * global_batch_size) in the
// dataset's order (the last one possibly smaller), and replica r of n
// computes a contiguous part of it, as Fit splits batches
// (strategies/placement_policy.h ReplicaRows: as even as possible, the first
// replicas one example more). Batches are views into the loaded examples, no
// copies. Immutable; thread-safe (Run's replicas may read it at once).
class DistributedDataset {
 public:
  // One replica's part of a global batch.
  struct ReplicaBatch {
    absl::Span<const float> x;        // examples() rows of `features` values
    absl::Span<const int32_t> labels;
    int64_t features = 0;
    // Examples in the whole global batch: a replica's mean weighted by
    // examples() / global_examples and summed over the replicas is the
    // global batch's mean.
    int64_t global_examples = 0;
    int64_t examples() const { return static_cast<int64_t>(labels.size()); }
  };

  int64_t num_examples() const;
  int64_t global_batch_size() const { return global_batch_size_; }
  // ceil(num_examples / global_batch_size).
  int64_t num_batches() const;
  int num_replicas_in_sync() const { return num_replicas_; }

  // Replica `replica`'s part of global batch `batch`. Empty (no examples)
  // for a batch or replica out of range, and for a replica with no share
  // (a batch of fewer examples than replicas).
  ReplicaBatch Batch(int64_t batch, const ReplicaContext& replica) const;

 private:
  friend class Strategy;
  DistributedDataset(std::shared_ptr<const ::strata::Dataset> data,
                     int64_t global_batch_size, int num_replicas)
      : data_(std::move(data)),
        global_batch_size_(global_batch_size),
        num_replicas_(num_replicas) {}

  std::shared_ptr<const ::strata::Dataset> data_;
  int64_t global_batch_size_;
  int num_replicas_;
};

// Where a model's variables live and how its replicas train (as
// tf.distribute.Strategy). Immutable after construction; thread-safe.
class Strategy {
 public:
  virtual ~Strategy() = default;

  // The job's strategy.type: "one_device", "mirrored", "parameter_server",
  // "central_storage", "multi_worker_mirrored".
  virtual std::string name() const = 0;
  // Replicas whose gradients each step combines (tf.distribute's
  // num_replicas_in_sync): 1 for OneDevice, the replicas for Mirrored, the
  // workers for the cluster strategies.
  virtual int num_replicas_in_sync() const = 0;

  // Makes (a copy of) this strategy the current one on this thread until
  // the returned scope is destroyed; models built meanwhile use it. Scopes
  // nest; each restores the strategy that was current before it, so they
  // must end in reverse order (as locals do) on the thread that made them.
  StrategyScope Scope() const;

  // Calls fn(const ReplicaContext&) once for each replica that runs in this
  // process and returns their results by replica (tf.distribute's
  // strategy.run). MirroredStrategy runs its replicas here: fn runs on
  // num_replicas_in_sync() threads at once (replica 0 on the calling
  // thread), so it must be safe to call concurrently. Every other strategy
  // runs fn once, as replica 0 of num_replicas_in_sync(): under the cluster
  // strategies the other replicas are worker processes that exist only
  // during Fit, and no function of this process runs in them. fn must
  // return a value (e.g. an absl::Status for code run for its effects).
  template <typename Fn>
  auto Run(Fn&& fn) const
      -> PerReplica<std::invoke_result_t<Fn&, const ReplicaContext&>>;

  // Combines the values of a PerReplica in replica order: their sum, or
  // their mean over value.num_replicas() (the replicas that ran here).
  // Vectors are combined element-wise; INVALID_ARGUMENT when their sizes
  // differ or there are no values.
  float Reduce(ReduceOp op, const PerReplica<float>& value) const;
  double Reduce(ReduceOp op, const PerReplica<double>& value) const;
  absl::StatusOr<std::vector<float>> Reduce(
      ReduceOp op, const PerReplica<std::vector<float>>& value) const;

  // `data` (loaded now) split into global batches of `global_batch_size`
  // examples, each split between num_replicas_in_sync() replicas (see
  // DistributedDataset). Errors: INVALID_ARGUMENT for global_batch_size < 1;
  // Dataset::Load's errors.
  absl::StatusOr<DistributedDataset> DistributeDataset(
      const Dataset& data, int64_t global_batch_size) const;

  virtual std::unique_ptr<Strategy> Clone() const = 0;

 private:
  friend class Sequential;
  // Runs Sequential::Fit for a compiled model.
  virtual absl::StatusOr<History> Fit(internal::ModelState& model,
                                      const Dataset& train,
                                      const FitOptions& options) const = 0;
  // Replicas whose functions Run calls in this process.
  virtual int num_local_replicas() const { return 1; }
  // Calls fn for replicas 0 .. num_local_replicas() - 1, on threads when
  // there are several (replica 0 on this one); returns when all returned.
  void RunReplicas(const std::function<void(const ReplicaContext&)>& fn) const;
};

template <typename Fn>
auto Strategy::Run(Fn&& fn) const
    -> PerReplica<std::invoke_result_t<Fn&, const ReplicaContext&>> {
  using T = std::invoke_result_t<Fn&, const ReplicaContext&>;
  static_assert(!std::is_void_v<T>,
                "Strategy::Run: the function must return a value (an "
                "absl::Status for code run for its effects)");
  std::vector<std::optional<T>> results(
      static_cast<size_t>(num_local_replicas()));
  RunReplicas([&](const ReplicaContext& replica) {
    results[static_cast<size_t>(replica.replica_id_in_sync_group())].emplace(
        fn(replica));
  });
  std::vector<T> values;
  values.reserve(results.size());
  for (std::optional<T>& r : results) values.push_back(std::move(*r));
  return PerReplica<T>(std::move(values));
}

// See Strategy::Scope. Neither copyable nor movable.
class StrategyScope {
 public:
  ~StrategyScope();
  StrategyScope(const StrategyScope&) = delete;
  StrategyScope& operator=(const StrategyScope&) = delete;

 private:
  friend class Strategy;
  explicit StrategyScope(std::shared_ptr<const Strategy> strategy);
  std::shared_ptr<const Strategy> previous_;
};

// The strategy current on this thread (tf.distribute.get_strategy()): the
// innermost scope's, else the default OneDeviceStrategy.
std::shared_ptr<const Strategy> GetStrategy();
// True inside some Scope on this thread.
bool HasStrategy();

// Trains in this process (worker/model.h LocalTrainer), printing a line per
// epoch. The default strategy.
class OneDeviceStrategy : public Strategy {
 public:
  OneDeviceStrategy() = default;
  std::string name() const override { return "one_device"; }
  int num_replicas_in_sync() const override { return 1; }
  std::unique_ptr<Strategy> Clone() const override;

 private:
  absl::StatusOr<History> Fit(internal::ModelState& model,
                              const Dataset& train,
                              const FitOptions& options) const override;
};

// Replicas of the model in this process, one thread each
// (tf.distribute.MirroredStrategy on CPU). Fit splits every global batch
// between the replicas (ReplicaRows); each computes the gradient of its
// share, weighted by its share of the batch; one in-process all-reduce per
// step sums them (collective/in_process.h); and each replica applies the
// same optimizer update to its own copy of the weights, so the copies stay
// identical and training follows OneDeviceStrategy's up to float rounding
// (dropout masks differ with more than one replica). A later Fit continues
// from the weights and optimizer state reached. Run calls its function on
// the replicas' threads.
//
// On GPUs (CreateOnDevices, CreateOnAllGpus): one replica per GPU, replica i
// driving devices[i], and the all-reduce goes through NCCL between the GPUs
// (collective/nccl.h) instead of the in-process ring; a Fit forms the NCCL
// group at its start. (The replicas' forward and backward passes run where
// the model runtime runs them.)
class MirroredStrategy : public Strategy {
 public:
  static constexpr int kMaxReplicas = 256;
  // Errors: INVALID_ARGUMENT unless 1 <= num_replicas <= kMaxReplicas.
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> Create(
      int num_replicas = 2);
  // tf.distribute.MirroredStrategy(devices=["GPU:0", "GPU:1"]): one replica
  // per listed GPU, named "cuda" (cuda:0) or "cuda:N".
  // Errors: INVALID_ARGUMENT for an empty list, another name (e.g. "cpu":
  // use Create(n) for replicas on the CPU), a GPU listed twice, more than
  // kMaxReplicas; FAILED_PRECONDITION when this build has no CUDA/NCCL
  // support, no GPU is usable, or a listed GPU is not visible (naming both
  // numbers).
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> CreateOnDevices(
      const std::vector<std::string>& devices);
  // tf.distribute.MirroredStrategy(): one replica per visible GPU.
  // Errors: FAILED_PRECONDITION as CreateOnDevices.
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> CreateOnAllGpus();

  // The replicas' GPUs (CUDA ordinals); empty for replicas on the CPU.
  const std::vector<int>& gpus() const { return gpus_; }

  std::string name() const override { return "mirrored"; }
  int num_replicas_in_sync() const override { return num_replicas_; }
  std::unique_ptr<Strategy> Clone() const override;

 private:
  explicit MirroredStrategy(int num_replicas, std::vector<int> gpus = {})
      : num_replicas_(num_replicas), gpus_(std::move(gpus)) {}
  absl::StatusOr<History> Fit(internal::ModelState& model,
                              const Dataset& train,
                              const FitOptions& options) const override;
  int num_local_replicas() const override { return num_replicas_; }

  int num_replicas_;
  std::vector<int> gpus_;
};

}  // namespace strata::sdk

#endif  // STRATA_SDK_STRATEGY_H_

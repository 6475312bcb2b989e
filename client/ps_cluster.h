// PsCluster: variables split on axis 0 over the PS tasks of a cluster, as
// tf.distribute's ShardedVariable under ParameterServerStrategy. Shard i of
// variable "v" is the PS variable "v/part_i" on the task the placement
// policy chose for it, created with the full shape and its row offset so
// that initializers give exactly the unsplit variable's values.
#ifndef STRATA_CLIENT_PS_CLUSTER_H_
#define STRATA_CLIENT_PS_CLUSTER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/ps_client.h"
#include "client/shared_region.h"
#include "common/thread_pool.h"
#include "strategies/partitioner.h"
#include "strategies/placement_policy.h"

namespace strata {

struct ShardPlacement {
  int ps = 0;           // PS task index
  std::string name;     // variable name on that task
  int64_t row_offset = 0;
  int64_t num_rows = 0;
  size_t byte_offset = 0;  // within the full variable's buffer
  size_t bytes = 0;
};

struct VariablePlacement {
  v1::VariableSpec spec;  // the full (unsplit) variable
  size_t bytes = 0;
  std::vector<ShardPlacement> shards;
};

// Thread-safe. Calls on several shards run in parallel.
class PsCluster {
 public:
  // One PsClient per address, in PS task order.
  static std::unique_ptr<PsCluster> Connect(
      const std::vector<std::string>& ps_addresses,
      const PsClientOptions& options = {});
  explicit PsCluster(std::vector<std::unique_ptr<PsClient>> clients);

  int num_ps() const { return static_cast<int>(clients_.size()); }
  PsClient* ps(int i) { return clients_[i].get(); }

  // Creates `spec` (a whole variable) as the shards a placement policy
  // chose (PlacementPolicy::Place): shard i holds rows shards[i].slice on
  // task shards[i].ps; empty = one shard on task 0. Idempotent. Errors:
  // INVALID_ARGUMENT for a shard on a task the cluster does not have;
  // those of the PS, naming the shard and its task.
  absl::StatusOr<VariablePlacement> CreateVariableOn(
      const v1::VariableSpec& spec,
      const std::vector<PlacementPolicy::Shard>& shards);
  // For callers without a policy: `slices` (from a partitioner; empty = one
  // shard) on tasks i % num_ps, the parameter_server policy's placement.
  absl::StatusOr<VariablePlacement> CreateVariable(
      const v1::VariableSpec& spec, const std::vector<ShardSlice>& slices);

  // The placement of a created variable; NOT_FOUND otherwise.
  absl::StatusOr<VariablePlacement> Placement(const std::string& name) const;

  // Pulls whole variables into `dsts` (one full-size buffer each).
  absl::Status PullMany(const std::vector<std::string>& names,
                        const std::vector<void*>& dsts,
                        const PullOptions& options = {});
  // Pushes dense gradients (full-size buffers) with one tag for all shards.
  // Returns the smallest version among the shards' replies.
  absl::StatusOr<int64_t> PushMany(const std::vector<std::string>& names,
                                   const std::vector<const void*>& grads,
                                   const PushTag& tag);

  // Pushes `grads` (float32, full-size buffers; none when empty) with `tag`,
  // then pulls `names` into `dsts` (none when empty): one ExchangeShared
  // call per PS task on
  // this host, whose bytes go through a shared-memory region of `lane`
  // (one lane per concurrent caller: calls on one lane must not overlap);
  // PushVariables then PullVariables for a task elsewhere, for a client
  // with options().shared_memory off, or when the server refuses the
  // region. Errors: those of PushMany and PullMany.
  absl::Status PushPullMany(int lane, const std::vector<std::string>& names,
                            const std::vector<const void*>& grads,
                            const PushTag& tag, const std::vector<void*>& dsts,
                            const PullOptions& options = {});
  // Whether `lane`'s calls to PS task `ps` go through shared memory (after
  // its first PushPullMany).
  bool UsesSharedMemory(int lane, int ps) const;

  // Pulls `names` into `dsts` as PushPullMany(lane, names, {}, {}, dsts,
  // options) does, but from a same-host PS task's mirrors of the variables
  // (MirrorVariables: the server keeps their newest values in a region of
  // this cluster's) without a call. Falls back to PushPullMany for a task
  // elsewhere, while options wait for a version or a clock, when the
  // server refuses, and until a mirror is set up again after the server
  // replaced the variables, lost the region, or a call to it failed. Safe
  // from several lanes at once. Errors: those of PushPullMany.
  absl::Status PullLatest(int lane, const std::vector<std::string>& names,
                          const std::vector<void*>& dsts,
                          const PullOptions& options = {});
  // Whether the last PullLatest read PS task `ps`'s mirror (tests).
  bool ReadsMirror(int ps) const;

  // Detaches every lane's regions.
  ~PsCluster();

 private:
  // Runs fn(0..num_ps-1) concurrently, fn(0) on the calling thread.
  void RunPerPs(const std::function<void(int)>& fn);

  // What one PS task gets of a call: its shards' names, shapes and where
  // their bytes are in the caller's full buffers.
  struct PerPs {
    std::vector<std::string> names;
    std::vector<Shape> shapes;
    std::vector<size_t> sizes;
    std::vector<void*> dsts;
    std::vector<const void*> grads;
  };
  absl::StatusOr<std::vector<PerPs>> SplitPerPs(
      const std::vector<std::string>& names,
      const std::vector<const void*>& grads,
      const std::vector<void*>& dsts) const;

  // One lane's shared region with one PS task; used only by the lane's
  // caller.
  struct SharedLane {
    std::unique_ptr<SharedRegion> region;
    uint64_t id = 0;
    bool refused = false;  // the server or this host said no: stream
    // The region's doorbell (ServeSharedRegion): its message areas' size,
    // and the server's process id; doorbell false: ExchangeShared calls.
    uint32_t message_bytes = 0;
    bool doorbell = false;
    int64_t server_pid = 0;
    // The version of each variable of the task last delivered on this lane
    // (by a pull, an exchange or a mirror): the base version of the lane's
    // next push of its gradient.
    std::map<std::string, int64_t> delivered;
  };
  // `tag` with the base versions of `part`'s variables from `lane`.
  static PushTag WithBaseVersions(const PushTag& tag, const SharedLane& lane,
                                  const PerPs& part);
  // One exchange through `lane`'s doorbell. Errors: the answer's status;
  // DEADLINE_EXCEEDED or UNAVAILABLE (the server process is gone) when no
  // answer came, after which the lane's region is dropped (an answer may
  // still be written into it).
  absl::StatusOr<v1::SharedExchangeResponse> RingDoorbell(
      int ps, SharedLane* lane, const v1::SharedExchangeRequest& request);
  SharedLane* Lane(int lane, int ps);
  // PushPullMany's exchange with task `ps` through `lane`; false in
  // `*shared` when it could not use shared memory (nothing was sent then).
  absl::Status ExchangeWith(int ps, SharedLane* lane, const PerPs& part,
                            const PushTag& tag, const PullOptions& options,
                            bool* shared);
  // PushPullMany's work with task `ps` (ExchangeWith, else streaming).
  absl::Status PushPullOne(int lane, int ps, const PerPs& part,
                           const PushTag& tag, const PullOptions& options);

  std::vector<std::unique_ptr<PsClient>> clients_;
  std::unique_ptr<ThreadPool> pool_;
  mutable absl::Mutex mu_;
  std::map<std::string, VariablePlacement> placements_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<int, int>, std::unique_ptr<SharedLane>> lanes_
      ABSL_GUARDED_BY(mu_);

  // A region of mirrors of one PS task's variables (PullLatest).
  struct MirrorSet {
    std::unique_ptr<SharedRegion> region;
    uint64_t id = 0;
    std::vector<std::string> names;  // in the caller's order
    std::vector<size_t> offsets;     // header offsets in the region
    int64_t epoch = 0;               // failures_[ps] when it was set up
    int64_t server_pid = 0;          // 0: unknown
  };
  // Sets up (or reuses) task `ps`'s mirrors of `part`; null when the task
  // cannot serve them (the caller pulls instead).
  std::shared_ptr<const MirrorSet> MirrorsFor(int ps, const PerPs& part);
  // Copies the mirrored values into part.dsts and their versions into
  // `versions`; false when a mirror is gone or kept changing (the caller
  // pulls instead).
  static bool ReadMirrors(const MirrorSet& set, const PerPs& part,
                          std::vector<int64_t>* versions);
  // Failed or re-attached calls per task: a mirror set up before the last
  // one may be stale (the server restarted).
  void NoteFailure(int ps);
  std::vector<std::shared_ptr<const MirrorSet>> mirrors_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> mirror_refused_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> read_mirror_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> failures_ ABSL_GUARDED_BY(mu_);
  // Lanes of the callers that name none (PushMany, PullMany), so that
  // each concurrent caller has streams of its own: taken from the pool and
  // given back after the call.
  int TakePoolLane();
  void ReturnPoolLane(int lane);
  std::vector<int> free_pool_lanes_ ABSL_GUARDED_BY(mu_);
  int pool_lanes_ ABSL_GUARDED_BY(mu_) = 0;
  // Serialize the setting up of each task's mirrors (not their reading).
  std::vector<std::unique_ptr<absl::Mutex>> mirror_setup_mu_;
};

}  // namespace strata

#endif  // STRATA_CLIENT_PS_CLUSTER_H_

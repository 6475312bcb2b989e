// The worker's training loop for synchronous strategies (placement policies
// whose loop is TrainingLoop::kSyncGroup: central_storage,
// multi_worker_mirrored, mirrored, one_device). The live trainer tasks form
// a group at the coordinator; every replica of the group runs every step on
// its share of the global batch, and the replicas' gradients meet as the
// policy says (averaged by the PS store, or all-reduced and applied by every
// replica to its own copy). When a member dies, or a collective fails or
// times out, the survivors form a new group and continue from the last
// completed step; a member that comes back copies the state of a survivor.
//
// Mirrored with job.device "cuda[:N]" runs one replica per visible GPU from
// N on (job.strategy.replicas of them when given) and all-reduces through
// NCCL (collective/nccl.h) instead of the in-process ring; without such
// GPUs (or without CUDA in this build) the job fails at setup with
// FAILED_PRECONDITION naming what is missing.
#ifndef STRATA_WORKER_GROUP_WORKER_H_
#define STRATA_WORKER_GROUP_WORKER_H_

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "client/coordinator_client.h"
#include "common/file_system.h"
#include "common/logging.h"
#include "strata/v1/coordinator.pb.h"

namespace strata {

struct GroupWorkerOptions {
  // Where this task's WorkerService listens (ring all-reduce, state copy).
  std::string host = "127.0.0.1";
  int worker_port = 0;
  // The host peers dial for that service (the pod's DNS name where `host`
  // is 0.0.0.0); empty: `host`.
  std::string advertise_host;
  // When set and the variables live on the replicas: the rank that ran the
  // job's last step as rank 0 writes its final state to
  // export_dir/final_state.pb (a serialized strata.v1.WorkerState; tensors
  // named as the model's variables, slots as "NAME/SLOT"), atomically.
  std::string export_dir;
  // Where that export is written; null: LocalFileSystem(). Not owned.
  FileSystem* file_system = nullptr;
  // Ends the run early when set.
  const std::atomic<bool>* stop = nullptr;
  // TLS and bearer token of the calls to the PS tasks and to the peers'
  // WorkerServices.
  ClientSecurity ps_security;
  // TLS of this task's WorkerService (plaintext when not enabled).
  TlsOptions worker_tls;
};

// Trains the job described by `status` (already RUNNING) as one registered
// task (agent) until the job ends. Errors: INVALID_ARGUMENT /
// FAILED_PRECONDITION for a job this loop cannot run (including mirrored on
// GPUs this machine or build does not have); CANCELLED when stopped.
absl::Status RunGroupTraining(Coordinator* coordinator, Logger* logger,
                              MembershipAgent* agent,
                              const v1::JobStatus& status,
                              const GroupWorkerOptions& options);

}  // namespace strata

#endif  // STRATA_WORKER_GROUP_WORKER_H_

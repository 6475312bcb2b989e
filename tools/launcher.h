// `strata launch`: a whole local cluster (coordinator, PS tasks, workers) as
// processes on 127.0.0.1, supervised until the job ends.
#ifndef STRATA_TOOLS_LAUNCHER_H_
#define STRATA_TOOLS_LAUNCHER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "strata/v1/coordinator.pb.h"

namespace strata {

struct LaunchOptions {
  std::string job_path;
  std::string strategy;   // overrides the job's strategy.type when set
  // Overrides the job's strategy.collective ("ring" or "ps") when set.
  std::string collective;
  // Policies whose variables live on the replicas (multi_worker_mirrored,
  // mirrored): rank 0 writes its final state there as
  // EXPORT_DIR/final_state.pb (a serialized strata.v1.WorkerState: one
  // float32 NamedTensor per model variable, named as the model names them,
  // then "NAME/SLOT" for optimizer slots). Empty: not written.
  std::string export_dir;
  int num_ps = 2;
  int num_workers = 2;
  int epochs = 0;         // overrides the job's epochs when > 0
  std::string summary_path;
  std::string run_dir;    // logs, state, checkpoints; a temp dir when empty
  std::string bin_dir;    // where strata-ps, strata-worker, ... live
  // Restart a PS or the coordinator that dies (as Kubernetes would).
  bool restart_servers = true;
  // Coordinator high availability: an etcd server (Debian's etcd-server,
  // `etcd` on the PATH or in /usr/bin) in RUN_DIR/etcd and two coordinator
  // replicas elected through it (strata-coordinator --etcd-endpoints);
  // every task is given both. The summary says how many leaders answered
  // the launcher ("coordinator_leaders").
  bool ha = false;
  // The replicas' --leader-ttl-ms under `ha`.
  int64_t leader_ttl_ms = 2000;
  // Steps each worker runs concurrently (strata-worker --steps-in-flight).
  int steps_in_flight = 2;
  // strata-worker --ps-shared-memory: same-host PS exchanges through shared
  // memory.
  bool ps_shared_memory = true;
  // Runs the cluster over mutual TLS with per-job credentials: a CA and
  // certificates made by strata-make-certs (tools/make_certs.sh, next to
  // the binaries) in RUN_DIR/tls, and RUN_DIR/tls/auth.json with fresh
  // tokens for the job (coordinator, worker and admin roles).
  bool tls = false;
  // Where the PS tasks keep variables and optimizer slots (strata-ps
  // --device: "cpu", "cuda" or "cuda:N"). Empty: strata-ps's default (cpu).
  // The workers' device is the job's "device".
  std::string ps_device;
  // The memory of this machine (where every task runs), in bytes: a job
  // whose model one worker could not hold (CheckJobFitsMemory) is refused
  // before any process starts. <= 0: unknown, not checked.
  int64_t memory_bytes = 0;
  // Called after the job succeeded, while the PS tasks still run, with
  // their addresses in task order (to read the trained variables).
  std::function<absl::Status(const std::vector<std::string>& ps_addresses)>
      on_finished;
  // Called with every job status the launcher reads from the coordinator
  // (about 10 times a second while the job runs), on the calling thread.
  std::function<void(const v1::JobStatus&)> on_status;
};

// Runs the job to the end, printing one line per epoch to `out`. Returns the
// summary (also written to summary_path). `stop` set by a signal handler
// ends the run (children stopped) with CANCELLED.
//
// The job is resolved and checked before any process starts: its file (as
// LoadJobFile), the flags, the strategy's own conditions (CheckPsJob), that
// its model fits `memory_bytes` (RESOURCE_EXHAUSTED) and that its data files
// exist (CheckDataFiles), each error naming the field. `refused` (when set)
// tells the caller whether an error came from these checks, before anything
// started (true), or from the run itself (false).
absl::StatusOr<nlohmann::json> Launch(const LaunchOptions& options,
                                      std::ostream& out,
                                      const std::atomic<bool>* stop,
                                      bool* refused = nullptr);

}  // namespace strata

#endif  // STRATA_TOOLS_LAUNCHER_H_

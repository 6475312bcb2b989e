// `strata submit`: hands a job file to a running coordinator (the one a
// cluster of strata-ps / strata-worker daemons registered with, as on
// Kubernetes), optionally after waiting for the tasks to register, and
// optionally follows the job to its end.
#ifndef STRATA_TOOLS_SUBMIT_H_
#define STRATA_TOOLS_SUBMIT_H_

#include <atomic>
#include <functional>
#include <iosfwd>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "rpc/tls.h"
#include "strata/v1/coordinator.pb.h"

namespace strata {

// Adds "train_seconds" (the epochs' training time: each epoch from its
// first step handed out to its last step reported, without evaluations or
// start-up) and "train_examples_per_second" (examples over that time, as
// local_train measures a single process) to a run summary.
void AddTrainThroughput(const v1::JobStatus& status, nlohmann::json* summary);

// One epoch's row of a summary's "epochs_detail" (`strata launch` and
// `strata submit` write the same): epoch (from 1), steps, loss, accuracy,
// examples_per_second, elapsed_seconds, and test_loss, test_accuracy and
// test_auc where it was evaluated, or evaluation_missing.
nlohmann::json EpochRow(const v1::EpochResult& e);

// Adds the job's checkpoint record to a run summary: "checkpoints" with
// "saved", "failed", "failures_in_a_row", "last_error", "last" (the
// newest kept checkpoint), "last_step" and "skipped" (those a restore
// skipped, with why).
void AddCheckpointSummary(const v1::JobStatus& status,
                          nlohmann::json* summary);

// Adds what `strata launch` and `strata submit` both record of a finished
// job to a run summary: epochs and batch_size (`epochs`, `batch_size`, of
// the job file), the last evaluation's test_accuracy, test_loss and
// test_auc (null without one), the step counts, wall_seconds and
// examples_per_second, epochs_detail (EpochRow each), then
// AddTrainThroughput and AddCheckpointSummary.
void AddJobResult(int64_t epochs, int64_t batch_size,
                  const v1::JobStatus& status, nlohmann::json* summary);

struct SubmitOptions {
  std::string coordinator;  // host:port
  std::string job_path;
  // Before submitting, wait until at least this many ps and worker tasks
  // are registered (alive) with the coordinator.
  int wait_ps = 0;
  int wait_workers = 0;
  // Bounds the wait for the coordinator and the tasks.
  absl::Duration register_timeout = absl::Minutes(10);
  // Follow the job until it ends: one line per completed epoch, then the
  // summary (also written to summary_path when set).
  bool wait = false;
  std::string summary_path;
  // TLS and the bearer token (coordinator or admin role: SubmitJob) of
  // every call, to the coordinator and the PS tasks.
  ClientSecurity security;
  // With `wait`: called with every job status read while following the job
  // (about 5 times a second), on the calling thread.
  std::function<void(const v1::JobStatus&)> on_status;
};

// Writes `summary` (indented JSON) to `path`; nothing when `path` is empty.
// Errors: INTERNAL naming the path.
absl::Status WriteSummary(const std::string& path,
                          const nlohmann::json& summary);

// Whether status.epochs(index) (of a job of `epochs` epochs) is complete:
// all its steps and its evaluation are done (or the next epoch started, or
// the job ended).
bool EpochComplete(const v1::JobStatus& status, int epochs, size_t index);

// Writes to `out` the progress line of each epoch of `status` (a job of
// `epochs` epochs) completed (EpochComplete) since epoch *printed, and
// advances *printed.
void PrintCompletedEpochs(const v1::JobStatus& status, int epochs,
                          size_t* printed, std::ostream& out);

// Writes to `out` a line for each checkpoint a restore skipped (corrupt or
// unreadable, an older one restored instead) since entry *printed of
// status.checkpoints_skipped(), and advances *printed.
void PrintSkippedCheckpoints(const v1::JobStatus& status, size_t* printed,
                             std::ostream& out);

// Validates the job file (and counts its training examples) before it
// contacts the coordinator. Returns {"job_id": ...} without `wait`, else the
// run summary. Errors: the job file's INVALID_ARGUMENT / NOT_FOUND;
// DEADLINE_EXCEEDED when the tasks did not register in time;
// FAILED_PRECONDITION when a job is already running on the coordinator;
// ABORTED when the followed job failed (its error in the message);
// CANCELLED when `stop` was set.
absl::StatusOr<nlohmann::json> Submit(const SubmitOptions& options,
                                      std::ostream& out,
                                      const std::atomic<bool>* stop);

}  // namespace strata

#endif  // STRATA_TOOLS_SUBMIT_H_

// The parameter server's pure-logic core: named variables, their updates,
// and checkpoints. No gRPC here; ParameterServiceImpl adapts it.
#ifndef STRATA_SERVER_VARIABLE_STORE_H_
#define STRATA_SERVER_VARIABLE_STORE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/device_state.h"
#include "server/variable.h"

namespace strata {

struct VariableStoreOptions {
  // Largest variable (and so largest push, pull or assign) in bytes.
  uint64_t max_variable_bytes = uint64_t{16} << 30;
  // Relative checkpoint paths resolve under this directory; empty refuses
  // relative paths.
  std::string checkpoint_dir;
  // Where variables live: host memory (default) or a CUDA device. The store
  // does not probe the device; creating a variable on an unusable one fails
  // (FAILED_PRECONDITION). PsServer::Start checks it first.
  PsDevice device;
};

struct StoreStats {
  int64_t num_variables = 0;
  int64_t variable_bytes = 0;
  int64_t pushes_applied = 0;
  int64_t pushes_duplicate = 0;
  int64_t pulls = 0;
  int64_t bytes_pushed = 0;
  int64_t bytes_pulled = 0;
  int64_t sync_steps_applied = 0;
};

struct SaveResult {
  std::string path;
  int64_t num_variables = 0;
  int64_t bytes = 0;
};

// Thread-safe. The name map has its own lock, held only to find, add or
// replace variables; each variable serializes its own updates, so pushes to
// different variables run in parallel.
class VariableStore {
 public:
  explicit VariableStore(VariableStoreOptions options);
  ~VariableStore();

  // Creates a variable (on options().device). Returns true when created,
  // false when an identical variable already exists. Errors: ALREADY_EXISTS
  // for a different spec under the same name; INVALID_ARGUMENT /
  // RESOURCE_EXHAUSTED / FAILED_PRECONDITION from Variable::Create.
  absl::StatusOr<bool> Create(const v1::VariableSpec& spec);

  // Errors: NOT_FOUND naming the variable.
  absl::StatusOr<std::shared_ptr<Variable>> Get(const std::string& name) const;

  std::vector<std::shared_ptr<Variable>> List() const;

  // Writes every variable to `path` (see server/checkpoint.h); slots of
  // device variables are read back from the device. Errors: those of
  // WriteCheckpoint and of reading device slots.
  absl::StatusOr<SaveResult> Save(const std::string& path);
  // Replaces every variable with the checkpoint's (on options().device,
  // whatever device saved it). Pulls waiting on the old variables get
  // ABORTED. Errors: NOT_FOUND, DATA_LOSS, and the device's errors (nothing
  // changes).
  absl::StatusOr<int64_t> Restore(const std::string& path);

  // Resolves a request path against checkpoint_dir.
  absl::StatusOr<std::string> ResolvePath(const std::string& path) const;

  // Accounting, called by the service.
  void RecordPush(const PushOutcome& outcome, int64_t bytes);
  void RecordPull(int64_t bytes);
  StoreStats Stats() const;

  // Fails every waiting pull (shutdown).
  void CancelWaiters(const absl::Status& status);

  const VariableStoreOptions& options() const { return options_; }

 private:
  const VariableStoreOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Variable>> variables_
      ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> pushes_applied_{0};
  std::atomic<int64_t> pushes_duplicate_{0};
  std::atomic<int64_t> pulls_{0};
  std::atomic<int64_t> bytes_pushed_{0};
  std::atomic<int64_t> bytes_pulled_{0};
};

}  // namespace strata

#endif  // STRATA_SERVER_VARIABLE_STORE_H_

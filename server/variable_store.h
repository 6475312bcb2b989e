// The parameter server's pure-logic core: named variables, their owners,
// their updates, and checkpoints, in memory. No gRPC here;
// ParameterServiceImpl adapts it (through ParameterStore).
#ifndef STRATA_SERVER_VARIABLE_STORE_H_
#define STRATA_SERVER_VARIABLE_STORE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "checkpoint/checkpoint.h"
#include "rpc/auth.h"
#include "server/device_state.h"
#include "server/parameter_store.h"
#include "server/variable.h"

namespace strata {

struct VariableStoreOptions {
  // Largest variable (and so largest push, pull or assign) in bytes.
  uint64_t max_variable_bytes = uint64_t{16} << 30;
  // Relative checkpoint paths resolve under this directory; empty refuses
  // relative paths.
  std::string checkpoint_dir;
  // The dynamic tables' options (time source of their time-to-live).
  TableStoreOptions tables;
  // Where variables live: host memory (default) or a CUDA device. The store
  // does not probe the device; creating a variable on an unusable one fails
  // (FAILED_PRECONDITION). PsServer::Start checks it first.
  PsDevice device;
};

// Thread-safe. The name map (and the owners beside it) has its own lock,
// held only to find, add or replace variables and to check owners, never
// across checkpoint I/O or a variable's initialization; each variable
// serializes its own updates, so pushes to different variables run in
// parallel.
class VariableStore : public ParameterStore {
 public:
  explicit VariableStore(VariableStoreOptions options);
  ~VariableStore() override;

  // ParameterStore. The overloads without a caller act for a server
  // without credentials.
  absl::StatusOr<bool> Create(const v1::VariableSpec& spec,
                              const std::optional<Caller>& caller) override;
  absl::StatusOr<bool> Create(const v1::VariableSpec& spec) {
    return Create(spec, std::nullopt);
  }
  absl::StatusOr<std::shared_ptr<Variable>> Get(
      const std::string& name) const override;
  std::vector<std::shared_ptr<Variable>> List() const override;
  absl::Status CheckOwner(const std::optional<Caller>& caller,
                          const std::string& name) const override;
  absl::Status CheckCheckpointAccess(const std::optional<Caller>& caller,
                                     const char* what) const override;

  // Writes every variable to `path` (see server/checkpoint.h); slots of
  // device variables are read back from the device. Errors: those of
  // CheckCheckpointAccess, WriteCheckpoint and of reading device slots.
  absl::StatusOr<SaveResult> Save(
      const std::string& path, const std::optional<Caller>& caller) override;
  absl::StatusOr<SaveResult> Save(const std::string& path) {
    return Save(path, std::nullopt);
  }
  // Replaces every variable with the checkpoint's (on options().device,
  // whatever device saved it). Without a caller, restored variables keep
  // the owners known before. Errors: as ParameterStore::Restore.
  absl::StatusOr<int64_t> Restore(
      const std::string& path, const std::optional<Caller>& caller) override;
  absl::StatusOr<int64_t> Restore(const std::string& path) {
    return Restore(path, std::nullopt);
  }

  // Resolves a request path against checkpoint_dir.
  absl::StatusOr<std::string> ResolvePath(const std::string& path) const;
  absl::StatusOr<std::string> ResolveCheckpointPath(
      const std::string& path) const override {
    return ResolvePath(path);
  }

  TableStore* tables() override { return &tables_; }
  absl::StatusOr<bool> CreateTable(
      const v1::TableSpec& spec, const std::optional<Caller>& caller) override;
  absl::Status CheckTableOwner(const std::optional<Caller>& caller,
                               const std::string& name) const override;
  bool TableVisibleTo(const std::optional<Caller>& caller,
                      const std::string& name) const override;
  absl::StatusOr<int64_t> RestoreTables(
      const std::vector<std::string>& paths,
      const std::optional<Caller>& caller) override;

  uint64_t max_variable_bytes() const override {
    return options_.max_variable_bytes;
  }
  void RecordPush(const PushOutcome& outcome, int64_t bytes) override;
  void RecordPull(int64_t bytes) override;
  StoreStats Stats() const override;
  void CancelWaiters(const absl::Status& status) override;

  const VariableStoreOptions& options() const { return options_; }

  // PS replication (server/replication.h). A primary's store appends its
  // changes to `sink` (creations, restores, and through each variable its
  // pushes and assignments) and refuses dynamic tables, which are not
  // replicated. Set before serving.
  void set_replication(ReplicationSink* sink);
  // The state transfer to a new backup: appends every variable's state
  // (Variable::AppendState) to the sink.
  absl::Status AppendState();
  // A backup's store applying its primary's entries: adds or replaces a
  // variable (owned by `owner`'s job unless empty), drops them all.
  void Install(std::shared_ptr<Variable> v, const std::string& owner);
  void Clear();

 protected:
  // The checkpoint's file I/O (server/checkpoint.h), called without any
  // lock held. Tests override them to stand for slow storage.
  virtual absl::StatusOr<int64_t> WriteCheckpointFiles(
      const std::string& path, const Checkpoint& checkpoint);
  virtual absl::StatusOr<Checkpoint> ReadCheckpointFiles(
      const std::string& path);

 private:
  absl::Status CheckOwnerLocked(const std::optional<Caller>& caller,
                                const std::string& name) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status CheckTableOwnerLocked(const std::optional<Caller>& caller,
                                     const std::string& name) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The variables' owners and the tables'.
  absl::Status CheckCheckpointAccessLocked(const std::optional<Caller>& caller,
                                           const char* what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Makes `name` the caller's job's unless it has an owner (no caller:
  // nothing).
  void AdoptLocked(const std::optional<Caller>& caller, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Looks up an existing `spec.name()` for Create: false when identical
  // (adopting it), ALREADY_EXISTS (`detail`: the specs in the message)
  // when not, nullopt when there is none.
  std::optional<absl::StatusOr<bool>> FindForCreateLocked(
      const v1::VariableSpec& spec, const std::optional<Caller>& caller,
      bool detail) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const VariableStoreOptions options_;
  ReplicationSink* sink_ = nullptr;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Variable>> variables_
      ABSL_GUARDED_BY(mu_);
  // The job owning each variable that has one (servers with credentials).
  absl::flat_hash_map<std::string, std::string> owners_ ABSL_GUARDED_BY(mu_);
  // The same for the dynamic tables.
  absl::flat_hash_map<std::string, std::string> table_owners_
      ABSL_GUARDED_BY(mu_);
  TableStore tables_;
  std::atomic<int64_t> pushes_applied_{0};
  std::atomic<int64_t> pushes_duplicate_{0};
  std::atomic<int64_t> pulls_{0};
  std::atomic<int64_t> bytes_pushed_{0};
  std::atomic<int64_t> bytes_pulled_{0};
  std::atomic<int64_t> pushes_with_base_version_{0};
  std::atomic<int64_t> staleness_sum_{0};
  std::atomic<int64_t> staleness_max_{0};
  std::atomic<int64_t> pushes_staged_{0};
  std::atomic<int64_t> staged_discarded_{0};
};

}  // namespace strata

#endif  // STRATA_SERVER_VARIABLE_STORE_H_

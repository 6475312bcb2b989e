// The parameter server's core as its gRPC adapter (ParameterServiceImpl)
// sees it: named variables, the job owning each, checkpoints and
// accounting. VariableStore (server/variable_store.h) keeps everything in
// memory.
//
// Job ownership, for servers with credentials: a variable (and a dynamic
// table) belongs to the job whose caller created it. A job's coordinator may reach only its job's
// variables, and may save or restore only while the server holds no other
// job's variable; its restore makes every restored variable its job's. An
// admin reaches every job; its restore keeps the owners known before and
// gives the other variables to the admin's job. A null caller
// (std::nullopt) is a server without credentials: everything is allowed and
// nothing gains an owner.
//
// Implementations are thread-safe and hold no lock across checkpoint I/O:
// pushes and pulls run while a save or restore reads or writes files (a
// restore swaps the variables in under a short lock at the end).
#ifndef STRATA_SERVER_PARAMETER_STORE_H_
#define STRATA_SERVER_PARAMETER_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rpc/auth.h"
#include "server/variable.h"
#include "strata/v1/parameter_server.pb.h"
#include "tables/table_store.h"

namespace strata {

class PushSession;  // server/push_session.h

struct StoreStats {
  int64_t num_variables = 0;
  int64_t variable_bytes = 0;
  int64_t pushes_applied = 0;
  int64_t pushes_duplicate = 0;
  int64_t pulls = 0;
  int64_t bytes_pushed = 0;
  int64_t bytes_pulled = 0;
  int64_t sync_steps_applied = 0;
  // Dense pushes applied that named their base version, and the sum and
  // the largest of their staleness (PushOutcome::staleness).
  int64_t pushes_with_base_version = 0;
  int64_t staleness_sum = 0;
  int64_t staleness_max = 0;
  // Pushes applied from a staged copy, and staged copies dropped
  // (PushOutcome::staged).
  int64_t pushes_staged = 0;
  int64_t staged_discarded = 0;
};

struct SaveResult {
  std::string path;
  int64_t num_variables = 0;
  int64_t bytes = 0;
};

class ParameterStore {
 public:
  virtual ~ParameterStore() = default;

  // Creates a variable for `caller`, who owns it once it exists (an
  // identical variable without an owner becomes the caller's job's too).
  // Returns true when created, false when an identical variable already
  // exists. Errors: PERMISSION_DENIED when the name belongs to another job
  // (checked first); ALREADY_EXISTS for a different spec under the name;
  // INVALID_ARGUMENT / RESOURCE_EXHAUSTED / FAILED_PRECONDITION from
  // Variable::Create.
  virtual absl::StatusOr<bool> Create(const v1::VariableSpec& spec,
                                      const std::optional<Caller>& caller) = 0;

  // Errors: NOT_FOUND naming the variable.
  virtual absl::StatusOr<std::shared_ptr<Variable>> Get(
      const std::string& name) const = 0;

  virtual std::vector<std::shared_ptr<Variable>> List() const = 0;

  // PERMISSION_DENIED when variable `name` belongs to another job than the
  // caller's (and the caller is no admin); an unknown name passes.
  virtual absl::Status CheckOwner(const std::optional<Caller>& caller,
                                  const std::string& name) const = 0;

  // Whether `caller` may save or restore this server's checkpoints (`what`:
  // "save" or "restore", for the message). Errors: PERMISSION_DENIED for a
  // job's coordinator while the server holds a variable or a table not of
  // its job.
  virtual absl::Status CheckCheckpointAccess(
      const std::optional<Caller>& caller, const char* what) const = 0;

  // Writes every variable to `path` (resolved against the checkpoint
  // directory). The access check and the choice of variables are one step.
  // Errors: those of CheckCheckpointAccess, of resolving the path and of
  // writing the checkpoint.
  virtual absl::StatusOr<SaveResult> Save(
      const std::string& path, const std::optional<Caller>& caller) = 0;

  // A request's checkpoint path as Save and Restore resolve it (against the
  // checkpoint directory). Errors: INVALID_ARGUMENT ('..'),
  // FAILED_PRECONDITION (a relative path without a checkpoint directory).
  virtual absl::StatusOr<std::string> ResolveCheckpointPath(
      const std::string& path) const = 0;

  // Replaces every variable with the checkpoint's, owned as the rule above
  // says; returns how many. Pulls waiting on the old variables get
  // ABORTED. The access is checked before reading and again when the
  // variables are swapped in. Errors: those of CheckCheckpointAccess,
  // NOT_FOUND, DATA_LOSS, and the device's (nothing changes).
  virtual absl::StatusOr<int64_t> Restore(
      const std::string& path, const std::optional<Caller>& caller) = 0;

  // The dynamic embedding tables (saved and restored with the variables).
  virtual TableStore* tables() = 0;

  // Creates table shard `spec` (TableStore::Create) for `caller`, whose job
  // owns it once it exists (an identical table without an owner becomes
  // the caller's job's too). Errors: PERMISSION_DENIED when the name
  // belongs to another job (checked first); those of TableStore::Create.
  virtual absl::StatusOr<bool> CreateTable(
      const v1::TableSpec& spec, const std::optional<Caller>& caller) = 0;
  // PERMISSION_DENIED when table `name` belongs to another job than the
  // caller's (and the caller is no admin); an unknown name passes.
  virtual absl::Status CheckTableOwner(const std::optional<Caller>& caller,
                                       const std::string& name) const = 0;
  // Whether `caller` may see table `name` (its job's, or an admin, or a
  // server without credentials), for listings.
  virtual bool TableVisibleTo(const std::optional<Caller>& caller,
                              const std::string& name) const = 0;

  // Loads this task's rows of its tables from the checkpoints at `paths`
  // (resolved as Restore's; written by any number of tasks): see
  // TableStore::Reshard. Errors: those of CheckCheckpointAccess, of
  // resolving and reading each path, and of Reshard (nothing changes).
  virtual absl::StatusOr<int64_t> RestoreTables(
      const std::vector<std::string>& paths,
      const std::optional<Caller>& caller) = 0;

  // Starts a PushVariables of `header` (which must outlive the session)
  // for `caller`: the one entry point of a push, whatever carries its bytes
  // (server/push_session.h). Checks, in order, that every variable is the
  // caller's job's, then the header (ValidatePushVariablesHeader), then the
  // payload against max_variable_bytes().
  // Errors: PERMISSION_DENIED, NOT_FOUND, INVALID_ARGUMENT naming the
  // variable; RESOURCE_EXHAUSTED for a payload above the limit.
  absl::StatusOr<std::unique_ptr<PushSession>> StartPush(
      const v1::PushVariablesHeader& header,
      const std::optional<Caller>& caller);

  // Largest variable (and so largest push, pull or assign) in bytes.
  virtual uint64_t max_variable_bytes() const = 0;

  // Accounting, called by the service.
  virtual void RecordPush(const PushOutcome& outcome, int64_t bytes) = 0;
  virtual void RecordPull(int64_t bytes) = 0;
  virtual StoreStats Stats() const = 0;

  // Fails every waiting pull (shutdown).
  virtual void CancelWaiters(const absl::Status& status) = 0;
};

}  // namespace strata

#endif  // STRATA_SERVER_PARAMETER_STORE_H_

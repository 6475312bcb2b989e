// One call of the parameter service, from its arrival to its status: who
// made it (authentication and role), and its accounting, done once at the
// end: the method's metrics (count by code, latency, tensor bytes) and, for
// an error, one "rpc_error" log line. Every method of ParameterServiceImpl,
// unary or streamed, goes through one.
//
// Not thread-safe: a call's steps run one after the other (possibly on
// different threads). The service must outlive it.
#ifndef STRATA_SERVER_PARAMETER_SERVICE_CALL_H_
#define STRATA_SERVER_PARAMETER_SERVICE_CALL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "rpc/auth.h"
#include "server/parameter_store.h"

namespace strata {

class ParameterServiceImpl;

class ServiceCall {
 public:
  // Starts the clock of `method` (a string literal).
  ServiceCall(ParameterServiceImpl* service, const char* method);

  // Authenticates the call and checks that its role holds `needed` (see
  // ParameterServiceOptions::credentials); sets caller(). Errors:
  // UNAUTHENTICATED, PERMISSION_DENIED.
  absl::Status Authorize(const grpc::CallbackServerContext* ctx, Role needed);
  // Sets the caller directly (a call made on behalf of an authorized one).
  void set_caller(std::optional<Caller> caller) { caller_ = std::move(caller); }
  // nullopt: the server runs without credentials (everything allowed).
  const std::optional<Caller>& caller() const { return caller_; }

  // Names the transport in error lines ("transport" field; null: none).
  void set_transport(const char* transport) { transport_ = transport; }

  const char* method() const { return method_; }
  absl::Time start() const { return start_; }
  bool ended() const { return ended_; }

  // Records the call's status, latency and tensor bytes, and logs an error
  // with `variable` (what it was about) in a "variable" field. Once: later
  // calls do nothing and return false.
  bool End(const absl::Status& status, const std::string& variable,
           int64_t bytes_in = 0, int64_t bytes_out = 0);
  // The same for a call about no variable in particular (no "variable"
  // field).
  bool End(const absl::Status& status);

 private:
  bool Record(const absl::Status& status, int64_t bytes_in, int64_t bytes_out);

  ParameterServiceImpl* const service_;
  const char* const method_;
  const absl::Time start_;
  std::optional<Caller> caller_;
  const char* transport_ = nullptr;
  bool ended_ = false;
};

// The checkpoint path a caller's Save, Restore or RestoreTables (`what`)
// uses, once the store allows it: a job's coordinator works under "<job>/"
// of the checkpoint directory. Errors: those of CheckCheckpointAccess,
// PERMISSION_DENIED for a coordinator's absolute path.
absl::StatusOr<std::string> ScopedCheckpointPath(
    const ParameterStore& store, const std::optional<Caller>& caller,
    const std::string& path, const char* what);

// Authorizes the call of a new reactor (whose call() is its ServiceCall)
// for `needed`, then begins it with `args`, or rejects it with the error.
// Returns the reactor.
template <typename Reactor, typename... Args>
Reactor* StartAuthorized(Reactor* reactor,
                         const grpc::CallbackServerContext* ctx, Role needed,
                         Args&&... args) {
  absl::Status s = reactor->call().Authorize(ctx, needed);
  if (s.ok()) {
    reactor->Begin(std::forward<Args>(args)...);
  } else {
    reactor->Reject(s);
  }
  return reactor;
}

}  // namespace strata

#endif  // STRATA_SERVER_PARAMETER_SERVICE_CALL_H_

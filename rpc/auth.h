// Per-job credentials and roles. A credentials file lists bearer tokens,
// each naming its job and role:
//   {"credentials": [{"token": "...", "job": "mnist", "role": "worker"}, ...]}
// Roles: "worker" (pull, push, list, stats), "coordinator" (also create,
// assign, save, restore; the job's own variables), "admin" (everything,
// every job). Servers authenticate a call by its "authorization: Bearer
// <token>" metadata.
#ifndef STRATA_RPC_AUTH_H_
#define STRATA_RPC_AUTH_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/string_ref.h"

namespace strata {

enum class Role { kWorker = 0, kCoordinator = 1, kAdmin = 2 };

const char* RoleName(Role role);
// Errors: INVALID_ARGUMENT naming the accepted roles.
absl::StatusOr<Role> ParseRole(const std::string& name);

// Who made a call.
struct Caller {
  std::string job;
  Role role = Role::kWorker;
  // Holds at least `role` (admin > coordinator > worker).
  bool Has(Role r) const { return static_cast<int>(role) >= static_cast<int>(r); }
};

// The token table of one server. Immutable after loading; thread-safe.
class CredentialStore {
 public:
  // Parses the JSON text. Errors: INVALID_ARGUMENT naming the entry and
  // field (missing or empty token or job, unknown role, a repeated token).
  static absl::StatusOr<CredentialStore> Parse(const std::string& json);
  // Reads and parses `path`; errors name the file.
  static absl::StatusOr<CredentialStore> Load(const std::string& path);

  // Finds the caller of a call by its metadata. Errors: UNAUTHENTICATED
  // for a missing or malformed authorization header or an unknown token
  // (the message never echoes the token).
  absl::StatusOr<Caller> Authenticate(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;
  // The same for a bare token.
  absl::StatusOr<Caller> AuthenticateToken(const std::string& token) const;

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string token;
    Caller caller;
  };
  std::vector<Entry> entries_;
};

// PERMISSION_DENIED naming the method, the role it needs and the caller's,
// unless `caller` holds `needed`.
absl::Status RequireRole(const Caller& caller, Role needed,
                         const char* method);

}  // namespace strata

#endif  // STRATA_RPC_AUTH_H_

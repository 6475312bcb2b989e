#include "rpc/auth.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "rpc/tls.h"

namespace strata {
namespace {

// Compares without an early exit so that the time taken does not tell how
// much of a guessed token matched.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kWorker:
      return "worker";
    case Role::kCoordinator:
      return "coordinator";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

absl::StatusOr<Role> ParseRole(const std::string& name) {
  if (name == "worker") return Role::kWorker;
  if (name == "coordinator") return Role::kCoordinator;
  if (name == "admin") return Role::kAdmin;
  return absl::InvalidArgumentError(absl::StrCat(
      "role '", name, "' is not one of worker, coordinator, admin"));
}

absl::StatusOr<CredentialStore> CredentialStore::Parse(const std::string& text) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError("credentials: not a JSON object");
  }
  auto list = json.find("credentials");
  if (list == json.end() || !list->is_array()) {
    return absl::InvalidArgumentError(
        "credentials: field 'credentials' must be an array");
  }
  CredentialStore store;
  std::set<std::string> tokens;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& e = (*list)[i];
    const std::string where = absl::StrCat("credentials[", i, "]");
    if (!e.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": not an object"));
    }
    Entry entry;
    for (const char* field : {"token", "job", "role"}) {
      auto f = e.find(field);
      if (f == e.end() || !f->is_string() ||
          f->get<std::string>().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".", field, ": must be a non-empty string"));
      }
    }
    entry.token = e["token"].get<std::string>();
    entry.caller.job = e["job"].get<std::string>();
    // Job names scope checkpoint paths on the PS: keep them path-safe.
    for (char c : entry.caller.job) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' &&
          c != '_' && c != '.') {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".job: '", entry.caller.job,
            "' may hold only letters, digits, '-', '_' and '.'"));
      }
    }
    if (entry.caller.job[0] == '.') {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".job: '", entry.caller.job, "' must not start with '.'"));
    }
    auto role = ParseRole(e["role"].get<std::string>());
    if (!role.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".role: ", role.status().message()));
    }
    entry.caller.role = *role;
    if (!tokens.insert(entry.token).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".token: repeats an earlier entry's token"));
    }
    store.entries_.push_back(std::move(entry));
  }
  return store;
}

absl::StatusOr<CredentialStore> CredentialStore::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("--auth-file: cannot read '", path, "'"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  auto store = Parse(text.str());
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("--auth-file '", path,
                                     "': ", store.status().message()));
  }
  return store;
}

absl::StatusOr<Caller> CredentialStore::AuthenticateToken(
    const std::string& token) const {
  const Caller* found = nullptr;
  for (const Entry& e : entries_) {
    if (ConstantTimeEquals(e.token, token)) found = &e.caller;
  }
  if (found == nullptr) {
    return absl::UnauthenticatedError("the bearer token is not valid here");
  }
  return *found;
}

absl::StatusOr<Caller> CredentialStore::Authenticate(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  auto it = metadata.find(kAuthorizationKey);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "no credentials: this server requires 'authorization: Bearer "
        "<token>' metadata (--auth-token or STRATA_AUTH_TOKEN)");
  }
  std::string value(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(value, kBearer)) {
    return absl::UnauthenticatedError(
        "the authorization metadata is not 'Bearer <token>'");
  }
  return AuthenticateToken(value.substr(kBearer.size()));
}

absl::Status RequireRole(const Caller& caller, Role needed,
                         const char* method) {
  if (caller.Has(needed)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      method, " needs the ", RoleName(needed), " role; the caller (job '",
      caller.job, "') is a ", RoleName(caller.role)));
}

}  // namespace strata

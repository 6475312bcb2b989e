// The transport-security flags every Strata binary accepts, defined in
// security_flags.cc (the strata_security_flags target, linked only into
// executables; libraries take the resulting options, never the flags):
//   --tls-cert, --tls-key   this process's certificate chain and key (PEM)
//   --tls-ca                the CA that verifies peers (PEM)
//   --tls-client-auth       servers require and verify client certificates
//   --tls-server-name       clients: the name the servers' certificates carry
//                           when it is not the host dialled
//   --auth-file             servers: credentials JSON (see common/auth.h)
//   --auth-token            clients: bearer token (default $STRATA_AUTH_TOKEN)
// The functions read the flags (call them after parsing) and the files they
// name; they are thread-compatible.
#ifndef STRATA_RPC_SECURITY_FLAGS_H_
#define STRATA_RPC_SECURITY_FLAGS_H_

#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "rpc/auth.h"
#include "rpc/tls.h"

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(bool, tls_client_auth);
ABSL_DECLARE_FLAG(std::string, tls_server_name);
ABSL_DECLARE_FLAG(std::string, auth_file);
ABSL_DECLARE_FLAG(std::string, auth_token);

namespace strata {

// What a server daemon takes from the security flags.
struct SecurityOptions {
  TlsOptions tls;         // --tls-*: how its servers serve
  ClientSecurity client;  // the same TLS and --auth-token: how it dials
  // --auth-file's credentials; null when not given.
  std::shared_ptr<const CredentialStore> credentials;
};

// TLS settings from the --tls-* flags (files read now). Errors: those of
// LoadTlsOptions.
absl::StatusOr<TlsOptions> TlsFromFlags();

// How this process's clients dial: the TLS flags and the token
// (--auth-token, else $STRATA_AUTH_TOKEN). Errors: those of TlsFromFlags.
absl::StatusOr<ClientSecurity> ClientSecurityFromFlags();

// The --auth-file credentials; null when not given. Errors: those of
// CredentialStore::Load.
absl::StatusOr<std::shared_ptr<const CredentialStore>> CredentialsFromFlags();

// All three above, the first error returned.
absl::StatusOr<SecurityOptions> SecurityFromFlags();

}  // namespace strata

#endif  // STRATA_RPC_SECURITY_FLAGS_H_

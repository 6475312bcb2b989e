// The security flags' definitions. Only executables link this file (the
// strata_security_flags target): libraries never read flags.
#include "rpc/security_flags.h"

#include <cstdlib>
#include <utility>

#include "absl/flags/flag.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of this process; with --tls-key turns TLS on "
          "for its servers and is presented as a client certificate");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s) that verify the servers this process dials "
          "(TLS on for its clients) and, with --tls-client-auth, its clients");
ABSL_FLAG(bool, tls_client_auth, false,
          "Mutual TLS: servers require a client certificate signed by "
          "--tls-ca");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name the servers' certificates must carry when it is not the host "
          "dialled (default: the host)");
ABSL_FLAG(std::string, auth_file, "",
          "Credentials JSON {\"credentials\":[{\"token\",\"job\",\"role\"}]}: "
          "every call to this process's servers must carry one of the tokens "
          "(default: no authentication)");
ABSL_FLAG(std::string, auth_token, "",
          "Bearer token this process sends on its calls (default: "
          "$STRATA_AUTH_TOKEN)");

namespace strata {
namespace {

ClientSecurity ClientSecurityWith(TlsOptions tls) {
  ClientSecurity security;
  security.tls = std::move(tls);
  security.auth_token = absl::GetFlag(FLAGS_auth_token);
  if (security.auth_token.empty()) {
    if (const char* env = std::getenv("STRATA_AUTH_TOKEN")) {
      security.auth_token = env;
    }
  }
  return security;
}

}  // namespace

absl::StatusOr<TlsOptions> TlsFromFlags() {
  TlsFiles files;
  files.cert_file = absl::GetFlag(FLAGS_tls_cert);
  files.key_file = absl::GetFlag(FLAGS_tls_key);
  files.ca_file = absl::GetFlag(FLAGS_tls_ca);
  files.client_auth = absl::GetFlag(FLAGS_tls_client_auth);
  auto tls = LoadTlsOptions(files);
  if (tls.ok()) tls->server_name = absl::GetFlag(FLAGS_tls_server_name);
  return tls;
}

absl::StatusOr<ClientSecurity> ClientSecurityFromFlags() {
  STRATA_ASSIGN_OR_RETURN(TlsOptions tls, TlsFromFlags());
  return ClientSecurityWith(std::move(tls));
}

absl::StatusOr<std::shared_ptr<const CredentialStore>> CredentialsFromFlags() {
  const std::string path = absl::GetFlag(FLAGS_auth_file);
  if (path.empty()) return std::shared_ptr<const CredentialStore>();
  auto store = CredentialStore::Load(path);
  if (!store.ok()) return store.status();
  return std::shared_ptr<const CredentialStore>(
      std::make_shared<CredentialStore>(*std::move(store)));
}

absl::StatusOr<SecurityOptions> SecurityFromFlags() {
  SecurityOptions options;
  STRATA_ASSIGN_OR_RETURN(options.tls, TlsFromFlags());
  options.client = ClientSecurityWith(options.tls);
  STRATA_ASSIGN_OR_RETURN(options.credentials, CredentialsFromFlags());
  return options;
}

}  // namespace strata

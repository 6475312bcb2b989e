// Transport security shared by every Strata server and client: TLS (and
// mutual TLS) from PEM files, and the bearer token a client sends in each
// call's metadata. Plaintext stays the default: an empty TlsOptions means an
// insecure channel or listening port.
#ifndef STRATA_RPC_TLS_H_
#define STRATA_RPC_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace strata {

// Where the PEM files are (as given by --tls-cert, --tls-key, --tls-ca,
// --tls-client-auth).
struct TlsFiles {
  std::string cert_file;  // this process's certificate chain
  std::string key_file;   // its private key
  std::string ca_file;    // roots that verify the peer
  bool client_auth = false;
};

// TLS settings with the PEM contents loaded. Not enabled: plaintext.
//  - A server needs cert_pem and key_pem; with client_auth it requires a
//    client certificate and verifies it against ca_pem.
//  - A client verifies the server against ca_pem (the system roots when
//    empty) and presents cert_pem/key_pem when set (mutual TLS).
struct TlsOptions {
  bool enabled = false;
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
  bool client_auth = false;
  // Clients: the name the server certificate must carry, when it differs
  // from the host of the target (e.g. an IP target and a DNS-only
  // certificate). Empty: the target's host.
  std::string server_name;
};

// Reads the files. TLS is enabled when any file is named. Errors:
// INVALID_ARGUMENT for an incomplete set (a cert without its key, or
// --tls-client-auth without a CA) or a file that holds no PEM block of the
// expected kind; NOT_FOUND for a file that cannot be read. Each error names
// the file (and the flag).
absl::StatusOr<TlsOptions> LoadTlsOptions(const TlsFiles& files);

// Server credentials: insecure when !enabled. Errors: INVALID_ARGUMENT when
// enabled without a certificate and key, or client_auth without a CA.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& tls);

// Channel credentials: insecure when !enabled. (LoadTlsOptions has checked
// that a certificate comes with its key; a mismatched pair fails the
// handshake, so calls fail UNAVAILABLE.)
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const TlsOptions& tls);

// How a client reaches a server: TLS settings and the bearer token sent as
// "authorization: Bearer <token>" on every call (none when empty).
struct ClientSecurity {
  TlsOptions tls;
  std::string auth_token;
};

// A replicated PS task's address: its replicas' HOST:PORT, comma-separated
// ("127.0.0.1:7001,127.0.0.1:7002", or names: "ps-0-r0:5000,ps-0-r1:5000").
bool IsReplicaSetTarget(const std::string& target);
// The gRPC target for `target`: a replica set becomes an "ipv4:" (or
// "ipv6:") address list, which the channel tries in order; others as is.
// A host that is a name is resolved now (its first IPv4 address, else its
// first IPv6 one), so each name must stand for a stable address (on
// Kubernetes, a ClusterIP Service per replica); a name that does not
// resolve, or a list that resolves to both families, is left as is (the
// channel then fails naming the target).
std::string ChannelTarget(const std::string& target);
// False for a replica set that ChannelTarget cannot resolve now (a channel
// made from it never connects: make it again later); true otherwise.
bool TargetResolves(const std::string& target);

// A channel to `target` (a replica set too, see ChannelTarget) with
// `security`: TLS per security.tls, and an
// interceptor that adds the token to every call's metadata (plaintext too:
// local clusters may use tokens without TLS).
std::shared_ptr<grpc::Channel> CreateChannel(const std::string& target,
                                             const ClientSecurity& security,
                                             grpc::ChannelArguments args = {});

// The metadata key and the value for a token.
inline constexpr char kAuthorizationKey[] = "authorization";
std::string BearerValue(const std::string& token);

}  // namespace strata

#endif  // STRATA_RPC_TLS_H_

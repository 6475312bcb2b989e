#include "rpc/tls.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace strata {
namespace {

// Reads a PEM file and checks that it holds a block of `kind` (the word
// after "-----BEGIN ", e.g. "CERTIFICATE", or "PRIVATE KEY" which also
// matches "RSA PRIVATE KEY" and "EC PRIVATE KEY").
absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag,
                                    const char* kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(flag, ": cannot read '", path, "'"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string pem = text.str();
  if (!absl::StrContains(pem, "-----BEGIN ") ||
      !absl::StrContains(pem, absl::StrCat(kind, "-----"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": '", path, "' holds no PEM ", kind, " block"));
  }
  return pem;
}

// Adds "authorization: Bearer <token>" before each call's initial metadata.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* value) : value_(value) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthorizationKey, *value_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const value_;
};

class TokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string value)
      : value_(std::move(value)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new TokenInterceptor(&value_);
  }

 private:
  const std::string value_;
};

}  // namespace

absl::StatusOr<TlsOptions> LoadTlsOptions(const TlsFiles& files) {
  TlsOptions tls;
  tls.client_auth = files.client_auth;
  if (files.cert_file.empty() && files.key_file.empty() &&
      files.ca_file.empty()) {
    if (files.client_auth) {
      return absl::InvalidArgumentError(
          "--tls-client-auth needs --tls-ca (the roots that verify client "
          "certificates) and --tls-cert/--tls-key");
    }
    return tls;
  }
  tls.enabled = true;
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        files.cert_file.empty()
            ? absl::StrCat("--tls-key '", files.key_file,
                           "' is given without --tls-cert")
            : absl::StrCat("--tls-cert '", files.cert_file,
                           "' is given without --tls-key"));
  }
  if (files.client_auth && files.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-auth needs --tls-ca (the roots that verify client "
        "certificates)");
  }
  if (!files.cert_file.empty()) {
    auto cert = ReadPem(files.cert_file, "--tls-cert", "CERTIFICATE");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(files.key_file, "--tls-key", "PRIVATE KEY");
    if (!key.ok()) return key.status();
    tls.cert_pem = *std::move(cert);
    tls.key_pem = *std::move(key);
  }
  if (!files.ca_file.empty()) {
    auto ca = ReadPem(files.ca_file, "--tls-ca", "CERTIFICATE");
    if (!ca.ok()) return ca.status();
    tls.ca_pem = *std::move(ca);
  }
  return tls;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& tls) {
  if (!tls.enabled) return grpc::InsecureServerCredentials();
  if (tls.cert_pem.empty() || tls.key_pem.empty()) {
    return absl::InvalidArgumentError(
        "TLS on a server needs a certificate and key (--tls-cert, --tls-key)");
  }
  if (tls.client_auth && tls.ca_pem.empty()) {
    return absl::InvalidArgumentError(
        "mutual TLS (--tls-client-auth) needs a CA (--tls-ca)");
  }
  grpc::SslServerCredentialsOptions options(
      tls.client_auth
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_root_certs = tls.ca_pem;
  options.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const TlsOptions& tls) {
  if (!tls.enabled) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls.ca_pem;
  options.pem_private_key = tls.key_pem;
  options.pem_cert_chain = tls.cert_pem;
  return grpc::SslCredentials(options);
}

std::string BearerValue(const std::string& token) {
  return absl::StrCat("Bearer ", token);
}

bool IsReplicaSetTarget(const std::string& target) {
  return target.find(',') != std::string::npos &&
         target.find("://") == std::string::npos &&
         !absl::StartsWith(target, "ipv4:") &&
         !absl::StartsWith(target, "ipv6:");
}

namespace {

// The IP literal `host` stands for: itself, or the first address of
// `family` it resolves to; "" when it has none.
std::string Resolve(const std::string& host, int family) {
  in6_addr literal;
  if (inet_pton(family, host.c_str(), &literal) == 1) return host;
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 ||
      found == nullptr) {
    return "";
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* address =
      family == AF_INET
          ? static_cast<const void*>(
                &reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr)
          : static_cast<const void*>(
                &reinterpret_cast<const sockaddr_in6*>(found->ai_addr)
                     ->sin6_addr);
  const bool ok = inet_ntop(family, address, text, sizeof text) != nullptr;
  freeaddrinfo(found);
  return ok ? std::string(text) : std::string();
}

}  // namespace

std::string ChannelTarget(const std::string& target) {
  if (!IsReplicaSetTarget(target)) return target;
  // pick_first over the addresses in order: the channel connects to the
  // first that accepts, which is the primary (backups do not listen).
  std::vector<std::string> v4, v6;
  for (absl::string_view entry : absl::StrSplit(target, ',')) {
    const size_t colon = entry.rfind(':');
    if (colon == absl::string_view::npos) return target;
    std::string host(entry.substr(0, colon));
    const absl::string_view port = entry.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    if (std::string a = Resolve(host, AF_INET); !a.empty()) {
      v4.push_back(absl::StrCat(a, ":", port));
    } else if (std::string b = Resolve(host, AF_INET6); !b.empty()) {
      v6.push_back(absl::StrCat("[", b, "]:", port));
    } else {
      return target;
    }
  }
  if (!v4.empty() && !v6.empty()) return target;
  return v6.empty() ? absl::StrCat("ipv4:", absl::StrJoin(v4, ","))
                    : absl::StrCat("ipv6:", absl::StrJoin(v6, ","));
}

bool TargetResolves(const std::string& target) {
  return !IsReplicaSetTarget(target) || ChannelTarget(target) != target;
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& raw_target,
                                             const ClientSecurity& security,
                                             grpc::ChannelArguments args) {
  const std::string target = ChannelTarget(raw_target);
  if (target != raw_target) {
    // After the primary's death, try the next replica soon.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // A primary that hangs (its connection open, nothing answered) is
    // noticed within about 2 s: the connection closes, calls fail
    // UNAVAILABLE and retry, and the channel moves on to a replica that
    // listens (a hung process's port accepts but never completes the
    // handshake, which the 100 ms minimum connect time gives up on).
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  if (security.tls.enabled && !security.tls.server_name.empty()) {
    args.SetSslTargetNameOverride(security.tls.server_name);
  }
  std::shared_ptr<grpc::ChannelCredentials> creds =
      MakeChannelCredentials(security.tls);
  if (security.auth_token.empty()) {
    return grpc::CreateCustomChannel(target, creds, args);
  }
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<TokenInterceptorFactory>(
      BearerValue(security.auth_token)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, creds, args, std::move(interceptors));
}

}  // namespace strata

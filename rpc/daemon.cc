#include "rpc/daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tf_config.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

namespace strata {
namespace {

// StopFlag's state: set by the handler, which then writes a byte to the
// pipe so that Wait() wakes whichever thread took the signal.
std::atomic<bool> g_stop{false};
int g_wake[2] = {-1, -1};

void OnStopSignal(int) {
  const int saved = errno;
  g_stop.store(true);
  if (g_wake[1] >= 0 && ::write(g_wake[1], "x", 1) < 0) {
    // Nothing to do in a handler; Wait() also times out and rechecks.
  }
  errno = saved;
}

}  // namespace

StopSignals StopSignals::Block() {
  StopSignals signals;
  sigemptyset(&signals.set_);
  sigaddset(&signals.set_, SIGTERM);
  sigaddset(&signals.set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals.set_, nullptr);
  return signals;
}

int StopSignals::Wait() const {
  int sig = 0;
  sigwait(&set_, &sig);
  return sig;
}

int StopSignals::WaitFor(absl::Duration timeout) const {
  const timespec wait = absl::ToTimespec(timeout);
  const int sig = sigtimedwait(&set_, nullptr, &wait);
  return sig > 0 ? sig : 0;
}

StopFlag* StopFlag::Install() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
      g_wake[0] = g_wake[1] = -1;
    }
    struct sigaction sa {};
    sa.sa_handler = OnStopSignal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
  });
  static StopFlag* const flag = new StopFlag();
  return flag;
}

const std::atomic<bool>* StopFlag::flag() const { return &g_stop; }

void StopFlag::Wait() const {
  while (!g_stop.load()) {
    // The byte is never read, so every later poll returns at once too; the
    // bound covers a pipe that could not be made.
    pollfd wake{g_wake[0], POLLIN, 0};
    ::poll(&wake, g_wake[0] >= 0 ? 1 : 0, 200);
  }
}

absl::StatusOr<DaemonServerOptions> ListeningOptions(const std::string& host,
                                                     int port,
                                                     const TlsOptions& tls) {
  auto credentials = MakeServerCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  DaemonServerOptions serving;
  serving.host = host;
  serving.port = port;
  serving.credentials = *credentials;
  return serving;
}

absl::StatusOr<std::unique_ptr<DaemonServer>> DaemonServer::Start(
    const DaemonServerOptions& options) {
  std::unique_ptr<DaemonServer> s(new DaemonServer());
  s->host_ = options.host;
  s->health_services_ = options.health_services;
  std::shared_ptr<grpc::ServerCredentials> credentials =
      options.credentials ? options.credentials
                          : grpc::InsecureServerCredentials();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = JoinHostPort(options.host, options.port);
  builder.AddListeningPort(address, credentials, &s->port_);
  for (grpc::Service* service : options.services) {
    builder.RegisterService(service);
  }
  // gRPC adds its default health service only to a server with a service
  // of its own: an empty generic one (every method: UNIMPLEMENTED).
  if (options.services.empty()) {
    builder.RegisterCallbackGenericService(&s->no_methods_);
  }
  if (options.configure_builder) options.configure_builder(builder);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    s->server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  s->SetServing(true);
  if (options.metrics_port >= 0) {
    auto http = MetricsHttpServer::Start(options.host, options.metrics_port,
                                         options.metrics);
    if (!http.ok()) {
      s->Shutdown(absl::ZeroDuration());
      return http.status();
    }
    s->http_ = *std::move(http);
  }
  return s;
}

DaemonServer::~DaemonServer() { StopMetrics(); }

std::string DaemonServer::address() const {
  return JoinHostPort(host_, port_);
}

void DaemonServer::SetServing(bool serving) {
  if (server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  for (const std::string& name : health_services_) {
    health->SetServingStatus(name, serving);
  }
  health->SetServingStatus(serving);
}

void DaemonServer::Shutdown(absl::Duration grace) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(grace));
  server_->Wait();
}

void DaemonServer::StopMetrics() {
  if (http_) http_->Stop();
}

}  // namespace strata

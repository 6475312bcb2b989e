#include "bench/baselines.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "bench/echo.grpc.pb.h"
#include "bench/echo.pb.h"
#include "grpcpp/grpcpp.h"

namespace strata {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSocketTimeoutSeconds = 30;
constexpr int kRawWarmupRounds = 1;
constexpr int kPingPongWarmupRounds = 10;
constexpr int kEchoWarmupCalls = 3;
constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kCallTimeout = std::chrono::seconds(60);
constexpr auto kStreamTimeoutPerRound = std::chrono::milliseconds(10);

// Exit codes of the socket baselines' child before its body runs.
constexpr int kChildConnectFailed = 2;
constexpr int kChildSetnsFailed = 3;

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start)
      .count();
}

absl::Status ErrnoError(int error, absl::string_view what) {
  if (error == EAGAIN || error == EWOULDBLOCK) {
    return absl::DeadlineExceededError(absl::StrCat(
        what, ": no progress within ", kSocketTimeoutSeconds, " s"));
  }
  return absl::ErrnoToStatus(error, what);
}

absl::Status SocketError(absl::string_view what) {
  return ErrnoError(errno, what);
}

// Owns a file descriptor; closes it on destruction.
class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// ---------------------------------------------------------------------------
// Blocking socket helpers. They only make system calls, so the forked child
// (a copy of a possibly multi-threaded process) may use them too.

// Sets send/receive timeouts and TCP_NODELAY; returns false on failure.
bool ConfigureSocket(int fd) {
  timeval timeout{};
  timeout.tv_sec = kSocketTimeoutSeconds;
  const int one = 1;
  return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)) ==
             0 &&
         setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout)) ==
             0 &&
         setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0;
}

// Sends all of buf; false on error or timeout (errno set).
bool SendAll(int fd, const char* buf, size_t len) {
  while (len > 0) {
    const ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    buf += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// Receives exactly len bytes; false on error, timeout or EOF (errno =
// ECONNRESET for EOF).
bool RecvAll(int fd, char* buf, size_t len) {
  while (len > 0) {
    const ssize_t n = recv(fd, buf, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = ECONNRESET;
      return false;
    }
    buf += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// Sends `len` bytes of `out` and receives `len` bytes into `in` on `fd` at
// the same time, with non-blocking calls driven by poll(); only system
// calls (a forked child runs it). False on error, EOF (errno ECONNRESET) or
// no progress for kSocketTimeoutSeconds (errno EAGAIN).
bool DuplexAll(int fd, const char* out, char* in, size_t len) {
  size_t sent = 0;
  size_t received = 0;
  while (sent < len || received < len) {
    pollfd p{};
    p.fd = fd;
    p.events = static_cast<short>((received < len ? POLLIN : 0) |
                                  (sent < len ? POLLOUT : 0));
    const int ready = poll(&p, 1, kSocketTimeoutSeconds * 1000);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (ready == 0) {
      errno = EAGAIN;
      return false;
    }
    if (sent < len && (p.revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      const ssize_t n =
          send(fd, out + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return false;
      }
      if (n > 0) sent += static_cast<size_t>(n);
    }
    if (received < len && (p.revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
      const ssize_t n = recv(fd, in + received, len - received, MSG_DONTWAIT);
      if (n == 0) {
        errno = ECONNRESET;
        return false;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return false;
      }
      if (n > 0) received += static_cast<size_t>(n);
    }
  }
  return true;
}

// `bytes` moved in `seconds`, as a TransferResult.
TransferResult Throughput(int64_t bytes, double seconds) {
  TransferResult result;
  result.seconds = seconds;
  result.bytes = bytes;
  result.gbytes_per_sec =
      seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
  return result;
}

// The error for a baseline child that exited (wait `status`) before it
// connected.
absl::Status EarlyChildExit(int status, const SocketLink& link,
                            const std::string& listen_address) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == kChildSetnsFailed) {
    return absl::InternalError(absl::StrCat(
        "baseline child cannot join network namespace ", link.child_netns));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == kChildConnectFailed) {
    return absl::InternalError(absl::StrCat(
        "baseline child cannot connect to ", listen_address,
        link.child_netns.empty() ? ""
                                 : absl::StrCat(" from ", link.child_netns)));
  }
  return absl::InternalError(absl::StrCat(
      "baseline child exited before connecting (wait status ", status, ")"));
}

// A child process connected to this one over TCP (on a SocketLink). The
// destructor closes the socket and reaps the child (killing it first unless
// Finish() already reaped it).
class Peer {
 public:
  // Forks a child that joins link.child_netns (if set), connects to the
  // parent on link.listen_address and runs `child_body(fd)`, exiting with
  // its return value. `child_body` must only make system calls (no malloc,
  // no locks): the parent may be multi-threaded.
  template <typename ChildBody>
  static absl::StatusOr<std::unique_ptr<Peer>> Start(const SocketLink& link,
                                                     ChildBody child_body);

  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer() {
    if (fd_ >= 0) close(fd_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }

  int fd() const { return fd_; }

  // Closes the socket and waits for the child (bounded by its socket
  // timeouts). Errors: INTERNAL when the child did not exit with 0.
  absl::Status Finish() {
    close(fd_);
    fd_ = -1;
    int status = 0;
    pid_t r;
    while ((r = waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    if (r < 0) return SocketError("waitpid");
    pid_ = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return absl::InternalError(
          absl::StrCat("baseline child process failed (wait status ", status,
                       ")"));
    }
    return absl::OkStatus();
  }

 private:
  Peer(pid_t pid, int fd) : pid_(pid), fd_(fd) {}

  pid_t pid_;
  int fd_;
};

template <typename ChildBody>
absl::StatusOr<std::unique_ptr<Peer>> Peer::Start(const SocketLink& link,
                                                  ChildBody child_body) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  const std::string listen_address =
      link.listen_address.empty() ? "127.0.0.1" : link.listen_address;
  if (inet_pton(AF_INET, listen_address.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "baseline listen address is not IPv4: ", listen_address));
  }
  // Opened before the fork: the child then only needs setns().
  const ScopedFd netns(link.child_netns.empty()
                           ? -1
                           : open(link.child_netns.c_str(),
                                  O_RDONLY | O_CLOEXEC));
  if (!link.child_netns.empty() && netns.get() < 0) {
    const int error = errno;
    return ErrnoError(error, absl::StrCat("open ", link.child_netns));
  }
  ScopedFd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.get() < 0) return SocketError("socket");
  socklen_t addr_len = sizeof(addr);
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr),
           sizeof(addr)) != 0 ||
      listen(listener.get(), 1) != 0 ||
      getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr),
                  &addr_len) != 0) {
    const int error = errno;
    return ErrnoError(error,
                      absl::StrCat("bind/listen on ", listen_address, ":0"));
  }
  const std::string where =
      absl::StrCat(listen_address, ":", ntohs(addr.sin_port));
  const int listen_fd = listener.get();
  const int netns_fd = netns.get();

  const pid_t pid = fork();
  if (pid < 0) return SocketError("fork");
  if (pid == 0) {
    // Child: system calls only, then _exit. The socket is created after
    // setns() so that it belongs to the child's namespace.
    close(listen_fd);
    if (netns_fd >= 0) {
      if (setns(netns_fd, CLONE_NEWNET) != 0) _exit(kChildSetnsFailed);
      close(netns_fd);
    }
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || !ConfigureSocket(fd) ||
        connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      _exit(kChildConnectFailed);
    }
    const int code = child_body(fd);
    close(fd);
    _exit(code);
  }

  // Parent: accept the child's connection, bounded in time; a child that
  // exits first (cannot join the namespace or connect) fails fast.
  auto peer = std::unique_ptr<Peer>(new Peer(pid, -1));
  const Clock::time_point deadline =
      Clock::now() + std::chrono::seconds(kSocketTimeoutSeconds);
  while (true) {
    pollfd pfd{listen_fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, 100);
    if (ready > 0) break;
    if (ready < 0 && errno != EINTR) return SocketError("poll");
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      peer->pid_ = -1;
      return EarlyChildExit(status, link, where);
    }
    if (Clock::now() >= deadline) {
      return ErrnoError(EAGAIN,
                        absl::StrCat("accept from baseline child on ", where));
    }
  }
  const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return SocketError("accept");
  peer->fd_ = fd;
  if (!ConfigureSocket(fd)) return SocketError("setsockopt");
  return peer;
}

absl::Status ValidateSizes(size_t bytes, int iterations) {
  if (bytes == 0) return absl::InvalidArgumentError("message size must be > 0");
  if (iterations <= 0) {
    return absl::InvalidArgumentError("iterations must be > 0");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// gRPC echo.

absl::Status FromGrpc(const grpc::Status& status,
                      absl::string_view method = "Echo") {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(method, " RPC: ", status.error_message()));
}

// Opens a channel of its own (not shared with other channels to the same
// target) whose message size limits fit `bytes`, and waits for it to connect.
absl::StatusOr<std::unique_ptr<Echo::Stub>> ConnectEcho(
    const std::string& target, size_t bytes) {
  constexpr size_t kSlack = 1 << 16;  // protobuf framing
  if (bytes > static_cast<size_t>(INT_MAX) - kSlack) {
    return absl::InvalidArgumentError(
        absl::StrCat("echo payload of ", bytes, " bytes exceeds 2 GB"));
  }
  const int limit = static_cast<int>(std::max<size_t>(bytes + kSlack, 4 << 20));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(limit);
  args.SetMaxSendMessageSize(limit);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);  // always the direct path
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      target, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 kConnectTimeout)) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to echo server at ", target));
  }
  return Echo::NewStub(channel);
}

absl::Status CallEcho(Echo::Stub& stub, const EchoMessage& request,
                      EchoMessage* reply) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
  return FromGrpc(stub.Echo(&context, request, reply));
}

EchoMessage MakePayload(size_t bytes) {
  EchoMessage message;
  message.mutable_data()->assign(bytes, '\x5a');
  return message;
}

}  // namespace

// ---------------------------------------------------------------------------

namespace {

// The raw-socket transfers' frame: starts `child_body` as the peer, runs
// kRawWarmupRounds untimed and then `iterations` timed calls of
// `round(fd)`, waits for the peer, runs `check()`, and returns the
// throughput of `bytes_per_round` per timed round.
template <typename ChildBody, typename Round, typename Check>
absl::StatusOr<TransferResult> TimedRawRounds(const SocketLink& link,
                                              size_t bytes_per_round,
                                              int iterations,
                                              ChildBody child_body,
                                              Round round, Check check) {
  absl::StatusOr<std::unique_ptr<Peer>> peer = Peer::Start(link, child_body);
  if (!peer.ok()) return peer.status();
  const int fd = (*peer)->fd();
  Clock::time_point start;
  for (int i = 0; i < kRawWarmupRounds + iterations; ++i) {
    if (i == kRawWarmupRounds) start = Clock::now();
    if (absl::Status s = round(fd); !s.ok()) return s;
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  if (absl::Status s = (*peer)->Finish(); !s.ok()) return s;
  if (absl::Status s = check(); !s.ok()) return s;
  return Throughput(static_cast<int64_t>(bytes_per_round) * iterations,
                    seconds);
}
template <typename ChildBody, typename Round>
absl::StatusOr<TransferResult> TimedRawRounds(const SocketLink& link,
                                              size_t bytes_per_round,
                                              int iterations,
                                              ChildBody child_body,
                                              Round round) {
  return TimedRawRounds(link, bytes_per_round, iterations, child_body, round,
                        [] { return absl::OkStatus(); });
}

}  // namespace

absl::StatusOr<TransferResult> RawSocketTransfer(size_t message_bytes,
                                                 int iterations,
                                                 const SocketLink& link) {
  if (absl::Status s = ValidateSizes(message_bytes, iterations); !s.ok()) {
    return s;
  }
  // One buffer, touched before the fork: the parent sends from it, the child
  // receives into its copy-on-write copy.
  std::vector<char> buffer(message_bytes, '\x5a');
  char* const data = buffer.data();
  const int rounds = kRawWarmupRounds + iterations;

  return TimedRawRounds(
      link, message_bytes, iterations,
      [data, message_bytes, rounds](int fd) {
        const char ack = 1;
        for (int i = 0; i < rounds; ++i) {
          if (!RecvAll(fd, data, message_bytes) || !SendAll(fd, &ack, 1)) {
            return 1;
          }
        }
        return 0;
      },
      [data, message_bytes](int fd) {
        char ack = 0;
        if (!SendAll(fd, data, message_bytes)) return SocketError("send");
        if (!RecvAll(fd, &ack, 1)) return SocketError("recv ack");
        return absl::OkStatus();
      });
}

absl::StatusOr<TransferResult> RawSocketDuplexTransfer(
    size_t message_bytes, int iterations, const SocketLink& link) {
  if (absl::Status s = ValidateSizes(message_bytes, iterations); !s.ok()) {
    return s;
  }
  // Both buffers touched before the fork: each side sends from `out` and
  // receives into `in` (the child into its copy-on-write copies).
  std::vector<char> out(message_bytes, '\x5a');
  std::vector<char> in(message_bytes, 0);
  char* const out_data = out.data();
  char* const in_data = in.data();
  const int rounds = kRawWarmupRounds + iterations;

  return TimedRawRounds(
      link, message_bytes, iterations,
      [out_data, in_data, message_bytes, rounds](int fd) {
        for (int i = 0; i < rounds; ++i) {
          if (!DuplexAll(fd, out_data, in_data, message_bytes)) return 1;
        }
        return 0;
      },
      [&](int fd) {
        if (!DuplexAll(fd, out_data, in_data, message_bytes)) {
          return SocketError("duplex send/recv");
        }
        return absl::OkStatus();
      },
      [&] {
        return in[0] == '\x5a' && in[message_bytes - 1] == '\x5a'
                   ? absl::OkStatus()
                   : absl::InternalError("duplex: the received bytes differ");
      });
}

absl::StatusOr<std::vector<double>> RawSocketPingPongMicros(
    size_t bytes, int iterations, const SocketLink& link) {
  if (absl::Status s = ValidateSizes(bytes, iterations); !s.ok()) return s;
  std::vector<char> out(bytes, '\x5a');
  std::vector<char> in(bytes, 0);
  char* const in_data = in.data();
  const int rounds = kPingPongWarmupRounds + iterations;

  absl::StatusOr<std::unique_ptr<Peer>> peer =
      Peer::Start(link, [in_data, bytes, rounds](int fd) {
        for (int i = 0; i < rounds; ++i) {
          if (!RecvAll(fd, in_data, bytes) || !SendAll(fd, in_data, bytes)) {
            return 1;
          }
        }
        return 0;
      });
  if (!peer.ok()) return peer.status();
  const int fd = (*peer)->fd();

  std::vector<double> micros;
  micros.reserve(iterations);
  for (int i = 0; i < rounds; ++i) {
    const Clock::time_point start = Clock::now();
    if (!SendAll(fd, out.data(), bytes)) return SocketError("send");
    if (!RecvAll(fd, in.data(), bytes)) return SocketError("recv");
    if (i >= kPingPongWarmupRounds) micros.push_back(MicrosSince(start));
  }
  if (absl::Status s = (*peer)->Finish(); !s.ok()) return s;
  return micros;
}

// ---------------------------------------------------------------------------

class EchoServer::ServiceImpl final : public Echo::CallbackService {
 public:
  // Echoes each message of one EchoStream: read, write it back, read the
  // next; finishes OK when the client is done writing. Deletes itself.
  class StreamReactor final
      : public grpc::ServerBidiReactor<EchoMessage, EchoMessage> {
   public:
    StreamReactor() { StartRead(&message_); }

    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status::OK);
        return;
      }
      StartWrite(&message_);
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "echo stream write failed"));
        return;
      }
      StartRead(&message_);
    }
    void OnDone() override { delete this; }

   private:
    EchoMessage message_;  // one read or one write in flight at a time
  };

  grpc::ServerBidiReactor<EchoMessage, EchoMessage>* EchoStream(
      grpc::CallbackServerContext* /*context*/) override {
    return new StreamReactor();
  }

  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context,
                                 const EchoMessage* request,
                                 EchoMessage* reply) override {
    *reply->mutable_data() = request->data();
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

EchoServer::EchoServer(std::unique_ptr<ServiceImpl> service,
                       std::unique_ptr<grpc::Server> server, std::string host,
                       int port)
    : service_(std::move(service)),
      server_(std::move(server)),
      host_(std::move(host)),
      port_(port) {}

EchoServer::~EchoServer() {
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::seconds(1));
  server_->Wait();
}

absl::StatusOr<std::unique_ptr<EchoServer>> EchoServer::Start(
    int max_message_bytes, const std::string& host) {
  const std::string bracketed =
      !host.empty() && host.find(':') != std::string::npos &&
              host.front() != '['
          ? absl::StrCat("[", host, "]")
          : host;
  auto service = std::make_unique<ServiceImpl>();
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(bracketed, ":0"),
                           grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  builder.SetMaxSendMessageSize(max_message_bytes);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start the echo server on ", bracketed, ":0"));
  }
  return std::unique_ptr<EchoServer>(
      new EchoServer(std::move(service), std::move(server), bracketed, port));
}

std::string EchoServer::target() const {
  return absl::StrCat(host_, ":", port_);
}

absl::StatusOr<std::vector<double>> EchoLatencyMicros(const std::string& target,
                                                      size_t bytes,
                                                      int iterations) {
  if (iterations <= 0) {
    return absl::InvalidArgumentError("iterations must be > 0");
  }
  absl::StatusOr<std::unique_ptr<Echo::Stub>> stub = ConnectEcho(target, bytes);
  if (!stub.ok()) return stub.status();
  const EchoMessage request = MakePayload(bytes);
  EchoMessage reply;

  std::vector<double> micros;
  micros.reserve(iterations);
  for (int i = 0; i < kEchoWarmupCalls + iterations; ++i) {
    const Clock::time_point start = Clock::now();
    if (absl::Status s = CallEcho(**stub, request, &reply); !s.ok()) return s;
    if (i >= kEchoWarmupCalls) micros.push_back(MicrosSince(start));
    if (reply.data().size() != bytes) {
      return absl::InternalError(absl::StrCat("echo returned ",
                                              reply.data().size(),
                                              " bytes, sent ", bytes));
    }
  }
  return micros;
}

absl::StatusOr<std::vector<double>> EchoStreamPingPongMicros(
    const std::string& target, size_t bytes, int iterations) {
  if (iterations <= 0) {
    return absl::InvalidArgumentError("iterations must be > 0");
  }
  absl::StatusOr<std::unique_ptr<Echo::Stub>> stub = ConnectEcho(target, bytes);
  if (!stub.ok()) return stub.status();
  const EchoMessage request = MakePayload(bytes);
  EchoMessage reply;
  const int rounds = kPingPongWarmupRounds + iterations;

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallTimeout +
                       kStreamTimeoutPerRound * rounds);
  std::unique_ptr<grpc::ClientReaderWriter<EchoMessage, EchoMessage>> stream =
      (*stub)->EchoStream(&context);

  std::vector<double> micros;
  micros.reserve(iterations);
  absl::Status mismatch;
  int completed = 0;
  for (; completed < rounds; ++completed) {
    const Clock::time_point start = Clock::now();
    if (!stream->Write(request) || !stream->Read(&reply)) break;
    if (reply.data().size() != bytes) {
      mismatch = absl::InternalError(absl::StrCat(
          "echo stream returned ", reply.data().size(), " bytes, sent ",
          bytes));
      context.TryCancel();
      break;
    }
    if (completed >= kPingPongWarmupRounds) {
      micros.push_back(MicrosSince(start));
    }
  }
  if (completed == rounds) stream->WritesDone();
  const grpc::Status status = stream->Finish();
  if (!mismatch.ok()) return mismatch;
  if (!status.ok()) return FromGrpc(status, "EchoStream");
  if (completed < rounds) {
    return absl::InternalError(absl::StrCat(
        "echo stream ended after ", completed, " of ", rounds, " rounds"));
  }
  return micros;
}

absl::StatusOr<TransferResult> EchoThroughput(const std::string& target,
                                              size_t bytes, int iterations) {
  if (iterations <= 0) {
    return absl::InvalidArgumentError("iterations must be > 0");
  }
  absl::StatusOr<std::unique_ptr<Echo::Stub>> stub = ConnectEcho(target, bytes);
  if (!stub.ok()) return stub.status();
  const EchoMessage request = MakePayload(bytes);
  EchoMessage reply;

  Clock::time_point start;
  for (int i = 0; i < 1 + iterations; ++i) {
    if (i == 1) start = Clock::now();  // call 0 is the warm-up
    if (absl::Status s = CallEcho(**stub, request, &reply); !s.ok()) return s;
    if (reply.data().size() != bytes) {
      return absl::InternalError(absl::StrCat("echo returned ",
                                              reply.data().size(),
                                              " bytes, sent ", bytes));
    }
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();

  TransferResult result;
  result.seconds = seconds;
  result.bytes = 2 * static_cast<int64_t>(bytes) * iterations;
  result.gbytes_per_sec =
      seconds > 0 ? static_cast<double>(result.bytes) / seconds / 1e9 : 0;
  return result;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  p = std::isnan(p) ? 0.0 : std::clamp(p, 0.0, 100.0);
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double fraction = rank - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * fraction;
}

}  // namespace bench
}  // namespace strata

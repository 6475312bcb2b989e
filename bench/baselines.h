// Reference points for the data-plane benchmark, measured inside the
// benchmark process so they share its machine, load and allocator:
//
//  - a plain blocking TCP socket between two processes (the ceiling on this
//    machine: no framing, no serialization), and
//  - a bare gRPC unary echo and a bidi-stream ping-pong on the default
//    protobuf path (what gRPC costs before any parameter-server logic).
//
// By default both ends are on 127.0.0.1. A SocketLink puts the socket
// baselines' peer in another network namespace, and EchoServer binds any
// local address, so that the bytes cross a real link (a veth pair).
//
// Throughput is in GB/s with 1 GB = 1e9 bytes. All functions are blocking
// and bounded in time: socket operations time out after 30 s and RPCs carry
// deadlines, so a broken peer yields an error, never a hang.
#ifndef STRATA_BENCH_BASELINES_H_
#define STRATA_BENCH_BASELINES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace strata {
namespace bench {

// Where the raw-socket baselines' peer runs. The default is a forked child
// connecting to the parent over 127.0.0.1.
struct SocketLink {
  // A network-namespace file (e.g. /var/run/netns/NAME) that the child joins
  // (setns) before it connects; empty: the parent's namespace. Joining one
  // needs CAP_SYS_ADMIN.
  std::string child_netns;
  // The IPv4 address the parent listens on (port chosen by the kernel) and
  // the child connects to; empty: 127.0.0.1. Reachable from child_netns.
  std::string listen_address;
};

struct TransferResult {
  double gbytes_per_sec = 0;  // bytes / seconds / 1e9
  double seconds = 0;         // wall time of the timed part
  int64_t bytes = 0;          // payload bytes counted in the timed part
};

// Sends `iterations` messages of `message_bytes` each from this process to a
// forked child over a TCP connection (on `link`); the child reads each
// message fully and answers with a 1-byte ack, and the next message is sent
// once the ack is in (like a unary push). Timed from the first send to the
// last ack; one untimed warm-up message goes first. bytes =
// message_bytes * iterations.
// Errors: INVALID_ARGUMENT for message_bytes == 0 or iterations <= 0; the
// errno-derived status of a failed socket call, or of opening
// link.child_netns; INVALID_ARGUMENT for a link.listen_address that is not
// an IPv4 address; DEADLINE_EXCEEDED when the peer does not answer within
// 30 s; INTERNAL when the child fails (e.g. cannot join the namespace or
// connect).
absl::StatusOr<TransferResult> RawSocketTransfer(size_t message_bytes,
                                                 int iterations,
                                                 const SocketLink& link = {});

// Full duplex, as a ring all-reduce step moves bytes: per iteration each
// side sends `message_bytes` to the other and receives `message_bytes` from
// it at the same time (one thread each, poll()-driven non-blocking send and
// receive on one connection). Timed from the first round to the last, after
// one untimed warm-up round; bytes = message_bytes * iterations, the bytes
// of one direction, so gbytes_per_sec is what each direction carried while
// both were busy. Errors as RawSocketTransfer.
absl::StatusOr<TransferResult> RawSocketDuplexTransfer(
    size_t message_bytes, int iterations, const SocketLink& link = {});

// Same two-process setup: `bytes` from parent to child and `bytes` back, per
// iteration. Returns each round trip's latency in microseconds (after a few
// untimed warm-up round trips). Errors as RawSocketTransfer.
absl::StatusOr<std::vector<double>> RawSocketPingPongMicros(
    size_t bytes, int iterations, const SocketLink& link = {});

// An in-process gRPC server with the callback-API `strata.bench.Echo`
// service (unary Echo and bidi EchoStream), bound to a free port of one
// local address. Thread-safe; shuts the server down in its destructor.
class EchoServer {
 public:
  // Starts the server on `host` (an address of this network namespace; an
  // IPv6 one with or without brackets), port 0. It accepts messages up to
  // `max_message_bytes`.
  // Errors: UNAVAILABLE when the server cannot be started or bound.
  static absl::StatusOr<std::unique_ptr<EchoServer>> Start(
      int max_message_bytes = 256 << 20,
      const std::string& host = "127.0.0.1");

  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;
  ~EchoServer();

  int port() const { return port_; }
  // "HOST:PORT" ("[HOST]:PORT" for IPv6), for EchoLatencyMicros,
  // EchoStreamPingPongMicros and EchoThroughput.
  std::string target() const;

 private:
  class ServiceImpl;
  EchoServer(std::unique_ptr<ServiceImpl> service,
             std::unique_ptr<grpc::Server> server, std::string host, int port);

  std::unique_ptr<ServiceImpl> service_;  // outlives server_
  std::unique_ptr<grpc::Server> server_;
  std::string host_;  // bracketed where IPv6
  int port_;
};

// Makes `iterations` synchronous Echo calls of `bytes` payload on one new
// channel to `target` (after a few untimed warm-up calls) and returns each
// call's latency in microseconds.
// Errors: INVALID_ARGUMENT for iterations <= 0 or a payload over 2 GB;
// UNAVAILABLE when the channel does not connect within 10 s; the call's
// status (mapped to absl) when an RPC fails; INTERNAL if the echo differs.
absl::StatusOr<std::vector<double>> EchoLatencyMicros(const std::string& target,
                                                      size_t bytes,
                                                      int iterations);

// Opens one EchoStream on a new channel to `target` and ping-pongs on it:
// writes a `bytes` message, reads its echo, `iterations` times (after a few
// untimed warm-up rounds on the same stream). Returns each round trip's
// latency in microseconds. The whole stream carries one deadline: 60 s plus
// 10 ms per round.
// Errors as EchoLatencyMicros (the stream's status when it fails).
absl::StatusOr<std::vector<double>> EchoStreamPingPongMicros(
    const std::string& target, size_t bytes, int iterations);

// Makes `iterations` sequential synchronous Echo calls of `bytes` payload on
// one new channel (message size limits raised to fit) after one untimed
// warm-up call. The payload crosses the connection twice per call (request
// and reply), so bytes = 2 * bytes * iterations: comparable with a one-way
// push of the same total size. Errors as EchoLatencyMicros.
absl::StatusOr<TransferResult> EchoThroughput(const std::string& target,
                                              size_t bytes, int iterations);

// The p-th percentile (p in [0, 100], clamped) of `v`, interpolating
// linearly between the closest ranks (NumPy's default). NaN when v is empty.
double Percentile(std::vector<double> v, double p);

}  // namespace bench
}  // namespace strata

#endif  // STRATA_BENCH_BASELINES_H_

// Reference points for the data-plane benchmark, measured inside the
// benchmark process so they share its machine, load and allocator:
//
//  - a plain blocking TCP socket between two processes (the ceiling on this
//    machine: no framing, no serialization), and
//  - a bare gRPC unary echo on the default protobuf path (what gRPC costs
//    before any parameter-server logic).
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

struct TransferResult {
  double gbytes_per_sec = 0;  // bytes / seconds / 1e9
  double seconds = 0;         // wall time of the timed part
  int64_t bytes = 0;          // payload bytes counted in the timed part
};

// Sends `iterations` messages of `message_bytes` each from this process to a
// forked child over a TCP connection on 127.0.0.1; the child reads each
// message fully and answers with a 1-byte ack, and the next message is sent
// once the ack is in (like a unary push). Timed from the first send to the
// last ack; one untimed warm-up message goes first. bytes =
// message_bytes * iterations.
// Errors: INVALID_ARGUMENT for message_bytes == 0 or iterations <= 0; the
// errno-derived status of a failed socket call; DEADLINE_EXCEEDED when the
// peer does not answer within 30 s; INTERNAL when the child fails.
absl::StatusOr<TransferResult> RawSocketTransfer(size_t message_bytes,
                                                 int iterations);

// Same two-process setup: `bytes` from parent to child and `bytes` back, per
// iteration. Returns each round trip's latency in microseconds (after a few
// untimed warm-up round trips). Errors as RawSocketTransfer.
absl::StatusOr<std::vector<double>> RawSocketPingPongMicros(size_t bytes,
                                                            int iterations);

// An in-process gRPC server with the callback-API `strata.bench.Echo`
// service, bound to 127.0.0.1 on a free port. Thread-safe; shuts the server
// down in its destructor.
class EchoServer {
 public:
  // Starts the server. It accepts messages up to `max_message_bytes`.
  // Errors: UNAVAILABLE when the server cannot be started or bound.
  static absl::StatusOr<std::unique_ptr<EchoServer>> Start(
      int max_message_bytes = 256 << 20);

  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;
  ~EchoServer();

  int port() const { return port_; }
  // "127.0.0.1:PORT", for EchoLatencyMicros / EchoThroughput.
  std::string target() const;

 private:
  class ServiceImpl;
  EchoServer(std::unique_ptr<ServiceImpl> service,
             std::unique_ptr<grpc::Server> server, int port);

  std::unique_ptr<ServiceImpl> service_;  // outlives server_
  std::unique_ptr<grpc::Server> server_;
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

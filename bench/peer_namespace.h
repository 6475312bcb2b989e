// What the benchmarks that put a peer in another network namespace share
// (ps_bench's PS and echo server, allreduce_bench's rank 1): where the peer
// runs, how to start a process there, and how the markdown files name the
// command that wrote them.
#ifndef STRATA_BENCH_PEER_NAMESPACE_H_
#define STRATA_BENCH_PEER_NAMESPACE_H_

#include <string>
#include <vector>

#include "bench/baselines.h"

namespace strata {
namespace bench {

// iproute2's ip, or "" where none is installed.
std::string FindIp();

// This binary's path (/proc/self/exe), for children that run it again;
// argv0 where it cannot be read.
std::string SelfPath(const char* argv0);

// argv as a shell command line: arguments with characters outside a safe
// set are single-quoted.
std::string CommandLine(int argc, char** argv);

// Where a benchmark's peer runs: this namespace (loopback) or network
// namespace `netns`, reached at peer_addr from self_addr.
struct PeerNamespace {
  std::string ip;     // iproute2's ip; with netns only
  std::string netns;  // empty: loopback
  std::string peer_addr;
  std::string self_addr;

  // argv run in the peer's namespace (behind `ip netns exec`).
  std::vector<std::string> Exec(std::vector<std::string> argv) const;
  // The raw-socket baselines' peer on the same side of the link as the
  // benchmark's peer.
  SocketLink Link() const;
  // The addresses this side and the peer bind: 127.0.0.1 on loopback.
  std::string SelfHost() const;
  std::string PeerHost() const;
};

}  // namespace bench
}  // namespace strata

#endif  // STRATA_BENCH_PEER_NAMESPACE_H_

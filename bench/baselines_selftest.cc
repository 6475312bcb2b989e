// Runs each baseline once at 4 KB and 4 MB and prints the figures: a quick
// check that the baselines work on this machine (on loopback), and that
// their SocketLink and error paths behave. Exits 1 on any error.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "bench/baselines.h"

namespace strata {
namespace bench {
namespace {

constexpr size_t kSmall = 4 << 10;
constexpr size_t kLarge = 4 << 20;

bool Report(const char* name, const absl::StatusOr<TransferResult>& result) {
  if (!result.ok()) {
    std::printf("%-34s FAILED: %s\n", name, result.status().ToString().c_str());
    return false;
  }
  std::printf("%-34s %7.2f GB/s  (%lld bytes in %.3f s)\n", name,
              result->gbytes_per_sec, static_cast<long long>(result->bytes),
              result->seconds);
  return true;
}

bool Report(const char* name, const absl::StatusOr<std::vector<double>>& us) {
  if (!us.ok()) {
    std::printf("%-34s FAILED: %s\n", name, us.status().ToString().c_str());
    return false;
  }
  std::printf("%-34s p50 %7.1f us  p90 %7.1f us  p99 %7.1f us  (n=%zu)\n",
              name, Percentile(*us, 50), Percentile(*us, 90),
              Percentile(*us, 99), us->size());
  return true;
}

bool Check(const char* name, bool ok) {
  std::printf("%-34s %s\n", name, ok ? "ok" : "FAILED");
  return ok;
}

// The SocketLink paths that need no namespace of their own: the defaults
// spelled out, the child joining this process's own namespace, bad links.
bool CheckLinks() {
  bool ok = true;
  ok &= Report("raw socket ping-pong, link {}",
               RawSocketPingPongMicros(kSmall, 200, SocketLink{}));
  SocketLink loopback;
  loopback.listen_address = "127.0.0.1";
  ok &= Report("raw socket send+ack, 127.0.0.1",
               RawSocketTransfer(kSmall, 200, loopback));

  // Joining a namespace needs CAP_SYS_ADMIN; without it the child's setns
  // fails and the call must say so promptly, not time out.
  SocketLink own = loopback;
  own.child_netns = "/proc/self/ns/net";
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<double>> joined =
      RawSocketPingPongMicros(kSmall, 200, own);
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - started)
                             .count();
  if (joined.ok()) {
    ok &= Report("raw socket ping-pong, setns(own)", joined);
  } else {
    std::printf("%-34s %s (euid %d)\n", "raw socket ping-pong, setns(own)",
                joined.status().ToString().c_str(),
                static_cast<int>(geteuid()));
    ok &= Check("  fails fast, naming the namespace",
                absl::IsInternal(joined.status()) &&
                    absl::StrContains(joined.status().message(),
                                      "/proc/self/ns/net") &&
                    seconds < 10);
  }

  SocketLink missing = loopback;
  missing.child_netns = "/nonexistent/netns/strata";
  ok &= Check("missing netns file is an error",
              absl::IsNotFound(RawSocketTransfer(kSmall, 1, missing).status()));
  SocketLink bad_address;
  bad_address.listen_address = "not-an-address";
  ok &= Check("bad listen address is an error",
              absl::IsInvalidArgument(
                  RawSocketPingPongMicros(kSmall, 1, bad_address).status()));
  return ok;
}

int Main() {
  bool ok = true;
  ok &= Report("raw socket send+ack 4 KB", RawSocketTransfer(kSmall, 2000));
  ok &= Report("raw socket send+ack 4 MB", RawSocketTransfer(kLarge, 100));
  ok &= Report("raw socket duplex 4 KB", RawSocketDuplexTransfer(kSmall, 2000));
  ok &= Report("raw socket duplex 4 MB", RawSocketDuplexTransfer(kLarge, 100));
  ok &= Report("raw socket ping-pong 4 KB", RawSocketPingPongMicros(kSmall, 1000));
  ok &= Report("raw socket ping-pong 4 MB", RawSocketPingPongMicros(kLarge, 20));

  absl::StatusOr<std::unique_ptr<EchoServer>> server = EchoServer::Start();
  if (!server.ok()) {
    std::printf("echo server FAILED: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const std::string target = (*server)->target();
  std::printf("echo server on %s\n", target.c_str());
  ok &= Check("echo target is 127.0.0.1:PORT",
              target == "127.0.0.1:" + std::to_string((*server)->port()));
  ok &= Report("grpc echo latency 4 KB", EchoLatencyMicros(target, kSmall, 1000));
  ok &= Report("grpc echo latency 4 MB", EchoLatencyMicros(target, kLarge, 20));
  ok &= Report("grpc stream ping-pong 4 KB",
               EchoStreamPingPongMicros(target, kSmall, 1000));
  ok &= Report("grpc stream ping-pong 4 MB",
               EchoStreamPingPongMicros(target, kLarge, 20));
  // Two streams one after the other on the same server.
  absl::StatusOr<std::vector<double>> again =
      EchoStreamPingPongMicros(target, 1, 50);
  ok &= Check("grpc stream ping-pong again, 1 B",
              again.ok() && again->size() == 50);
  ok &= Report("grpc echo throughput 4 KB (2-way)",
               EchoThroughput(target, kSmall, 2000));
  ok &= Report("grpc echo throughput 4 MB (2-way)",
               EchoThroughput(target, kLarge, 50));

  // An echo server bound to an explicit host.
  absl::StatusOr<std::unique_ptr<EchoServer>> explicit_host =
      EchoServer::Start(4 << 20, "127.0.0.1");
  ok &= Check("echo server on host 127.0.0.1",
              explicit_host.ok() &&
                  EchoStreamPingPongMicros((*explicit_host)->target(), kSmall,
                                           10)
                      .ok());

  ok &= CheckLinks();

  // Error paths: bad arguments and an unreachable target fail cleanly.
  ok &= !RawSocketTransfer(0, 1).ok();
  ok &= !RawSocketDuplexTransfer(0, 1).ok();
  ok &= !RawSocketPingPongMicros(kSmall, 0).ok();
  ok &= absl::IsInvalidArgument(
      EchoStreamPingPongMicros(target, kSmall, 0).status());
  ok &= Percentile({1, 2, 3, 4}, 50) == 2.5 && Percentile({7}, 99) == 7;

  std::printf("%s\n", ok ? "baselines_selftest: OK" : "baselines_selftest: FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace bench
}  // namespace strata

int main() { return strata::bench::Main(); }

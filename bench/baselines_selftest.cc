// Runs each baseline once at 4 KB and 4 MB and prints the figures: a quick
// check that the baselines work on this machine. Exits 1 on any error.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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

int Main() {
  bool ok = true;
  ok &= Report("raw socket send+ack 4 KB", RawSocketTransfer(kSmall, 2000));
  ok &= Report("raw socket send+ack 4 MB", RawSocketTransfer(kLarge, 100));
  ok &= Report("raw socket ping-pong 4 KB", RawSocketPingPongMicros(kSmall, 1000));
  ok &= Report("raw socket ping-pong 4 MB", RawSocketPingPongMicros(kLarge, 20));

  absl::StatusOr<std::unique_ptr<EchoServer>> server = EchoServer::Start();
  if (!server.ok()) {
    std::printf("echo server FAILED: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const std::string target = (*server)->target();
  std::printf("echo server on %s\n", target.c_str());
  ok &= Report("grpc echo latency 4 KB", EchoLatencyMicros(target, kSmall, 1000));
  ok &= Report("grpc echo latency 4 MB", EchoLatencyMicros(target, kLarge, 20));
  ok &= Report("grpc echo throughput 4 KB (2-way)",
               EchoThroughput(target, kSmall, 2000));
  ok &= Report("grpc echo throughput 4 MB (2-way)",
               EchoThroughput(target, kLarge, 50));

  // Error paths: bad arguments and an unreachable target fail cleanly.
  ok &= !RawSocketTransfer(0, 1).ok();
  ok &= !RawSocketPingPongMicros(kSmall, 0).ok();
  ok &= Percentile({1, 2, 3, 4}, 50) == 2.5 && Percentile({7}, 99) == 7;

  std::printf("%s\n", ok ? "baselines_selftest: OK" : "baselines_selftest: FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace bench
}  // namespace strata

int main() { return strata::bench::Main(); }

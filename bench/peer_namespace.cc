#include "bench/peer_namespace.h"

#include <unistd.h>

#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace strata {
namespace bench {

std::string FindIp() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

std::string SelfPath(const char* argv0) {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return argv0;
  return std::string(path, static_cast<size_t>(n));
}

std::string CommandLine(int argc, char** argv) {
  std::vector<std::string> parts;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool plain =
        !arg.empty() &&
        arg.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
                              "vwxyz0123456789_-+=/.,:@%") == std::string::npos;
    parts.push_back(plain ? arg
                          : absl::StrCat("'", absl::StrReplaceAll(
                                                  arg, {{"'", "'\\''"}}),
                                         "'"));
  }
  return absl::StrJoin(parts, " ");
}

std::vector<std::string> PeerNamespace::Exec(
    std::vector<std::string> argv) const {
  if (netns.empty()) return argv;
  std::vector<std::string> out = {ip, "netns", "exec", netns};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

SocketLink PeerNamespace::Link() const {
  SocketLink link;
  if (!netns.empty()) {
    link.child_netns = "/var/run/netns/" + netns;
    link.listen_address = self_addr;
  }
  return link;
}

std::string PeerNamespace::SelfHost() const {
  return netns.empty() ? "127.0.0.1" : self_addr;
}

std::string PeerNamespace::PeerHost() const {
  return netns.empty() ? "127.0.0.1" : peer_addr;
}

}  // namespace bench
}  // namespace strata

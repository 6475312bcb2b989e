#include "tools/launch_setup.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/process.h"

namespace strata {
namespace {

std::string NewToken() {
  std::random_device rd;
  std::string token;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&token, absl::StrFormat("%08x%08x", rd(), rd()));
  }
  return token;
}

}  // namespace

absl::StatusOr<std::vector<int>> FreeLoopbackPorts(int n) {
  std::vector<int> fds;
  std::vector<int> ports;
  absl::Status status;
  for (int i = 0; i < n && status.ok(); ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      status = absl::InternalError("socket() failed");
      break;
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      status = absl::UnavailableError("no free port on 127.0.0.1");
      break;
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) close(fd);
  if (!status.ok()) return status;
  return ports;
}

std::string EtcdBinary() {
  if (const char* path = std::getenv("PATH")) {
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      const std::string candidate = absl::StrCat(dir, "/etcd");
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "/usr/bin/etcd";
}
std::string MakeRunDir(const std::string& requested) {
  if (!requested.empty()) {
    std::filesystem::create_directories(requested);
    return requested;
  }
  std::string tmpl = (std::filesystem::temp_directory_path() /
                      "strata-run-XXXXXX").string();
  char* made = mkdtemp(tmpl.data());
  return made != nullptr ? std::string(made) : std::string("/tmp");
}

absl::StatusOr<LocalSecurity> MakeLocalSecurity(const std::string& run_dir,
                                                const std::string& bin,
                                                const std::string& job_name,
                                                absl::Duration start_timeout) {
  const std::string dir = run_dir + "/tls";
  std::filesystem::create_directories(dir);
  ChildProcess certs;
  certs.name = "make-certs";
  certs.argv = {bin + "/strata-make-certs", dir};
  certs.log_path = dir + "/make_certs.log";
  STRATA_RETURN_IF_ERROR(Spawn(&certs, false, start_timeout));
  int status = 0;
  if (waitpid(certs.pid, &status, 0) != certs.pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        "strata-make-certs failed (", DescribeExit(status), "); see ",
        certs.log_path));
  }
  LocalSecurity sec;
  sec.server_flags = {"--tls-cert=" + dir + "/server.pem",
                      "--tls-key=" + dir + "/server.key",
                      "--tls-ca=" + dir + "/ca.pem", "--tls-client-auth"};
  // The job names the credentials; keep it to the characters they allow.
  std::string job;
  for (char c : job_name) {
    job += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
            c == '_' || c == '.')
               ? c
               : '_';
  }
  if (job.empty() || job[0] == '.') job = "job" + job;
  sec.coordinator_token = NewToken();
  sec.worker_token = NewToken();
  const std::string admin_token = NewToken();
  nlohmann::json auth = {
      {"credentials",
       {{{"token", sec.coordinator_token}, {"job", job},
         {"role", "coordinator"}},
        {{"token", sec.worker_token}, {"job", job}, {"role", "worker"}},
        {{"token", admin_token}, {"job", job}, {"role", "admin"}}}}};
  sec.auth_file = dir + "/auth.json";
  {
    std::ofstream f(sec.auth_file);
    f << auth.dump(2) << "\n";
    if (!f) {
      return absl::InternalError(
          absl::StrCat("cannot write ", sec.auth_file));
    }
  }
  std::filesystem::permissions(sec.auth_file,
                               std::filesystem::perms::owner_read |
                                   std::filesystem::perms::owner_write);
  TlsFiles files{dir + "/client.pem", dir + "/client.key", dir + "/ca.pem",
                 false};
  STRATA_ASSIGN_OR_RETURN(sec.launcher.tls, LoadTlsOptions(files));
  sec.launcher.auth_token = admin_token;
  return sec;
}

}  // namespace strata

// The elected coordinator's state in etcd: a FileSystem whose files are etcd
// keys ("<prefix>/files<path>"), so that CoordinatorState reads and writes
// its state.json there exactly as it does on disk. Every write is a
// transaction guarded by the leader key's create revision (the writer's
// epoch): once another coordinator leads, a deposed one's writes are
// refused by etcd itself, whatever its clock says.
#ifndef STRATA_COORDINATOR_ETCD_STATE_FILE_SYSTEM_H_
#define STRATA_COORDINATOR_ETCD_STATE_FILE_SYSTEM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "common/file_system.h"
#include "coordinator/etcd_client.h"

namespace strata {

// Thread-safe. The client must outlive it.
class EtcdStateFileSystem final : public FileSystem {
 public:
  // `on_fenced` runs (once) when a write is refused because `epoch` no
  // longer holds `leader_key`.
  EtcdStateFileSystem(EtcdClient* etcd, std::string prefix,
                      std::string leader_key, int64_t epoch,
                      std::function<void(const std::string&)> on_fenced = {});

  // Errors: UNAVAILABLE for etcd's errors, and for a write refused because
  // this coordinator no longer leads ("fenced", naming both epochs).
  absl::Status WriteFileAtomically(const std::string& path,
                                   absl::string_view contents) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) override;
  // Keys need no directories: OK.
  absl::Status CreateDirs(const std::string& path) override;
  bool FileExists(const std::string& path) override;

  std::string KeyOf(const std::string& path) const;

 private:
  EtcdClient* const etcd_;
  const std::string prefix_;
  const std::string leader_key_;
  const int64_t epoch_;
  const std::function<void(const std::string&)> on_fenced_;
  std::atomic<bool> fenced_{false};
};

}  // namespace strata

#endif  // STRATA_COORDINATOR_ETCD_STATE_FILE_SYSTEM_H_

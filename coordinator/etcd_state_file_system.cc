#include "coordinator/etcd_state_file_system.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace strata {

EtcdStateFileSystem::EtcdStateFileSystem(
    EtcdClient* etcd, std::string prefix, std::string leader_key,
    int64_t epoch, std::function<void(const std::string&)> on_fenced)
    : etcd_(etcd),
      prefix_(std::move(prefix)),
      leader_key_(std::move(leader_key)),
      epoch_(epoch),
      on_fenced_(std::move(on_fenced)) {}

std::string EtcdStateFileSystem::KeyOf(const std::string& path) const {
  return absl::StrCat(prefix_, "/files", path.empty() || path[0] != '/' ? "/" : "",
                      path);
}

absl::Status EtcdStateFileSystem::WriteFileAtomically(
    const std::string& path, absl::string_view contents) {
  const std::string key = KeyOf(path);
  etcdserverpb::TxnRequest txn;
  *txn.add_compare() = CreateRevisionIs(leader_key_, epoch_);
  *txn.add_success() = PutOp(key, std::string(contents));
  *txn.add_failure() = GetOp(leader_key_);
  absl::StatusOr<etcdserverpb::TxnResponse> resp = etcd_->Txn(txn);
  if (!resp.ok()) {
    return absl::UnavailableError(absl::StrCat("writing ", key, ": ",
                                               resp.status().message()));
  }
  if (resp->succeeded()) return absl::OkStatus();
  int64_t leader_epoch = 0;
  std::string leader;
  if (resp->responses_size() > 0 &&
      resp->responses(0).response_range().kvs_size() > 0) {
    leader_epoch = resp->responses(0).response_range().kvs(0).create_revision();
    leader = resp->responses(0).response_range().kvs(0).value();
  }
  const std::string why = absl::StrCat(
      "fenced: coordinator epoch ", epoch_, " no longer leads (",
      leader_epoch == 0
          ? std::string("no leader now")
          : absl::StrCat("'", leader, "' leads as epoch ", leader_epoch),
      "); its write of ", key, " was refused by etcd");
  if (!fenced_.exchange(true) && on_fenced_) on_fenced_(why);
  return absl::UnavailableError(why);
}

absl::StatusOr<std::string> EtcdStateFileSystem::ReadFile(
    const std::string& path) {
  const std::string key = KeyOf(path);
  absl::StatusOr<std::optional<EtcdKeyValue>> kv = etcd_->Get(key);
  if (!kv.ok()) {
    return absl::UnavailableError(
        absl::StrCat("reading ", key, ": ", kv.status().message()));
  }
  if (!kv->has_value()) {
    return absl::NotFoundError(absl::StrCat("no key ", key, " in etcd"));
  }
  return (*kv)->value;
}

absl::Status EtcdStateFileSystem::CreateDirs(const std::string&) {
  return absl::OkStatus();
}

bool EtcdStateFileSystem::FileExists(const std::string& path) {
  absl::StatusOr<std::optional<EtcdKeyValue>> kv = etcd_->Get(KeyOf(path));
  return kv.ok() && kv->has_value();
}

}  // namespace strata

#include "common/task_identity.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace {

// Whether TF_CONFIG's task type `type` describes a `kind` daemon.
bool Describes(DaemonKind kind, const std::string& type) {
  switch (kind) {
    case DaemonKind::kPs:
      return type == "ps";
    case DaemonKind::kWorker:
      return type == "worker" || type == "chief";
    case DaemonKind::kCoordinator:
      return type == "chief" || type == "master";
  }
  return false;
}

absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrCat(prefix, status.message()));
}

// Applies TF_CONFIG to `id`.
absl::Status ApplyTfConfig(DaemonKind kind, const TfConfig& config,
                           TaskIdentity* id) {
  if (kind == DaemonKind::kCoordinator && !config.cluster.jobs.empty()) {
    id->static_cluster = config.cluster;
  }
  if (Describes(kind, config.task_type)) {
    if (kind == DaemonKind::kWorker) id->role = config.task_type;
    if (kind != DaemonKind::kCoordinator) id->task_index = config.task_index;
    const std::string address = TaskAddress(config);
    id->tf_config_address = address;
    if (!address.empty()) {
      auto hp = SplitHostPort(address);
      if (!hp.ok()) return Prefixed("TF_CONFIG address: ", hp.status());
      // The cluster lists the name others reach this task by; it listens
      // on all interfaces at that port.
      id->host = "0.0.0.0";
      id->port = hp->second;
      id->tf_config_host = hp->first;
    }
  }
  if (kind != DaemonKind::kCoordinator && id->coordinator.empty()) {
    id->coordinator = ChiefAddress(config);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TaskIdentity> ResolveTaskIdentity(
    DaemonKind kind, const TaskIdentityFlags& flags,
    const std::optional<std::string>& tf_config) {
  if (!tf_config.has_value() || tf_config->empty()) {
    return ResolveTaskIdentity(kind, flags, nullptr);
  }
  absl::StatusOr<TfConfig> config = ParseTfConfig(*tf_config);
  if (!config.ok()) return Prefixed("bad TF_CONFIG: ", config.status());
  return ResolveTaskIdentity(kind, flags, &*config);
}

absl::StatusOr<TaskIdentity> ResolveTaskIdentity(
    DaemonKind kind, const TaskIdentityFlags& flags, const TfConfig* config) {
  TaskIdentity id;
  switch (kind) {
    case DaemonKind::kPs:
      id.role = "ps";
      break;
    case DaemonKind::kWorker:
      id.role = "worker";
      id.port = -1;
      break;
    case DaemonKind::kCoordinator:
      id.role = "coordinator";
      break;
  }
  if (kind != DaemonKind::kCoordinator) id.coordinator = flags.coordinator;
  if (config != nullptr) {
    absl::Status s = ApplyTfConfig(kind, *config, &id);
    if (!s.ok()) return s;
  }
  if (!flags.host.empty()) id.host = flags.host;
  if (flags.port >= 0) id.port = flags.port;
  if (kind == DaemonKind::kCoordinator) return id;
  if (!flags.task_index_from_name.empty()) {
    absl::StatusOr<int> ordinal = OrdinalFromName(flags.task_index_from_name);
    if (!ordinal.ok()) {
      return Prefixed("--task-index-from-name: ", ordinal.status());
    }
    id.task_index = *ordinal;
  }
  if (flags.task_index >= 0) id.task_index = flags.task_index;
  if (kind == DaemonKind::kWorker && id.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "--coordinator HOST:PORT is required (or a chief task in TF_CONFIG)");
  }
  return id;
}

}  // namespace strata

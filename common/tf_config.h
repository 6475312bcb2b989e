// TF_CONFIG: the cluster description TensorFlow and Kubeflow's TFJob hand to
// each task, e.g.
//   {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222"],
//                "ps": ["host2:2222"]},
//    "task": {"type": "worker", "index": 0},
//    "environment": "cloud"}
// This file only parses and prints the string; reading the TF_CONFIG
// environment variable is main()'s job.
#ifndef STRATA_COMMON_TF_CONFIG_H_
#define STRATA_COMMON_TF_CONFIG_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

// Job name ("chief", "worker", "ps", "evaluator", "master") -> the
// "host:port" addresses of its tasks, by task index.
struct ClusterSpec {
  std::map<std::string, std::vector<std::string>> jobs;

  bool operator==(const ClusterSpec& o) const { return jobs == o.jobs; }
  bool operator!=(const ClusterSpec& o) const { return !(*this == o); }
};

struct TfConfig {
  ClusterSpec cluster;
  std::string task_type;  // empty when TF_CONFIG has no "task"
  int task_index = 0;
  std::string environment;  // e.g. "cloud"; empty when absent

  bool operator==(const TfConfig& o) const {
    return cluster == o.cluster && task_type == o.task_type &&
           task_index == o.task_index && environment == o.environment;
  }
  bool operator!=(const TfConfig& o) const { return !(*this == o); }
};

// Parses a TF_CONFIG JSON string. Accepts what TensorFlow's multi-worker
// validation accepts: job names among chief, worker, ps, evaluator, master;
// at most one chief (chief or master) and one evaluator task; every address
// "host:port" (see SplitHostPort); task.type in the cluster, except
// "evaluator", which Kubeflow leaves out of it; task.index a non-negative
// integer below the job's size (default 0). "cluster", "task" and
// "environment" may each be absent; other top-level keys are ignored.
// Errors: INVALID_ARGUMENT naming the field, e.g.
//   "TF_CONFIG.task.index: expected a non-negative integer, got \"1\"".
absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view json);

// Prints `config` as compact TF_CONFIG JSON that ParseTfConfig reads back
// unchanged; "task" is omitted when task_type is empty, "environment" when
// it is empty.
std::string TfConfigToJson(const TfConfig& config);

// Splits "host:port" or "[ipv6]:port" into host (without brackets) and port
// in [0, 65535]. Errors: INVALID_ARGUMENT quoting the address and saying
// what is wrong (empty host, missing or non-numeric port, unbracketed IPv6).
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    absl::string_view address);

// The inverse of SplitHostPort: "host:port", with an IPv6 host in brackets.
std::string JoinHostPort(absl::string_view host, int port);

// The address of config's own task, cluster[task_type][task_index], or ""
// when the cluster does not list it (an evaluator, or no task).
std::string TaskAddress(const TfConfig& config);

// The address of the chief task (or "master", its older name): where a
// Strata cluster described by TF_CONFIG runs its coordinator, so the other
// tasks register there. "" when the cluster lists neither.
std::string ChiefAddress(const TfConfig& config);

// The ordinal at the end of a StatefulSet pod's name ("strata-ps-3" → 3),
// a task's index in Kubernetes. Errors: INVALID_ARGUMENT naming `name`
// when it does not end in "-<digits>" (at most 9 digits).
absl::StatusOr<int> OrdinalFromName(absl::string_view name);

}  // namespace strata

#endif  // STRATA_COMMON_TF_CONFIG_H_

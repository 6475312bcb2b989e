// Membership: registration, heartbeat leases, leaving and failing, and the
// views of the cluster (see coordinator_internal.h).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_internal.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace coordinator_internal {
namespace {

using nlohmann::json;

constexpr const char* kRoles[] = {"chief", "worker", "ps", "evaluator"};
constexpr const char* kRolesText = "chief, worker, ps, evaluator";

// `task`'s record when registered with `incarnation`; else NOT_FOUND, the
// message ending in `advice`.
absl::StatusOr<MemberRecord*> FindMember(CoordinatorCore& core,
                                         const TaskKey& task,
                                         const std::string& incarnation,
                                         const char* advice)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  auto it = core.members.find(task);
  if (it == core.members.end()) {
    return absl::NotFoundError(
        absl::StrCat("task ", Name(task), " is not registered", advice));
  }
  MemberRecord& m = it->second;
  if (m.incarnation != incarnation) {
    return absl::NotFoundError(absl::StrCat(
        "task ", Name(task), " incarnation ", json(incarnation).dump(),
        " is stale (current ", json(m.incarnation).dump(), ")", advice));
  }
  return &m;
}

// Re-queues items held by `task` (any incarnation when `incarnation` is
// null) and aborts the barriers it waits in.
void ReleaseTask(CoordinatorCore& core, const TaskKey& task,
                 const std::string* incarnation, const char* reason,
                 Callbacks* callbacks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  RequeueItemsOf(core, task, incarnation, reason);
  AbortBarriersOf(core, task, reason, callbacks);
}

}  // namespace

std::string Name(const TaskKey& task) {
  return absl::StrCat(task.role, ":", task.index);
}

absl::StatusOr<TaskKey> ValidateTask(const v1::TaskId& task) {
  bool known = false;
  for (const char* role : kRoles) known = known || task.role() == role;
  if (!known) {
    return absl::InvalidArgumentError(absl::StrCat("task.role: unknown role ",
                                                   json(task.role()).dump(),
                                                   "; allowed: ", kRolesText));
  }
  if (task.index() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task.index: must be >= 0, got ", task.index()));
  }
  return TaskKey{task.role(), task.index()};
}

absl::StatusOr<TaskKey> ValidateRegistration(const CoordinatorCore& core,
                                             const v1::TaskId& task_id,
                                             const std::string& incarnation) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ValidateTask(task_id));
  if (incarnation.empty()) {
    return absl::InvalidArgumentError(
        "incarnation: must not be empty (use a fresh id per process start)");
  }
  if (core.options.static_cluster && task.role != "evaluator") {
    const auto& jobs = core.options.static_cluster->jobs;
    auto it = jobs.find(task.role);
    const size_t size = it == jobs.end() ? 0 : it->second.size();
    if (static_cast<size_t>(task.index) >= size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "task ", Name(task),
          " is not in the static cluster (TF_CONFIG "
          "lists ",
          size, " ", task.role, " task", size == 1 ? "" : "s", ")"));
    }
  }
  return task;
}

absl::StatusOr<MemberRecord*> LiveMember(CoordinatorCore& core,
                                         const TaskKey& task,
                                         const std::string& incarnation) {
  STRATA_ASSIGN_OR_RETURN(
      MemberRecord * member,
      FindMember(core, task, incarnation, "; re-register"));
  MemberRecord& m = *member;
  if (m.state == v1::Member::FAILED) {
    return absl::NotFoundError(absl::StrCat(
        "task ", Name(task),
        " was declared failed (lease expired) and its work re-queued; "
        "re-register"));
  }
  if (m.state == v1::Member::LEFT) {
    return absl::NotFoundError(
        absl::StrCat("task ", Name(task), " has deregistered; re-register"));
  }
  return &m;
}

void BumpGeneration(CoordinatorCore& core) {
  ++core.generation;
  core.MarkDirty();
}

absl::StatusOr<bool> CheckExclusiveClaim(const CoordinatorCore& core,
                                         const TaskKey& task,
                                         const std::string& incarnation,
                                         const std::string& replaces,
                                         bool only_if_failed) {
  auto it = core.members.find(task);
  if (it == core.members.end()) return false;
  const MemberRecord& m = it->second;
  if (m.incarnation == incarnation) return false;
  const bool fenced = std::find(m.fenced.begin(), m.fenced.end(),
                                incarnation) != m.fenced.end();
  if (!replaces.empty() && replaces == m.incarnation) {
    if (!fenced && only_if_failed && m.state == v1::Member::ALIVE) {
      return absl::AlreadyExistsError(absl::StrCat(
          "task ", Name(task), ": incarnation ", json(m.incarnation).dump(),
          " is alive (its lease has not expired)"));
    }
    if (!fenced) return true;
    return absl::AlreadyExistsError(absl::StrCat(
        "task ", Name(task), ": incarnation ", json(m.incarnation).dump(),
        " dropped this replica (", json(incarnation).dump(),
        ") as its backup; it may not take the task over"));
  }
  if (m.state != v1::Member::ALIVE) return false;
  return absl::AlreadyExistsError(absl::StrCat(
      "task ", Name(task), " is held by incarnation ",
      json(m.incarnation).dump(), " at ", m.address,
      replaces.empty() ? std::string()
                       : absl::StrCat(" (not ", json(replaces).dump(), ")")));
}

int64_t RegisterMember(CoordinatorCore& core, const TaskKey& task,
                       const std::string& address,
                       const std::string& incarnation, Callbacks* callbacks,
                       bool state_intact) {
  const absl::Time now = core.Now();
  auto it = core.members.find(task);
  if (it == core.members.end()) {
    core.members[task] =
        MemberRecord{address, incarnation, v1::Member::ALIVE, now};
    BumpGeneration(core);
    core.logger->Info("member_joined", {{"member", Name(task)},
                                        {"address", address},
                                        {"incarnation", incarnation},
                                        {"generation", core.generation}});
  } else if (it->second.incarnation != incarnation) {
    MemberRecord& m = it->second;
    const std::string previous = m.incarnation;
    const v1::Member::State previous_state = m.state;
    ReleaseTask(core, task, &previous, "restarted", callbacks);
    m = MemberRecord{address, incarnation, v1::Member::ALIVE, now};
    BumpGeneration(core);
    core.logger->Info(
        "member_restarted",
        {{"member", Name(task)},
         {"address", address},
         {"incarnation", incarnation},
         {"previous_incarnation", previous},
         {"previous_state", v1::Member::State_Name(previous_state)},
         {"generation", core.generation}});
    if (task.role == "ps" && state_intact) {
      core.logger->Warning("ps_failover", {{"member", Name(task)},
                                           {"incarnation", incarnation},
                                           {"replaces", previous}});
    } else if (task.role == "ps") {
      NotePsRestart(core, task);
    }
  } else if (it->second.state != v1::Member::ALIVE ||
             it->second.address != address) {
    MemberRecord& m = it->second;
    const v1::Member::State previous_state = m.state;
    m.state = v1::Member::ALIVE;
    m.address = address;
    m.last_heartbeat = now;
    BumpGeneration(core);
    core.logger->Info(
        "member_rejoined",
        {{"member", Name(task)},
         {"address", address},
         {"previous_state", v1::Member::State_Name(previous_state)},
         {"generation", core.generation}});
  } else {
    it->second.last_heartbeat = now;
  }
  UpdateJob(core);
  return core.generation;
}

absl::StatusOr<bool> DeregisterMember(CoordinatorCore& core,
                                      const TaskKey& task,
                                      const std::string& incarnation,
                                      Callbacks* callbacks) {
  STRATA_ASSIGN_OR_RETURN(MemberRecord * member,
                          FindMember(core, task, incarnation, ""));
  MemberRecord& m = *member;
  if (m.state == v1::Member::LEFT) return false;
  m.state = v1::Member::LEFT;
  ReleaseTask(core, task, nullptr, "left", callbacks);
  BumpGeneration(core);
  core.logger->Info("member_left",
                    {{"member", Name(task)}, {"generation", core.generation}});
  UpdateJob(core);
  return true;
}

void ExpireLeases(CoordinatorCore& core, Callbacks* callbacks) {
  const absl::Time now = core.Now();
  for (auto& [task, m] : core.members) {
    if (m.state != v1::Member::ALIVE ||
        now - m.last_heartbeat <= core.options.lease) {
      continue;
    }
    m.state = v1::Member::FAILED;
    BumpGeneration(core);
    core.logger->Warning(
        "member_failed",
        {{"member", Name(task)},
         {"incarnation", m.incarnation},
         {"since_heartbeat_ms",
          absl::ToInt64Milliseconds(now - m.last_heartbeat)},
         {"generation", core.generation}});
    ReleaseTask(core, task, nullptr, "failed (lease expired)", callbacks);
  }
  UpdateJob(core);
}

v1::ClusterState ClusterStateOf(const CoordinatorCore& core) {
  v1::ClusterState out;
  out.set_generation(core.generation);
  for (const auto& [task, m] : core.members) {
    v1::Member* member = out.add_members();
    member->mutable_task()->set_role(task.role);
    member->mutable_task()->set_index(task.index);
    member->set_address(m.address);
    member->set_incarnation(m.incarnation);
    member->set_state(m.state);
    member->set_last_heartbeat_unix_ms(absl::ToUnixMillis(m.last_heartbeat));
  }
  return out;
}

ClusterSpec AliveCluster(const CoordinatorCore& core) {
  ClusterSpec cluster;
  for (const auto& [task, m] : core.members) {
    if (m.state != v1::Member::ALIVE || m.address.empty()) continue;
    cluster.jobs[task.role].push_back(m.address);  // index order
  }
  return cluster;
}

std::map<int, std::pair<std::string, std::string>> AlivePsMembers(
    const CoordinatorCore& core) {
  std::map<int, std::pair<std::string, std::string>> by_index;
  for (const auto& [task, m] : core.members) {
    if (task.role == "ps" && m.state == v1::Member::ALIVE &&
        !m.address.empty()) {
      by_index[task.index] = {m.address, m.incarnation};
    }
  }
  return by_index;
}

std::map<int, std::string> AlivePsAddresses(const CoordinatorCore& core) {
  std::map<int, std::string> by_index;
  for (const auto& [task, m] : core.members) {
    if (task.role == "ps" && m.state == v1::Member::ALIVE &&
        !m.address.empty()) {
      by_index[task.index] = m.address;
    }
  }
  return by_index;
}

std::string MissingRole(const CoordinatorCore& core) {
  auto alive = [&core](const char* role) {
    core.mu.AssertHeld();
    int n = 0;
    for (const auto& [task, m] : core.members) {
      n += task.role == role && m.state == v1::Member::ALIVE;
    }
    return n;
  };
  const std::optional<ClusterSpec>& fixed = core.options.static_cluster;
  auto listed = [&fixed](const char* role) -> size_t {
    if (!fixed) return 0;
    auto it = fixed->jobs.find(role);
    return it == fixed->jobs.end() ? 0 : it->second.size();
  };
  const bool has_worker = alive("worker") + listed("worker") > 0;
  if (UsesPs(core)) {
    if (alive("ps") + listed("ps") == 0) return "ps";
    if (!has_worker) return "worker";
    return "";
  }
  if (!has_worker && alive("chief") + listed("chief") + listed("master") == 0) {
    return "worker";
  }
  return "";
}

std::string AliveList(const CoordinatorCore& core) {
  std::vector<std::string> names;
  for (const auto& [task, m] : core.members) {
    if (m.state == v1::Member::ALIVE) names.push_back(Name(task));
  }
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

std::vector<std::string> PsDown(const CoordinatorCore& core) {
  std::vector<std::string> down;
  for (const auto& [task, m] : core.members) {
    if (task.role == "ps" && m.state != v1::Member::ALIVE) {
      down.push_back(Name(task));
    }
  }
  return down;
}

}  // namespace coordinator_internal
}  // namespace strata

#include "tools/launcher.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/coordinator_client.h"
#include "client/ps_client.h"
#include "common/file_system.h"
#include "common/status_macros.h"
#include "coordinator/etcd_client.h"
#include "job/job.h"
#include "rpc/tls.h"
#include "tools/launch_setup.h"
#include "tools/process.h"
#include "tools/restart_policy.h"
#include "tools/submit.h"
#include "worker/dataset.h"
#include "worker/ps_worker.h"

namespace strata {
namespace {

constexpr absl::Duration kStartTimeout = absl::Seconds(60);
constexpr absl::Duration kPoll = absl::Milliseconds(100);

// strata-worker's exit code for a failure no restart helps.
constexpr int kWorkerCannotRun = 3;

std::string Port(const std::string& address) {
  return address.substr(address.rfind(':') + 1);
}

void WriteClusterFile(const std::string& path,
                      const std::vector<ChildProcess*>& children) {
  nlohmann::json j = nlohmann::json::array();
  for (const ChildProcess* c : children) {
    j.push_back({{"name", c->name},
                 {"pid", c->pid},
                 {"address", c->address},
                 {"log", c->log_path},
                 {"restarts", c->restarts},
                 {"exited", c->exited}});
  }
  // Best effort: the file is for people and tools watching the run.
  LocalFileSystem()->WriteFileAtomically(path, j.dump(2) + "\n").IgnoreError();
}

// Applied steps as the PS tasks count them: the smallest version over all
// variables (each step pushes every shard once).
absl::StatusOr<int64_t> PsAppliedSteps(const std::vector<ChildProcess>& ps,
                                       const ClientSecurity& security) {
  if (ps.empty()) {
    return absl::FailedPreconditionError("no ps task (reported as -1)");
  }
  int64_t applied = -1;
  for (const ChildProcess& p : ps) {
    PsClientOptions client_options;
    client_options.security = security;
    auto client = PsClient::Connect(p.address, client_options);
    auto list = client->ListVariables();
    if (!list.ok()) return list.status();
    for (const auto& v : list->variables()) {
      if (applied < 0 || v.version() < applied) applied = v.version();
    }
  }
  return applied < 0 ? 0 : applied;
}

// The staleness of the dense pushes the PS tasks applied that named their
// base version (StatsResponse): how many, the mean and the largest; null
// when none did or a task did not answer. A replicated task's replicas
// share an address and are asked once.
nlohmann::json PsStaleness(const std::vector<ChildProcess>& ps,
                           const ClientSecurity& security) {
  int64_t pushes = 0, sum = 0, max = 0;
  std::set<std::string> asked;
  for (const ChildProcess& p : ps) {
    if (!asked.insert(p.address).second) continue;
    PsClientOptions client_options;
    client_options.security = security;
    auto stats = PsClient::Connect(p.address, client_options)->Stats();
    if (!stats.ok()) return nullptr;
    pushes += stats->pushes_with_base_version();
    sum += stats->staleness_sum();
    max = std::max(max, stats->staleness_max());
  }
  if (pushes == 0) return nullptr;
  return {{"pushes", pushes},
          {"mean", static_cast<double>(sum) / static_cast<double>(pushes)},
          {"max", max}};
}

}  // namespace

absl::StatusOr<nlohmann::json> Launch(const LaunchOptions& options,
                                      std::ostream& out,
                                      const std::atomic<bool>* stop,
                                      bool* refused) {
  bool ignored = false;
  if (refused == nullptr) refused = &ignored;
  *refused = true;
  // Resolve the job with the command-line overrides, and validate it here,
  // before any process starts.
  STRATA_ASSIGN_OR_RETURN(JobSpec base, LoadJobFile(options.job_path));
  nlohmann::json job_json = nlohmann::json::parse(base.json);
  if (options.num_ps < 0 || options.num_workers < 1) {
    return absl::InvalidArgumentError(
        "--ps must be >= 0 and --workers must be >= 1");
  }
  if (!job_json.contains("strategy") || !job_json["strategy"].is_object()) {
    // The job's default strategy, written out so that overrides can be
    // added to it (an empty object would lack the required type).
    job_json["strategy"] = {{"type", StrategySpec().type}};
  }
  nlohmann::json& strategy_json = job_json["strategy"];
  if (!options.strategy.empty() &&
      strategy_json.value("type", std::string()) != options.strategy) {
    // Another strategy: its own update default ("sync" for the synchronous
    // ones).
    strategy_json["type"] = options.strategy;
    strategy_json.erase("update");
    // Checkpoints are the parameter servers': under another strategy the
    // job's interval cannot apply (a job file asking for both is refused);
    // the override resets it, and says so.
    nlohmann::json without = job_json;
    without.erase("checkpoint");
    absl::StatusOr<JobSpec> other = ParseJob(without);
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> other_policy =
        other.ok() ? PolicyFor(*other)
                   : absl::StatusOr<std::unique_ptr<PlacementPolicy>>(
                         other.status());
    if (other_policy.ok() && !(*other_policy)->supports_checkpoints() &&
        job_json.contains("checkpoint") && job_json["checkpoint"].is_object()) {
      for (const char* key : {"every_steps", "every_seconds"}) {
        nlohmann::json& c = job_json["checkpoint"];
        if (c.contains(key) && c[key].is_number() &&
            c[key].get<double>() > 0) {
          out << "--strategy=" << options.strategy
              << " takes no checkpoints: the job's checkpoint." << key << " ("
              << c[key].dump() << ") does not apply" << std::endl;
          c.erase(key);
        }
      }
    }
  }
  if (!options.collective.empty()) {
    strategy_json["collective"] = options.collective;
  }
  if (options.epochs > 0) job_json["epochs"] = options.epochs;
  STRATA_ASSIGN_OR_RETURN(JobSpec probe, ParseJob(job_json));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> policy,
                          PolicyFor(probe));
  int num_ps = options.num_ps;
  int num_workers = options.num_workers;
  if (!policy->needs_ps()) num_ps = 0;
  if (!policy->multi_worker()) {
    // One process runs the replicas as threads: --workers sets how many.
    strategy_json["replicas"] = num_workers;
    num_workers = 1;
  }
  if (policy->needs_ps() && num_ps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps: strategy ", policy->name(), " needs at least one ps task"));
  }
  STRATA_ASSIGN_OR_RETURN(JobSpec job, ParseJob(job_json));
  STRATA_ASSIGN_OR_RETURN(policy, PolicyFor(job));
  if (policy->loop() == TrainingLoop::kStepQueue) {
    STRATA_RETURN_IF_ERROR(CheckPsJob(job));
  }
  // Every task runs here: refuse a model this machine cannot hold, or data
  // files that are not there, before starting anything.
  STRATA_RETURN_IF_ERROR(CheckJobFitsMemory(job, options.memory_bytes));
  STRATA_RETURN_IF_ERROR(CheckDataFiles(job));
  STRATA_ASSIGN_OR_RETURN(int64_t train_examples, CountTrainExamples(job));
  // From here on an error is the run's, not the job's.
  *refused = false;

  const std::string run_dir = MakeRunDir(options.run_dir);
  const std::string bin = options.bin_dir;
  out << "strata launch: job '" << job.name << "', strategy "
      << job.strategy.type << ", " << num_ps << " ps, " << num_workers
      << (policy->multi_worker() ? " workers"
                                 : absl::StrCat(" worker (", job.strategy.replicas,
                                                " replicas)"))
      << ", run dir " << run_dir << std::endl;

  LocalSecurity security;
  if (options.tls) {
    STRATA_ASSIGN_OR_RETURN(security,
                            MakeLocalSecurity(run_dir, bin, job.name, kStartTimeout));
    out << "strata launch: mutual TLS and credentials (" << run_dir
        << "/tls)" << std::endl;
  }
  // The security flags and token of one daemon.
  auto secure = [&](ChildProcess* c, bool server, const std::string& token) {
    if (!options.tls) return;
    for (const auto& f : security.server_flags) c->argv.push_back(f);
    if (server) c->argv.push_back("--auth-file=" + security.auth_file);
    c->env.push_back("STRATA_AUTH_TOKEN=" + token);
  };

  // One coordinator, or (--ha) the replicas and their etcd.
  std::vector<ChildProcess> coordinators(options.ha ? 2 : 1);
  ChildProcess etcd;
  // With strategy.ps_replication 2, task i runs as ps[2i] (replica 0) and
  // ps[2i+1] (replica 1), each knowing both serving addresses.
  const int replication = static_cast<int>(job.strategy.ps_replication);
  std::vector<ChildProcess> ps(num_ps * replication);
  std::vector<ChildProcess> workers(num_workers);
  auto all = [&]() {
    std::vector<ChildProcess*> v;
    if (options.ha) v.push_back(&etcd);
    for (auto& c : coordinators) v.push_back(&c);
    for (auto& p : ps) v.push_back(&p);
    for (auto& w : workers) v.push_back(&w);
    return v;
  };
  // The launcher's coordinator clients (submitting, then polling).
  std::unique_ptr<CoordinatorClient> coord;
  std::unique_ptr<CoordinatorClient> poll;
  auto stop_all = [&]() {
    // Closed first: the coordinator's drain waits for its clients'
    // connections to go, and an idle channel's would not by itself.
    poll.reset();
    coord.reset();
    // Workers first, then the servers.
    for (auto& w : workers) Stop(&w, absl::Seconds(5));
    for (auto& p : ps) Stop(&p, absl::Seconds(10));
    for (auto& c : coordinators) Stop(&c, absl::Seconds(10));
    if (options.ha) Stop(&etcd, absl::Seconds(10));
  };
  const std::string cluster_file = run_dir + "/cluster.json";

  if (options.ha) {
    STRATA_ASSIGN_OR_RETURN(const std::vector<int> ports,
                            FreeLoopbackPorts(2));
    const int client_port = ports[0];
    const int peer_port = ports[1];
    const std::string client_url =
        absl::StrCat("http://127.0.0.1:", client_port);
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port);
    etcd.name = "etcd";
    etcd.argv = {EtcdBinary(),
                 "--name=strata",
                 "--data-dir=" + run_dir + "/etcd",
                 "--listen-client-urls=" + client_url,
                 "--advertise-client-urls=" + client_url,
                 "--listen-peer-urls=" + peer_url,
                 "--initial-advertise-peer-urls=" + peer_url,
                 "--initial-cluster=strata=" + peer_url,
                 // The state is rewritten many times a second: keep only
                 // the recent revisions.
                 "--auto-compaction-mode=revision",
                 "--auto-compaction-retention=1000"};
    etcd.log_path = run_dir + "/etcd.log";
    etcd.address = absl::StrCat("127.0.0.1:", client_port);
    STRATA_RETURN_IF_ERROR(Spawn(&etcd, false, kStartTimeout));
    // Up once it answers a read.
    auto client = EtcdClient::Connect(etcd.address, absl::Seconds(1));
    const absl::Time deadline = absl::Now() + kStartTimeout;
    while (true) {
      absl::Status up = client->Get("/strata/ping").status();
      if (up.ok()) break;
      if (Reap(&etcd) || absl::Now() > deadline) {
        stop_all();
        return absl::UnavailableError(absl::StrCat(
            "etcd did not start (", up.message(), "); see ", etcd.log_path));
      }
      absl::SleepFor(kPoll);
    }
    out << "strata launch: coordinator high availability: etcd on "
        << etcd.address << ", " << coordinators.size() << " replicas"
        << std::endl;
  }
  for (size_t i = 0; i < coordinators.size(); ++i) {
    ChildProcess& coordinator = coordinators[i];
    coordinator.name =
        options.ha ? absl::StrCat("coordinator:", i) : "coordinator";
    coordinator.argv = {bin + "/strata-coordinator", "--host=127.0.0.1",
                        "--port=0"};
    if (options.ha) {
      coordinator.argv.push_back("--etcd-endpoints=" + etcd.address);
      coordinator.argv.push_back("--etcd-prefix=/strata/" + job.name);
      coordinator.argv.push_back(
          absl::StrCat("--leader-ttl-ms=", options.leader_ttl_ms));
    } else {
      coordinator.argv.push_back("--state-dir=" + run_dir + "/coordinator");
    }
    coordinator.log_path =
        run_dir + (options.ha ? absl::StrCat("/coordinator-", i, ".log")
                              : std::string("/coordinator.log"));
    // The coordinator's token saves and restores the PS tasks.
    secure(&coordinator, true, security.coordinator_token);
    absl::Status started = Spawn(&coordinator, true, kStartTimeout);
    if (!started.ok()) {
      stop_all();
      return started;
    }
  }
  // Every task is given every replica (the clients follow the leader).
  std::vector<std::string> coordinator_addresses;
  for (const auto& c : coordinators) coordinator_addresses.push_back(c.address);
  const std::string coordinator_target =
      absl::StrJoin(coordinator_addresses, ",");
  std::vector<int> replica_ports;
  if (replication > 1) {
    STRATA_ASSIGN_OR_RETURN(replica_ports,
                            FreeLoopbackPorts(2 * replication * num_ps));
  }
  for (int k = 0; k < num_ps * replication; ++k) {
    const int i = k / replication;
    const int r = k % replication;
    ChildProcess& p = ps[k];
    p.name = replication > 1 ? absl::StrCat("ps:", i, "/", r)
                             : absl::StrCat("ps:", i);
    p.argv = {bin + "/strata-ps", "--host=127.0.0.1", "--port=0",
              absl::StrCat("--task-index=", i),
              "--checkpoint-dir=" + run_dir + absl::StrCat("/ps-", i),
              "--coordinator=" + coordinator_target};
    std::string serving;
    if (replication > 1) {
      std::vector<std::string> addresses(2);
      for (int j = 0; j < replication; ++j) {
        const int base = 2 * (i * replication + j);
        // Names, as on Kubernetes (a Service per replica): clients resolve
        // them, and each replica listens on --host with its entries' ports.
        absl::StrAppend(&addresses[0], j ? "," : "", "localhost:",
                        replica_ports[base]);
        absl::StrAppend(&addresses[1], j ? "," : "", "localhost:",
                        replica_ports[base + 1]);
      }
      serving = addresses[0];
      p.argv.push_back(absl::StrCat("--replica=", r));
      p.argv.push_back("--replica-addresses=" + addresses[0]);
      p.argv.push_back("--replication-addresses=" + addresses[1]);
    }
    if (!options.ps_device.empty()) {
      p.argv.push_back("--device=" + options.ps_device);
    }
    p.log_path = run_dir + (replication > 1
                                ? absl::StrCat("/ps-", i, "-", r, ".log")
                                : absl::StrCat("/ps-", i, ".log"));
    // A PS only registers with the coordinator: the worker role will do.
    secure(&p, true, security.worker_token);
    absl::Status s = Spawn(&p, true, kStartTimeout);
    if (!s.ok()) {
      stop_all();
      return s;
    }
    // A replica reports its replication address; clients and the summary
    // know the task by both serving addresses.
    if (replication > 1) p.address = serving;
  }
  coord = CoordinatorClient::Connect(coordinator_target, absl::Seconds(30),
                                    security.launcher);
  // Submit once every PS task is registered, so that every worker sees the
  // same PS set.
  {
    const absl::Time deadline = absl::Now() + kStartTimeout;
    while (true) {
      auto spec = coord->GetClusterSpec();
      if (spec.ok()) {
        auto j = nlohmann::json::parse(spec->tf_config(), nullptr, false);
        size_t n = 0;
        if (j.is_object() && j.contains("cluster") &&
            j["cluster"].contains("ps")) {
          n = j["cluster"]["ps"].size();
        }
        if (static_cast<int>(n) >= num_ps) break;
      }
      if (absl::Now() > deadline) {
        stop_all();
        return absl::DeadlineExceededError(
            "the PS tasks did not register with the coordinator in time");
      }
      absl::SleepFor(kPoll);
    }
  }
  v1::SubmitJobRequest submit;
  submit.set_job_json(job_json.dump());
  submit.set_train_examples(train_examples);
  auto submitted = coord->SubmitJob(submit);
  if (!submitted.ok()) {
    stop_all();
    return submitted.status();
  }
  for (int i = 0; i < num_workers; ++i) {
    workers[i].name = absl::StrCat("worker:", i);
    workers[i].argv = {bin + "/strata-worker",
                       "--coordinator=" + coordinator_target,
                       absl::StrCat("--task-index=", i),
                       absl::StrCat("--steps-in-flight=",
                                    options.steps_in_flight),
                       absl::StrCat("--ps-shared-memory=",
                                    options.ps_shared_memory ? "true"
                                                             : "false")};
    if (!options.export_dir.empty()) {
      workers[i].argv.push_back("--export-dir=" + options.export_dir);
    }
    workers[i].log_path = run_dir + absl::StrCat("/worker-", i, ".log");
    // Workers create their job's variables on the PS tasks (idempotent
    // CreateVariable), which needs the coordinator role.
    secure(&workers[i], false, security.coordinator_token);
    absl::Status s = Spawn(&workers[i], false, kStartTimeout);
    if (!s.ok()) {
      stop_all();
      return s;
    }
  }
  WriteClusterFile(cluster_file, all());

  // Supervise until the job ends. The coordinator is polled with calls
  // that give up within a second, so that while it is down nothing else
  // waits: the other tasks are still restarted.
  poll = CoordinatorClient::Connect(
      coordinator_target, absl::Milliseconds(500), security.launcher,
      /*call_deadline=*/absl::Seconds(1));
  // A task that exited (a worker: with an error) is started again, at once
  // when it had served (a server that listened, a task that ran a while),
  // else after a pause that grows while its starts keep failing; the
  // policy's kMaxFailedStarts-th failed start in a row ends the run, naming
  // it (tools/restart_policy.h).
  struct Restart {
    bool due = false;
    RestartPolicy policy;
  };
  std::map<const ChildProcess*, Restart> restarts;
  size_t printed = 0;
  size_t skipped_printed = 0;
  // The job failed (the coordinator said so): its summary is written too.
  bool job_failed = false;
  // The epochs of the coordinators that answered (--ha).
  std::set<int64_t> leaders;
  v1::JobStatus status;
  absl::Status result = absl::OkStatus();
  // When the last worker was seen gone (InfiniteFuture: some are alive).
  absl::Time all_exited_at = absl::InfiniteFuture();
  while (true) {
    if (stop != nullptr && stop->load()) {
      result = absl::CancelledError("interrupted; stopped every process");
      break;
    }
    bool changed = false;
    auto supervise = [&](ChildProcess* c, bool server) -> absl::Status {
      Restart& r = restarts[c];
      const absl::Time now = absl::Now();
      if (!r.due) {
        const bool was = c->exited;
        if (!Reap(c)) return absl::OkStatus();
        if (was) return absl::OkStatus();  // a worker that finished
        changed = true;
        if (!server && WIFEXITED(c->wait_status) &&
            WEXITSTATUS(c->wait_status) == 0) {
          return absl::OkStatus();
        }
        if (server && !options.restart_servers) {
          return absl::UnavailableError(absl::StrCat(
              c->name, " exited (", DescribeExit(c->wait_status), ")"));
        }
        if (!server && WIFEXITED(c->wait_status) &&
            WEXITSTATUS(c->wait_status) == kWorkerCannotRun) {
          out << c->name << " exited (" << DescribeExit(c->wait_status)
              << ": the job cannot run on it; see " << c->log_path
              << "); not restarted" << std::endl;
          return absl::OkStatus();
        }
        if (!r.policy.Exited(now)) {
          return absl::UnavailableError(absl::StrCat(
              c->name, " exited ", r.policy.failed_starts(),
              " times in a row before it became ready; last: ",
              DescribeExit(c->wait_status), "; see ", c->log_path));
        }
        r.due = true;
        const absl::Duration wait = r.policy.restart_at() - now;
        out << c->name << " exited (" << DescribeExit(c->wait_status)
            << "); restarting it"
            << (server ? absl::StrCat(" on ", c->address) : std::string())
            << (wait > absl::ZeroDuration()
                    ? absl::StrCat(" in ", absl::FormatDuration(wait))
                    : std::string())
            << std::endl;
      }
      if (now < r.policy.restart_at()) return absl::OkStatus();
      r.due = false;
      // A server comes back on its port (etcd's ports are in its flags).
      const bool wait_for_address = server && c != &etcd;
      const bool replica = replication > 1 && !ps.empty() &&
                           c >= &ps.front() && c <= &ps.back();
      const std::string address = c->address;
      if (wait_for_address && !replica) {
        c->argv[2] = "--port=" + Port(c->address);
      }
      c->restarts++;
      changed = true;
      absl::Status started = Spawn(c, wait_for_address, kStartTimeout);
      if (replica) c->address = address;
      if (started.ok()) {
        // A server that listened on its address became ready.
        r.policy.Started(absl::Now(), wait_for_address);
        return started;
      }
      const absl::Time failed = absl::Now();
      if (!r.policy.StartFailed(failed)) {
        return absl::UnavailableError(absl::StrCat(
            c->name, " failed to start ", r.policy.failed_starts(),
            " times in a row; last: ", started.message()));
      }
      out << c->name << " did not start (" << started.message()
          << "); trying again in "
          << absl::FormatDuration(r.policy.restart_at() - failed) << std::endl;
      r.due = true;
      return absl::OkStatus();
    };
    if (options.ha) result = supervise(&etcd, true);
    for (auto& c : coordinators) {
      if (result.ok()) result = supervise(&c, true);
    }
    for (auto& p : ps) {
      if (result.ok()) result = supervise(&p, true);
    }
    int alive = 0;
    for (auto& w : workers) {
      if (result.ok()) result = supervise(&w, false);
      if (!w.exited || restarts[&w].due) ++alive;
    }
    if (!result.ok()) break;
    if (changed) WriteClusterFile(cluster_file, all());

    auto s = poll->GetJob();
    if (s.ok() && poll->epoch() > 0) leaders.insert(poll->epoch());
    if (s.ok()) {
      status = *s;
      if (options.on_status) options.on_status(status);
      PrintCompletedEpochs(status, job.epochs, &printed, out);
      PrintSkippedCheckpoints(status, &skipped_printed, out);
      if (status.state() == v1::JobStatus::SUCCEEDED) break;
      if (status.state() == v1::JobStatus::FAILED) {
        result = absl::AbortedError(absl::StrCat("job failed: ", status.error()));
        job_failed = true;
        break;
      }
    }
    if (alive == 0) {
      // The workers may have finished the job just before the coordinator
      // died (or was paused): its answer decides, once it can give one.
      if (all_exited_at == absl::InfiniteFuture()) all_exited_at = absl::Now();
      if (s.ok() || absl::Now() - all_exited_at > kStartTimeout) {
        result = absl::UnavailableError(absl::StrCat(
            "every worker exited before the job ended",
            s.ok() ? std::string()
                   : absl::StrCat(" (the coordinator did not say: ",
                                  s.status().message(), ")"),
            "; see ", run_dir));
        break;
      }
    } else {
      all_exited_at = absl::InfiniteFuture();
    }
    absl::SleepFor(kPoll);
  }

  nlohmann::json summary;
  if (result.ok() || job_failed) {
    auto ps_applied = PsAppliedSteps(ps, security.launcher);
    if (ps_applied.ok() && policy->loop() == TrainingLoop::kStepQueue &&
        job.strategy.update == "sync") {
      // Versions count aggregated steps of sync_replicas steps each.
      ps_applied = std::min<int64_t>(*ps_applied * job.strategy.sync_replicas,
                                     status.steps_scheduled());
    }
    summary = {
        {"job", job.name},
        {"strategy", job.strategy.type},
        {"collective", policy->backend() == CollectiveBackend::kRing ? "ring"
                       : policy->backend() == CollectiveBackend::kPs ? "ps"
                       : policy->backend() == CollectiveBackend::kInProcess
                           ? "in_process"
                           : "none"},
        {"replicas_per_worker", policy->local_replicas()},
        {"ps", num_ps},
        {"ps_replication", replication},
        {"workers", num_workers},
        {"steps_applied_ps", ps_applied.ok() ? *ps_applied : -1},
        {"staleness", PsStaleness(ps, security.launcher)},
        {"coordinator_leaders",
         options.ha ? nlohmann::json(leaders.size()) : nlohmann::json()},
        {"restarts", nlohmann::json::object()},
        {"run_dir", run_dir},
        {"state", job_failed ? "FAILED" : "SUCCEEDED"}};
    if (job_failed) summary["error"] = status.error();
    AddJobResult(job.epochs, job.batch_size, status, &summary);
    for (ChildProcess* c : all()) {
      if (c->restarts > 0) summary["restarts"][c->name] = c->restarts;
    }
    if (!job_failed) {
      out << absl::StrFormat("Test accuracy: %.4f (test loss %.4f)",
                             summary["test_accuracy"].get<double>(),
                             summary["test_loss"].get<double>())
          << std::endl;
    }
    if (options.on_finished && !job_failed) {
      std::vector<std::string> addresses;
      for (const auto& p : ps) {
        // The replicas of a task share its address.
        if (addresses.empty() || addresses.back() != p.address) {
          addresses.push_back(p.address);
        }
      }
      result = options.on_finished(addresses);
    }
  }
  stop_all();
  WriteClusterFile(cluster_file, all());
  if (job_failed) {
    // The cause goes to the caller; the summary records the run up to it.
    absl::Status written = WriteSummary(options.summary_path, summary);
    if (!written.ok()) {
      out << "summary not written: " << written.message() << std::endl;
    }
  }
  if (!result.ok()) return result;
  STRATA_RETURN_IF_ERROR(WriteSummary(options.summary_path, summary));
  return summary;
}

}  // namespace strata

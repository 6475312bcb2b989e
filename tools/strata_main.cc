// strata: the command-line tool.
//   strata launch --job FILE [--strategy S] [--ps N] [--workers N]
//                 [--epochs N] [--summary FILE] [--run-dir DIR]
//   strata submit --job FILE [--coordinator HOST:PORT] [--wait]
//                 [--summary FILE] [--wait-ps N] [--wait-workers N]
//   strata tfconfig [--task-type T] [--task-index I]
//   strata certs --dir DIR [--san DNS:name,...] [--days N]
//   strata datagen --out PATH --examples N [--seed S]
//                  [--cardinalities C1,...,C26 | --max-cardinality M]
//                  [--gzip] [--zipf-exponent X] [--latent-dim D] ...
//   strata help [COMMAND], strata [COMMAND] --help, strata --version
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "common/cli.h"
#include "common/tf_config.h"
#include "nlohmann/json.hpp"
#include "rpc/daemon.h"
#include "rpc/security_flags.h"
#include "tools/datagen.h"
#include "tools/launcher.h"
#include "tools/submit.h"

ABSL_FLAG(std::string, job, "", "launch: the job file (JSON)");
ABSL_FLAG(std::string, strategy, "", "launch: overrides the job's strategy");
ABSL_FLAG(std::string, collective, "", "launch: overrides the job's "
          "strategy.collective (multi_worker_mirrored: ring or ps)");
ABSL_FLAG(int, ps, 2, "launch: parameter-server tasks");
ABSL_FLAG(std::string, ps_device, "", "launch: where the PS tasks keep "
          "variables and slots (cpu, cuda, cuda:N; strata-ps --device)");
ABSL_FLAG(int, workers, 2, "launch: worker tasks");
ABSL_FLAG(int, epochs, 0, "launch: overrides the job's epochs");
ABSL_FLAG(std::string, summary, "", "launch: write the run summary (JSON)");
ABSL_FLAG(std::string, run_dir, "", "launch: logs, state and checkpoints "
          "(default: a new temporary directory)");
ABSL_FLAG(std::string, bin_dir, "", "launch: directory of strata-ps, "
          "strata-worker, strata-coordinator (default: found beside strata)");
ABSL_FLAG(int, steps_in_flight, 2, "launch: steps each worker runs "
          "concurrently");
ABSL_FLAG(bool, ps_shared_memory, true, "launch: workers exchange bytes "
          "with the (same-host) PS tasks through shared memory; false: "
          "stream them over gRPC");
ABSL_FLAG(std::string, coordinator, "", "submit: the coordinator's "
          "host:port (default: the chief task of TF_CONFIG)");
ABSL_FLAG(bool, wait, false, "submit: follow the job to its end (exit 0 "
          "when it succeeded)");
ABSL_FLAG(int, wait_ps, -1, "submit: first wait until this many ps tasks "
          "registered (default: as many as TF_CONFIG lists, else 0)");
ABSL_FLAG(int, wait_workers, -1, "submit: first wait until this many "
          "worker tasks registered (default: as TF_CONFIG, else 0)");
ABSL_FLAG(int, wait_timeout_seconds, 600, "submit: bound on waiting for the "
          "coordinator and the tasks");
ABSL_FLAG(bool, tls, false, "launch: run the cluster over mutual TLS with "
          "per-job credentials (certificates and tokens made in RUN_DIR/tls)");
ABSL_FLAG(bool, ha, false, "launch: coordinator high availability: an etcd "
          "server (Debian's etcd-server) and two coordinator replicas "
          "elected through it; a killed leader is replaced by the standby");
ABSL_FLAG(int64_t, leader_ttl_ms, 2000, "launch --ha: the coordinator "
          "replicas' --leader-ttl-ms");
ABSL_FLAG(std::string, dir, "", "certs: directory for the CA and the "
          "certificates");
ABSL_FLAG(std::string, san, "", "certs: more names for the server "
          "certificate (DNS:name,IP:addr,...)");
ABSL_FLAG(int, days, 10950, "certs: validity in days");
ABSL_FLAG(std::string, task_type, "", "tfconfig: overrides task.type");
ABSL_FLAG(int, task_index, -1, "tfconfig: overrides task.index");
ABSL_FLAG(std::string, out, "", "datagen: the TSV file to write (the "
          "summary goes to PATH.summary.json)");
ABSL_FLAG(int64_t, examples, 0, "datagen: how many examples (lines)");
ABSL_FLAG(uint64_t, seed, 1, "datagen: the seed; the output is a function "
          "of the flags alone");
ABSL_FLAG(std::string, cardinalities, "", "datagen: 26 comma-separated "
          "distinct-id counts of the categorical columns, each in [1, 2^32] "
          "(default: see --max-cardinality)");
ABSL_FLAG(int64_t, max_cardinality, 0, "datagen: the 26 cardinalities "
          "spread geometrically from M^(1/3) to M (default: 1000000); not "
          "with --cardinalities");
ABSL_FLAG(bool, gzip, false, "datagen: write gzip");
ABSL_FLAG(double, zipf_exponent, 1.05, "datagen: the Zipf exponent of the "
          "ids' frequencies");
ABSL_FLAG(int, latent_dim, 8, "datagen: the dimension of the hidden "
          "per-id vectors behind the labels");
ABSL_FLAG(double, noise, 0.5, "datagen: the scale of the N(0,1) noise "
          "added to the label logit");
ABSL_FLAG(double, missing_rate, 0.02, "datagen: the probability that a "
          "field is empty");
ABSL_FLAG(std::vector<std::string>, multi_hot_columns, {},
          "datagen: categorical columns (0..25, comma-separated) written as "
          "multi-hot fields (comma-separated id lists)");
ABSL_FLAG(int, max_hot, 4, "datagen: the most ids of a multi-hot field "
          "(each holds 1 to this many, uniform)");
ABSL_FLAG(double, positive_rate, 0.25, "datagen: the target fraction of "
          "positive labels");
ABSL_FLAG(int64_t, split, 0, "datagen: the first N examples are the "
          "training set (the rest the test set): the summary adds the test "
          "set's Bayes AUC and the ceilings of a learner that saw only the "
          "training set (seen_ids_auc); 0: none");
ABSL_FLAG(std::string, test_out, "", "datagen: with --split, write the "
          "test examples to this file (--out then holds the training "
          "set); the directories of both files are created");

namespace {

// The binaries live in build/{server,worker,coordinator}/ or all in one
// directory (installed).
std::string DefaultBinDir(const char* argv0) {
  std::string self = argv0;
  std::string dir = self.substr(0, self.find_last_of('/') + 1);
  if (dir.empty()) dir = "./";
  return dir;
}

int Launch(const char* argv0) {
  strata::LaunchOptions options;
  options.job_path = absl::GetFlag(FLAGS_job);
  if (options.job_path.empty()) {
    std::cerr << "strata launch: --job FILE is required\n";
    return 2;
  }
  options.strategy = absl::GetFlag(FLAGS_strategy);
  options.collective = absl::GetFlag(FLAGS_collective);
  options.ps_device = absl::GetFlag(FLAGS_ps_device);
  options.num_ps = absl::GetFlag(FLAGS_ps);
  options.num_workers = absl::GetFlag(FLAGS_workers);
  options.epochs = absl::GetFlag(FLAGS_epochs);
  options.summary_path = absl::GetFlag(FLAGS_summary);
  options.run_dir = absl::GetFlag(FLAGS_run_dir);
  options.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  options.steps_in_flight = absl::GetFlag(FLAGS_steps_in_flight);
  options.ps_shared_memory = absl::GetFlag(FLAGS_ps_shared_memory);
  options.tls = absl::GetFlag(FLAGS_tls);
  options.ha = absl::GetFlag(FLAGS_ha);
  options.leader_ttl_ms = absl::GetFlag(FLAGS_leader_ttl_ms);
  if (options.ha && options.leader_ttl_ms < 1000) {
    std::cerr << "strata launch: --leader-ttl-ms must be >= 1000, got "
              << options.leader_ttl_ms << "\n";
    return 2;
  }
  if (options.bin_dir.empty()) options.bin_dir = DefaultBinDir(argv0);
  const std::atomic<bool>* stop = strata::StopFlag::Install()->flag();
  // The job is refused when one worker's model would not fit this machine.
  options.memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
                         static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
  bool refused = false;
  auto summary = strata::Launch(options, std::cout, stop, &refused);
  if (!summary.ok()) {
    std::cerr << "strata launch: " << summary.status().message() << "\n";
    // Exit codes: 2 a job or flags refused before anything started, 130
    // interrupted, 1 the run failed.
    if (refused) return 2;
    return summary.status().code() == absl::StatusCode::kCancelled ? 130 : 1;
  }
  return 0;
}

// Exit codes: 0 submitted (with --wait: succeeded), 1 failed, 2 bad flags or
// job file, 3 another job is running, 130 interrupted.
int Submit() {
  strata::SubmitOptions options;
  options.job_path = absl::GetFlag(FLAGS_job);
  if (options.job_path.empty()) {
    std::cerr << "strata submit: --job FILE is required\n";
    return 2;
  }
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.wait_ps = absl::GetFlag(FLAGS_wait_ps);
  options.wait_workers = absl::GetFlag(FLAGS_wait_workers);
  if (const char* env = std::getenv("TF_CONFIG"); env != nullptr && *env) {
    auto config = strata::ParseTfConfig(env);
    if (!config.ok()) {
      std::cerr << "strata submit: TF_CONFIG: " << config.status().message()
                << "\n";
      return 2;
    }
    const auto& jobs = config->cluster.jobs;
    auto size = [&jobs](const char* name) {
      auto it = jobs.find(name);
      return it == jobs.end() ? 0 : static_cast<int>(it->second.size());
    };
    if (options.wait_ps < 0) options.wait_ps = size("ps");
    if (options.wait_workers < 0) options.wait_workers = size("worker");
    if (options.coordinator.empty()) {
      options.coordinator = strata::ChiefAddress(*config);
    }
  }
  options.wait_ps = std::max(0, options.wait_ps);
  options.wait_workers = std::max(0, options.wait_workers);
  if (options.coordinator.empty()) {
    std::cerr << "strata submit: --coordinator HOST:PORT is required (or a "
                 "chief task in TF_CONFIG)\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_wait_timeout_seconds) <= 0) {
    std::cerr << "strata submit: --wait-timeout-seconds must be > 0\n";
    return 2;
  }
  options.register_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_wait_timeout_seconds));
  options.wait = absl::GetFlag(FLAGS_wait);
  options.summary_path = absl::GetFlag(FLAGS_summary);
  auto security = strata::ClientSecurityFromFlags();
  if (!security.ok()) {
    std::cerr << "strata submit: " << security.status().message() << "\n";
    return 2;
  }
  options.security = *security;
  const std::atomic<bool>* stop = strata::StopFlag::Install()->flag();
  auto result = strata::Submit(options, std::cout, stop);
  if (!result.ok()) {
    std::cerr << "strata submit: " << result.status().message() << "\n";
    switch (result.status().code()) {
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kNotFound:
        return 2;
      case absl::StatusCode::kFailedPrecondition:
        return 3;
      case absl::StatusCode::kCancelled:
        return 130;
      default:
        return 1;
    }
  }
  return 0;
}

// strata certs --dir D: a CA, server and client certificates for a local
// cluster (strata-make-certs, i.e. tools/make_certs.sh, next to this binary).
int Certs(const char* argv0) {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) {
    std::cerr << "strata certs: --dir DIR is required\n";
    return 2;
  }
  const std::string script = DefaultBinDir(argv0) + "strata-make-certs";
  std::vector<std::string> argv = {
      script, dir, "--days", std::to_string(absl::GetFlag(FLAGS_days))};
  if (!absl::GetFlag(FLAGS_san).empty()) {
    argv.push_back("--san");
    argv.push_back(absl::GetFlag(FLAGS_san));
  }
  std::vector<char*> raw;
  for (auto& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  execv(raw[0], raw.data());
  std::cerr << "strata certs: cannot run " << script << ": "
            << std::strerror(errno) << "\n";
  return 1;
}

int TfConfig() {
  strata::TfConfig config;
  if (const char* env = std::getenv("TF_CONFIG"); env != nullptr && *env) {
    auto parsed = strata::ParseTfConfig(env);
    if (!parsed.ok()) {
      std::cerr << "strata tfconfig: TF_CONFIG: " << parsed.status().message()
                << "\n";
      return 2;
    }
    config = *parsed;
  }
  if (!absl::GetFlag(FLAGS_task_type).empty()) {
    config.task_type = absl::GetFlag(FLAGS_task_type);
  }
  if (absl::GetFlag(FLAGS_task_index) >= 0) {
    config.task_index = absl::GetFlag(FLAGS_task_index);
  }
  // Re-validate the result of the overrides.
  auto checked = strata::ParseTfConfig(strata::TfConfigToJson(config));
  if (!checked.ok()) {
    std::cerr << "strata tfconfig: " << checked.status().message() << "\n";
    return 2;
  }
  nlohmann::json out = nlohmann::json::parse(strata::TfConfigToJson(config));
  out["address"] = strata::TaskAddress(config);
  // Where the daemons register (strata-ps, strata-worker, strata submit).
  if (const std::string chief = strata::ChiefAddress(config); !chief.empty()) {
    out["coordinator"] = chief;
  }
  std::cout << out.dump(2) << std::endl;
  return 0;
}

// strata datagen: synthetic Criteo-format data (tools/datagen.h); prints
// the summary. Exit codes: 0 written, 2 bad flags, 1 the write failed.
int Datagen() {
  strata::DatagenOptions options;
  options.path = absl::GetFlag(FLAGS_out);
  if (options.path.empty()) {
    std::cerr << "strata datagen: --out PATH is required\n";
    return 2;
  }
  options.examples = absl::GetFlag(FLAGS_examples);
  if (options.examples < 1) {
    std::cerr << "strata datagen: --examples N (>= 1) is required\n";
    return 2;
  }
  options.seed = absl::GetFlag(FLAGS_seed);
  const std::string cardinalities = absl::GetFlag(FLAGS_cardinalities);
  const int64_t max_cardinality = absl::GetFlag(FLAGS_max_cardinality);
  if (!cardinalities.empty()) {
    if (max_cardinality != 0) {
      std::cerr << "strata datagen: give --cardinalities or "
                   "--max-cardinality, not both\n";
      return 2;
    }
    auto parsed = strata::ParseCardinalities(cardinalities);
    if (!parsed.ok()) {
      std::cerr << "strata datagen: " << parsed.status().message() << "\n";
      return 2;
    }
    options.cardinalities = *std::move(parsed);
  } else if (max_cardinality != 0) {
    if (max_cardinality < 1 || max_cardinality > (int64_t{1} << 32)) {
      std::cerr << "strata datagen: --max-cardinality must be in [1, 2^32]\n";
      return 2;
    }
    options.cardinalities = strata::DefaultCardinalities(max_cardinality);
  } else {
    options.cardinalities = strata::DefaultCardinalities();
  }
  options.gzip = absl::GetFlag(FLAGS_gzip);
  options.zipf_exponent = absl::GetFlag(FLAGS_zipf_exponent);
  options.latent_dim = absl::GetFlag(FLAGS_latent_dim);
  options.noise = absl::GetFlag(FLAGS_noise);
  options.missing_rate = absl::GetFlag(FLAGS_missing_rate);
  options.positive_rate = absl::GetFlag(FLAGS_positive_rate);
  for (const std::string& c : absl::GetFlag(FLAGS_multi_hot_columns)) {
    int column = 0;
    if (!absl::SimpleAtoi(c, &column)) {
      std::cerr << "strata datagen: --multi-hot-columns: '" << c
                << "' is not a column index\n";
      return 2;
    }
    options.multi_hot_columns.push_back(column);
  }
  options.max_hot = absl::GetFlag(FLAGS_max_hot);
  options.split = absl::GetFlag(FLAGS_split);
  options.test_path = absl::GetFlag(FLAGS_test_out);
  auto summary = strata::GenerateCriteoData(options);
  if (!summary.ok()) {
    std::cerr << "strata datagen: " << summary.status().message() << "\n";
    return summary.status().code() == absl::StatusCode::kInvalidArgument ? 2
                                                                        : 1;
  }
  std::cout << strata::DatagenSummaryJson(options, *summary);
  return 0;
}

}  // namespace

namespace {

// --help: the commands, the flags each reads, and the shared ones. The
// flags' help strings start with their command ("launch: ..."), which the
// help leaves out.
strata::CliSpec Cli() {
  strata::CliFlagGroup security = strata::SecurityFlagGroup();
  strata::CliSpec cli;
  cli.program = "strata";
  cli.usage = "strata COMMAND [flags]";
  cli.description =
      "The Strata command-line tool: trains a job on a local cluster of "
      "processes, submits one to a running cluster, resolves TF_CONFIG, "
      "makes TLS certificates and generates synthetic click data.";
  cli.groups = {{"Transport security (strata submit)", security.flags}};
  cli.commands = {
      {"launch",
       "train a job on a local cluster (coordinator, PS tasks, workers as "
       "processes on 127.0.0.1), printing a line per epoch; a job that "
       "fails (e.g. checkpoint.max_failures failed saves in a row, default "
       "3) exits 1 with its cause, the summary still written",
       "strata launch --job FILE [--strategy S] [--collective ring|ps] "
       "[--ps N] [--workers N] [--epochs N] [--summary FILE] [--run-dir DIR] "
       "[--tls] [flags]",
       {{"Job", {"job", "strategy", "collective", "epochs", "summary"}},
        {"Local cluster", {"ps", "workers", "ps_device", "steps_in_flight",
                           "ps_shared_memory", "tls", "ha", "leader_ttl_ms", "run_dir",
                           "bin_dir"}}}},
      {"submit",
       "submit a job to a running coordinator (daemons started by hand or "
       "by Kubernetes) and, with --wait, follow it to its end",
       "strata submit --job FILE [--coordinator HOST:PORT] [--wait] "
       "[--summary FILE] [--tls-ca F --tls-cert F --tls-key F] "
       "[--auth-token T] [flags]",
       {{"Job", {"job", "coordinator", "wait", "summary"}},
        {"Waiting for the cluster",
         {"wait_ps", "wait_workers", "wait_timeout_seconds"}},
        security}},
      {"tfconfig",
       "print the cluster, task, address and coordinator resolved from "
       "TF_CONFIG",
       "strata tfconfig [--task-type T] [--task-index I]",
       {{"Overrides", {"task_type", "task_index"}}}},
      {"certs",
       "make a CA, server and client certificates for a local cluster "
       "(needs openssl)",
       "strata certs --dir DIR [--san DNS:name,IP:addr,...] [--days N]",
       {{"Certificates", {"dir", "san", "days"}}}},
      {"datagen",
       "write synthetic click data in the Criteo TSV format (Zipf-distributed "
       "ids, labels from a hidden model), deterministic from the seed, and "
       "report the best achievable AUC",
       "strata datagen --out PATH --examples N [--seed S] "
       "[--cardinalities C1,...,C26 | --max-cardinality M] [--gzip] "
       "[--zipf-exponent X] [--latent-dim D] [--noise X] [--missing-rate X] "
       "[--positive-rate X] [--multi-hot-columns C,... [--max-hot K]] "
       "[--split N [--test-out PATH]]",
       {{"Output", {"out", "examples", "seed", "gzip", "split", "test_out"}},
        {"Ids", {"cardinalities", "max_cardinality", "zipf_exponent",
                 "missing_rate", "multi_hot_columns", "max_hot"}},
        {"Labels", {"latent_dim", "noise", "positive_rate"}}}}};
  return cli;
}

}  // namespace

int main(int argc, char** argv) {
  // Exits 0 on --help and --version, 2 on an unknown command or flag.
  const std::string command = strata::ParseCli(argc, argv, Cli());
  if (command == "launch") return Launch(argv[0]);
  if (command == "submit") return Submit();
  if (command == "tfconfig") return TfConfig();
  if (command == "certs") return Certs(argv[0]);
  if (command == "datagen") return Datagen();
  std::cerr << "strata: unknown command '" << command
            << "' (see strata --help)\n";
  return 2;
}

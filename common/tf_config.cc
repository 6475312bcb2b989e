#include "common/tf_config.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace {

using nlohmann::json;

constexpr const char* kAllowedJobs[] = {"chief", "worker", "ps", "evaluator",
                                        "master"};
constexpr absl::string_view kAllowedJobsText =
    "chief, worker, ps, evaluator, master";

bool IsAllowedJob(absl::string_view name) {
  for (const char* job : kAllowedJobs) {
    if (name == job) return true;
  }
  return false;
}

// A JSON value as it appeared, shortened for error messages.
std::string Show(const json& value) {
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 64) s = absl::StrCat(s.substr(0, 61), "...");
  return s;
}

std::string Quote(absl::string_view s) {
  return json(std::string(s))
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("TF_CONFIG", field.empty() ? "" : ".", field, ": ", what));
}

absl::Status ParseCluster(const json& value, ClusterSpec* cluster) {
  if (!value.is_object()) {
    return FieldError("cluster",
                      absl::StrCat("expected an object, got ", Show(value)));
  }
  // address -> field that first listed it, to reject duplicates.
  std::map<std::string, std::string> seen;
  for (const auto& [job, tasks] : value.items()) {
    const std::string field = absl::StrCat("cluster.", job);
    if (!IsAllowedJob(job)) {
      return FieldError(field, absl::StrCat("unknown job name ", Quote(job),
                                            "; allowed: ", kAllowedJobsText));
    }
    if (!tasks.is_array()) {
      return FieldError(
          field, absl::StrCat("expected an array of \"host:port\" strings, "
                              "got ",
                              Show(tasks)));
    }
    std::vector<std::string>& addresses = cluster->jobs[job];
    for (size_t i = 0; i < tasks.size(); ++i) {
      const std::string task_field = absl::StrCat(field, "[", i, "]");
      const json& task = tasks[i];
      if (!task.is_string()) {
        return FieldError(
            task_field,
            absl::StrCat("expected a \"host:port\" string, got ", Show(task)));
      }
      const std::string& address = task.get_ref<const std::string&>();
      absl::StatusOr<std::pair<std::string, int>> split =
          SplitHostPort(address);
      if (!split.ok()) return FieldError(task_field, split.status().message());
      auto [it, inserted] = seen.emplace(address, task_field);
      if (!inserted) {
        return FieldError(task_field,
                          absl::StrCat("address ", Quote(address),
                                       " is also TF_CONFIG.", it->second));
      }
      addresses.push_back(address);
    }
  }
  auto count = [&](const char* job) -> size_t {
    auto it = cluster->jobs.find(job);
    return it == cluster->jobs.end() ? 0 : it->second.size();
  };
  if (count("chief") + count("master") > 1) {
    return FieldError("cluster",
                      absl::StrCat("at most one chief task (chief or master) "
                                   "is allowed, got ",
                                   count("chief") + count("master")));
  }
  if (count("evaluator") > 1) {
    return FieldError("cluster",
                      absl::StrCat("at most one evaluator task is allowed, "
                                   "got ",
                                   count("evaluator")));
  }
  return absl::OkStatus();
}

absl::Status ParseTask(const json& value, TfConfig* config) {
  if (!value.is_object()) {
    return FieldError("task",
                      absl::StrCat("expected an object, got ", Show(value)));
  }
  auto type = value.find("type");
  if (type == value.end()) return FieldError("task.type", "missing");
  if (!type->is_string()) {
    return FieldError("task.type",
                      absl::StrCat("expected a string, got ", Show(*type)));
  }
  config->task_type = type->get<std::string>();
  if (!IsAllowedJob(config->task_type)) {
    return FieldError(
        "task.type",
        absl::StrCat("unknown task type ", Quote(config->task_type),
                     "; allowed: ", kAllowedJobsText));
  }

  config->task_index = 0;
  auto index = value.find("index");
  if (index != value.end()) {
    bool ok = false;
    if (index->is_number_unsigned()) {
      ok = index->get<uint64_t>() <=
           static_cast<uint64_t>(std::numeric_limits<int>::max());
    } else if (index->is_number_integer()) {
      int64_t v = index->get<int64_t>();
      ok = v >= 0 && v <= std::numeric_limits<int>::max();
    }
    if (!ok) {
      return FieldError(
          "task.index",
          absl::StrCat("expected a non-negative integer, got ", Show(*index)));
    }
    config->task_index = index->get<int>();
  }

  const auto& jobs = config->cluster.jobs;
  auto job = jobs.find(config->task_type);
  if (job == jobs.end()) {
    // Kubeflow leaves the evaluator out of the training cluster.
    if (config->task_type == "evaluator") return absl::OkStatus();
    std::vector<std::string> names;
    for (const auto& entry : jobs) names.push_back(entry.first);
    return FieldError(
        "task.type",
        absl::StrCat(
            "job ", Quote(config->task_type), " is not in TF_CONFIG.cluster (",
            names.empty() ? std::string("which has no jobs")
                          : absl::StrCat("jobs: ", absl::StrJoin(names, ", ")),
            ")"));
  }
  if (static_cast<size_t>(config->task_index) >= job->second.size()) {
    return FieldError(
        "task.index",
        absl::StrCat(config->task_index, " is out of range: job ",
                     Quote(config->task_type), " has ", job->second.size(),
                     job->second.size() == 1 ? " task" : " tasks"));
  }
  return absl::OkStatus();
}

absl::Status InvalidAddress(absl::string_view address, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid address ", Quote(address), ": ", what));
}

}  // namespace

absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view text) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return FieldError("", "empty; expected a JSON object");
  }
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return FieldError("", absl::StrCat("invalid JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return FieldError("",
                      absl::StrCat("expected a JSON object, got ", Show(root)));
  }

  TfConfig config;
  if (auto it = root.find("cluster"); it != root.end() && !it->is_null()) {
    absl::Status status = ParseCluster(*it, &config.cluster);
    if (!status.ok()) return status;
  }
  if (auto it = root.find("task"); it != root.end() && !it->is_null()) {
    absl::Status status = ParseTask(*it, &config);
    if (!status.ok()) return status;
  }
  if (auto it = root.find("environment"); it != root.end() && !it->is_null()) {
    if (!it->is_string()) {
      return FieldError("environment",
                        absl::StrCat("expected a string, got ", Show(*it)));
    }
    config.environment = it->get<std::string>();
  }
  return config;
}

std::string TfConfigToJson(const TfConfig& config) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  nlohmann::ordered_json cluster = nlohmann::ordered_json::object();
  for (const auto& [job, addresses] : config.cluster.jobs) {
    cluster[job] = addresses;
  }
  root["cluster"] = std::move(cluster);
  if (!config.task_type.empty()) {
    root["task"] = {{"type", config.task_type}, {"index", config.task_index}};
  }
  if (!config.environment.empty()) root["environment"] = config.environment;
  return root.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    absl::string_view address) {
  if (address.empty()) return InvalidAddress(address, "empty");
  for (char c : address) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) ||
        absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
      return InvalidAddress(address,
                            "contains whitespace or control "
                            "characters");
    }
  }
  absl::string_view host;
  absl::string_view port;
  if (address.front() == '[') {
    size_t close = address.find(']');
    if (close == absl::string_view::npos) {
      return InvalidAddress(address, "missing ']' after the IPv6 host");
    }
    host = address.substr(1, close - 1);
    if (host.find('[') != absl::string_view::npos) {
      // "[[::]:0" would give host "[::", which JoinHostPort cannot bracket.
      return InvalidAddress(address, "'[' inside the bracketed IPv6 host");
    }
    absl::string_view rest = address.substr(close + 1);
    if (rest.empty()) return InvalidAddress(address, "missing ':port'");
    if (rest.front() != ':') {
      return InvalidAddress(address, "expected ':port' after ']'");
    }
    port = rest.substr(1);
  } else {
    size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) {
      return InvalidAddress(address, "missing ':port'");
    }
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) {
      return InvalidAddress(
          address, "an IPv6 host must be in brackets, as \"[::1]:2222\"");
    }
  }
  if (host.empty()) return InvalidAddress(address, "empty host");
  if (port.empty()) return InvalidAddress(address, "empty port");
  for (char c : port) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return InvalidAddress(
          address, absl::StrCat("port ", Quote(port), " is not a number"));
    }
  }
  int port_number = 0;
  if (port.size() > 5 || !absl::SimpleAtoi(port, &port_number) ||
      port_number > 65535) {
    return InvalidAddress(
        address, absl::StrCat("port ", port, " is out of range [0, 65535]"));
  }
  return std::make_pair(std::string(host), port_number);
}

std::string TaskAddress(const TfConfig& config) {
  auto it = config.cluster.jobs.find(config.task_type);
  if (it == config.cluster.jobs.end() || config.task_index < 0 ||
      static_cast<size_t>(config.task_index) >= it->second.size()) {
    return "";
  }
  return it->second[config.task_index];
}

std::string ChiefAddress(const TfConfig& config) {
  for (const char* chief : {"chief", "master"}) {
    auto it = config.cluster.jobs.find(chief);
    if (it != config.cluster.jobs.end() && !it->second.empty()) {
      return it->second[0];
    }
  }
  return "";
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos && !host.empty() &&
      host.front() != '[') {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<int> OrdinalFromName(absl::string_view name) {
  const size_t dash = name.rfind('-');
  const absl::string_view digits =
      dash == absl::string_view::npos ? absl::string_view()
                                      : name.substr(dash + 1);
  int ordinal = 0;
  if (digits.empty() || digits.size() > 9 ||
      !absl::c_all_of(digits, [](char c) { return c >= '0' && c <= '9'; }) ||
      !absl::SimpleAtoi(digits, &ordinal)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name '", name, "' does not end in -<index> (a StatefulSet pod name "
        "such as strata-ps-0)"));
  }
  return ordinal;
}

}  // namespace strata

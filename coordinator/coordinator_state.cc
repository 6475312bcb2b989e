#include "coordinator/coordinator_state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/job.h"  // the job limits (inline; no link dependency)

namespace strata {
namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr int kStateFormat = 1;
constexpr const char* kStateFile = "state.json";
constexpr const char* kRoles[] = {"chief", "worker", "ps", "evaluator"};
constexpr const char* kRolesText = "chief, worker, ps, evaluator";
constexpr const char* kStrategies[] = {
    "parameter_server", "central_storage", "multi_worker_mirrored",
    "mirrored",         "one_device",      "default"};
constexpr const char* kStrategiesText =
    "parameter_server, central_storage, multi_worker_mirrored, mirrored, "
    "one_device, default";
// Bound on epochs * steps_per_epoch.
constexpr int64_t kMaxSteps = int64_t{1} << 40;

// A JSON value as it appeared, shortened for error messages.
std::string Show(const json& value) {
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 64) s = absl::StrCat(s.substr(0, 61), "...");
  return s;
}

absl::Status JobFieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("job.", field, ": ", what));
}

// Reads an optional integer `key` of `object` (>= min) into *out.
absl::Status ReadInt(const json& object, const char* key,
                     absl::string_view field, int64_t min, int64_t* out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  const std::string expected =
      min == 1 ? "expected a positive integer"
               : absl::StrCat("expected an integer >= ", min);
  bool ok = false;
  int64_t value = 0;
  if (it->is_number_unsigned()) {
    ok = it->get<uint64_t>() <=
         static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (ok) value = static_cast<int64_t>(it->get<uint64_t>());
  } else if (it->is_number_integer()) {
    ok = true;
    value = it->get<int64_t>();
  }
  if (!ok || value < min) {
    return JobFieldError(field, absl::StrCat(expected, ", got ", Show(*it)));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadObject(const json& root, const char* key, const json** out) {
  *out = nullptr;
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) {
    return JobFieldError(key,
                         absl::StrCat("expected an object, got ", Show(*it)));
  }
  *out = &*it;
  return absl::OkStatus();
}

json TimeToJson(absl::Time t) {
  if (t == absl::InfinitePast()) return nullptr;
  return absl::ToUnixMicros(t);
}

absl::Time TimeFromJson(const json& value) {
  if (value.is_null()) return absl::InfinitePast();
  return absl::FromUnixMicros(value.get<int64_t>());
}

json DoubleToJson(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

double DoubleFromJson(const json& value) {
  if (value.is_null()) return std::numeric_limits<double>::quiet_NaN();
  return value.get<double>();
}

json RangesToJson(const StepSet& set) {
  json out = json::array();
  for (const auto& [begin, end] : set.Ranges()) out.push_back({begin, end});
  return out;
}

absl::Status RangesFromJson(const json& value, int64_t total,
                            absl::string_view field, StepSet* set) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const json& r : value) {
    if (!r.is_array() || r.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": expected [begin, end] pairs, got ", Show(r)));
    }
    ranges.emplace_back(r[0].get<int64_t>(), r[1].get<int64_t>());
  }
  absl::Status s = set->SetRanges(ranges);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", s.message()));
  }
  if (!ranges.empty() && set->Ranges().back().second > total) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": step ", set->Ranges().back().second - 1,
                     " is beyond the job's ", total, " steps"));
  }
  return absl::OkStatus();
}

absl::Status ErrnoError(const char* what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("cannot write coordinator state: ", what, " ", path, ": ",
                   std::strerror(errno)));
}

// Writes `data` to dir/name via name.tmp, fsync, rename, fsync(dir).
absl::Status WriteFileAtomically(const std::string& dir,
                                 const std::string& name,
                                 const std::string& data) {
  const std::string path = absl::StrCat(dir, "/", name);
  const std::string tmp = absl::StrCat(path, ".tmp");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("open", tmp);
  size_t written = 0;
  while (written < data.size()) {
    ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = ErrnoError("write", tmp);
      ::close(fd);
      return s;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status s = ErrnoError("fsync", tmp);
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return ErrnoError("close", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoError("rename to", path);
  }
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoError("open", dir);
  int rc = ::fsync(dir_fd);
  ::close(dir_fd);
  if (rc != 0) return ErrnoError("fsync", dir);
  return absl::OkStatus();
}

std::string SecondsText(absl::Duration d) {
  return absl::StrCat(absl::ToDoubleSeconds(d));
}

}  // namespace

// ---------------------------------------------------------------------------
// Job spec.

absl::StatusOr<CoordinatorJobSpec> ParseCoordinatorJobSpec(
    absl::string_view job_json) {
  // The limits every tool applies to a job file (worker/job.h), here for
  // any client: size and nesting before parsing, strings after.
  STRATA_RETURN_IF_ERROR(CheckJobTextLimits(job_json));
  json root;
  try {
    root = json::parse(job_json.begin(), job_json.end());
  } catch (const json::exception& e) {
    // The message quotes the token last read, which may be long.
    return absl::InvalidArgumentError(absl::StrCat(
        "job: invalid JSON: ", absl::string_view(e.what()).substr(0, 256)));
  }
  STRATA_RETURN_IF_ERROR(CheckJobValueLimits(root));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job: expected a JSON object, got ", Show(root)));
  }
  CoordinatorJobSpec spec;
  STRATA_RETURN_IF_ERROR(ReadInt(root, "epochs", "epochs", 1, &spec.epochs));
  STRATA_RETURN_IF_ERROR(
      ReadInt(root, "batch_size", "batch_size", 1, &spec.batch_size));

  PolicyConfig policy;
  if (auto it = root.find("strategy"); it != root.end() && !it->is_null()) {
    const json* type = nullptr;
    if (it->is_string()) {
      type = &*it;
    } else if (it->is_object()) {
      auto t = it->find("type");
      if (t != it->end() && !t->is_null()) type = &*t;
    } else {
      return JobFieldError(
          "strategy",
          absl::StrCat("expected an object or a string, got ", Show(*it)));
    }
    if (type != nullptr) {
      const char* field = it->is_string() ? "strategy" : "strategy.type";
      if (!type->is_string()) {
        return JobFieldError(
            field, absl::StrCat("expected a string, got ", Show(*type)));
      }
      spec.strategy = type->get<std::string>();
      bool known = false;
      for (const char* s : kStrategies) known = known || spec.strategy == s;
      if (!known) {
        return JobFieldError(field,
                             absl::StrCat("unknown strategy ", Show(*type),
                                          "; allowed: ", kStrategiesText));
      }
    }
    policy.type = spec.strategy;
    policy.update = spec.strategy == "parameter_server" ? "async" : "sync";
    if (it->is_object()) {
      for (const char* key : {"update", "collective"}) {
        auto f = it->find(key);
        if (f == it->end() || f->is_null()) continue;
        if (!f->is_string()) {
          return JobFieldError(
              absl::StrCat("strategy.", key),
              absl::StrCat("expected a string, got ", Show(*f)));
        }
        (std::string(key) == "update" ? policy.update : policy.collective) =
            f->get<std::string>();
      }
      if (auto f = it->find("replicas"); f != it->end() && f->is_number()) {
        policy.replicas = f->get<int>();
      }
    }
  }
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> made =
      MakePlacementPolicy(policy);
  if (!made.ok()) return made.status();
  spec.policy = std::shared_ptr<const PlacementPolicy>(std::move(*made));

  const json* checkpoint = nullptr;
  STRATA_RETURN_IF_ERROR(ReadObject(root, "checkpoint", &checkpoint));
  if (checkpoint != nullptr) {
    STRATA_RETURN_IF_ERROR(ReadInt(*checkpoint, "every_steps",
                                   "checkpoint.every_steps", 0,
                                   &spec.checkpoint_every_steps));
    auto it = checkpoint->find("every_seconds");
    if (it != checkpoint->end() && !it->is_null()) {
      if (!it->is_number() || !std::isfinite(it->get<double>()) ||
          it->get<double>() < 0) {
        return JobFieldError(
            "checkpoint.every_seconds",
            absl::StrCat("expected a number >= 0, got ", Show(*it)));
      }
      spec.checkpoint_every_seconds = it->get<double>();
    }
  }
  const json* evaluation = nullptr;
  STRATA_RETURN_IF_ERROR(ReadObject(root, "evaluation", &evaluation));
  if (evaluation != nullptr) {
    STRATA_RETURN_IF_ERROR(ReadInt(*evaluation, "every_epochs",
                                   "evaluation.every_epochs", 0,
                                   &spec.evaluate_every_epochs));
  }
  if (!spec.policy->supports_checkpoints()) {
    // The model state is not (only) on ps tasks, or steps are not
    // independent: coordinated PS checkpoints do not apply.
    spec.checkpoint_every_steps = 0;
    spec.checkpoint_every_seconds = 0;
  }
  return spec;
}

// ---------------------------------------------------------------------------
// StepSet.

bool StepSet::Contains(int64_t step) const {
  auto it = ranges_.upper_bound(step);
  if (it == ranges_.begin()) return false;
  --it;
  return step < it->second;
}

bool StepSet::Insert(int64_t step) {
  if (Contains(step)) return false;
  auto next = ranges_.upper_bound(step);
  const bool merge_next = next != ranges_.end() && next->first == step + 1;
  auto prev = next;
  bool merge_prev = false;
  if (next != ranges_.begin()) {
    prev = std::prev(next);
    merge_prev = prev->second == step;
  }
  if (merge_prev && merge_next) {
    prev->second = next->second;
    ranges_.erase(next);
  } else if (merge_prev) {
    prev->second = step + 1;
  } else if (merge_next) {
    const int64_t end = next->second;
    ranges_.erase(next);
    ranges_[step] = end;
  } else {
    ranges_[step] = step + 1;
  }
  ++size_;
  return true;
}

int64_t StepSet::NextAbsent(int64_t from) const {
  auto it = ranges_.upper_bound(from);
  if (it == ranges_.begin()) return from;
  --it;
  // Ranges are kept merged, so a range's end is never in the set.
  return from < it->second ? it->second : from;
}

std::vector<std::pair<int64_t, int64_t>> StepSet::Ranges() const {
  return {ranges_.begin(), ranges_.end()};
}

absl::Status StepSet::SetRanges(
    const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::map<int64_t, int64_t> out;
  int64_t size = 0;
  int64_t last_end = -1;
  for (const auto& [begin, end] : ranges) {
    if (begin < 0 || end <= begin) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad range [", begin, ", ", end, ")"));
    }
    if (begin < last_end) {
      return absl::InvalidArgumentError(
          absl::StrCat("range [", begin, ", ", end,
                       ") is unsorted or overlaps the one "
                       "before"));
    }
    if (begin == last_end) {
      std::prev(out.end())->second = end;
    } else {
      out[begin] = end;
    }
    size += end - begin;
    last_end = end;
  }
  ranges_ = std::move(out);
  size_ = size;
  return absl::OkStatus();
}

std::vector<int64_t> StepSet::Minus(const StepSet& other) const {
  std::vector<int64_t> out;
  for (const auto& [begin, end] : ranges_) {
    for (int64_t s = begin; s < end; ++s) {
      if (!other.Contains(s)) out.push_back(s);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Construction and persistence.

CoordinatorState::CoordinatorState(CoordinatorOptions options, Logger* logger)
    : options_(std::move(options)), logger_(logger) {}

CoordinatorState::~CoordinatorState() = default;

absl::StatusOr<std::unique_ptr<CoordinatorState>> CoordinatorState::Create(
    CoordinatorOptions options, Logger* logger) {
  if (options.lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease must be positive");
  }
  if (options.heartbeat_interval <= absl::ZeroDuration() ||
      options.heartbeat_interval >= options.lease) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat interval (",
                     absl::FormatDuration(options.heartbeat_interval),
                     ") must be positive and shorter than the lease (",
                     absl::FormatDuration(options.lease), ")"));
  }
  if (options.topology_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("topology timeout must be >= 0");
  }
  if (options.retry_after <= absl::ZeroDuration() ||
      options.restore_retry <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "retry_after and restore_retry must be positive");
  }
  if (!options.clock) options.clock = [] { return absl::Now(); };
  std::unique_ptr<CoordinatorState> state(
      new CoordinatorState(std::move(options), logger));
  if (!state->persistent()) return state;

  const std::string dir = state->options_.state_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create coordinator state directory ", dir, ": ", ec.message()));
  }
  const std::string path = state->StatePath();
  if (!std::filesystem::exists(path, ec)) return state;
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::DataLossError(
        absl::StrCat("coordinator state ", path, " cannot be read"));
  }
  {
    absl::MutexLock lock(&state->mu_);
    absl::Status s = state->LoadLocked(text.str());
    if (!s.ok()) {
      return absl::DataLossError(
          absl::StrCat("coordinator state ", path, " is corrupt: ", s.message(),
                       " (move it away to start afresh)"));
    }
    const Job* job = state->job_ ? &*state->job_ : nullptr;
    state->logger_->Info(
        "state_loaded",
        {{"path", path},
         {"generation", state->generation_},
         {"members", state->members_.size()},
         {"job", job ? job->id : ""},
         {"job_state", job ? v1::JobStatus::State_Name(job->state) : ""},
         {"steps_completed", job ? job->completed.size() : 0},
         {"lost_steps", job ? job->lost_steps : 0}});
  }
  return state;
}

std::string CoordinatorState::StatePath() const {
  return absl::StrCat(options_.state_dir, "/", kStateFile);
}

json CoordinatorState::EpochsToJson(const std::vector<EpochStats>& epochs) {
  json out = json::array();
  for (const EpochStats& e : epochs) {
    out.push_back({{"steps", e.steps},
                   {"loss_sum", DoubleToJson(e.loss_sum)},
                   {"accuracy_sum", DoubleToJson(e.accuracy_sum)},
                   {"examples", e.examples},
                   {"evaluated", e.evaluated},
                   {"test_loss", DoubleToJson(e.test_loss)},
                   {"test_accuracy", DoubleToJson(e.test_accuracy)},
                   {"start_us", TimeToJson(e.start)},
                   {"end_us", TimeToJson(e.end)}});
  }
  return out;
}

absl::Status CoordinatorState::EpochsFromJson(const json& value, size_t count,
                                              std::vector<EpochStats>* epochs) {
  if (!value.is_array() || value.size() != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", count, " epoch records, got ", Show(value)));
  }
  epochs->clear();
  for (const json& j : value) {
    EpochStats e;
    e.steps = j.at("steps").get<int64_t>();
    e.loss_sum = DoubleFromJson(j.at("loss_sum"));
    e.accuracy_sum = DoubleFromJson(j.at("accuracy_sum"));
    e.examples = j.at("examples").get<int64_t>();
    e.evaluated = j.at("evaluated").get<bool>();
    e.test_loss = DoubleFromJson(j.at("test_loss"));
    e.test_accuracy = DoubleFromJson(j.at("test_accuracy"));
    e.start = TimeFromJson(j.at("start_us"));
    e.end = TimeFromJson(j.at("end_us"));
    epochs->push_back(e);
  }
  return absl::OkStatus();
}

std::string CoordinatorState::SerializeLocked() const {
  ordered_json root;
  root["format"] = kStateFormat;
  root["generation"] = generation_;
  root["job_seq"] = job_seq_;
  root["group_seq"] = group_seq_;
  ordered_json members = ordered_json::array();
  for (const auto& [task, m] : members_) {
    members.push_back({{"role", task.role},
                       {"index", task.index},
                       {"address", m.address},
                       {"incarnation", m.incarnation},
                       {"state", v1::Member::State_Name(m.state)}});
  }
  root["members"] = std::move(members);
  if (job_) {
    const Job& job = *job_;
    ordered_json j;
    j["id"] = job.id;
    j["json"] = job.json;
    j["train_examples"] = job.train_examples;
    j["state"] = v1::JobStatus::State_Name(job.state);
    j["error"] = job.error;
    j["submitted_us"] = TimeToJson(job.submitted);
    j["started_us"] = TimeToJson(job.started);
    j["finished_us"] = TimeToJson(job.finished);
    j["completed"] = RangesToJson(job.completed);
    j["lost_steps"] = job.lost_steps;
    j["epochs"] = EpochsToJson(job.epochs);
    j["checkpoint"] = {{"name", job.last_checkpoint},
                       {"step", job.last_checkpoint_step},
                       {"completed", RangesToJson(job.checkpoint_completed)},
                       {"epochs", EpochsToJson(job.checkpoint_epochs)},
                       {"attempted", job.checkpoint_attempted},
                       {"attempt_us", TimeToJson(job.checkpoint_attempt_time)}};
    j["restore_pending"] = job.restore_pending;
    j["restore_floor_generation"] = job.restore_floor_generation;
    root["job"] = std::move(j);
  }
  return root.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

absl::Status CoordinatorState::LoadLocked(const std::string& text) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a JSON object, got ", Show(root)));
  }
  const absl::Time now = Now();
  try {
    const int format = root.at("format").get<int>();
    if (format != kStateFormat) {
      return absl::InvalidArgumentError(
          absl::StrCat("format ", format, " is not the ", kStateFormat,
                       " this coordinator reads"));
    }
    generation_ = root.at("generation").get<int64_t>();
    job_seq_ = root.value("job_seq", int64_t{0});
    group_seq_ = root.value("group_seq", int64_t{0});
    if (generation_ < 0 || job_seq_ < 0) {
      return absl::InvalidArgumentError("negative generation or job_seq");
    }
    for (const json& m : root.at("members")) {
      v1::TaskId id;
      id.set_role(m.at("role").get<std::string>());
      id.set_index(m.at("index").get<int>());
      absl::StatusOr<TaskKey> task = ValidateTask(id);
      if (!task.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("members: ", task.status().message()));
      }
      MemberRecord record;
      record.address = m.at("address").get<std::string>();
      record.incarnation = m.at("incarnation").get<std::string>();
      if (!v1::Member::State_Parse(m.at("state").get<std::string>(),
                                   &record.state) ||
          record.state == v1::Member::UNKNOWN) {
        return absl::InvalidArgumentError(absl::StrCat(
            "members: bad state ", Show(m.at("state")), " of ", Name(*task)));
      }
      // A full lease to heartbeat or re-register after our restart.
      record.last_heartbeat = now;
      members_[*task] = std::move(record);
    }
    auto it = root.find("job");
    if (it == root.end() || it->is_null()) return absl::OkStatus();
    const json& j = *it;
    Job job;
    job.id = j.at("id").get<std::string>();
    job.json = j.at("json").get<std::string>();
    job.train_examples = j.at("train_examples").get<int64_t>();
    absl::StatusOr<CoordinatorJobSpec> spec = ParseCoordinatorJobSpec(job.json);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job.json: ", spec.status().message()));
    }
    if (job.train_examples <= 0) {
      return absl::InvalidArgumentError("job.train_examples must be > 0");
    }
    job.spec = *spec;
    job.steps_per_epoch =
        (job.train_examples + job.spec.batch_size - 1) / job.spec.batch_size;
    if (job.spec.epochs > kMaxSteps / job.steps_per_epoch) {
      return absl::InvalidArgumentError("job: too many steps");
    }
    job.total_steps = job.spec.epochs * job.steps_per_epoch;
    if (!v1::JobStatus::State_Parse(j.at("state").get<std::string>(),
                                    &job.state) ||
        job.state == v1::JobStatus::NONE) {
      return absl::InvalidArgumentError(
          absl::StrCat("job.state: bad value ", Show(j.at("state"))));
    }
    job.error = j.at("error").get<std::string>();
    job.submitted = TimeFromJson(j.at("submitted_us"));
    job.started = TimeFromJson(j.at("started_us"));
    job.finished = TimeFromJson(j.at("finished_us"));
    STRATA_RETURN_IF_ERROR(RangesFromJson(j.at("completed"), job.total_steps,
                                          "job.completed", &job.completed));
    job.lost_steps = j.at("lost_steps").get<int64_t>();
    const size_t epochs = static_cast<size_t>(job.spec.epochs);
    absl::Status s = EpochsFromJson(j.at("epochs"), epochs, &job.epochs);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job.epochs: ", s.message()));
    }
    // The per-epoch counts must agree with the completed set.
    std::vector<int64_t> per_epoch(epochs, 0);
    for (const auto& [begin, end] : job.completed.Ranges()) {
      for (int64_t step = begin; step < end; ++step) {
        ++per_epoch[static_cast<size_t>(step / job.steps_per_epoch)];
      }
    }
    for (size_t e = 0; e < epochs; ++e) {
      if (per_epoch[e] != job.epochs[e].steps) {
        return absl::InvalidArgumentError(absl::StrCat(
            "job.epochs[", e, "].steps is ", job.epochs[e].steps, " but ",
            per_epoch[e], " of its steps are in job.completed"));
      }
    }
    const json& c = j.at("checkpoint");
    job.last_checkpoint = c.at("name").get<std::string>();
    job.last_checkpoint_step = c.at("step").get<int64_t>();
    STRATA_RETURN_IF_ERROR(RangesFromJson(c.at("completed"), job.total_steps,
                                          "job.checkpoint.completed",
                                          &job.checkpoint_completed));
    if (job.checkpoint_completed.size() != job.last_checkpoint_step) {
      return absl::InvalidArgumentError(
          "job.checkpoint.step disagrees with job.checkpoint.completed");
    }
    if (!c.at("epochs").empty()) {
      s = EpochsFromJson(c.at("epochs"), epochs, &job.checkpoint_epochs);
      if (!s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("job.checkpoint.epochs: ", s.message()));
      }
    }
    job.checkpoint_attempted = c.at("attempted").get<int64_t>();
    job.checkpoint_attempt_time = TimeFromJson(c.at("attempt_us"));
    if (job.checkpoint_attempt_time == absl::InfinitePast()) {
      job.checkpoint_attempt_time = now;
    }
    job.restore_pending = j.at("restore_pending").get<bool>();
    job.restore_floor_generation =
        j.at("restore_floor_generation").get<int64_t>();
    if (job.lost_steps < 0 || job.checkpoint_attempted < 0) {
      return absl::InvalidArgumentError("negative step counts in job");
    }
    // A job still waiting for its topology gets a fresh timeout.
    if (job.state == v1::JobStatus::RUNNING &&
        job.started == absl::InfinitePast()) {
      job.submitted = now;
    }
    job_ = std::move(job);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return absl::OkStatus();
}

absl::Status CoordinatorState::Flush() {
  if (!persistent()) return absl::OkStatus();
  absl::MutexLock write_lock(&write_mu_);
  std::string data;
  int64_t seq = 0;
  {
    absl::MutexLock lock(&mu_);
    seq = change_seq_;
    if (seq == durable_seq_) return absl::OkStatus();
    data = SerializeLocked();
  }
  STRATA_RETURN_IF_ERROR(
      WriteFileAtomically(options_.state_dir, kStateFile, data));
  durable_seq_ = seq;
  return absl::OkStatus();
}

void CoordinatorState::FlushOrLog() {
  absl::Status s = Flush();
  if (!s.ok()) {
    logger_->Error("state_write_failed", {{"error", s.ToString()}});
  }
}

void CoordinatorState::AfterChange(Callbacks callbacks) {
  for (auto& [done, status] : callbacks) done(status);
  absl::MutexLock lock(&watchers_mu_);
  const int64_t g = generation();
  if (g <= notified_generation_) return;
  notified_generation_ = g;
  for (auto& [id, watcher] : watchers_) watcher(g);
}

// ---------------------------------------------------------------------------
// Membership.

std::string CoordinatorState::Name(const TaskKey& task) {
  return absl::StrCat(task.role, ":", task.index);
}

absl::StatusOr<CoordinatorState::TaskKey> CoordinatorState::ValidateTask(
    const v1::TaskId& task) {
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

absl::StatusOr<CoordinatorState::MemberRecord*>
CoordinatorState::LiveMemberLocked(const TaskKey& task,
                                   const std::string& incarnation) {
  auto it = members_.find(task);
  if (it == members_.end()) {
    return absl::NotFoundError(
        absl::StrCat("task ", Name(task), " is not registered; re-register"));
  }
  MemberRecord& m = it->second;
  if (m.incarnation != incarnation) {
    return absl::NotFoundError(absl::StrCat(
        "task ", Name(task), " incarnation ", json(incarnation).dump(),
        " is stale (current ", json(m.incarnation).dump(), "); re-register"));
  }
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

void CoordinatorState::BumpGenerationLocked() {
  ++generation_;
  MarkDirtyLocked();
}

int64_t CoordinatorState::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

void CoordinatorState::RequeueLocked(const ItemKey& item) {
  Job& job = *job_;
  if (item.kind != v1::WorkItem::TRAIN) return;  // EVALUATE: implicit
  if (job.completed.Contains(item.number)) return;
  if (item.number < job.cursor) job.requeued.insert(item.number);
}

void CoordinatorState::ReleaseTaskLocked(const TaskKey& task,
                                         const std::string* incarnation,
                                         const char* reason,
                                         bool abort_barriers,
                                         Callbacks* callbacks) {
  if (job_) {
    std::vector<int64_t> steps;
    std::vector<int64_t> evaluations;
    for (auto it = job_->inflight.begin(); it != job_->inflight.end();) {
      const Holder& h = it->second;
      if (h.task == task &&
          (incarnation == nullptr || h.incarnation == *incarnation)) {
        const ItemKey item = it->first;
        it = job_->inflight.erase(it);
        RequeueLocked(item);
        (item.kind == v1::WorkItem::TRAIN ? steps : evaluations)
            .push_back(item.number);
      } else {
        ++it;
      }
    }
    if (!steps.empty() || !evaluations.empty()) {
      logger_->Warning("work_requeued", {{"member", Name(task)},
                                         {"reason", reason},
                                         {"steps", steps},
                                         {"evaluations", evaluations}});
    }
  }
  if (!abort_barriers) return;
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    if (it->second.waiters.count(task) == 0) {
      ++it;
      continue;
    }
    absl::Status aborted = absl::AbortedError(
        absl::StrCat("barrier '", it->first, "': task ", Name(task), " ",
                     reason, " while waiting"));
    for (auto& [waiter, w] : it->second.waiters) {
      callbacks->emplace_back(std::move(w.done), aborted);
    }
    logger_->Warning(
        "barrier_aborted",
        {{"barrier", it->first}, {"member", Name(task)}, {"reason", reason}});
    it = barriers_.erase(it);
  }
}

absl::StatusOr<int64_t> CoordinatorState::Register(
    const v1::TaskId& task_id, const std::string& address,
    const std::string& incarnation) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ValidateTask(task_id));
  if (incarnation.empty()) {
    return absl::InvalidArgumentError(
        "incarnation: must not be empty (use a fresh id per process start)");
  }
  if (options_.static_cluster && task.role != "evaluator") {
    const auto& jobs = options_.static_cluster->jobs;
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
  Callbacks callbacks;
  int64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = Now();
    auto it = members_.find(task);
    if (it == members_.end()) {
      members_[task] =
          MemberRecord{address, incarnation, v1::Member::ALIVE, now};
      BumpGenerationLocked();
      logger_->Info("member_joined", {{"member", Name(task)},
                                      {"address", address},
                                      {"incarnation", incarnation},
                                      {"generation", generation_}});
    } else if (it->second.incarnation != incarnation) {
      MemberRecord& m = it->second;
      const std::string previous = m.incarnation;
      const v1::Member::State previous_state = m.state;
      ReleaseTaskLocked(task, &previous, "restarted", true, &callbacks);
      m = MemberRecord{address, incarnation, v1::Member::ALIVE, now};
      BumpGenerationLocked();
      logger_->Info("member_restarted",
                    {{"member", Name(task)},
                     {"address", address},
                     {"incarnation", incarnation},
                     {"previous_incarnation", previous},
                     {"previous_state", v1::Member::State_Name(previous_state)},
                     {"generation", generation_}});
      if (task.role == "ps" && job_ && job_->state == v1::JobStatus::RUNNING &&
          job_->started != absl::InfinitePast()) {
        Job& job = *job_;
        job.restore_pending = true;
        ++job.restore_seq;
        job.restore_floor_generation = generation_;
        job.next_restore_attempt = absl::InfinitePast();
        MarkDirtyLocked();
        logger_->Warning("ps_restart_detected",
                         {{"member", Name(task)},
                          {"job", job.id},
                          {"steps_completed", job.completed.size()},
                          {"last_checkpoint", job.last_checkpoint},
                          {"last_checkpoint_step", job.last_checkpoint_step},
                          {"inflight", job.inflight.size()}});
      }
    } else if (it->second.state != v1::Member::ALIVE ||
               it->second.address != address) {
      MemberRecord& m = it->second;
      const v1::Member::State previous_state = m.state;
      m.state = v1::Member::ALIVE;
      m.address = address;
      m.last_heartbeat = now;
      BumpGenerationLocked();
      logger_->Info("member_rejoined",
                    {{"member", Name(task)},
                     {"address", address},
                     {"previous_state", v1::Member::State_Name(previous_state)},
                     {"generation", generation_}});
    } else {
      it->second.last_heartbeat = now;
    }
    UpdateJobLocked();
    generation = generation_;
  }
  AfterChange(std::move(callbacks));
  STRATA_RETURN_IF_ERROR(Flush());
  return generation;
}

absl::StatusOr<int64_t> CoordinatorState::Heartbeat(
    const v1::TaskId& task_id, const std::string& incarnation) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ValidateTask(task_id));
  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(MemberRecord * m,
                          LiveMemberLocked(task, incarnation));
  m->last_heartbeat = Now();
  return generation_;
}

absl::Status CoordinatorState::Deregister(const v1::TaskId& task_id,
                                          const std::string& incarnation) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ValidateTask(task_id));
  Callbacks callbacks;
  {
    absl::MutexLock lock(&mu_);
    auto it = members_.find(task);
    if (it == members_.end()) {
      return absl::NotFoundError(
          absl::StrCat("task ", Name(task), " is not registered"));
    }
    MemberRecord& m = it->second;
    if (m.incarnation != incarnation) {
      return absl::NotFoundError(absl::StrCat(
          "task ", Name(task), " incarnation ", json(incarnation).dump(),
          " is stale (current ", json(m.incarnation).dump(), ")"));
    }
    if (m.state == v1::Member::LEFT) return absl::OkStatus();
    m.state = v1::Member::LEFT;
    ReleaseTaskLocked(task, nullptr, "left", true, &callbacks);
    BumpGenerationLocked();
    logger_->Info("member_left",
                  {{"member", Name(task)}, {"generation", generation_}});
    UpdateJobLocked();
  }
  AfterChange(std::move(callbacks));
  return Flush();
}

void CoordinatorState::CheckLeases() {
  Callbacks callbacks;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = Now();
    for (auto& [task, m] : members_) {
      if (m.state != v1::Member::ALIVE ||
          now - m.last_heartbeat <= options_.lease) {
        continue;
      }
      m.state = v1::Member::FAILED;
      BumpGenerationLocked();
      logger_->Warning("member_failed",
                       {{"member", Name(task)},
                        {"incarnation", m.incarnation},
                        {"since_heartbeat_ms",
                         absl::ToInt64Milliseconds(now - m.last_heartbeat)},
                        {"generation", generation_}});
      ReleaseTaskLocked(task, nullptr, "failed (lease expired)", true,
                        &callbacks);
    }
    UpdateJobLocked();
  }
  AfterChange(std::move(callbacks));
  FlushOrLog();
}

v1::ClusterState CoordinatorState::GetClusterState() const {
  v1::ClusterState out;
  absl::MutexLock lock(&mu_);
  out.set_generation(generation_);
  for (const auto& [task, m] : members_) {
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

std::string CoordinatorState::GetClusterSpec() const {
  TfConfig config;
  if (options_.static_cluster) {
    config.cluster = *options_.static_cluster;
    return TfConfigToJson(config);
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [task, m] : members_) {
    if (m.state != v1::Member::ALIVE || m.address.empty()) continue;
    config.cluster.jobs[task.role].push_back(m.address);  // index order
  }
  return TfConfigToJson(config);
}

std::vector<PsTarget> CoordinatorState::PsTargets() const {
  std::map<int, std::string> by_index;
  if (options_.static_cluster) {
    auto it = options_.static_cluster->jobs.find("ps");
    if (it != options_.static_cluster->jobs.end()) {
      for (size_t i = 0; i < it->second.size(); ++i) {
        by_index[static_cast<int>(i)] = it->second[i];
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [task, m] : members_) {
      if (task.role == "ps" && m.state == v1::Member::ALIVE &&
          !m.address.empty()) {
        by_index[task.index] = m.address;
      }
    }
  }
  std::vector<PsTarget> out;
  for (const auto& [index, address] : by_index) {
    out.push_back(PsTarget{absl::StrCat("ps:", index), address});
  }
  return out;
}

int64_t CoordinatorState::AddWatcher(Watcher watcher) {
  absl::MutexLock lock(&watchers_mu_);
  const int64_t id = next_watcher_id_++;
  watchers_[id] = std::move(watcher);
  return id;
}

void CoordinatorState::RemoveWatcher(int64_t id) {
  absl::MutexLock lock(&watchers_mu_);
  watchers_.erase(id);
}

int64_t CoordinatorState::WaitForChange(int64_t after_generation,
                                        absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto above = [this, after_generation] {
    mu_.AssertHeld();
    return generation_ > after_generation;
  };
  mu_.AwaitWithDeadline(absl::Condition(&above), deadline);
  return generation_;
}

// ---------------------------------------------------------------------------
// Job.

bool CoordinatorState::UsesPs() const {
  return job_->spec.policy != nullptr && job_->spec.policy->needs_ps();
}

std::string CoordinatorState::MissingRoleLocked() const {
  auto alive = [this](const char* role) {
    mu_.AssertHeld();
    int n = 0;
    for (const auto& [task, m] : members_) {
      n += task.role == role && m.state == v1::Member::ALIVE;
    }
    return n;
  };
  auto listed = [this](const char* role) -> size_t {
    if (!options_.static_cluster) return 0;
    auto it = options_.static_cluster->jobs.find(role);
    return it == options_.static_cluster->jobs.end() ? 0 : it->second.size();
  };
  const bool has_worker = alive("worker") + listed("worker") > 0;
  if (UsesPs()) {
    if (alive("ps") + listed("ps") == 0) return "ps";
    if (!has_worker) return "worker";
    return "";
  }
  if (!has_worker && alive("chief") + listed("chief") + listed("master") == 0) {
    return "worker";
  }
  return "";
}

std::string CoordinatorState::AliveListLocked() const {
  std::vector<std::string> names;
  for (const auto& [task, m] : members_) {
    if (m.state == v1::Member::ALIVE) names.push_back(Name(task));
  }
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

std::vector<std::string> CoordinatorState::PsDownLocked() const {
  std::vector<std::string> down;
  for (const auto& [task, m] : members_) {
    if (task.role == "ps" && m.state != v1::Member::ALIVE) {
      down.push_back(Name(task));
    }
  }
  return down;
}

bool CoordinatorState::EvalDueLocked(int64_t epoch) const {
  const int64_t every = job_->spec.evaluate_every_epochs;
  return every > 0 &&
         ((epoch + 1) % every == 0 || epoch + 1 == job_->spec.epochs);
}

bool CoordinatorState::EpochDoneLocked(int64_t epoch) const {
  const EpochStats& e = job_->epochs[static_cast<size_t>(epoch)];
  return e.steps == job_->steps_per_epoch &&
         (e.evaluated || !EvalDueLocked(epoch));
}

int64_t CoordinatorState::OpenEpochLocked() const {
  int64_t e = 0;
  while (e < job_->spec.epochs && EpochDoneLocked(e)) ++e;
  return e;
}

int64_t CoordinatorState::LowestPendingLocked() {
  Job& job = *job_;
  for (;;) {
    job.cursor = job.completed.NextAbsent(job.cursor);
    if (job.cursor < job.total_steps &&
        job.inflight.count({v1::WorkItem::TRAIN, job.cursor}) > 0) {
      ++job.cursor;
      continue;
    }
    break;
  }
  int64_t best = job.cursor < job.total_steps ? job.cursor : -1;
  if (!job.requeued.empty() && (best < 0 || *job.requeued.begin() < best)) {
    best = *job.requeued.begin();
  }
  return best;
}

void CoordinatorState::FailJobLocked(const std::string& error) {
  Job& job = *job_;
  job.state = v1::JobStatus::FAILED;
  job.error = error;
  job.finished = Now();
  job.inflight.clear();
  job.checkpoint_pending = false;
  job.restore_pending = false;
  MarkDirtyLocked();
  logger_->Error("job_failed", {{"job", job.id}, {"error", error}});
}

void CoordinatorState::UpdateJobLocked() {
  if (!job_ || job_->state != v1::JobStatus::RUNNING) return;
  Job& job = *job_;
  const absl::Time now = Now();
  if (job.started == absl::InfinitePast()) {
    const std::string missing = MissingRoleLocked();
    if (missing.empty()) {
      job.started = now;
      job.checkpoint_attempt_time = now;
      MarkDirtyLocked();
      logger_->Info("job_started", {{"job", job.id},
                                    {"strategy", job.spec.strategy},
                                    {"members", AliveListLocked()}});
    } else if (now - job.submitted >= options_.topology_timeout) {
      FailJobLocked(absl::StrCat("strategy ", job.spec.strategy,
                                 " needs at least one ", missing,
                                 " task; none registered after ",
                                 SecondsText(options_.topology_timeout),
                                 " s; registered: ", AliveListLocked()));
      return;
    } else {
      return;
    }
  }
  if (SyncGroupJobLocked()) UpdateGroupLocked();
  if (job.restore_pending && job.last_checkpoint.empty() &&
      job.inflight.empty() && !job.action_in_progress) {
    // Nothing to restore from: the workers re-create the variables and
    // every completed step is redone.
    RestoreBookkeepingLocked();
  }
  if (job.restore_pending || job.action_in_progress) return;

  const int64_t completed = job.completed.size();
  const bool all_done = OpenEpochLocked() == job.spec.epochs;
  const bool checkpoints = job.spec.checkpoint_every_steps > 0 ||
                           job.spec.checkpoint_every_seconds > 0;
  if (!job.checkpoint_pending && checkpoints &&
      completed > job.checkpoint_attempted) {
    const int64_t every = job.spec.checkpoint_every_steps;
    bool due = all_done;
    if (every > 0 && completed / every > job.checkpoint_attempted / every) {
      due = true;
    }
    if (job.spec.checkpoint_every_seconds > 0 &&
        now - job.checkpoint_attempt_time >=
            absl::Seconds(job.spec.checkpoint_every_seconds)) {
      due = true;
    }
    if (due) {
      job.checkpoint_pending = true;
      logger_->Info("checkpoint_due", {{"job", job.id},
                                       {"steps_completed", completed},
                                       {"inflight", job.inflight.size()}});
    }
  }
  if (all_done && !job.checkpoint_pending) {
    job.state = v1::JobStatus::SUCCEEDED;
    job.finished = now;
    MarkDirtyLocked();
    int64_t examples = 0;
    for (const EpochStats& e : job.epochs) examples += e.examples;
    logger_->Info(
        "job_succeeded",
        {{"job", job.id},
         {"steps", completed},
         {"lost_steps", job.lost_steps},
         {"examples", examples},
         {"wall_seconds", absl::ToDoubleSeconds(job.finished - job.started)}});
  }
}

absl::StatusOr<std::string> CoordinatorState::SubmitJob(
    const std::string& job_json, int64_t train_examples) {
  if (train_examples <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train_examples: must be > 0, got ", train_examples));
  }
  STRATA_ASSIGN_OR_RETURN(CoordinatorJobSpec spec,
                          ParseCoordinatorJobSpec(job_json));
  const int64_t steps_per_epoch =
      train_examples / spec.batch_size +
      (train_examples % spec.batch_size != 0 ? 1 : 0);
  if (spec.epochs > kMaxSteps / steps_per_epoch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job.epochs: ", spec.epochs, " epochs of ", steps_per_epoch,
        " steps exceed the limit of ", kMaxSteps, " steps"));
  }
  std::string static_error;
  std::string id;
  {
    absl::MutexLock lock(&mu_);
    if (job_ && job_->state == v1::JobStatus::RUNNING) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_->id, " is still running (",
                       job_->completed.size(), " of ", job_->total_steps,
                       " steps done); submit again when it has finished"));
    }
    const absl::Time now = Now();
    Job job;
    job.id = absl::StrCat(
        "job-", absl::FormatTime("%Y%m%d-%H%M%S", now, absl::UTCTimeZone()),
        "-", ++job_seq_);
    job.json = job_json;
    job.train_examples = train_examples;
    job.spec = spec;
    job.steps_per_epoch = steps_per_epoch;
    job.total_steps = spec.epochs * steps_per_epoch;
    job.submitted = now;
    job.checkpoint_attempt_time = now;
    job.epochs.resize(static_cast<size_t>(spec.epochs));
    job_ = std::move(job);
    id = job_->id;
    MarkDirtyLocked();
    logger_->Info("job_submitted", {{"job", id},
                                    {"strategy", spec.strategy},
                                    {"epochs", spec.epochs},
                                    {"batch_size", spec.batch_size},
                                    {"train_examples", train_examples},
                                    {"steps_per_epoch", steps_per_epoch},
                                    {"steps", job_->total_steps}});
    if (options_.static_cluster) {
      // A static cluster will not grow: fail now rather than at timeout.
      const std::string missing = MissingRoleLocked();
      if (!missing.empty()) {
        std::vector<std::string> jobs;
        for (const auto& [name, tasks] : options_.static_cluster->jobs) {
          if (!tasks.empty()) jobs.push_back(name);
        }
        static_error = absl::StrCat(
            "strategy ", spec.strategy, " needs at least one ", missing,
            " task; the static cluster (TF_CONFIG) has none (jobs: ",
            jobs.empty() ? "none" : absl::StrJoin(jobs, ", "), ")");
        FailJobLocked(static_error);
      }
    }
    UpdateJobLocked();
  }
  STRATA_RETURN_IF_ERROR(Flush());
  if (!static_error.empty()) {
    return absl::FailedPreconditionError(static_error);
  }
  return id;
}

v1::EpochResult CoordinatorState::EpochResultLocked(int64_t epoch) const {
  const EpochStats& e = job_->epochs[static_cast<size_t>(epoch)];
  v1::EpochResult r;
  r.set_epoch(static_cast<int32_t>(epoch));
  r.set_steps(e.steps);
  r.set_examples(e.examples);
  if (e.steps > 0) {
    r.set_loss(e.loss_sum / static_cast<double>(e.steps));
    r.set_accuracy(e.accuracy_sum / static_cast<double>(e.steps));
  }
  r.set_evaluated(e.evaluated);
  if (e.evaluated) {
    r.set_test_loss(e.test_loss);
    r.set_test_accuracy(e.test_accuracy);
  }
  if (e.start != absl::InfinitePast()) {
    const absl::Time end = e.end != absl::InfinitePast() ? e.end : Now();
    const double elapsed = std::max(0.0, absl::ToDoubleSeconds(end - e.start));
    r.set_elapsed_seconds(elapsed);
    if (elapsed > 0) {
      r.set_examples_per_second(static_cast<double>(e.examples) / elapsed);
    }
  }
  return r;
}

void CoordinatorState::LogEpochEndLocked(int64_t epoch) {
  v1::EpochResult r = EpochResultLocked(epoch);
  logger_->Info("epoch_end",
                {{"job", job_->id},
                 {"epoch", epoch},
                 {"epochs", job_->spec.epochs},
                 {"steps", r.steps()},
                 {"loss", r.loss()},
                 {"accuracy", r.accuracy()},
                 {"evaluated", r.evaluated()},
                 {"test_loss", r.test_loss()},
                 {"test_accuracy", r.test_accuracy()},
                 {"elapsed_seconds", r.elapsed_seconds()},
                 {"examples_per_second", r.examples_per_second()}});
}

v1::JobStatus::State CoordinatorState::JobState() const {
  absl::MutexLock lock(&mu_);
  return job_ ? job_->state : v1::JobStatus::NONE;
}

v1::JobStatus CoordinatorState::GetJob() const {
  v1::JobStatus status;
  absl::MutexLock lock(&mu_);
  if (!job_) {
    status.set_state(v1::JobStatus::NONE);
    return status;
  }
  const Job& job = *job_;
  status.set_job_id(job.id);
  status.set_job_json(job.json);
  status.set_state(job.state);
  status.set_error(job.error);
  status.set_steps_scheduled(job.total_steps);
  status.set_steps_completed(job.completed.size());
  status.set_lost_steps(job.lost_steps);
  status.set_last_checkpoint_step(job.last_checkpoint_step);
  status.set_last_checkpoint(job.last_checkpoint);
  int64_t examples = 0;
  for (int64_t e = 0; e < job.spec.epochs; ++e) {
    const EpochStats& stats = job.epochs[static_cast<size_t>(e)];
    examples += stats.examples;
    if (stats.start != absl::InfinitePast() || stats.steps > 0) {
      *status.add_epochs() = EpochResultLocked(e);
    }
  }
  status.set_examples(examples);
  if (job.started != absl::InfinitePast()) {
    const absl::Time end =
        job.finished != absl::InfinitePast() ? job.finished : Now();
    status.set_wall_seconds(
        std::max(0.0, absl::ToDoubleSeconds(end - job.started)));
  }
  return status;
}

absl::StatusOr<v1::WorkItem> CoordinatorState::GetWork(
    const v1::TaskId& task_id, const std::string& incarnation) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ValidateTask(task_id));
  if (task.role == "ps") {
    return absl::FailedPreconditionError(
        absl::StrCat("task ", Name(task), ": ps tasks take no work"));
  }
  v1::WorkItem item;
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    STRATA_ASSIGN_OR_RETURN(MemberRecord * member,
                            LiveMemberLocked(task, incarnation));
    const absl::Time now = Now();
    member->last_heartbeat = now;  // asking for work proves liveness
    const int64_t seq = change_seq_;
    UpdateJobLocked();
    item.set_kind(v1::WorkItem::WAIT);
    item.set_retry_after_ms(absl::ToInt64Milliseconds(options_.retry_after));
    item.set_generation(generation_);
    if (job_) {
      Job& job = *job_;
      item.set_job_id(job.id);
      if (job.state != v1::JobStatus::RUNNING) {
        item.set_kind(v1::WorkItem::DONE);
        item.set_retry_after_ms(0);
      } else if (job.started != absl::InfinitePast() && !job.restore_pending &&
                 !job.checkpoint_pending && !job.action_in_progress &&
                 !(UsesPs() && !PsDownLocked().empty())) {
        const int64_t epoch = OpenEpochLocked();
        if (epoch < job.spec.epochs) {
          EpochStats& stats = job.epochs[static_cast<size_t>(epoch)];
          const Holder holder{task, incarnation};
          if (stats.steps == job.steps_per_epoch) {
            // Training of the epoch is done; its evaluation is due.
            const ItemKey key{v1::WorkItem::EVALUATE, epoch};
            if (job.inflight.count(key) == 0) {
              job.inflight.emplace(key, holder);
              item.set_kind(v1::WorkItem::EVALUATE);
              item.set_epoch(static_cast<int32_t>(epoch));
              item.set_retry_after_ms(0);
            }
          } else if (task.role != "evaluator") {
            const int64_t step = LowestPendingLocked();
            if (step >= 0 && step / job.steps_per_epoch == epoch) {
              if (job.requeued.erase(step) == 0) job.cursor = step + 1;
              job.inflight.emplace(ItemKey{v1::WorkItem::TRAIN, step}, holder);
              if (stats.start == absl::InfinitePast()) {
                stats.start = now;
                MarkDirtyLocked();
              }
              item.set_kind(v1::WorkItem::TRAIN);
              item.set_step(step);
              item.set_epoch(static_cast<int32_t>(epoch));
              item.set_batch(step % job.steps_per_epoch);
              item.set_retry_after_ms(0);
            }
          }
        }
      }
    }
    changed = change_seq_ != seq;
  }
  if (changed) FlushOrLog();
  return item;
}

int64_t CoordinatorState::RequestCheckpoint() {
  absl::MutexLock lock(&mu_);
  if (!job_ || job_->state != v1::JobStatus::RUNNING ||
      job_->started == absl::InfinitePast() || job_->restore_pending ||
      (UsesPs() && !PsDownLocked().empty())) {
    return -1;
  }
  Job& job = *job_;
  const bool checkpoints = job.spec.checkpoint_every_steps > 0 ||
                           job.spec.checkpoint_every_seconds > 0;
  const int64_t completed = job.completed.size();
  if (!checkpoints || completed <= job.checkpoint_attempted) return -1;
  if (!job.checkpoint_pending) {
    job.checkpoint_pending = true;
    logger_->Info("checkpoint_due", {{"job", job.id},
                                     {"reason", "requested"},
                                     {"steps_completed", completed},
                                     {"inflight", job.inflight.size()}});
  }
  return completed;
}

int64_t CoordinatorState::CheckpointAttempted() const {
  absl::MutexLock lock(&mu_);
  return job_ ? job_->checkpoint_attempted : -1;
}

std::string CoordinatorState::LastCheckpoint() const {
  absl::MutexLock lock(&mu_);
  return job_ ? job_->last_checkpoint : std::string();
}

absl::StatusOr<int> CoordinatorState::ReleaseUnheld(
    const v1::TaskId& task_id, const std::string& incarnation,
    const std::vector<int64_t>& holding,
    const std::vector<int64_t>& holding_evaluations) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ValidateTask(task_id));
  const std::set<int64_t> held(holding.begin(), holding.end());
  const std::set<int64_t> held_evaluations(holding_evaluations.begin(),
                                           holding_evaluations.end());
  std::vector<int64_t> steps;
  std::vector<int64_t> evaluations;
  {
    absl::MutexLock lock(&mu_);
    if (!job_) return 0;
    for (auto it = job_->inflight.begin(); it != job_->inflight.end();) {
      const ItemKey item = it->first;
      const bool train = item.kind == v1::WorkItem::TRAIN;
      const bool held_item = train
                                 ? held.count(item.number) > 0
                                 : held_evaluations.count(item.number) > 0;
      if (it->second.task == task && it->second.incarnation == incarnation &&
          !held_item) {
        it = job_->inflight.erase(it);
        RequeueLocked(item);
        (train ? steps : evaluations).push_back(item.number);
      } else {
        ++it;
      }
    }
    if (!steps.empty() || !evaluations.empty()) {
      logger_->Warning("work_requeued", {{"member", Name(task)},
                                         {"reason", "lease lost in transit"},
                                         {"steps", steps},
                                         {"evaluations", evaluations}});
      MarkDirtyLocked();
    }
  }
  return static_cast<int>(steps.size() + evaluations.size());
}

absl::Status CoordinatorState::ReportWork(const v1::ReportWorkRequest& report) {
  STRATA_RETURN_IF_ERROR(ApplyReport(report));
  return Flush();
}

absl::Status CoordinatorState::ApplyReport(
    const v1::ReportWorkRequest& report) {
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ValidateTask(report.task()));
  const v1::WorkItem& item = report.item();
  if (item.kind() != v1::WorkItem::TRAIN &&
      item.kind() != v1::WorkItem::EVALUATE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "item.kind: only TRAIN and EVALUATE items are reported, got ",
        v1::WorkItem::Kind_Name(item.kind())));
  }
  if (report.examples() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("examples: must be >= 0, got ", report.examples()));
  }
  absl::MutexLock lock(&mu_);
  if (members_.count(task) == 0) {
    return absl::NotFoundError(
        absl::StrCat("task ", Name(task), " is not registered; re-register"));
  }
  if (!job_ || (!item.job_id().empty() && item.job_id() != job_->id)) {
    logger_->Debug("report_ignored", {{"member", Name(task)},
                                      {"job", item.job_id()},
                                      {"reason", "not the current job"}});
    return absl::OkStatus();
  }
  Job& job = *job_;
  const bool train = item.kind() == v1::WorkItem::TRAIN;
  const int64_t number = train ? item.step() : item.epoch();
  const int64_t limit = train ? job.total_steps : job.spec.epochs;
  if (number < 0 || number >= limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(train ? "item.step: " : "item.epoch: ", number,
                     " is outside the job's [0, ", limit, ")"));
  }
  if (job.state != v1::JobStatus::RUNNING) return absl::OkStatus();

  const ItemKey key{item.kind(), number};
  auto it = job.inflight.find(key);
  const bool held = it != job.inflight.end() && it->second.task == task &&
                    it->second.incarnation == report.incarnation();
  if (held) job.inflight.erase(it);
  const bool stale = item.generation() < job.restore_floor_generation;
  if (stale || !report.error().empty()) {
    if (held) RequeueLocked(key);
    if (!report.error().empty()) {
      logger_->Warning("work_failed",
                       {{"member", Name(task)},
                        {"kind", v1::WorkItem::Kind_Name(item.kind())},
                        {"number", number},
                        {"error", report.error()}});
    }
    UpdateJobLocked();
    return absl::OkStatus();
  }
  const absl::Time now = Now();
  if (train) {
    if (!job.completed.Insert(number)) {  // a duplicate: counted once
      UpdateJobLocked();
      return absl::OkStatus();
    }
    job.requeued.erase(number);
    const int64_t epoch = number / job.steps_per_epoch;
    EpochStats& stats = job.epochs[static_cast<size_t>(epoch)];
    ++stats.steps;
    stats.loss_sum += report.loss();
    stats.accuracy_sum += report.accuracy();
    stats.examples += report.examples();
    if (stats.start == absl::InfinitePast()) stats.start = now;
    if (stats.steps == job.steps_per_epoch) {
      stats.end = now;
      if (!EvalDueLocked(epoch)) LogEpochEndLocked(epoch);
    }
  } else {
    EpochStats& stats = job.epochs[static_cast<size_t>(number)];
    if (stats.evaluated || stats.steps < job.steps_per_epoch) {
      UpdateJobLocked();
      return absl::OkStatus();
    }
    stats.evaluated = true;
    stats.test_loss = report.test_loss();
    stats.test_accuracy = report.test_accuracy();
    LogEpochEndLocked(number);
  }
  MarkDirtyLocked();
  UpdateJobLocked();
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Checkpoint and restore orchestration.

std::optional<PsAction> CoordinatorState::NextPsAction() {
  std::optional<PsAction> action;
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    const int64_t seq = change_seq_;
    UpdateJobLocked();
    changed = change_seq_ != seq;
    if (job_ && job_->state == v1::JobStatus::RUNNING &&
        job_->started != absl::InfinitePast() && !job_->action_in_progress &&
        job_->inflight.empty() && PsDownLocked().empty()) {
      Job& job = *job_;
      if (job.restore_pending) {
        if (!job.last_checkpoint.empty() && Now() >= job.next_restore_attempt) {
          action = PsAction{PsAction::Kind::kRestore, job.last_checkpoint,
                            job.id, job.restore_seq};
          logger_->Info("restore_started",
                        {{"job", job.id}, {"checkpoint", job.last_checkpoint}});
        }
      } else if (job.checkpoint_pending) {
        job.save_completed = job.completed;
        job.save_epochs = job.epochs;
        action = PsAction{PsAction::Kind::kSave,
                          absl::StrCat("ckpt-", job.completed.size()), job.id,
                          job.restore_seq};
        logger_->Info("checkpoint_started",
                      {{"job", job.id}, {"checkpoint", action->checkpoint}});
      }
      if (action) job.action_in_progress = true;
    }
  }
  if (changed) FlushOrLog();
  return action;
}

void CoordinatorState::RestoreBookkeepingLocked() {
  Job& job = *job_;
  const std::vector<int64_t> redo =
      job.completed.Minus(job.checkpoint_completed);
  const int64_t lost = job.completed.size() - job.checkpoint_completed.size();
  job.lost_steps += lost;
  job.completed = job.checkpoint_completed;
  std::vector<EpochStats> epochs =
      job.checkpoint_epochs.empty()
          ? std::vector<EpochStats>(static_cast<size_t>(job.spec.epochs))
          : job.checkpoint_epochs;
  for (size_t e = 0; e < epochs.size(); ++e) {
    // Keep when the epoch first started; its end is redone.
    if (epochs[e].start == absl::InfinitePast()) {
      epochs[e].start = job.epochs[e].start;
    }
    if (epochs[e].steps < job.steps_per_epoch) {
      epochs[e].end = absl::InfinitePast();
    }
  }
  job.epochs = std::move(epochs);
  job.requeued.clear();
  job.cursor = 0;
  job.restore_pending = false;
  job.checkpoint_pending = false;
  job.checkpoint_attempted = job.last_checkpoint_step;
  MarkDirtyLocked();
  logger_->Warning(
      "ps_restored",
      {{"job", job.id},
       {"checkpoint", job.last_checkpoint.empty() ? std::string("(none)")
                                                  : job.last_checkpoint},
       {"checkpoint_step", job.last_checkpoint_step},
       {"lost_steps", lost},
       {"total_lost_steps", job.lost_steps},
       {"requeued_steps", redo.size()},
       {"first_requeued", redo.empty() ? int64_t{-1} : redo.front()}});
}

void CoordinatorState::FinishPsAction(const PsAction& action,
                                      const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (!job_ || job_->id != action.job_id || !job_->action_in_progress) {
      return;  // the job ended or was replaced meanwhile
    }
    Job& job = *job_;
    job.action_in_progress = false;
    const absl::Time now = Now();
    if (action.kind == PsAction::Kind::kSave) {
      job.checkpoint_pending = false;
      job.checkpoint_attempted = job.save_completed.size();
      job.checkpoint_attempt_time = now;
      if (action.ticket != job.restore_seq) {
        logger_->Warning("checkpoint_discarded",
                         {{"job", job.id},
                          {"checkpoint", action.checkpoint},
                          {"reason", "a ps task restarted during the save"}});
      } else if (status.ok()) {
        job.last_checkpoint = action.checkpoint;
        job.last_checkpoint_step = job.save_completed.size();
        job.checkpoint_completed = job.save_completed;
        job.checkpoint_epochs = job.save_epochs;
        logger_->Info("checkpoint_saved", {{"job", job.id},
                                           {"checkpoint", action.checkpoint},
                                           {"step", job.last_checkpoint_step}});
      } else {
        logger_->Warning("checkpoint_failed",
                         {{"job", job.id},
                          {"checkpoint", action.checkpoint},
                          {"error", status.ToString()}});
      }
      job.save_completed.Clear();
      job.save_epochs.clear();
      MarkDirtyLocked();
    } else if (!status.ok()) {
      job.next_restore_attempt = now + options_.restore_retry;
      logger_->Error(
          "restore_failed",
          {{"job", job.id},
           {"checkpoint", action.checkpoint},
           {"error", status.ToString()},
           {"retry_in_ms", absl::ToInt64Milliseconds(options_.restore_retry)}});
    } else if (action.ticket != job.restore_seq) {
      logger_->Warning(
          "restore_superseded",
          {{"job", job.id}, {"reason", "another ps task restarted meanwhile"}});
    } else {
      RestoreBookkeepingLocked();
    }
    UpdateJobLocked();
  }
  FlushOrLog();
}

// ---------------------------------------------------------------------------
// Barriers.

absl::Status CoordinatorState::ArriveAtBarrier(const std::string& name,
                                               const v1::TaskId& task_id,
                                               int count, int64_t ticket,
                                               BarrierDone done) {
  if (name.empty()) {
    return absl::InvalidArgumentError("name: a barrier needs a name");
  }
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("count: must be >= 1, got ", count));
  }
  STRATA_ASSIGN_OR_RETURN(TaskKey task, ValidateTask(task_id));
  Callbacks callbacks;
  {
    absl::MutexLock lock(&mu_);
    Barrier& barrier = barriers_[name];
    if (barrier.waiters.empty()) {
      barrier.count = count;
    } else if (barrier.count != count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "barrier '", name, "': count ", count, " differs from the ",
          barrier.count, " its waiting tasks use"));
    }
    auto it = barrier.waiters.find(task);
    if (it != barrier.waiters.end()) {
      callbacks.emplace_back(
          std::move(it->second.done),
          absl::AbortedError(absl::StrCat("barrier '", name,
                                          "': superseded by a new arrival of ",
                                          Name(task))));
    }
    barrier.waiters[task] = BarrierWaiter{ticket, std::move(done)};
    if (static_cast<int>(barrier.waiters.size()) >= barrier.count) {
      for (auto& [waiter, w] : barrier.waiters) {
        callbacks.emplace_back(std::move(w.done), absl::OkStatus());
      }
      logger_->Info("barrier_released",
                    {{"barrier", name}, {"count", barrier.count}});
      barriers_.erase(name);
    }
  }
  for (auto& [fn, status] : callbacks) fn(status);
  return absl::OkStatus();
}

bool CoordinatorState::CancelBarrierWait(int64_t ticket) {
  absl::MutexLock lock(&mu_);
  for (auto it = barriers_.begin(); it != barriers_.end(); ++it) {
    for (auto w = it->second.waiters.begin(); w != it->second.waiters.end();
         ++w) {
      if (w->second.ticket == ticket) {
        it->second.waiters.erase(w);
        if (it->second.waiters.empty()) barriers_.erase(it);
        return true;
      }
    }
  }
  return false;
}

void CoordinatorState::CancelAllBarriers(const absl::Status& status) {
  Callbacks callbacks;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, barrier] : barriers_) {
      for (auto& [task, w] : barrier.waiters) {
        callbacks.emplace_back(std::move(w.done), status);
      }
    }
    barriers_.clear();
  }
  for (auto& [fn, s] : callbacks) fn(s);
}

}  // namespace strata

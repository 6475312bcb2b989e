// The state codec: state.json, the membership, the job and its checkpoint
// bookkeeping a restarted coordinator resumes from (see
// coordinator_internal.h).
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_internal.h"
#include "nlohmann/json.hpp"

namespace strata {
namespace coordinator_internal {
namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr int kStateFormat = 1;

// A JSON value as it appeared, shortened for error messages.
std::string Show(const json& value) {
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 64) s = absl::StrCat(s.substr(0, 61), "...");
  return s;
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

json EpochsToJson(const std::vector<EpochStats>& epochs) {
  json out = json::array();
  for (const EpochStats& e : epochs) {
    out.push_back({{"steps", e.steps},
                   {"reported", e.reported},
                   {"loss_sum", DoubleToJson(e.loss_sum)},
                   {"accuracy_sum", DoubleToJson(e.accuracy_sum)},
                   {"examples", e.examples},
                   {"evaluated", e.evaluated},
                   {"evaluation_missing", e.evaluation_missing},
                   {"test_loss", DoubleToJson(e.test_loss)},
                   {"test_accuracy", DoubleToJson(e.test_accuracy)},
                   {"has_test_auc", e.has_test_auc},
                   {"test_auc", DoubleToJson(e.test_auc)},
                   {"start_us", TimeToJson(e.start)},
                   {"end_us", TimeToJson(e.end)}});
  }
  return out;
}

absl::Status EpochsFromJson(const json& value, size_t count,
                            std::vector<EpochStats>* epochs) {
  if (!value.is_array() || value.size() != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", count, " epoch records, got ", Show(value)));
  }
  epochs->clear();
  for (const json& j : value) {
    EpochStats e;
    e.steps = j.at("steps").get<int64_t>();
    // Absent in state written before steps were counted apart from their
    // reports: every step was reported then.
    e.reported = j.value("reported", e.steps);
    e.loss_sum = DoubleFromJson(j.at("loss_sum"));
    e.accuracy_sum = DoubleFromJson(j.at("accuracy_sum"));
    e.examples = j.at("examples").get<int64_t>();
    e.evaluated = j.at("evaluated").get<bool>();
    e.evaluation_missing = j.value("evaluation_missing", false);
    e.test_loss = DoubleFromJson(j.at("test_loss"));
    e.test_accuracy = DoubleFromJson(j.at("test_accuracy"));
    // Absent in state written before test AUCs.
    e.has_test_auc = j.value("has_test_auc", false);
    if (e.has_test_auc) e.test_auc = DoubleFromJson(j.at("test_auc"));
    e.start = TimeFromJson(j.at("start_us"));
    e.end = TimeFromJson(j.at("end_us"));
    epochs->push_back(e);
  }
  return absl::OkStatus();
}

}  // namespace

std::string SerializeState(const CoordinatorCore& core) {
  ordered_json root;
  root["format"] = kStateFormat;
  root["generation"] = core.generation;
  root["job_seq"] = core.job_seq;
  root["group_seq"] = core.group_seq;
  ordered_json members = ordered_json::array();
  for (const auto& [task, m] : core.members) {
    members.push_back({{"role", task.role},
                       {"index", task.index},
                       {"address", m.address},
                       {"incarnation", m.incarnation},
                       {"state", v1::Member::State_Name(m.state)}});
  }
  root["members"] = std::move(members);
  if (core.job) {
    const Job& job = *core.job;
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
    ordered_json kept = ordered_json::array();
    for (const CheckpointRecord& r : job.checkpoints) {
      kept.push_back({{"name", r.name},
                      {"step", r.step},
                      {"completed", RangesToJson(r.completed)},
                      {"epochs", EpochsToJson(r.epochs)}});
    }
    j["checkpoint"] = {{"kept", std::move(kept)},
                       {"unusable", job.unusable_checkpoints},
                       {"saved", job.checkpoints_saved},
                       {"failed", job.checkpoints_failed},
                       {"failures_in_a_row", job.checkpoint_failures_in_a_row},
                       {"last_error", job.last_checkpoint_error},
                       {"skipped", job.checkpoints_skipped},
                       {"attempted", job.checkpoint_attempted},
                       {"attempt_us", TimeToJson(job.checkpoint_attempt_time)}};
    j["restore_pending"] = job.restore_pending;
    j["restore_floor_generation"] = job.restore_floor_generation;
    j["first_group_after_restore"] = job.first_group_after_restore;
    root["job"] = std::move(j);
  }
  return root.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

absl::Status LoadState(CoordinatorCore& core, const std::string& text) {
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
  const absl::Time now = core.Now();
  try {
    const int format = root.at("format").get<int>();
    if (format != kStateFormat) {
      return absl::InvalidArgumentError(
          absl::StrCat("format ", format, " is not the ", kStateFormat,
                       " this coordinator reads"));
    }
    core.generation = root.at("generation").get<int64_t>();
    core.job_seq = root.value("job_seq", int64_t{0});
    core.group_seq = root.value("group_seq", int64_t{0});
    if (core.generation < 0 || core.job_seq < 0) {
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
      core.members[*task] = std::move(record);
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
    // One kept checkpoint: "name", "step", "completed", "epochs" (also the
    // form of a state.json from before several were kept).
    auto read_record = [&](const json& r,
                           const std::string& where) -> absl::Status {
      CheckpointRecord record;
      record.name = r.at("name").get<std::string>();
      if (record.name.empty()) return absl::OkStatus();
      record.step = r.at("step").get<int64_t>();
      STRATA_RETURN_IF_ERROR(RangesFromJson(r.at("completed"), job.total_steps,
                                            where + ".completed",
                                            &record.completed));
      if (record.completed.size() != record.step) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".step disagrees with ", where, ".completed"));
      }
      if (!r.at("epochs").empty()) {
        absl::Status e = EpochsFromJson(r.at("epochs"), epochs, &record.epochs);
        if (!e.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ".epochs: ", e.message()));
        }
      }
      job.checkpoints.push_back(std::move(record));
      return absl::OkStatus();
    };
    if (auto kept = c.find("kept"); kept != c.end()) {
      for (size_t i = 0; i < kept->size(); ++i) {
        STRATA_RETURN_IF_ERROR(read_record(
            (*kept)[i], absl::StrCat("job.checkpoint.kept[", i, "]")));
      }
    } else {
      STRATA_RETURN_IF_ERROR(read_record(c, "job.checkpoint"));
    }
    job.unusable_checkpoints =
        c.value("unusable", std::vector<std::string>());
    job.checkpoints_saved = c.value("saved", int64_t{0});
    job.checkpoints_failed = c.value("failed", int64_t{0});
    job.checkpoint_failures_in_a_row = c.value("failures_in_a_row", int64_t{0});
    job.last_checkpoint_error = c.value("last_error", std::string());
    job.checkpoints_skipped = c.value("skipped", std::vector<std::string>());
    job.checkpoint_attempted = c.at("attempted").get<int64_t>();
    job.checkpoint_attempt_time = TimeFromJson(c.at("attempt_us"));
    if (job.checkpoint_attempt_time == absl::InfinitePast()) {
      job.checkpoint_attempt_time = now;
    }
    job.restore_pending = j.at("restore_pending").get<bool>();
    job.restore_floor_generation =
        j.at("restore_floor_generation").get<int64_t>();
    job.first_group_after_restore =
        j.value("first_group_after_restore", int64_t{0});
    if (job.lost_steps < 0 || job.checkpoint_attempted < 0) {
      return absl::InvalidArgumentError("negative step counts in job");
    }
    // A job still waiting for its topology gets a fresh timeout.
    if (job.state == v1::JobStatus::RUNNING &&
        job.started == absl::InfinitePast()) {
      job.submitted = now;
    }
    core.job = std::move(job);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return absl::OkStatus();
}

}  // namespace coordinator_internal
}  // namespace strata

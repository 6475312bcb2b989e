#include "worker/replica_state.h"

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace strata {

v1::WorkerState SnapshotReplicaState(
    const StateLayout& layout, int64_t step,
    const std::vector<std::vector<float>>& params,
    const std::vector<std::vector<std::vector<float>>>& slots) {
  v1::WorkerState state;
  state.set_step(step);
  auto add = [&](const std::string& name, const std::vector<float>& values) {
    v1::NamedTensor* t = state.add_tensors();
    t->set_name(name);
    t->set_dtype(v1::DT_FLOAT32);
    t->add_shape(static_cast<int64_t>(values.size()));
    t->set_data(values.data(), values.size() * sizeof(float));
  };
  for (size_t i = 0; i < layout.names.size(); ++i) {
    add(layout.names[i], params[i]);
    for (size_t j = 0; j < layout.slot_names.size(); ++j) {
      add(absl::StrCat(layout.names[i], "/", layout.slot_names[j]),
          slots[i][j]);
    }
  }
  return state;
}

absl::Status LoadReplicaState(
    const v1::WorkerState& state, const StateLayout& layout,
    std::vector<std::vector<float>>* params,
    std::vector<std::vector<std::vector<float>>>* slots) {
  slots->assign(layout.names.size(), {});
  for (auto& s : *slots) s.resize(layout.slot_names.size());
  std::map<std::string, const v1::NamedTensor*> by_name;
  for (const v1::NamedTensor& t : state.tensors()) by_name[t.name()] = &t;
  auto load = [&](const std::string& name,
                  std::vector<float>* out, int64_t size) -> absl::Status {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::DataLossError(
          absl::StrCat("copied state lacks tensor '", name, "'"));
    }
    const std::string& data = it->second->data();
    if (it->second->dtype() != v1::DT_FLOAT32 ||
        data.size() != static_cast<size_t>(size) * sizeof(float)) {
      return absl::DataLossError(absl::StrCat(
          "copied tensor '", name, "' has ", data.size(), " bytes, expected ",
          size * 4, " of float32"));
    }
    out->resize(static_cast<size_t>(size));
    std::memcpy(out->data(), data.data(), data.size());
    return absl::OkStatus();
  };
  for (size_t i = 0; i < layout.names.size(); ++i) {
    STRATA_RETURN_IF_ERROR(
        load(layout.names[i], &(*params)[i], layout.sizes[i]));
    for (size_t j = 0; j < layout.slot_names.size(); ++j) {
      STRATA_RETURN_IF_ERROR(
          load(absl::StrCat(layout.names[i], "/", layout.slot_names[j]),
               &(*slots)[i][j], layout.sizes[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status ExportFinalState(FileSystem* fs, Logger* logger,
                              const std::string& dir,
                              const v1::WorkerState& state) {
  // A directory that cannot be created fails the write below.
  fs->CreateDirs(dir).IgnoreError();
  const std::string path = dir + "/final_state.pb";
  STRATA_RETURN_IF_ERROR(
      fs->WriteFileAtomically(path, state.SerializeAsString()));
  logger->Log(LogLevel::kInfo, "state_exported", {{"path", path}});
  return absl::OkStatus();
}

}  // namespace strata

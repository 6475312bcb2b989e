#include "client/ps_cluster.h"

#include <algorithm>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace strata {

std::unique_ptr<PsCluster> PsCluster::Connect(
    const std::vector<std::string>& ps_addresses,
    const PsClientOptions& options) {
  std::vector<std::unique_ptr<PsClient>> clients;
  for (const auto& a : ps_addresses) {
    clients.push_back(PsClient::Connect(a, options));
  }
  return std::make_unique<PsCluster>(std::move(clients));
}

PsCluster::PsCluster(std::vector<std::unique_ptr<PsClient>> clients)
    : clients_(std::move(clients)),
      pool_(std::make_unique<ThreadPool>(
          std::max<int>(2, 2 * static_cast<int>(clients_.size())))) {}

absl::StatusOr<VariablePlacement> PsCluster::CreateVariable(
    const v1::VariableSpec& spec, const std::vector<ShardSlice>& slices) {
  if (clients_.empty()) {
    return absl::FailedPreconditionError("the cluster has no PS task");
  }
  STRATA_ASSIGN_OR_RETURN(DType dtype,
                          spec.dtype() == v1::DT_INVALID
                              ? absl::StatusOr<DType>(absl::InvalidArgumentError(
                                    absl::StrCat("variable '", spec.name(),
                                                 "' has no dtype")))
                              : absl::StatusOr<DType>(
                                    static_cast<DType>(spec.dtype())));
  Shape shape(spec.shape().begin(), spec.shape().end());
  VariablePlacement placement;
  placement.spec = spec;
  const size_t esize = DTypeSize(dtype);
  placement.bytes = NumElements(shape) * esize;
  std::vector<ShardSlice> parts = slices;
  if (parts.empty() || shape.empty()) {
    parts = {ShardSlice{0, shape.empty() ? 1 : shape[0]}};
  }
  const size_t row_bytes =
      shape.empty() || shape[0] == 0 ? placement.bytes
                                     : placement.bytes / shape[0];
  for (size_t i = 0; i < parts.size(); ++i) {
    ShardPlacement s;
    s.ps = PlaceShard(static_cast<int>(i), num_ps());
    s.name = parts.size() == 1 ? spec.name()
                               : absl::StrCat(spec.name(), "/part_", i);
    s.row_offset = parts[i].row_offset;
    s.num_rows = parts[i].num_rows;
    s.byte_offset = shape.empty() ? 0 : parts[i].row_offset * row_bytes;
    s.bytes = shape.empty() ? placement.bytes : parts[i].num_rows * row_bytes;
    placement.shards.push_back(s);
  }
  std::vector<absl::Status> status(placement.shards.size());
  pool_->ParallelFor(static_cast<int>(placement.shards.size()), [&](int i) {
    const ShardPlacement& s = placement.shards[i];
    v1::VariableSpec shard = spec;
    shard.set_name(s.name);
    shard.set_full_name(spec.name());
    if (placement.shards.size() > 1) {
      shard.set_shape(0, s.num_rows);
      shard.clear_full_shape();
      for (int64_t d : shape) shard.add_full_shape(d);
      shard.set_row_offset(s.row_offset);
    }
    status[i] = clients_[s.ps]->CreateVariable(shard).status();
  });
  for (size_t i = 0; i < status.size(); ++i) {
    if (!status[i].ok()) {
      return absl::Status(
          status[i].code(),
          absl::StrCat("creating shard '", placement.shards[i].name,
                       "' on ps ", placement.shards[i].ps, ": ",
                       status[i].message()));
    }
  }
  absl::MutexLock lock(&mu_);
  placements_[spec.name()] = placement;
  return placement;
}

absl::StatusOr<VariablePlacement> PsCluster::Placement(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = placements_.find(name);
  if (it == placements_.end()) {
    return absl::NotFoundError(
        absl::StrCat("variable '", name, "' was not created in this cluster"));
  }
  return it->second;
}

void PsCluster::RunPerPs(const std::function<void(int)>& fn) {
  // One thread per extra PS task, not the shared pool: a pull may block
  // (sync mode, staleness bound) and must not hold a pool thread that
  // another step's call is queued behind.
  std::vector<std::thread> threads;
  for (int i = 1; i < num_ps(); ++i) threads.emplace_back(fn, i);
  if (num_ps() > 0) fn(0);
  for (auto& t : threads) t.join();
}

absl::Status PsCluster::PullMany(const std::vector<std::string>& names,
                                 const std::vector<void*>& dsts,
                                 const PullOptions& options) {
  std::vector<VariablePlacement> placements;
  for (const auto& n : names) {
    STRATA_ASSIGN_OR_RETURN(VariablePlacement p, Placement(n));
    placements.push_back(std::move(p));
  }
  // One PullVariables call per PS task, all tasks in parallel.
  struct PerPs {
    std::vector<std::string> names;
    std::vector<void*> dsts;
    std::vector<size_t> sizes;
  };
  std::vector<PerPs> per_ps(clients_.size());
  for (size_t v = 0; v < placements.size(); ++v) {
    for (const auto& s : placements[v].shards) {
      per_ps[s.ps].names.push_back(s.name);
      per_ps[s.ps].dsts.push_back(static_cast<char*>(dsts[v]) + s.byte_offset);
      per_ps[s.ps].sizes.push_back(s.bytes);
    }
  }
  std::vector<absl::Status> status(clients_.size());
  RunPerPs([&](int i) {
    if (per_ps[i].names.empty()) return;
    status[i] = clients_[i]
                    ->PullVariables(per_ps[i].names, per_ps[i].dsts,
                                    per_ps[i].sizes, options)
                    .status();
  });
  for (const auto& s : status) STRATA_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PsCluster::PushMany(
    const std::vector<std::string>& names,
    const std::vector<const void*>& grads, const PushTag& tag) {
  std::vector<VariablePlacement> placements;
  for (const auto& n : names) {
    STRATA_ASSIGN_OR_RETURN(VariablePlacement p, Placement(n));
    placements.push_back(std::move(p));
  }
  // One PushVariables call per PS task (float32 variables, as the model
  // runtime has them), all tasks in parallel.
  struct PerPs {
    std::vector<std::string> names;
    std::vector<Shape> shapes;
    std::vector<const void*> data;
  };
  std::vector<PerPs> per_ps(clients_.size());
  for (size_t v = 0; v < placements.size(); ++v) {
    if (placements[v].spec.dtype() != v1::DT_FLOAT32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PushMany: variable '", names[v], "' is not float32"));
    }
    for (const auto& s : placements[v].shards) {
      Shape shape(placements[v].spec.shape().begin(),
                  placements[v].spec.shape().end());
      if (!shape.empty()) shape[0] = s.num_rows;
      per_ps[s.ps].names.push_back(s.name);
      per_ps[s.ps].shapes.push_back(std::move(shape));
      per_ps[s.ps].data.push_back(static_cast<const char*>(grads[v]) +
                                  s.byte_offset);
    }
  }
  std::vector<absl::StatusOr<std::vector<PushResult>>> results(clients_.size());
  RunPerPs([&](int i) {
    if (per_ps[i].names.empty()) {
      results[i] = std::vector<PushResult>();
      return;
    }
    results[i] = clients_[i]->PushVariables(per_ps[i].names, DType::kFloat32,
                                            per_ps[i].shapes, per_ps[i].data,
                                            tag);
  });
  int64_t version = std::numeric_limits<int64_t>::max();
  for (const auto& r : results) {
    if (!r.ok()) return r.status();
    for (const PushResult& p : *r) version = std::min(version, p.version);
  }
  return version;
}

}  // namespace strata

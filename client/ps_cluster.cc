#include "client/ps_cluster.h"

#include <algorithm>
#include <limits>
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

absl::Status PsCluster::PullMany(const std::vector<std::string>& names,
                                 const std::vector<void*>& dsts,
                                 const PullOptions& options) {
  struct Call {
    const ShardPlacement* shard;
    char* dst;
  };
  std::vector<VariablePlacement> placements;
  for (const auto& n : names) {
    STRATA_ASSIGN_OR_RETURN(VariablePlacement p, Placement(n));
    placements.push_back(std::move(p));
  }
  std::vector<Call> calls;
  for (size_t v = 0; v < placements.size(); ++v) {
    for (const auto& s : placements[v].shards) {
      calls.push_back(Call{&s, static_cast<char*>(dsts[v]) + s.byte_offset});
    }
  }
  std::vector<absl::Status> status(calls.size());
  pool_->ParallelFor(static_cast<int>(calls.size()), [&](int i) {
    status[i] = clients_[calls[i].shard->ps]
                    ->Pull(calls[i].shard->name, calls[i].dst,
                           calls[i].shard->bytes, options)
                    .status();
  });
  for (const auto& s : status) STRATA_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PsCluster::PushMany(
    const std::vector<std::string>& names,
    const std::vector<const void*>& grads, const PushTag& tag) {
  struct Call {
    const ShardPlacement* shard;
    const VariablePlacement* var;
    const char* grad;
  };
  std::vector<VariablePlacement> placements;
  for (const auto& n : names) {
    STRATA_ASSIGN_OR_RETURN(VariablePlacement p, Placement(n));
    placements.push_back(std::move(p));
  }
  std::vector<Call> calls;
  for (size_t v = 0; v < placements.size(); ++v) {
    for (const auto& s : placements[v].shards) {
      calls.push_back(Call{&s, &placements[v],
                           static_cast<const char*>(grads[v]) + s.byte_offset});
    }
  }
  std::vector<absl::StatusOr<PushResult>> results(calls.size());
  pool_->ParallelFor(static_cast<int>(calls.size()), [&](int i) {
    const Call& c = calls[i];
    Shape shape(c.var->spec.shape().begin(), c.var->spec.shape().end());
    if (!shape.empty()) shape[0] = c.shard->num_rows;
    results[i] = clients_[c.shard->ps]->Push(
        c.shard->name, static_cast<DType>(c.var->spec.dtype()), shape, c.grad,
        tag);
  });
  int64_t version = std::numeric_limits<int64_t>::max();
  for (const auto& r : results) {
    if (!r.ok()) return r.status();
    version = std::min(version, r->version);
  }
  return version;
}

}  // namespace strata

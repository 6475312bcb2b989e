// PsEmbeddingTables (worker/ps_embedding_tables.h).
#include "worker/ps_embedding_tables.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/push_tag.h"
#include "common/status_macros.h"
#include "kernels/row_optimizers.h"
#include "server/dynamic_table.h"

namespace strata {

std::vector<v1::TableSpec> TableSpecsFor(const ModelSpec& model, uint64_t seed,
                                         int shard, int num_shards) {
  std::vector<v1::TableSpec> out;
  std::set<std::string> seen;
  for (const EmbeddingSpec& e : model.embeddings) {
    if (!seen.insert(e.table).second) continue;
    v1::TableSpec t;
    t.set_name(e.table);
    t.set_dim(e.output_dim);
    t.set_seed(seed);
    t.set_initializer(e.initializer);
    t.set_init_scale(e.init_scale);
    t.set_min_count(e.min_count);
    t.set_max_rows(e.max_rows);
    t.set_eviction(e.eviction);
    t.set_ttl_steps(e.ttl_steps);
    t.set_shard(shard);
    t.set_num_shards(num_shards);
    v1::RowOptimizerSpec* o = t.mutable_optimizer();
    const RowOptimizerConfig& c = e.optimizer;
    o->set_type(RowOptimizerTypeName(c.type));
    if (c.learning_rate > 0) o->set_learning_rate(c.learning_rate);
    o->set_epsilon(c.epsilon);
    o->set_initial_accumulator_value(c.initial_accumulator_value);
    o->set_beta_1(c.beta_1);
    o->set_beta_2(c.beta_2);
    o->set_learning_rate_power(c.learning_rate_power);
    o->set_l1_regularization_strength(c.l1_regularization_strength);
    o->set_l2_regularization_strength(c.l2_regularization_strength);
    out.push_back(std::move(t));
  }
  return out;
}

absl::Status PsEmbeddingTables::CreateTables(PsCluster& cluster,
                                             const ModelSpec& model,
                                             uint64_t seed) {
  for (int ps = 0; ps < cluster.num_ps(); ++ps) {
    for (const v1::TableSpec& spec :
         TableSpecsFor(model, seed, ps, cluster.num_ps())) {
      STRATA_RETURN_IF_ERROR(cluster.ps(ps)->CreateTable(spec).status());
    }
  }
  return absl::OkStatus();
}

void PsEmbeddingTables::Split(absl::Span<const int64_t> ids) {
  const int n = cluster_->num_ps();
  positions_.assign(static_cast<size_t>(n), {});
  for (size_t i = 0; i < ids.size(); ++i) {
    positions_[static_cast<size_t>(DynamicTable::ShardOf(ids[i], n))]
        .push_back(i);
  }
}

absl::Status PsEmbeddingTables::Lookup(const std::string& table,
                                       absl::Span<const int64_t> ids,
                                       bool train, absl::Span<float> out) {
  if (ids.empty()) return absl::OkStatus();
  const size_t dim = out.size() / ids.size();
  Split(ids);
  for (int ps = 0; ps < cluster_->num_ps(); ++ps) {
    const std::vector<size_t>& pos = positions_[static_cast<size_t>(ps)];
    if (pos.empty()) continue;
    part_ids_.clear();
    for (size_t i : pos) part_ids_.push_back(ids[i]);
    part_values_.resize(pos.size() * dim);
    STRATA_RETURN_IF_ERROR(cluster_->ps(ps)->LookupRows(
        table, part_ids_, train, absl::MakeSpan(part_values_)));
    for (size_t k = 0; k < pos.size(); ++k) {
      std::memcpy(out.data() + pos[k] * dim, part_values_.data() + k * dim,
                  dim * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status PsEmbeddingTables::Push(const std::string& table,
                                     absl::Span<const int64_t> ids,
                                     absl::Span<const float> gradients,
                                     int64_t step) {
  if (ids.empty()) return absl::OkStatus();
  const size_t dim = gradients.size() / ids.size();
  Split(ids);
  for (int ps = 0; ps < cluster_->num_ps(); ++ps) {
    const std::vector<size_t>& pos = positions_[static_cast<size_t>(ps)];
    if (pos.empty()) continue;
    part_ids_.clear();
    part_values_.clear();
    for (size_t i : pos) {
      part_ids_.push_back(ids[i]);
      part_values_.insert(part_values_.end(), gradients.begin() + i * dim,
                          gradients.begin() + (i + 1) * dim);
    }
    STRATA_RETURN_IF_ERROR(cluster_->ps(ps)
                               ->PushTableRows(table, part_ids_, part_values_,
                                               PushTag{job_id_, 0, step})
                               .status());
  }
  return absl::OkStatus();
}

}  // namespace strata

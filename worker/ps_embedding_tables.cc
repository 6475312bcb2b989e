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
#include "tables/dynamic_table.h"

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

absl::Status PsEmbeddingTables::LookupAll(
    const std::vector<std::string>& tables,
    const std::vector<std::vector<int64_t>>& ids, bool train,
    std::vector<std::vector<float>>* rows) {
  const int n = cluster_->num_ps();
  const size_t num_tables = tables.size();
  // Per task: per table, the positions of its ids there.
  std::vector<std::vector<std::vector<size_t>>> pos(
      static_cast<size_t>(n), std::vector<std::vector<size_t>>(num_tables));
  for (size_t t = 0; t < num_tables; ++t) {
    for (size_t i = 0; i < ids[t].size(); ++i) {
      pos[static_cast<size_t>(DynamicTable::ShardOf(ids[t][i], n))][t]
          .push_back(i);
    }
  }
  for (int ps = 0; ps < n; ++ps) {
    std::vector<std::string> names;
    std::vector<std::vector<int64_t>> part_ids;
    std::vector<std::vector<float>> part_rows;
    std::vector<size_t> which;
    for (size_t t = 0; t < num_tables; ++t) {
      const std::vector<size_t>& p = pos[static_cast<size_t>(ps)][t];
      if (p.empty()) continue;
      const size_t dim = (*rows)[t].size() / ids[t].size();
      names.push_back(tables[t]);
      part_ids.emplace_back();
      for (size_t i : p) part_ids.back().push_back(ids[t][i]);
      part_rows.emplace_back(p.size() * dim);
      which.push_back(t);
    }
    if (names.empty()) continue;
    std::vector<absl::Span<const int64_t>> id_spans;
    std::vector<absl::Span<float>> dsts;
    for (size_t k = 0; k < names.size(); ++k) {
      id_spans.emplace_back(part_ids[k]);
      dsts.push_back(absl::MakeSpan(part_rows[k]));
    }
    STRATA_RETURN_IF_ERROR(
        cluster_->ps(ps)->LookupTables(names, id_spans, train, dsts));
    for (size_t k = 0; k < names.size(); ++k) {
      const size_t t = which[k];
      const size_t dim = (*rows)[t].size() / ids[t].size();
      const std::vector<size_t>& p = pos[static_cast<size_t>(ps)][t];
      for (size_t j = 0; j < p.size(); ++j) {
        std::memcpy((*rows)[t].data() + p[j] * dim,
                    part_rows[k].data() + j * dim, dim * sizeof(float));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PsEmbeddingTables::PushAll(
    const std::vector<TableGradients>& grads, int64_t step) {
  const int n = cluster_->num_ps();
  for (int ps = 0; ps < n; ++ps) {
    std::vector<std::string> names;
    std::vector<std::vector<int64_t>> part_ids;
    std::vector<std::vector<float>> part_grads;
    for (const TableGradients& g : grads) {
      if (g.ids.empty()) continue;
      const size_t dim = g.gradients.size() / g.ids.size();
      std::vector<int64_t> ids;
      std::vector<float> values;
      for (size_t i = 0; i < g.ids.size(); ++i) {
        if (DynamicTable::ShardOf(g.ids[i], n) != ps) continue;
        ids.push_back(g.ids[i]);
        values.insert(values.end(), g.gradients.begin() + i * dim,
                      g.gradients.begin() + (i + 1) * dim);
      }
      if (ids.empty()) continue;
      names.push_back(g.table);
      part_ids.push_back(std::move(ids));
      part_grads.push_back(std::move(values));
    }
    if (names.empty()) continue;
    std::vector<absl::Span<const int64_t>> id_spans;
    std::vector<absl::Span<const float>> grad_spans;
    for (size_t k = 0; k < names.size(); ++k) {
      id_spans.emplace_back(part_ids[k]);
      grad_spans.emplace_back(part_grads[k]);
    }
    STRATA_RETURN_IF_ERROR(cluster_->ps(ps)->PushTables(
        names, id_spans, grad_spans, PushTag{job_id_, 0, step}));
  }
  return absl::OkStatus();
}

}  // namespace strata

// EmbeddingModel, LocalEmbeddingTables and EmbeddingTrainer
// (worker/embedding_model.h).
#include "worker/embedding_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace strata {

// EmbeddingTables ------------------------------------------------------------

absl::Status EmbeddingTables::LookupAll(
    const std::vector<std::string>& tables,
    const std::vector<std::vector<int64_t>>& ids, bool train,
    std::vector<std::vector<float>>* rows) {
  for (size_t t = 0; t < tables.size(); ++t) {
    STRATA_RETURN_IF_ERROR(
        Lookup(tables[t], ids[t], train, absl::MakeSpan((*rows)[t])));
  }
  return absl::OkStatus();
}

absl::Status EmbeddingTables::PushAll(const std::vector<TableGradients>& grads,
                                      int64_t step) {
  for (const TableGradients& g : grads) {
    STRATA_RETURN_IF_ERROR(Push(g.table, g.ids, g.gradients, step));
  }
  return absl::OkStatus();
}

// LocalEmbeddingTables -------------------------------------------------------

absl::StatusOr<std::unique_ptr<LocalEmbeddingTables>>
LocalEmbeddingTables::Create(const ModelSpec& model, uint64_t seed) {
  auto out = std::make_unique<LocalEmbeddingTables>();
  for (const EmbeddingSpec& e : model.embeddings) {
    if (out->tables_.count(e.table)) continue;  // shared
    DynamicTableOptions o;
    o.name = e.table;
    o.dim = e.output_dim;
    o.seed = seed;
    o.initializer = e.initializer == "zeros" ? DynamicInitializer::kZeros
                                             : DynamicInitializer::kRandomUniform;
    o.init_scale = e.init_scale;
    o.min_count = e.min_count;
    o.max_rows = e.max_rows;
    o.eviction =
        e.eviction == "lfu" ? EvictionPolicy::kLfu : EvictionPolicy::kLru;
    o.ttl_steps = e.ttl_steps;
    Table t;
    STRATA_ASSIGN_OR_RETURN(t.table, DynamicTable::Create(std::move(o)));
    STRATA_ASSIGN_OR_RETURN(t.optimizer, RowOptimizer::Create(e.optimizer));
    out->tables_.emplace(e.table, std::move(t));
  }
  return out;
}

absl::Status LocalEmbeddingTables::Lookup(const std::string& table,
                                          absl::Span<const int64_t> ids,
                                          bool train, absl::Span<float> out) {
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrCat("no embedding table '", table, "'"));
  }
  return it->second.table->Lookup(ids, out, train);
}

absl::Status LocalEmbeddingTables::Push(const std::string& table,
                                        absl::Span<const int64_t> ids,
                                        absl::Span<const float> gradients,
                                        int64_t step) {
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrCat("no embedding table '", table, "'"));
  }
  return it->second.table->ApplyGradients(ids, gradients,
                                          *it->second.optimizer, step);
}

std::map<std::string, DynamicTableStats> LocalEmbeddingTables::Stats() const {
  std::map<std::string, DynamicTableStats> out;
  for (const auto& [name, t] : tables_) out[name] = t.table->Stats();
  return out;
}

// EmbeddingModel -------------------------------------------------------------

absl::StatusOr<EmbeddingModel> EmbeddingModel::Create(const ModelSpec& model) {
  if (model.embeddings.empty()) {
    return absl::InvalidArgumentError("the model has no embeddings");
  }
  EmbeddingModel m;
  m.dense_features_ = 1;
  for (int64_t d : model.input_shape) m.dense_features_ *= d;
  m.categorical_columns_ = model.categorical_columns;
  int64_t offset = m.dense_features_;
  for (const EmbeddingSpec& spec : model.embeddings) {
    Embedding e;
    auto known = std::find(m.table_names_.begin(), m.table_names_.end(),
                           spec.table);
    e.table = static_cast<int>(known - m.table_names_.begin());
    if (known == m.table_names_.end()) {
      m.table_names_.push_back(spec.table);
      m.table_dims_.push_back(spec.output_dim);
    }
    e.columns = spec.columns;
    e.dim = spec.output_dim;
    e.combiner = spec.combiner == "sum"    ? Embedding::kSum
                 : spec.combiner == "mean" ? Embedding::kMean
                                           : Embedding::kConcat;
    e.offset = offset;
    e.first_slot = m.slots_per_example_;
    m.slots_per_example_ += static_cast<int64_t>(e.columns.size());
    offset += e.combiner == Embedding::kConcat
                  ? static_cast<int64_t>(e.columns.size()) * e.dim
                  : e.dim;
    m.embeddings_.push_back(std::move(e));
  }
  m.width_ = offset;
  return m;
}

absl::Status EmbeddingModel::Gather(EmbeddingTables& tables,
                                    const float* dense, CategoricalIds ids,
                                    int64_t batch, bool train,
                                    std::vector<float>* x,
                                    GatherPlan* plan) const {
  const size_t num_tables = table_names_.size();
  const int64_t columns = categorical_columns_;
  plan->batch = batch;
  plan->tables = table_names_;
  plan->ids.assign(num_tables, {});
  plan->rows.resize(num_tables);
  plan->slot.clear();
  plan->slot.reserve(static_cast<size_t>(batch * slots_per_example_));
  plan->slot_offsets.resize(static_cast<size_t>(batch * slots_per_example_) +
                            1);
  plan->slot_offsets[0] = 0;
  // Distinct ids per table, in first-seen order.
  std::vector<absl::flat_hash_map<int64_t, int32_t>> index(num_tables);
  for (int64_t b = 0; b < batch; ++b) {
    for (const Embedding& e : embeddings_) {
      auto& idx = index[static_cast<size_t>(e.table)];
      auto& distinct = plan->ids[static_cast<size_t>(e.table)];
      for (size_t j = 0; j < e.columns.size(); ++j) {
        const int64_t field = b * columns + e.columns[j];
        const int64_t begin = ids.offsets ? ids.offsets[field] : field;
        const int64_t end = ids.offsets ? ids.offsets[field + 1] : field + 1;
        if (e.combiner == Embedding::kConcat && end - begin != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "example ", b, " of the batch holds ", end - begin,
              " ids in categorical column ", e.columns[j],
              ", which a concat embedding (table '",
              table_names_[static_cast<size_t>(e.table)],
              "') reads as exactly one (combine a multi-hot column with sum "
              "or mean)"));
        }
        for (int64_t p = begin; p < end; ++p) {
          const int64_t id = ids.ids[p];
          auto [it, inserted] =
              idx.emplace(id, static_cast<int32_t>(distinct.size()));
          if (inserted) distinct.push_back(id);
          plan->slot.push_back(it->second);
        }
        plan->slot_offsets[static_cast<size_t>(
            b * slots_per_example_ + e.first_slot + static_cast<int64_t>(j) +
            1)] = static_cast<int64_t>(plan->slot.size());
      }
    }
  }
  for (size_t t = 0; t < num_tables; ++t) {
    plan->rows[t].resize(plan->ids[t].size() *
                         static_cast<size_t>(table_dims_[t]));
  }
  STRATA_RETURN_IF_ERROR(
      tables.LookupAll(table_names_, plan->ids, train, &plan->rows));
  x->assign(static_cast<size_t>(batch * width_), 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    float* out = x->data() + b * width_;
    std::memcpy(out, dense + b * dense_features_,
                static_cast<size_t>(dense_features_) * sizeof(float));
    for (const Embedding& e : embeddings_) {
      const std::vector<float>& rows = plan->rows[static_cast<size_t>(e.table)];
      const int64_t* offsets =
          plan->slot_offsets.data() + b * slots_per_example_ + e.first_slot;
      const float scale = CombineScale(e, offsets);
      for (size_t j = 0; j < e.columns.size(); ++j) {
        float* dst = out + e.offset +
                     (e.combiner == Embedding::kConcat
                          ? static_cast<int64_t>(j) * e.dim
                          : 0);
        for (int64_t p = offsets[j]; p < offsets[j + 1]; ++p) {
          const float* row =
              rows.data() +
              static_cast<int64_t>(plan->slot[static_cast<size_t>(p)]) * e.dim;
          for (int64_t k = 0; k < e.dim; ++k) dst[k] += scale * row[k];
        }
      }
    }
  }
  return absl::OkStatus();
}

float EmbeddingModel::CombineScale(const Embedding& e,
                                   const int64_t* offsets) {
  if (e.combiner != Embedding::kMean) return 1.0f;
  const int64_t count =
      offsets[static_cast<int64_t>(e.columns.size())] - offsets[0];
  return count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
}

void EmbeddingModel::Scatter(const GatherPlan& plan, const float* x_grad,
                             std::vector<TableGradients>* out) const {
  out->resize(table_names_.size());
  for (size_t t = 0; t < table_names_.size(); ++t) {
    TableGradients& g = (*out)[t];
    g.table = table_names_[t];
    g.ids = plan.ids[t];
    g.gradients.assign(g.ids.size() * static_cast<size_t>(table_dims_[t]),
                       0.0f);
  }
  for (int64_t b = 0; b < plan.batch; ++b) {
    const float* in = x_grad + b * width_;
    for (const Embedding& e : embeddings_) {
      std::vector<float>& grads = (*out)[static_cast<size_t>(e.table)].gradients;
      const int64_t* offsets =
          plan.slot_offsets.data() + b * slots_per_example_ + e.first_slot;
      const float scale = CombineScale(e, offsets);
      for (size_t j = 0; j < e.columns.size(); ++j) {
        const float* src = in + e.offset +
                           (e.combiner == Embedding::kConcat
                                ? static_cast<int64_t>(j) * e.dim
                                : 0);
        for (int64_t p = offsets[j]; p < offsets[j + 1]; ++p) {
          float* dst =
              grads.data() +
              static_cast<int64_t>(plan.slot[static_cast<size_t>(p)]) * e.dim;
          for (int64_t k = 0; k < e.dim; ++k) dst[k] += scale * src[k];
        }
      }
    }
  }
}

// EmbeddingTrainer -----------------------------------------------------------

EmbeddingTrainer::EmbeddingTrainer(EmbeddingModel model,
                                   std::unique_ptr<LocalTrainer> layers,
                                   std::unique_ptr<LocalEmbeddingTables> tables,
                                   int64_t batch_size)
    : model_(std::move(model)),
      layers_(std::move(layers)),
      tables_(std::move(tables)),
      batch_size_(batch_size) {}

absl::StatusOr<std::unique_ptr<EmbeddingTrainer>> EmbeddingTrainer::Create(
    const JobSpec& job) {
  if (job.model.embeddings.empty()) {
    return absl::InvalidArgumentError(
        "job.model.embeddings: the job has no embeddings");
  }
  if (job.data.format != "criteo") {
    return absl::InvalidArgumentError(absl::StrCat(
        "job.data.format: a model with embeddings reads criteo data, not ",
        job.data.format));
  }
  STRATA_ASSIGN_OR_RETURN(EmbeddingModel model,
                          EmbeddingModel::Create(job.model));
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<LocalTrainer> layers,
      LocalTrainer::Create(job.model, job.loss, job.optimizer, job.seed));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<LocalEmbeddingTables> tables,
                          LocalEmbeddingTables::Create(job.model, job.seed));
  return std::unique_ptr<EmbeddingTrainer>(new EmbeddingTrainer(
      std::move(model), std::move(layers), std::move(tables), job.batch_size));
}

absl::StatusOr<StepStats> EmbeddingTrainer::Step(const CriteoBatch& batch,
                                                 int64_t step) {
  const int64_t n = batch.size;
  STRATA_RETURN_IF_ERROR(model_.Gather(*tables_, batch.dense.data(),
                                       batch.Categorical(), n,
                                       /*train=*/true, &x_, &plan_));
  labels_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    labels_[static_cast<size_t>(i)] =
        static_cast<int32_t>(batch.labels[static_cast<size_t>(i)]);
  }
  x_grad_.resize(x_.size());
  STRATA_ASSIGN_OR_RETURN(
      StepStats stats,
      layers_->Step(x_.data(), labels_.data(), n, step, x_grad_.data()));
  model_.Scatter(plan_, x_grad_.data(), &table_grads_);
  STRATA_RETURN_IF_ERROR(tables_->PushAll(table_grads_, step));
  return stats;
}

absl::StatusOr<StepStats> EmbeddingTrainer::TrainEpoch(CriteoReader& reader) {
  STRATA_RETURN_IF_ERROR(reader.Rewind());
  CriteoBatch batch;
  double loss_sum = 0, correct = 0;
  StepStats epoch;
  while (true) {
    STRATA_ASSIGN_OR_RETURN(bool more, reader.Next(&batch, batch_size_));
    if (!more) break;
    STRATA_ASSIGN_OR_RETURN(StepStats s, Step(batch, layers_->iterations()));
    loss_sum += s.loss * static_cast<double>(batch.size);
    correct += s.accuracy * static_cast<double>(batch.size);
    epoch.examples += batch.size;
  }
  if (epoch.examples > 0) {
    epoch.loss = loss_sum / static_cast<double>(epoch.examples);
    epoch.accuracy = correct / static_cast<double>(epoch.examples);
  }
  return epoch;
}

absl::StatusOr<BinaryEvaluation> EmbeddingTrainer::Evaluate(
    CriteoReader& reader, int64_t batch_size) {
  return EvaluateBinary(model_, *tables_, layers_->model(),
                        Model::Views(layers_->params()), reader, batch_size);
}

absl::StatusOr<BinaryEvaluation> EvaluateBinary(
    const EmbeddingModel& model, EmbeddingTables& tables, const Model& layers,
    const std::vector<absl::Span<const float>>& params, CriteoReader& reader,
    int64_t batch_size, std::vector<float>* probabilities) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be >= 1, got ", batch_size));
  }
  STRATA_RETURN_IF_ERROR(reader.Rewind());
  CriteoBatch batch;
  BinaryMetrics metrics;
  BinaryEvaluation out;
  double loss_sum = 0, correct = 0;
  std::vector<float> x;
  GatherPlan plan;
  std::vector<float> p_batch;
  while (true) {
    STRATA_ASSIGN_OR_RETURN(bool more, reader.Next(&batch, batch_size));
    if (!more) break;
    STRATA_RETURN_IF_ERROR(model.Gather(tables, batch.dense.data(),
                                        batch.Categorical(), batch.size,
                                        /*train=*/false, &x, &plan));
    STRATA_RETURN_IF_ERROR(
        layers.Predict(params, x.data(), batch.size, &p_batch));
    STRATA_RETURN_IF_ERROR(metrics.Add(p_batch, batch.labels));
    for (int64_t i = 0; i < batch.size; ++i) {
      const double p = std::clamp<double>(p_batch[static_cast<size_t>(i)],
                                          1e-7, 1 - 1e-7);
      const double y = batch.labels[static_cast<size_t>(i)];
      loss_sum += -(y * std::log(p) + (1 - y) * std::log(1 - p));
      correct += (p >= 0.5) == (y >= 0.5) ? 1 : 0;
    }
    if (probabilities != nullptr) {
      probabilities->insert(probabilities->end(), p_batch.begin(),
                            p_batch.begin() + batch.size);
    }
    out.examples += batch.size;
  }
  if (out.examples > 0) {
    out.loss = loss_sum / static_cast<double>(out.examples);
    out.accuracy = correct / static_cast<double>(out.examples);
    out.auc = metrics.Auc();
    out.log_loss = metrics.LogLoss();
  }
  return out;
}

}  // namespace strata

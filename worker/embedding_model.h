// Embedding models (issue 15): a ModelSpec's embeddings over each example's
// categorical ids, in front of its layers (DenseModelSpec), and the
// single-process trainer local_train runs them with.
//
// Per batch, EmbeddingModel::Gather looks up each table's distinct ids once
// (a row per id, however often the batch holds it) and assembles the
// layers' input: the dense features, then each embedding's output (a row
// per column for "concat", the sum or mean of the columns' rows for a bag).
// Scatter turns the gradient of that input back into one gradient row per
// distinct id of each table, summed over its occurrences, which is what a
// PS push carries.
#ifndef STRATA_WORKER_EMBEDDING_MODEL_H_
#define STRATA_WORKER_EMBEDDING_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "job/job.h"
#include "kernels/row_optimizers.h"
#include "tables/dynamic_table.h"
#include "worker/auc.h"
#include "worker/criteo_data.h"
#include "worker/model.h"

namespace strata {

struct TableGradients;

// Where an embedding model's rows live.
class EmbeddingTables {
 public:
  virtual ~EmbeddingTables() = default;
  // The rows of `ids` (distinct) of `table` into `out` (ids.size() x dim);
  // `train` counts toward admission and creates admitted rows.
  virtual absl::Status Lookup(const std::string& table,
                              absl::Span<const int64_t> ids, bool train,
                              absl::Span<float> out) = 0;
  // Applies a gradient row per distinct id at training step `step`.
  virtual absl::Status Push(const std::string& table,
                            absl::Span<const int64_t> ids,
                            absl::Span<const float> gradients,
                            int64_t step) = 0;
  // Several tables at once: (*rows)[i] (sized by the caller) gets table
  // i's rows of ids[i]. Default: a Lookup each.
  virtual absl::Status LookupAll(const std::vector<std::string>& tables,
                                 const std::vector<std::vector<int64_t>>& ids,
                                 bool train,
                                 std::vector<std::vector<float>>* rows);
  // Each table's gradient rows at `step`. Default: a Push each.
  virtual absl::Status PushAll(const std::vector<TableGradients>& grads,
                               int64_t step);
};

// The tables of a model in this process: a DynamicTable and its row
// optimizer per table name, options from the model's EmbeddingSpecs.
// Thread-compatible.
class LocalEmbeddingTables final : public EmbeddingTables {
 public:
  // Errors: INVALID_ARGUMENT from DynamicTable / RowOptimizer.
  static absl::StatusOr<std::unique_ptr<LocalEmbeddingTables>> Create(
      const ModelSpec& model, uint64_t seed);

  absl::Status Lookup(const std::string& table, absl::Span<const int64_t> ids,
                      bool train, absl::Span<float> out) override;
  absl::Status Push(const std::string& table, absl::Span<const int64_t> ids,
                    absl::Span<const float> gradients, int64_t step) override;

  // Each table's counters.
  std::map<std::string, DynamicTableStats> Stats() const;

 private:
  struct Table {
    std::unique_ptr<DynamicTable> table;
    std::unique_ptr<RowOptimizer> optimizer;
  };
  std::map<std::string, Table> tables_;
};

// Which rows a batch used: per table its distinct ids, and per (example,
// embedding, column) the indexes of its ids among them (one for a
// single-valued column, 0 or more for a multi-hot one).
struct GatherPlan {
  int64_t batch = 0;
  std::vector<std::string> tables;            // distinct table names
  std::vector<std::vector<int64_t>> ids;      // per table, distinct ids
  std::vector<std::vector<float>> rows;       // per table, ids x dim
  // Every occurrence's index among its table's distinct ids; those of
  // (example b, slot k) are slot[slot_offsets[b * S + k],
  // slot_offsets[b * S + k + 1]) for S the model's columns over all
  // embeddings.
  std::vector<int32_t> slot;
  std::vector<int64_t> slot_offsets;          // batch x S + 1
};

// A table's distinct ids and their summed gradient rows.
struct TableGradients {
  std::string table;
  std::vector<int64_t> ids;
  std::vector<float> gradients;  // ids.size() x dim
};

class EmbeddingModel {
 public:
  // The embeddings of `model` (which must have some). Errors:
  // INVALID_ARGUMENT for a model without embeddings.
  static absl::StatusOr<EmbeddingModel> Create(const ModelSpec& model);

  int64_t dense_features() const { return dense_features_; }
  int64_t categorical_columns() const { return categorical_columns_; }
  // Floats of the layers' input per example.
  int64_t width() const { return width_; }

  // The layers' input (batch x width()) of a batch: `dense` (batch x
  // dense_features()) and its categorical `ids` (CategoricalIds: one id
  // per column, or lists for multi-hot columns). A bag ("sum", "mean")
  // combines every id of its columns, "mean" dividing by how many there are
  // (an example with none gets zeros); "concat" takes each column's one id.
  // Errors: those of tables.Lookup; INVALID_ARGUMENT for a concat column
  // of an example that does not hold exactly one id.
  absl::Status Gather(EmbeddingTables& tables, const float* dense,
                      CategoricalIds ids, int64_t batch, bool train,
                      std::vector<float>* x, GatherPlan* plan) const;

  // Each table's gradient rows from the gradient of the layers' input
  // (batch x width()) of the batch `plan` gathered.
  void Scatter(const GatherPlan& plan, const float* x_grad,
               std::vector<TableGradients>* out) const;

 private:
  struct Embedding {
    int table = 0;  // index into table_names_
    std::vector<int64_t> columns;
    int64_t dim = 0;
    enum { kConcat, kSum, kMean } combiner = kConcat;
    int64_t offset = 0;       // of its output in the layers' input
    int64_t first_slot = 0;   // of its columns in GatherPlan::slot
  };

  // 1 / the ids of a mean bag's columns (0 when none), 1 otherwise;
  // `offsets` are the example's slot_offsets of e's first column.
  static float CombineScale(const Embedding& e, const int64_t* offsets);

  int64_t dense_features_ = 0;
  int64_t categorical_columns_ = 0;
  int64_t width_ = 0;
  int64_t slots_per_example_ = 0;
  std::vector<std::string> table_names_;
  std::vector<int64_t> table_dims_;
  std::vector<Embedding> embeddings_;
};

// Loss, accuracy, AUC and log loss of a binary model over a data set.
struct BinaryEvaluation {
  int64_t examples = 0;
  double loss = 0;       // the model's loss (binary cross-entropy)
  double accuracy = 0;   // at threshold 0.5
  double auc = 0;
  double log_loss = 0;
};

// The metrics of the layers `layers` (weights `params`) over the tables'
// rows for every example of `reader` (rewound first), in batches of
// `batch_size`; nothing counted or created in the tables. With
// `probabilities`, each example's output is appended to it. Errors: the
// reader's, the tables', the layers'.
absl::StatusOr<BinaryEvaluation> EvaluateBinary(
    const EmbeddingModel& model, EmbeddingTables& tables, const Model& layers,
    const std::vector<absl::Span<const float>>& params, CriteoReader& reader,
    int64_t batch_size, std::vector<float>* probabilities = nullptr);

// local_train for a job with embeddings: the layers trained as LocalTrainer
// does (the job's optimizer), the tables in this process (their row
// optimizers), over Criteo-format files read as a stream in file order.
// Thread-compatible.
class EmbeddingTrainer {
 public:
  // Errors: INVALID_ARGUMENT (a job without embeddings or Criteo data;
  // those of the model, optimizer and tables).
  static absl::StatusOr<std::unique_ptr<EmbeddingTrainer>> Create(
      const JobSpec& job);

  // One step on a batch: gather (counted for admission), the layers'
  // step, the tables' rows updated. Errors: those of the parts.
  absl::StatusOr<StepStats> Step(const CriteoBatch& batch, int64_t step);

  // One pass over `reader` (rewound first) in batches of the job's
  // batch_size: the example-weighted mean loss and accuracy.
  absl::StatusOr<StepStats> TrainEpoch(CriteoReader& reader);

  // The metrics over `reader` (rewound first), nothing counted or created.
  absl::StatusOr<BinaryEvaluation> Evaluate(CriteoReader& reader,
                                            int64_t batch = 4096);

  const LocalEmbeddingTables& tables() const { return *tables_; }
  LocalEmbeddingTables& mutable_tables() { return *tables_; }
  const EmbeddingModel& embedding_model() const { return model_; }
  LocalTrainer& layers() { return *layers_; }
  int64_t iterations() const { return layers_->iterations(); }

 private:
  EmbeddingTrainer(EmbeddingModel model, std::unique_ptr<LocalTrainer> layers,
                   std::unique_ptr<LocalEmbeddingTables> tables,
                   int64_t batch_size);

  EmbeddingModel model_;
  std::unique_ptr<LocalTrainer> layers_;
  std::unique_ptr<LocalEmbeddingTables> tables_;
  const int64_t batch_size_;
  std::vector<float> x_;
  std::vector<float> x_grad_;
  std::vector<int32_t> labels_;
  GatherPlan plan_;
  std::vector<TableGradients> table_grads_;
};

}  // namespace strata

#endif  // STRATA_WORKER_EMBEDDING_MODEL_H_

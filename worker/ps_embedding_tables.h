// An embedding model's tables on the PS tasks of a job (issue 15): every
// table sharded over all the tasks by id hash (DynamicTable::ShardOf), task
// i holding shard i. Lookups and pushes split the ids by shard and call each
// task that has some; pushes are tagged (job, 0, step), so a step's rows
// are applied once whoever runs it and however often it is retried.
#ifndef STRATA_WORKER_PS_EMBEDDING_TABLES_H_
#define STRATA_WORKER_PS_EMBEDDING_TABLES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/ps_cluster.h"
#include "job/job.h"
#include "strata/v1/parameter_server.pb.h"
#include "worker/embedding_model.h"

namespace strata {

// The TableSpecs of `model`'s tables (one per distinct table name) for
// shard `shard` of `num_shards`, seeded by `seed`.
std::vector<v1::TableSpec> TableSpecsFor(const ModelSpec& model, uint64_t seed,
                                         int shard, int num_shards);

// Thread-compatible per instance (one per step thread); `cluster` is shared
// and thread-safe.
class PsEmbeddingTables final : public EmbeddingTables {
 public:
  PsEmbeddingTables(PsCluster* cluster, std::string job_id)
      : cluster_(cluster), job_id_(std::move(job_id)) {}

  // Creates `model`'s tables on every task (idempotent). Errors: those of
  // CreateTable (UNAVAILABLE while a task restarts).
  static absl::Status CreateTables(PsCluster& cluster, const ModelSpec& model,
                                   uint64_t seed);

  absl::Status Lookup(const std::string& table, absl::Span<const int64_t> ids,
                      bool train, absl::Span<float> out) override;
  absl::Status Push(const std::string& table, absl::Span<const int64_t> ids,
                    absl::Span<const float> gradients, int64_t step) override;
  // One call per task for all the tables (LookupTables / PushTables).
  absl::Status LookupAll(const std::vector<std::string>& tables,
                         const std::vector<std::vector<int64_t>>& ids,
                         bool train,
                         std::vector<std::vector<float>>* rows) override;
  absl::Status PushAll(const std::vector<TableGradients>& grads,
                       int64_t step) override;

 private:
  // ids[i]'s task for each i, grouped: per task the positions it holds.
  void Split(absl::Span<const int64_t> ids);

  PsCluster* const cluster_;
  const std::string job_id_;
  std::vector<std::vector<size_t>> positions_;
  std::vector<int64_t> part_ids_;
  std::vector<float> part_values_;
};

}  // namespace strata

#endif  // STRATA_WORKER_PS_EMBEDDING_TABLES_H_

// The gradients of a SYNC variable's steps not yet applied: per step, the
// sum of the pushes taken so far and who sent them, until every replica of
// the step's group has contributed. Thread-compatible; a Variable owns it
// and guards it with its mutex.
#ifndef STRATA_SERVER_SYNC_ACCUMULATOR_H_
#define STRATA_SERVER_SYNC_ACCUMULATOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/exactly_once.h"
#include "common/tensor.h"
#include "nlohmann/json.hpp"

namespace strata {

// A sync push may run at most this many steps ahead of the applied version.
inline constexpr int64_t kMaxStepsAhead = 64;

// Thread-compatible: the owning Variable guards it with its mutex. Owns
// the sums; what CompleteStep returns points into them.
class SyncAccumulator {
 public:
  // For a variable of `num_elements` elements of `dtype` in rows of
  // `row_width`, whose steps need `num_replicas` contributors unless a
  // push names its group's size.
  SyncAccumulator(DType dtype, int64_t num_elements, int64_t row_width,
                  int num_replicas);

  // Adds the gradient of the tagged push `meta` to its step's sum: `dense`
  // (num_elements values) when not null, else the rows `ids` of `rows`
  // (distinct ids). `version` is the variable's: the next step to apply. A
  // push from a newer group than the step's drops the older group's sum.
  // Errors (naming `variable`): ABORTED for a step below `version` or from
  // a group older than the one running the step; FAILED_PRECONDITION for a
  // step kMaxStepsAhead or more ahead of `version`. Adds nothing on error.
  absl::Status Add(const std::string& variable, int64_t version,
                   const PushMeta& meta, const char* dense,
                   absl::Span<const int64_t> ids, const char* rows);

  // The averaged gradient of a complete step.
  struct Averaged {
    const char* dense = nullptr;   // num_elements values, or null for rows
    std::vector<int64_t> rows;     // the rows touched (when dense is null)
    std::shared_ptr<Buffer> packed;  // those rows' values, in that order
  };
  // When every contributor of `step` is in, divides its sum by their
  // number, in place (so once per application), and returns it; nullopt
  // when the step is incomplete or has no push. The step stays held until
  // Forget.
  std::optional<Averaged> CompleteStep(int64_t step);
  // Drops the sum of `step` (once applied).
  void Forget(int64_t step) { steps_.erase(step); }

  // (job, worker, step) of every push held in a step not yet applied.
  std::set<std::tuple<std::string, int64_t, int64_t>> HeldPushes() const;

  // The held steps, for a PS replica's state transfer: their bookkeeping
  // as JSON and their sums in `sums` (one per step, in the JSON's order).
  nlohmann::json Export(std::vector<std::shared_ptr<const Buffer>>* sums) const;
  // Replaces the held steps with an Export. Errors: DATA_LOSS for a
  // malformed export (nothing changes then).
  absl::Status Import(const nlohmann::json& steps,
                      const std::vector<std::string>& sums);

 private:
  struct Step {
    std::shared_ptr<Buffer> sum;  // dense sum of gradients (full size)
    std::set<int64_t> rows;       // rows touched by row pushes
    bool dense = false;           // any dense push in this step
    std::set<std::pair<std::string, int64_t>> contributors;  // (job, worker)
    int64_t group = 0;       // the group whose gradients these are
    int32_t group_size = 0;  // 0: num_replicas_
  };

  const DType dtype_;
  const int64_t num_elements_;
  const int64_t row_width_;
  const size_t row_bytes_;
  const int num_replicas_;
  std::map<int64_t, Step> steps_;
};

}  // namespace strata

#endif  // STRATA_SERVER_SYNC_ACCUMULATOR_H_

// job.strategy (and its partitioner): the StrategySpec, with every field
// checked against the strategy type it needs.
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "job/job.h"
#include "job/job_internal.h"
#include "strategies/placement_policy.h"

namespace strata {
namespace job_internal {
namespace {

absl::Status ParsePartitioner(const json& value, const std::string& path,
                              PartitionerSpec* p) {
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(value, path));
  STRATA_RETURN_IF_ERROR(o.CheckKeys({"type", "num_shards", "min_shard_bytes",
                                      "max_shard_bytes", "max_shards"}));
  STRATA_RETURN_IF_ERROR(
      o.Enum("type", true, {"fixed", "min_size", "max_size"}, &p->type));
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  if (p->type == "fixed") {
    STRATA_RETURN_IF_ERROR(o.CheckKeys({"type", "num_shards"},
                                       " for a fixed partitioner"));
    STRATA_RETURN_IF_ERROR(o.Int32("num_shards", false, 1, &p->num_shards));
  } else if (p->type == "min_size") {
    STRATA_RETURN_IF_ERROR(o.CheckKeys(
        {"type", "min_shard_bytes", "max_shards"}, " for a min_size "
                                                   "partitioner"));
    p->max_shards = 1;
    STRATA_RETURN_IF_ERROR(
        o.Int("min_shard_bytes", false, 1, kMax, &p->min_shard_bytes));
    STRATA_RETURN_IF_ERROR(o.Int32("max_shards", false, 1, &p->max_shards));
  } else {
    STRATA_RETURN_IF_ERROR(o.CheckKeys(
        {"type", "max_shard_bytes", "max_shards"}, " for a max_size "
                                                   "partitioner"));
    p->max_shards = 0;
    STRATA_RETURN_IF_ERROR(
        o.Int("max_shard_bytes", true, 1, kMax, &p->max_shard_bytes));
    STRATA_RETURN_IF_ERROR(o.Int32("max_shards", false, 0, &p->max_shards));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseStrategy(const json& value, StrategySpec* s) {
  STRATA_ASSIGN_OR_RETURN(Object o, Object::Make(value, "job.strategy"));
  STRATA_RETURN_IF_ERROR(
      o.CheckKeys({"type", "update", "partitioner", "sync_replicas",
                   "collective", "replicas", "pack_bytes", "timeout_seconds",
                   "gradient_compression", "ps_replication", "staleness_lr",
                   "staleness_tolerance", "staleness_compensation",
                   "dc_lambda", "dc_mean_square_decay", "dc_versions"}));
  // The names are the policy registry's (strategies/placement_policy.h).
  STRATA_RETURN_IF_ERROR(o.String("type", true, &s->type, /*allow_empty=*/true));
  if (!IsPlacementPolicyName(s->type)) {
    return PathError(o.Path("type"), absl::StrCat(Quote(s->type),
                                                  " is not one of ",
                                                  PlacementPolicyNames()));
  }
  s->update = s->type == "parameter_server" ? "async" : "sync";
  STRATA_RETURN_IF_ERROR(o.Enum("update", false, {"async", "sync"},
                                &s->update));
  if (s->update == "async" && s->type != "parameter_server" &&
      s->type != "one_device") {
    return PathError(o.Path("update"),
                     absl::StrCat("'async' is not supported by ", s->type,
                                  " (it is synchronous); use 'sync'"));
  }
  STRATA_RETURN_IF_ERROR(
      o.Int32("sync_replicas", false, 1, &s->sync_replicas));
  STRATA_RETURN_IF_ERROR(
      o.Enum("collective", false, {"ring", "ps"}, &s->collective));
  STRATA_RETURN_IF_ERROR(o.Int32("replicas", false, 1, &s->replicas));
  STRATA_RETURN_IF_ERROR(
      o.Int("pack_bytes", false, 1, int64_t{1} << 40, &s->pack_bytes));
  STRATA_RETURN_IF_ERROR(
      o.Number("timeout_seconds", false, 1e-3, 86400, false,
               &s->timeout_seconds));
  STRATA_RETURN_IF_ERROR(o.Enum("gradient_compression", false,
                                {"none", "bf16", "fp16"},
                                &s->gradient_compression));
  const bool pushes_to_ps =
      s->type == "parameter_server" || s->type == "central_storage" ||
      (s->type == "multi_worker_mirrored" && s->collective == "ps");
  if (s->gradient_compression != "none" && !pushes_to_ps) {
    return PathError(
        o.Path("gradient_compression"),
        absl::StrCat(Quote(s->gradient_compression),
                     " compresses the gradients pushed to PS tasks; ",
                     s->type,
                     s->type == "multi_worker_mirrored" ? " with collective '"
                                                          : "",
                     s->type == "multi_worker_mirrored" ? s->collective : "",
                     s->type == "multi_worker_mirrored" ? "'" : "",
                     " pushes none (use parameter_server, central_storage "
                     "or multi_worker_mirrored with collective 'ps')"));
  }
  STRATA_RETURN_IF_ERROR(
      o.Int("ps_replication", false, 1, 2, &s->ps_replication));
  if (s->ps_replication > 1 && !pushes_to_ps) {
    return PathError(o.Path("ps_replication"),
                     absl::StrCat(s->type,
                                  s->type == "multi_worker_mirrored"
                                      ? " with collective 'ring'"
                                      : "",
                                  " keeps no variables on PS tasks; "
                                  "ps_replication needs parameter_server, "
                                  "central_storage or multi_worker_mirrored "
                                  "with collective 'ps'"));
  }
  STRATA_RETURN_IF_ERROR(
      o.Enum("staleness_lr", false, {"none", "inverse"}, &s->staleness_lr));
  const bool async_ps = s->type == "parameter_server" && s->update == "async";
  if (s->staleness_lr != "none" && !async_ps) {
    return PathError(
        o.Path("staleness_lr"),
        absl::StrCat(Quote(s->staleness_lr), " scales the learning rate of "
                     "stale gradients, which only parameter_server with "
                     "update 'async' applies; ", s->type, " with update '",
                     s->update, "' applies every gradient to the values it "
                     "was computed from"));
  }
  STRATA_RETURN_IF_ERROR(o.Int32("staleness_tolerance", false, 0,
                                 &s->staleness_tolerance));
  if (o.Has("staleness_tolerance") && s->staleness_lr == "none") {
    return PathError(o.Path("staleness_tolerance"),
                     "needs staleness_lr 'inverse' (it is the staleness "
                     "that learning rate scaling tolerates)");
  }
  STRATA_RETURN_IF_ERROR(o.Enum("staleness_compensation", false,
                                {"none", "dc", "dc_adaptive"},
                                &s->staleness_compensation));
  if (s->staleness_compensation != "none" && !async_ps) {
    return PathError(
        o.Path("staleness_compensation"),
        absl::StrCat(Quote(s->staleness_compensation),
                     " corrects stale gradients, which only "
                     "parameter_server with update 'async' applies; ",
                     s->type, " with update '", s->update,
                     "' applies every gradient to the values it was "
                     "computed from"));
  }
  const bool dc = s->staleness_compensation != "none";
  for (const char* field :
       {"dc_lambda", "dc_mean_square_decay", "dc_versions"}) {
    if (o.Has(field) && !dc) {
      return PathError(o.Path(field),
                       "needs staleness_compensation 'dc' or "
                       "'dc_adaptive'");
    }
  }
  if (o.Has("dc_mean_square_decay") &&
      s->staleness_compensation != "dc_adaptive") {
    return PathError(o.Path("dc_mean_square_decay"),
                     "needs staleness_compensation 'dc_adaptive' (the "
                     "mean square only the adaptive variant keeps)");
  }
  s->dc_lambda = s->staleness_compensation == "dc_adaptive" ? 2.0 : 0.04;
  STRATA_RETURN_IF_ERROR(
      o.Number("dc_lambda", false, 0, 1e6, false, &s->dc_lambda));
  if (s->dc_lambda == 0) {
    return PathError(o.Path("dc_lambda"),
                     "must be > 0 (staleness_compensation 'none' turns "
                     "the correction off)");
  }
  STRATA_RETURN_IF_ERROR(o.Number("dc_mean_square_decay", false, 0, 1,
                                  /*max_open=*/true,
                                  &s->dc_mean_square_decay));
  int64_t versions = s->dc_versions;
  STRATA_RETURN_IF_ERROR(o.Int("dc_versions", false, 1, 1024, &versions));
  s->dc_versions = static_cast<int>(versions);
  if (o.Has("partitioner")) {
    STRATA_RETURN_IF_ERROR(ParsePartitioner(
        o.At("partitioner"), o.Path("partitioner"), &s->partitioner));
  }
  s->options = value;
  return absl::OkStatus();
}

}  // namespace job_internal
}  // namespace strata

// Reading a cluster Fit's trained variables back from its PS tasks
// (sdk/internal.h: PullShardedWeights, PullWholeWeights).
#include <string>
#include <vector>

#include "client/ps_client.h"
#include "client/ps_cluster.h"
#include "common/status_macros.h"
#include "sdk/internal.h"
#include "worker/ps_worker.h"

namespace strata::sdk::internal {

// Pulls every variable of `model` (its weights, then its state) from the PS
// tasks at `addresses` into *params (Keras's order), sharded as
// ParameterServerStrategy places them.
// Creating a variable is idempotent for the spec the workers used, and gives
// its placement (shards and their tasks).
absl::Status PullShardedWeights(const std::vector<std::string>& addresses,
                                const JobSpec& job, const Model& model,
                                std::vector<std::vector<float>>* params) {
  std::unique_ptr<PsCluster> cluster = PsCluster::Connect(addresses);
  // The weights, then the model's state (moving statistics), which the
  // workers keep on the PS too.
  std::vector<v1::VariableSpec> specs = PsVariableSpecs(job, model);
  for (v1::VariableSpec& spec : PsStateVariableSpecs(job, model)) {
    specs.push_back(std::move(spec));
  }
  params->assign(specs.size(), {});
  std::vector<std::string> names;
  std::vector<void*> dsts;
  for (size_t i = 0; i < specs.size(); ++i) {
    const Shape shape(specs[i].shape().begin(), specs[i].shape().end());
    STRATA_ASSIGN_OR_RETURN(std::vector<PlacementPolicy::Shard> shards,
                            PlaceFor(job, shape, cluster->num_ps()));
    STRATA_RETURN_IF_ERROR(
        cluster->CreateVariableOn(specs[i], shards).status());
    (*params)[i].resize(NumElements(shape));
    names.push_back(specs[i].name());
    dsts.push_back((*params)[i].data());
  }
  return cluster->PullMany(names, dsts);
}

// Pulls every variable of `model` (weights, then state), each whole on PS
// task 0 under its own name (CentralStorageStrategy's placement), into
// *params in one call.
absl::Status PullWholeWeights(const std::vector<std::string>& addresses,
                              const JobSpec& /*job*/, const Model& model,
                              std::vector<std::vector<float>>* params) {
  std::unique_ptr<PsClient> ps0 = PsClient::Connect(addresses[0]);
  // The weights, then the model's state (moving statistics).
  std::vector<VariableDef> all = model.variables();
  all.insert(all.end(), model.state_variables().begin(),
             model.state_variables().end());
  params->assign(all.size(), {});
  std::vector<std::string> names;
  std::vector<void*> dsts;
  std::vector<size_t> sizes;
  for (size_t i = 0; i < all.size(); ++i) {
    const VariableDef& v = all[i];
    (*params)[i].resize(NumElements(v.shape));
    names.push_back(v.name);
    dsts.push_back((*params)[i].data());
    sizes.push_back((*params)[i].size() * sizeof(float));
  }
  return ps0->PullVariables(names, dsts, sizes).status();
}

}  // namespace strata::sdk::internal

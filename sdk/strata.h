// The Strata SDK: training code shaped like tf.keras + tf.distribute.
//
//   namespace sdk = strata::sdk;
//   auto strategy = sdk::ParameterServerStrategy::Local({/*num_ps=*/2,
//                                                        /*num_workers=*/2});
//   {
//     auto scope = strategy->Scope();  // models built here use `strategy`
//     sdk::Sequential model({sdk::Dense(128, "relu", /*input_dim=*/784),
//                            sdk::Dense(10, "softmax")});
//     absl::Status s = model.Compile(sdk::Adam(0.001),
//                                    "sparse_categorical_crossentropy",
//                                    {"accuracy"});
//     auto data = sdk::datasets::FashionMnist();
//     absl::StatusOr<sdk::History> h =
//         model.Fit(data.train, {/*epochs=*/10, /*batch_size=*/128,
//                                /*validation=*/data.test});
//     absl::StatusOr<sdk::EvalResult> r = model.Evaluate(data.test);
//   }
//
// Everything lives in namespace strata::sdk (beside, not inside, the
// runtime's strata::Model, strata::Dataset and strata::Optimizer).
//
// A model is validated by turning it into a job (the JSON schema of
// job/job.h, as examples/fashion_mnist/job.json) and parsing that job, so
// errors name the job path of the offending value
// ("job.model.layers[1].activation: 'relux' is not one of ...").
//
// Strategies (the same Sequential / Compile / Fit code runs under each):
// - OneDeviceStrategy (the default) trains in this process.
// - MirroredStrategy::Create(n) trains n replicas in this process, one thread
//   each, their gradients all-reduced in process every step.
// - ParameterServerStrategy::Local, CentralStorageStrategy::Local and
//   MultiWorkerMirroredStrategy::Local start a whole local cluster
//   (coordinator, PS tasks, workers; tools/launcher.h) for each Fit and, when
//   the job has succeeded, read the trained variables back into the model
//   (from the PS tasks, or from the state the first worker exports), so
//   Evaluate, Predict and GetWeights afterwards run here on the trained
//   parameters.
//
// Beside Fit, a strategy offers tf.distribute's replica API for code of
// one's own: Run(fn) calls fn once per replica of this process (with its
// ReplicaContext) and returns a PerReplica of the results, Reduce(kSum |
// kMean, per_replica) combines them, and DistributeDataset(data, batch)
// splits each global batch between the replicas:
//
//   auto strategy = *sdk::MirroredStrategy::Create(4);
//   absl::StatusOr<sdk::DistributedDataset> dist =
//       strategy->DistributeDataset(data, /*global_batch_size=*/256);
//   for (int64_t b = 0; b < dist->num_batches(); ++b) {
//     sdk::PerReplica<double> sums =
//         strategy->Run([&](const sdk::ReplicaContext& ctx) {
//           double sum = 0;
//           for (int32_t y : dist->Batch(b, ctx).labels) sum += y;
//           return sum;
//         });
//     double total = strategy->Reduce(sdk::ReduceOp::kSum, sums);
//   }
//
// The declarations live in headers by concern, all included here:
//   sdk/data.h                Dataset, datasets::
//   sdk/layers.h              Layer, Optimizer, Embedding, Inputs
//   sdk/model.h               Sequential, Loss, FitOptions, History, ...
//   sdk/strategy.h            Strategy, the replica API, OneDevice, Mirrored
//   sdk/cluster_strategies.h  ParameterServer, CentralStorage,
//                             MultiWorkerMirrored, LocalClusterOptions
#ifndef STRATA_SDK_STRATA_H_
#define STRATA_SDK_STRATA_H_

#include "sdk/cluster_strategies.h"
#include "sdk/data.h"
#include "sdk/layers.h"
#include "sdk/model.h"
#include "sdk/strategy.h"

#endif  // STRATA_SDK_STRATA_H_

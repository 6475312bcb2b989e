// Helpers shared by the Model's source files (model.cc, model_compute.cc,
// local_trainer.cc). Pure functions; thread-safe.
#ifndef STRATA_WORKER_MODEL_INTERNAL_H_
#define STRATA_WORKER_MODEL_INTERNAL_H_

#include "model/random.h"

namespace strata {
namespace model_internal {

using ::strata::Mix64;

}  // namespace model_internal
}  // namespace strata

#endif  // STRATA_WORKER_MODEL_INTERNAL_H_

// The parameter-server state the request fuzz targets start every input
// from: a fresh VariableStore holding one small variable of each kind the
// handlers treat differently (dense and 2-D, every update mode, an
// optimizer with slots, an integer variable). Small, so that an input runs
// in microseconds and no valid request allocates much.
#ifndef STRATA_TESTS_FUZZ_PS_FIXTURE_H_
#define STRATA_TESTS_FUZZ_PS_FIXTURE_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "server/variable_store.h"
#include "tests/fuzz/fuzz_util.h"

namespace strata {
namespace fuzz {

// Largest variable, push or assign the fixture's store accepts (the
// service's --max-variable-bytes; the daemon's default is 16 GiB, which
// would let the fuzzer spend its time in legitimate huge allocations).
inline constexpr uint64_t kFuzzMaxVariableBytes = 1 << 16;

inline v1::VariableSpec FixtureSpec(const std::string& name, v1::DType dtype,
                                    std::initializer_list<int64_t> shape,
                                    const std::string& optimizer,
                                    v1::UpdateMode::Kind mode = v1::UpdateMode::ASYNC,
                                    int replicas = 0, int staleness = 0) {
  v1::VariableSpec spec;
  spec.set_name(name);
  spec.set_dtype(dtype);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_type(
      dtype == v1::DT_FLOAT32 || dtype == v1::DT_FLOAT64 ? "glorot_uniform"
                                                         : "zeros");
  spec.mutable_initializer()->set_seed(7);
  spec.mutable_optimizer()->set_type(optimizer);
  spec.mutable_update_mode()->set_kind(mode);
  spec.mutable_update_mode()->set_num_replicas(replicas);
  spec.mutable_update_mode()->set_staleness(staleness);
  return spec;
}

// Variables: "dense" f32 [4,3] sgd; "adam" f32 [3] adam; "emb" f32 [8,2]
// adagrad; "sync" f32 [4,2] sgd SYNC x2; "stale" f64 [2,2]
// STALENESS x2 bound 1 rmsprop; "count" i64 [4] assign_add; "empty" f32 [0,3] sgd; "wide" f32
// [2,4096] sgd (32 KiB: a few of its rows reach the store's limit).
inline std::unique_ptr<VariableStore> MakeFixtureStore(
    const std::string& checkpoint_dir = "") {
  VariableStoreOptions options;
  options.max_variable_bytes = kFuzzMaxVariableBytes;
  options.checkpoint_dir = checkpoint_dir;
  auto store = std::make_unique<VariableStore>(options);
  for (const v1::VariableSpec& spec :
       {FixtureSpec("dense", v1::DT_FLOAT32, {4, 3}, "sgd"),
        FixtureSpec("adam", v1::DT_FLOAT32, {3}, "adam"),
        FixtureSpec("emb", v1::DT_FLOAT32, {8, 2}, "adagrad"),
        FixtureSpec("sync", v1::DT_FLOAT32, {4, 2}, "sgd",
                    v1::UpdateMode::SYNC, 2),
        FixtureSpec("stale", v1::DT_FLOAT64, {2, 2}, "rmsprop",
                    v1::UpdateMode::STALENESS, 2, 1),
        FixtureSpec("count", v1::DT_INT64, {4}, "assign_add"),
        FixtureSpec("empty", v1::DT_FLOAT32, {0, 3}, "sgd"),
        FixtureSpec("wide", v1::DT_FLOAT32, {2, 4096}, "sgd")}) {
    absl::StatusOr<bool> created = store->Create(spec);
    FUZZ_CHECK(created.ok() && *created,
               "fixture variable " + spec.name() + ": " +
                   created.status().ToString());
  }
  return store;
}

}  // namespace fuzz
}  // namespace strata

#endif  // STRATA_TESTS_FUZZ_PS_FIXTURE_H_

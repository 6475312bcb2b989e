#include "server/variable_store.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "strategies/partitioner.h"
#include "tests/test_util.h"

namespace strata {
namespace {

v1::VariableSpec Spec(const std::string& init, Shape shape) {
  v1::VariableSpec spec;
  spec.set_name("emb");
  spec.set_dtype(v1::DT_FLOAT32);
  for (int64_t d : shape) spec.add_shape(d);
  spec.mutable_initializer()->set_type(init);
  spec.mutable_initializer()->set_seed(1234);
  return spec;
}

// A variable split over PS shards holds exactly what the unsplit one does,
// for every random initializer.
TEST(VariableStoreTest, ShardedInitializationMatchesUnsplitVariable) {
  const Shape full = {37, 5};
  for (const char* init :
       {"random_uniform", "random_normal", "truncated_normal",
        "glorot_uniform", "glorot_normal", "he_normal", "he_uniform"}) {
    VariableStore whole({});
    STRATA_ASSERT_OK(whole.Create(Spec(init, full)));
    auto expected = (*whole.Get("emb"))->Snapshot().value;
    auto slices = FixedShardsPartition(full, 3);
    ASSERT_TRUE(slices.ok());
    std::vector<char> joined;
    for (const ShardSlice& slice : *slices) {
      VariableStore shard({});  // one store per PS task
      v1::VariableSpec spec = Spec(init, {slice.num_rows, full[1]});
      for (int64_t d : full) spec.add_full_shape(d);
      spec.set_row_offset(slice.row_offset);
      STRATA_ASSERT_OK(shard.Create(spec));
      auto value = (*shard.Get("emb"))->Snapshot().value;
      joined.insert(joined.end(), value->data(), value->data() + value->size());
    }
    ASSERT_EQ(joined.size(), expected->size());
    EXPECT_EQ(std::memcmp(joined.data(), expected->data(), joined.size()), 0)
        << init;
  }
}

TEST(VariableStoreTest, LookupAndConflictStatuses) {
  VariableStore store({});
  EXPECT_THAT(store.Get("missing"),
              StatusIsWithMessage(absl::StatusCode::kNotFound, "'missing'"));
  auto created = store.Create(Spec("zeros", {2, 2}));
  ASSERT_TRUE(created.ok());
  EXPECT_TRUE(*created);
  auto again = store.Create(Spec("zeros", {2, 2}));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  EXPECT_THAT(store.Create(Spec("ones", {2, 2})),
              StatusIs(absl::StatusCode::kAlreadyExists));
  v1::VariableSpec bad = Spec("zeros", {4, 2});
  bad.set_name("shard");
  bad.add_full_shape(6);
  bad.add_full_shape(2);
  bad.set_row_offset(3);  // rows [3, 7) exceed 6
  EXPECT_THAT(store.Create(bad),
              StatusIsWithMessage(absl::StatusCode::kInvalidArgument,
                                  "outside full_shape"));
}

TEST(VariableStoreTest, RelativeCheckpointPathsNeedACheckpointDir) {
  VariableStore store({});
  EXPECT_THAT(store.ResolvePath("ckpt"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  VariableStoreOptions options;
  options.checkpoint_dir = "/tmp/strata";
  VariableStore with_dir(options);
  auto p = with_dir.ResolvePath("a/b");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "/tmp/strata/a/b");
  EXPECT_THAT(with_dir.ResolvePath("a/../../etc"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace strata

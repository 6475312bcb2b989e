// server/replication_codec.h: a variable's change (push dense, with and
// without a base version and a delay correction; push rows; assign)
// survives the trip through its ReplicationEntry.
#include "server/replication_codec.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

PushMeta SomeMeta() {
  PushMeta m;
  m.job = "job-7";
  m.worker = 3;
  m.step = 41;
  m.attempt = 2;
  m.group = 5;
  m.group_size = 4;
  m.tagged = true;
  m.base_version = 17;
  return m;
}

void ExpectSameMeta(const PushMeta& a, const PushMeta& b) {
  EXPECT_EQ(a.job, b.job);
  EXPECT_EQ(a.worker, b.worker);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.group_size, b.group_size);
  EXPECT_EQ(a.tagged, b.tagged);
  EXPECT_EQ(a.base_version, b.base_version);
}

TEST(ReplicationCodecTest, DensePushRoundTrips) {
  const std::string grad = "0123456789ab";
  const std::string fixed = "ba9876543210";
  for (bool corrected : {false, true}) {
    for (int64_t base : {int64_t{-1}, int64_t{0}, int64_t{17}}) {
      VariableChange c;
      c.kind = VariableChange::Kind::kPushDense;
      c.variable = "dense/kernel";
      c.meta = SomeMeta();
      c.meta.base_version = base;
      c.data = grad.data();
      c.size = grad.size();
      if (corrected) c.compensated = fixed.data();
      const v1::ReplicationEntry e = EncodeVariableChange(c);
      EXPECT_EQ(e.kind(), v1::ReplicationEntry::PUSH_DENSE);
      EXPECT_EQ(e.variable(), "dense/kernel");
      EXPECT_EQ(e.data(), grad);
      EXPECT_EQ(e.has_base_version(), base >= 0);
      EXPECT_EQ(e.delay_compensated(), corrected);
      EXPECT_EQ(e.compensated(), corrected ? fixed : "");
      EXPECT_EQ(e.ids_size(), 0);
      ExpectSameMeta(PushMetaFromEntry(e), c.meta);
    }
  }
  // An untagged push stays untagged.
  VariableChange c;
  c.variable = "v";
  c.meta.tagged = false;
  ExpectSameMeta(PushMetaFromEntry(EncodeVariableChange(c)), c.meta);
}

TEST(ReplicationCodecTest, RowPushAndAssignRoundTrip) {
  const std::vector<int64_t> ids = {9, 2, 70000000000};
  const std::string rows(3 * 8, 'r');
  VariableChange c;
  c.kind = VariableChange::Kind::kPushRows;
  c.variable = "emb";
  c.meta = SomeMeta();
  c.meta.base_version = -1;  // rows carry none
  c.ids = ids;
  c.data = rows.data();
  c.size = rows.size();
  v1::ReplicationEntry e = EncodeVariableChange(c);
  EXPECT_EQ(e.kind(), v1::ReplicationEntry::PUSH_ROWS);
  EXPECT_EQ(std::vector<int64_t>(e.ids().begin(), e.ids().end()), ids);
  EXPECT_EQ(e.data(), rows);
  EXPECT_FALSE(e.has_base_version());
  ExpectSameMeta(PushMetaFromEntry(e), c.meta);

  const std::string value = "new value bytes";
  VariableChange a;
  a.kind = VariableChange::Kind::kAssign;
  a.variable = "w";
  a.data = value.data();
  a.size = value.size();
  e = EncodeVariableChange(a);
  EXPECT_EQ(e.kind(), v1::ReplicationEntry::ASSIGN);
  EXPECT_EQ(e.variable(), "w");
  EXPECT_EQ(e.data(), value);
  EXPECT_TRUE(e.job().empty());
  EXPECT_FALSE(e.tagged());
}

}  // namespace
}  // namespace strata

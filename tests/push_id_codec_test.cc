// proto/push_id_codec.h: a push identity survives its wire form, and a
// header's tag becomes the PushMeta the core judges the push by.
#include "proto/push_id_codec.h"

#include "client/push_tag.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

TEST(PushIdCodecTest, EveryFieldRoundTrips) {
  PushId id;
  id.job = "job/7";
  id.worker = 12;
  id.step = 1234567890123;
  id.group = 4;
  id.group_size = 3;
  id.attempt = 2;
  const v1::PushTag wire = PushIdToProto(id);
  EXPECT_EQ(wire.job(), "job/7");
  EXPECT_EQ(wire.attempt(), 2);
  const PushId back = PushIdFromProto(wire);
  EXPECT_EQ(back.job, id.job);
  EXPECT_EQ(back.worker, id.worker);
  EXPECT_EQ(back.step, id.step);
  EXPECT_EQ(back.group, id.group);
  EXPECT_EQ(back.group_size, id.group_size);
  EXPECT_EQ(back.attempt, id.attempt);
}

TEST(PushIdCodecTest, TagsAndMetas) {
  // The client's tag, written as its callers write it.
  const PushTag tag{"job", 5, 9, 2, 4};
  const v1::PushTag wire = ToProto(tag);
  EXPECT_EQ(wire.worker(), 5);
  EXPECT_EQ(wire.step(), 9);
  EXPECT_EQ(wire.group(), 2);
  EXPECT_EQ(wire.group_size(), 4);
  EXPECT_EQ(wire.attempt(), 0);
  const PushMeta meta = PushMetaFromTag(true, wire);
  EXPECT_TRUE(meta.tagged);
  EXPECT_EQ(meta.job, "job");
  EXPECT_EQ(meta.group_size, 4);
  EXPECT_EQ(meta.base_version, -1);
  EXPECT_FALSE(PushMetaFromTag(false, v1::PushTag()).tagged);
}

}  // namespace
}  // namespace strata

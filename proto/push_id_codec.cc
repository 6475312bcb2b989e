#include "proto/push_id_codec.h"

namespace strata {

v1::PushTag PushIdToProto(const PushId& id) {
  v1::PushTag tag;
  tag.set_job(id.job);
  tag.set_worker(id.worker);
  tag.set_step(id.step);
  tag.set_group(id.group);
  tag.set_group_size(id.group_size);
  tag.set_attempt(id.attempt);
  return tag;
}

PushId PushIdFromProto(const v1::PushTag& tag) {
  PushId id;
  id.job = tag.job();
  id.worker = tag.worker();
  id.step = tag.step();
  id.group = tag.group();
  id.group_size = tag.group_size();
  id.attempt = tag.attempt();
  return id;
}

PushMeta PushMetaFromTag(bool has_tag, const v1::PushTag& tag) {
  PushMeta meta;
  static_cast<PushId&>(meta) = PushIdFromProto(tag);
  meta.tagged = has_tag;
  return meta;
}

}  // namespace strata

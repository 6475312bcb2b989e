#include "client/push_tag.h"

namespace strata {

v1::PushTag ToProto(const PushTag& tag) {
  v1::PushTag proto;
  proto.set_job(tag.job);
  proto.set_worker(tag.worker);
  proto.set_step(tag.step);
  proto.set_group(tag.group);
  proto.set_group_size(tag.group_size);
  return proto;
}

}  // namespace strata

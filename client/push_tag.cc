#include "client/push_tag.h"

#include "proto/push_id_codec.h"

namespace strata {

v1::PushTag ToProto(const PushTag& tag) { return PushIdToProto(tag); }

}  // namespace strata

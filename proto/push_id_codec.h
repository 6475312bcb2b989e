// The wire form of a push's identity (common/push_id.h) and back.
#ifndef STRATA_PROTO_PUSH_ID_CODEC_H_
#define STRATA_PROTO_PUSH_ID_CODEC_H_

#include "common/push_id.h"
#include "strata/v1/parameter_server.pb.h"

namespace strata {

v1::PushTag PushIdToProto(const PushId& id);
PushId PushIdFromProto(const v1::PushTag& tag);

// The PushMeta of a push whose header carries `tag` when `has_tag`
// (untagged otherwise; no base version).
PushMeta PushMetaFromTag(bool has_tag, const v1::PushTag& tag);

}  // namespace strata

#endif  // STRATA_PROTO_PUSH_ID_CODEC_H_

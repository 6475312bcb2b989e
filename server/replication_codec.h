// The replication log's wire form of a variable's change: the core hands
// the log a VariableChange (server/replication_sink.h) and this makes the
// ReplicationEntry; the backup reads the push identity back with
// PushMetaFromEntry. Pure functions.
#ifndef STRATA_SERVER_REPLICATION_CODEC_H_
#define STRATA_SERVER_REPLICATION_CODEC_H_

#include "common/exactly_once.h"
#include "server/replication_sink.h"
#include "strata/v1/replication.pb.h"

namespace strata {

// PUSH_DENSE (with base_version when the push named one, and the applied
// gradient when delay-corrected), PUSH_ROWS or ASSIGN; seq is left 0.
v1::ReplicationEntry EncodeVariableChange(const VariableChange& change);

// The push identity of a PUSH_DENSE or PUSH_ROWS entry (base_version -1
// when the entry names none).
PushMeta PushMetaFromEntry(const v1::ReplicationEntry& entry);

}  // namespace strata

#endif  // STRATA_SERVER_REPLICATION_CODEC_H_

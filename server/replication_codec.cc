#include "server/replication_codec.h"

namespace strata {

uint64_t ReplicationSink::AppendChange(const VariableChange& change) {
  return Append(EncodeVariableChange(change));
}

v1::ReplicationEntry EncodeVariableChange(const VariableChange& change) {
  v1::ReplicationEntry e;
  e.set_variable(change.variable);
  switch (change.kind) {
    case VariableChange::Kind::kAssign:
      e.set_kind(v1::ReplicationEntry::ASSIGN);
      e.set_data(change.data, change.size);
      return e;
    case VariableChange::Kind::kPushDense:
      e.set_kind(v1::ReplicationEntry::PUSH_DENSE);
      break;
    case VariableChange::Kind::kPushRows:
      e.set_kind(v1::ReplicationEntry::PUSH_ROWS);
      break;
  }
  const PushMeta& meta = change.meta;
  e.set_job(meta.job);
  e.set_worker(meta.worker);
  e.set_step(meta.step);
  e.set_attempt(meta.attempt);
  e.set_group(meta.group);
  e.set_group_size(meta.group_size);
  e.set_tagged(meta.tagged);
  e.set_data(change.data, change.size);
  if (change.kind == VariableChange::Kind::kPushRows) {
    e.mutable_ids()->Add(change.ids.begin(), change.ids.end());
    return e;
  }
  if (meta.base_version >= 0) e.set_base_version(meta.base_version);
  if (change.compensated != nullptr) {
    e.set_delay_compensated(true);
    e.set_compensated(change.compensated, change.size);
  }
  return e;
}

PushMeta PushMetaFromEntry(const v1::ReplicationEntry& e) {
  PushMeta meta;
  meta.job = e.job();
  meta.worker = e.worker();
  meta.step = e.step();
  meta.attempt = e.attempt();
  meta.group = e.group();
  meta.group_size = e.group_size();
  meta.tagged = e.tagged();
  if (e.has_base_version()) meta.base_version = e.base_version();
  return meta;
}

}  // namespace strata

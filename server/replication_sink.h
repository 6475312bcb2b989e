// ReplicationSink: where a replicated PS task's primary puts every change
// of its store (server/replication.h), in the order it applied them, and
// waits until its backup has them before acknowledging a call.
#ifndef STRATA_SERVER_REPLICATION_SINK_H_
#define STRATA_SERVER_REPLICATION_SINK_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/exactly_once.h"
#include "strata/v1/replication.pb.h"

namespace strata {

// A change of one variable as the core hands it to the log (the log makes
// the wire entry: server/replication_codec.h). The pointers are read
// during Append only.
struct VariableChange {
  enum class Kind { kPushDense, kPushRows, kAssign };
  Kind kind = Kind::kPushDense;
  std::string variable;
  PushMeta meta;  // pushes
  // The gradient (dense), the rows (ids.size() rows) or the new value.
  const char* data = nullptr;
  size_t size = 0;
  absl::Span<const int64_t> ids;  // kPushRows: distinct
  // kPushDense of a delay-compensated variable whose push was corrected:
  // the gradient applied (`size` bytes), which the backup applies as is.
  const char* compensated = nullptr;
};

// Thread-safe.
class ReplicationSink {
 public:
  virtual ~ReplicationSink() = default;
  // Whether changes are being sent to a backup now (callers skip building
  // entries when not).
  virtual bool active() const = 0;
  // Appends `entry` (its seq is set here): called under the lock that
  // orders the change (the variable's, the store's), so that the backup
  // applies the changes of each variable in the order the primary did.
  // Returns the ticket to Wait for; 0 when no backup takes it.
  virtual uint64_t Append(v1::ReplicationEntry entry) = 0;
  // Append of a variable's change: a push or an assignment.
  uint64_t AppendChange(const VariableChange& change);
  // The ticket of the newest entry: Wait(Tail()) waits for every change
  // appended so far (a duplicate push acknowledges nothing newer).
  virtual uint64_t Tail() const = 0;
  // Blocks until the backup applied the entry of `ticket`, or the backup
  // was dropped (fenced off at the coordinator: OK, the primary goes on
  // alone). Errors: UNAVAILABLE when this primary lost its task to its
  // backup (the caller's client retries on the new primary).
  virtual absl::Status Wait(uint64_t ticket) = 0;
};

}  // namespace strata

#endif  // STRATA_SERVER_REPLICATION_SINK_H_

// Collective communication for the MultiWorkerMirrored and Mirrored
// strategies: a message Transport between the ranks of a fixed group, and the
// collectives built on it (ring all-reduce, chained broadcast).
//
// The algorithms know nothing about the wire: collective/in_process.h runs
// the ranks as threads of one process, collective/worker_service.h runs them
// over gRPC between WorkerServers.
#ifndef STRATA_COLLECTIVE_COLLECTIVE_H_
#define STRATA_COLLECTIVE_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/tensor.h"

namespace strata {
namespace collective {

// Tuning and limits of one collective (like TF's CommunicationOptions).
struct CollectiveOptions {
  // Bytes per message of a pipelined collective: each ring segment (and a
  // broadcast payload) travels as packs of at most this many bytes (rounded
  // down to whole elements, at least one element), and a pack is forwarded as
  // soon as it has arrived. 1 MiB: large enough to amortize a message's fixed
  // cost, far below gRPC's message limits (see bench/RESULTS.md).
  int64_t pack_bytes = 1 << 20;
  // Deadline of a whole collective, from its start.
  absl::Duration timeout = absl::Seconds(30);
};

// One rank's message endpoint in a fixed group (ranks 0..size-1).
//
// Implementations are thread-safe: several collectives with distinct op names
// may run on one transport at once. Once aborted, a transport stays aborted;
// the group has to be formed anew.
class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Queues `data` for `peer` under `key` (unique per message within the
  // group); may return before delivery so that sends pipeline. `data` is NOT
  // copied: it must stay valid and unchanged until a later Flush returns
  // (after an error: until Flush returns after Abort). Errors from delivery
  // surface on a later Send/Flush or as an abort.
  // Errors: INVALID_ARGUMENT for a peer outside [0, size) or a key already
  // queued for that peer (the gRPC transport leaves this to the receiver,
  // whose ALREADY_EXISTS aborts the group); ABORTED (with the reason) once
  // the group was aborted; the first delivery failure (e.g. UNAVAILABLE).
  virtual absl::Status Send(int peer, const std::string& key,
                            absl::Span<const char> data) = 0;

  // Waits for message `key` from `peer` and copies it into `out`, until
  // `deadline`. Errors: INVALID_ARGUMENT for a peer outside [0, size) or a
  // message whose size differs from out.size() (the message is consumed);
  // DEADLINE_EXCEEDED naming peer and key; ABORTED when the group was aborted
  // (locally or by a peer), with the reason.
  virtual absl::Status Recv(int peer, const std::string& key,
                            absl::Span<char> out, absl::Time deadline) = 0;

  // Waits for message `key` from `peer`, as Recv, and adds it element-wise
  // into `inout` (elements of `dtype`, inout[i] += message[i]; integer sums
  // wrap around) instead of copying it: the reduction of AllReduceSum. This
  // default receives into a scratch buffer and adds from it; a transport
  // that holds received bytes itself (gRPC) adds straight from them, one
  // pass over memory. Errors: INVALID_ARGUMENT for an invalid dtype or an
  // inout.size() that is not a whole number of elements (before waiting;
  // the message is left queued); otherwise as Recv: INVALID_ARGUMENT for a
  // peer outside [0, size) or a message whose size differs from
  // inout.size() (the message is consumed, `inout` is unchanged);
  // DEADLINE_EXCEEDED; ABORTED.
  virtual absl::Status RecvReduce(int peer, const std::string& key,
                                  DType dtype, absl::Span<char> inout,
                                  absl::Time deadline);

  // Waits until every queued Send was delivered (or failed); returns the
  // first failure, ABORTED when the group was aborted, DEADLINE_EXCEEDED
  // when sends are still in flight at `deadline`.
  virtual absl::Status Flush(absl::Time deadline) = 0;

  // Aborts the group: pending and future Recv and Send fail ABORTED with
  // `reason`; peers are told (best effort) so that their waits end too.
  // Sends still queued are dropped and in-flight ones cancelled. The first
  // reason wins; later calls do nothing.
  virtual void Abort(const absl::Status& reason) = 0;
};

// Sum all-reduce, in place, over the group: ring reduce-scatter then ring
// all-gather. Each rank's `count` elements of `dtype` are split into `size`
// segments (sizes differ by at most one element; some are empty when count <
// size), each segment travels in packs of options.pack_bytes, and a pack is
// forwarded as soon as it has been reduced, so sends pipeline around the
// ring; a received pack is added straight into `data`
// (Transport::RecvReduce). Every rank ends with bit-identical values (each element is summed in
// the same order on every rank). Integer sums wrap around on overflow.
// `op` names the operation and must be unique per call within the group
// (e.g. "step42/grads"). Size 1: validates and returns.
// Errors: INVALID_ARGUMENT for a null transport, an invalid dtype, a negative
// or oversized count, null data with count > 0, an empty op, pack_bytes <= 0
// or timeout <= 0; DEADLINE_EXCEEDED when a peer's message does not arrive
// within options.timeout; ABORTED when the group was aborted; the transport's
// delivery errors (e.g. UNAVAILABLE). On any error the transport is Abort()ed
// with that error (so no peer waits past its own timeout either) and the
// error returned; every send has ended when this returns.
absl::Status AllReduceSum(Transport* t, DType dtype, void* data, int64_t count,
                          const std::string& op,
                          const CollectiveOptions& options);

// AllReduceSum followed by a division by size(): the mean over the group.
// Errors: as AllReduceSum; INVALID_ARGUMENT for an integer dtype (before any
// message is sent; the transport is aborted as for any error).
absl::Status AllReduceMean(Transport* t, DType dtype, void* data,
                           int64_t count, const std::string& op,
                           const CollectiveOptions& options);

// Copies `root`'s `bytes` bytes at `data` into every rank's `data`: a
// pipelined chain root → root+1 → ... (mod size), in packs of
// options.pack_bytes. Errors: INVALID_ARGUMENT for a null transport, a root
// outside [0, size), null data with bytes > 0, an empty op, bad options;
// otherwise as AllReduceSum (the transport is aborted on any error).
absl::Status Broadcast(Transport* t, int root, void* data, size_t bytes,
                       const std::string& op,
                       const CollectiveOptions& options);

// Transport::RecvReduce's argument checks, for its overrides:
// INVALID_ARGUMENT naming `key` for an invalid dtype or a `bytes` that is not
// a whole number of its elements.
absl::Status CheckRecvReduceArgs(const std::string& key, DType dtype,
                                 size_t bytes);

// inout[i] += src[i] for `count` elements of `dtype` (integer sums wrap
// around): AllReduceSum's reduction, for transports that override
// Transport::RecvReduce. `src` need not be aligned; the ranges must not
// overlap. Does nothing for an invalid dtype or count <= 0.
void AddInto(DType dtype, char* inout, const char* src, int64_t count);

// Bus bandwidth of a ring all-reduce over `size` ranks, from its algorithm
// bandwidth (bytes per rank / time): algbw * 2(size-1)/size, the traffic each
// link carries (NCCL's convention). 0 for size < 1.
double RingBusBandwidth(double algorithm_bandwidth, int size);

// The element range [begin, begin + count) of segment `index` when `count`
// elements are split over `size` ranks: the first count % size segments get
// one element more. Exposed for tests and callers that shard by segment.
struct Segment {
  int64_t begin = 0;
  int64_t count = 0;
};
Segment RingSegment(int64_t count, int size, int index);

}  // namespace collective
}  // namespace strata

#endif  // STRATA_COLLECTIVE_COLLECTIVE_H_

// The MultiWorkerMirrored strategy's ring all-reduce between worker
// processes, over their WorkerServices (collective/worker_service.h): one
// transport per group, opened on this task's WorkerServer. A newer group
// (or stopping) ends the ring at once: a watcher aborts the transport, so
// that waits in a collective stop instead of running into their deadline
// (a stuck peer is alive to the OS but not to its lease).
//
// Thread-safety: as GradientReducer. Owns the transport and the watcher
// thread (joined on destruction); the WorkerServer must outlive it.
#ifndef STRATA_WORKER_RING_REDUCER_H_
#define STRATA_WORKER_RING_REDUCER_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "collective/worker_service.h"
#include "strata/v1/coordinator.pb.h"
#include "worker/gradient_reducer.h"

namespace strata {

// Opens group `assignment.group()` on `server` as rank `assignment.rank()`,
// the members' addresses as the peers, and starts the watcher, which polls
// `end_group` every 50 ms and aborts the ring (ABORTED "group G replaced by
// a newer group") once it returns true. One local replica (index 0).
// Errors: those of WorkerServer::OpenGroup.
absl::StatusOr<std::unique_ptr<GradientReducer>> OpenRingReducer(
    collective::WorkerServer* server, const v1::GroupAssignment& assignment,
    const collective::CollectiveOptions& options,
    std::function<bool()> end_group);

}  // namespace strata

#endif  // STRATA_WORKER_RING_REDUCER_H_

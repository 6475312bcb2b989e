// A Transport between threads of one process: the Mirrored strategy's
// replicas, and the collective tests.
#ifndef STRATA_COLLECTIVE_IN_PROCESS_H_
#define STRATA_COLLECTIVE_IN_PROCESS_H_

#include <memory>
#include <vector>

#include "collective/collective.h"

namespace strata {
namespace collective {

// Returns the `size` transports of one new group, element i being rank i
// (empty when size < 1). Hand each to its own thread.
//
// Messages are a rendezvous: Send only records where the sender's bytes are,
// and Recv copies them straight into the receiver's buffer (one copy, no
// intermediate buffer). Flush therefore waits until the receivers have taken
// every message. Abort on any rank aborts the whole group at once.
// The transports share the group's state and may be destroyed in any order;
// destroying one withdraws its messages that no receiver took yet.
std::vector<std::unique_ptr<Transport>> NewInProcessGroup(int size);

}  // namespace collective
}  // namespace strata

#endif  // STRATA_COLLECTIVE_IN_PROCESS_H_

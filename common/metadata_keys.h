// gRPC metadata keys that servers and their clients both name (the
// authorization key is common/tls.h's kAuthorizationKey).
#ifndef STRATA_COMMON_METADATA_KEYS_H_
#define STRATA_COMMON_METADATA_KEYS_H_

namespace strata {

// The initial (and trailing) metadata in which an elected coordinator
// sends its epoch (coordinator/coordinator_service_impl.h), which
// CoordinatorClient checks to fence off a deposed leader.
inline constexpr char kCoordinatorEpochHeader[] = "strata-coordinator-epoch";

}  // namespace strata

#endif  // STRATA_COMMON_METADATA_KEYS_H_

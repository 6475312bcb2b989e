// Futex waits and wake-ups on a 32-bit word that may live in memory shared
// between processes (not FUTEX_PRIVATE).
#ifndef STRATA_COMMON_FUTEX_H_
#define STRATA_COMMON_FUTEX_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace strata {

// Sleeps while *word == expected, at most `timeout` (returns at once when
// the word differs). Spurious returns happen: callers check the word.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
               absl::Duration timeout);
// Wakes every waiter on *word.
void FutexWakeAll(std::atomic<uint32_t>* word);

}  // namespace strata

#endif  // STRATA_COMMON_FUTEX_H_

// ThreadSanitizer annotations for Debian's prebuilt Abseil synchronization
// library, loaded into `make tsan` runs with LD_PRELOAD.
//
// libabsl_synchronization.so is not built with -fsanitize=thread, so TSan
// does not see absl::Mutex, absl::CondVar or absl::Notification order
// anything: every member an absl::Mutex guards would be reported as racing.
// This library interposes the exported lock, unlock and wait functions
// (callers inside Abseil and gRPC reach them through the PLT too), calls the
// real ones (dlsym RTLD_NEXT) and tells TSan what they did:
//   a lock (or a wait that returns holding the lock) acquires the mutex;
//   an unlock (or a wait that gives the lock up) releases it.
// A Condition is evaluated by Abseil while the mutex is held, but inside
// the real call, so after the release above (Await) or before the acquire
// (LockWhen), and possibly by the thread that unlocks: Condition::Eval is
// interposed too and brackets the evaluation with an acquire and a release
// of the mutex the calling thread is working on (a thread-local set by the
// wrappers). Reader locks are treated as exclusive for ordering, which can
// only hide races between two readers, never report a false one. The symbol names are
// Abseil 20220623's in Debian's inline namespace "debian3"; a different
// Abseil fails the static_assert below rather than silently not annotating.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "absl/base/options.h"
#include "absl/time/time.h"

#define STRATA_STR2(x) #x
#define STRATA_STR(x) STRATA_STR2(x)
static_assert(std::string_view(STRATA_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME)) ==
                  "debian3",
              "the mangled names below are for Abseil's inline namespace "
              "debian3 (Debian 12)");

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

// The mutex whose lock, unlock or wait this thread is inside (for Eval).
thread_local void* current_mutex = nullptr;

// Sets current_mutex for the scope.
class Working {
 public:
  explicit Working(void* mu) : saved_(current_mutex) { current_mutex = mu; }
  ~Working() { current_mutex = saved_; }
  Working(const Working&) = delete;
  Working& operator=(const Working&) = delete;

 private:
  void* saved_;
};

void* Next(const char* name) {
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan absl annotations: %s not found\n", name);
    std::abort();
  }
  return fn;
}

}  // namespace

// Declares the interposer `shim` for the C++ symbol `mangled` with the
// given signature, and `real_<shim>` returning the next definition.
#define STRATA_SHIM(ret, shim, mangled, ...)                               \
  extern "C" ret shim(__VA_ARGS__) __asm__(mangled);                      \
  using shim##_fn = ret (*)(__VA_ARGS__);                                  \
  static shim##_fn real_##shim() {                                         \
    static const shim##_fn fn = reinterpret_cast<shim##_fn>(Next(mangled)); \
    return fn;                                                             \
  }

using Duration = absl::Duration;
using Time = absl::Time;

// ---- absl::Mutex ----
STRATA_SHIM(void, MutexLock, "_ZN4absl7debian35Mutex4LockEv", void*)
void MutexLock(void* mu) {
  {
    Working w(mu);
    real_MutexLock()(mu);
  }
  __tsan_acquire(mu);
}
STRATA_SHIM(void, MutexReaderLock, "_ZN4absl7debian35Mutex10ReaderLockEv",
            void*)
void MutexReaderLock(void* mu) {
  {
    Working w(mu);
    real_MutexReaderLock()(mu);
  }
  __tsan_acquire(mu);
}
STRATA_SHIM(bool, MutexTryLock, "_ZN4absl7debian35Mutex7TryLockEv", void*)
bool MutexTryLock(void* mu) {
  bool locked;
  {
    Working w(mu);
    locked = real_MutexTryLock()(mu);
  }
  if (locked) __tsan_acquire(mu);
  return locked;
}
STRATA_SHIM(bool, MutexReaderTryLock,
            "_ZN4absl7debian35Mutex13ReaderTryLockEv", void*)
bool MutexReaderTryLock(void* mu) {
  bool locked;
  {
    Working w(mu);
    locked = real_MutexReaderTryLock()(mu);
  }
  if (locked) __tsan_acquire(mu);
  return locked;
}
STRATA_SHIM(void, MutexUnlock, "_ZN4absl7debian35Mutex6UnlockEv", void*)
void MutexUnlock(void* mu) {
  __tsan_release(mu);
  {
    Working w(mu);
    real_MutexUnlock()(mu);
  }
}
STRATA_SHIM(void, MutexReaderUnlock, "_ZN4absl7debian35Mutex12ReaderUnlockEv",
            void*)
void MutexReaderUnlock(void* mu) {
  __tsan_release(mu);
  {
    Working w(mu);
    real_MutexReaderUnlock()(mu);
  }
}

// Lock-when: return holding the lock (also on timeout).
STRATA_SHIM(void, MutexLockWhen, "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE",
            void*, const void*)
void MutexLockWhen(void* mu, const void* cond) {
  {
    Working w(mu);
    real_MutexLockWhen()(mu, cond);
  }
  __tsan_acquire(mu);
}
STRATA_SHIM(void, MutexReaderLockWhen,
            "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE", void*,
            const void*)
void MutexReaderLockWhen(void* mu, const void* cond) {
  {
    Working w(mu);
    real_MutexReaderLockWhen()(mu, cond);
  }
  __tsan_acquire(mu);
}
STRATA_SHIM(bool, MutexLockWhenWithTimeout,
            "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE",
            void*, const void*, Duration)
bool MutexLockWhenWithTimeout(void* mu, const void* cond, Duration d) {
  bool met;
  {
    Working w(mu);
    met = real_MutexLockWhenWithTimeout()(mu, cond, d);
  }
  __tsan_acquire(mu);
  return met;
}
STRATA_SHIM(bool, MutexLockWhenWithDeadline,
            "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE",
            void*, const void*, Time)
bool MutexLockWhenWithDeadline(void* mu, const void* cond, Time t) {
  bool met;
  {
    Working w(mu);
    met = real_MutexLockWhenWithDeadline()(mu, cond, t);
  }
  __tsan_acquire(mu);
  return met;
}
STRATA_SHIM(bool, MutexReaderLockWhenWithTimeout,
            "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE",
            void*, const void*, Duration)
bool MutexReaderLockWhenWithTimeout(void* mu, const void* cond, Duration d) {
  bool met;
  {
    Working w(mu);
    met = real_MutexReaderLockWhenWithTimeout()(mu, cond, d);
  }
  __tsan_acquire(mu);
  return met;
}
STRATA_SHIM(bool, MutexReaderLockWhenWithDeadline,
            "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE",
            void*, const void*, Time)
bool MutexReaderLockWhenWithDeadline(void* mu, const void* cond, Time t) {
  bool met;
  {
    Working w(mu);
    met = real_MutexReaderLockWhenWithDeadline()(mu, cond, t);
  }
  __tsan_acquire(mu);
  return met;
}

// Await: gives the lock up while waiting, holds it again on return.
STRATA_SHIM(void, MutexAwait, "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE",
            void*, const void*)
void MutexAwait(void* mu, const void* cond) {
  __tsan_release(mu);
  {
    Working w(mu);
    real_MutexAwait()(mu, cond);
  }
  __tsan_acquire(mu);
}
STRATA_SHIM(bool, MutexAwaitWithTimeout,
            "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE",
            void*, const void*, Duration)
bool MutexAwaitWithTimeout(void* mu, const void* cond, Duration d) {
  __tsan_release(mu);
  bool met;
  {
    Working w(mu);
    met = real_MutexAwaitWithTimeout()(mu, cond, d);
  }
  __tsan_acquire(mu);
  return met;
}
STRATA_SHIM(bool, MutexAwaitWithDeadline,
            "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE",
            void*, const void*, Time)
bool MutexAwaitWithDeadline(void* mu, const void* cond, Time t) {
  __tsan_release(mu);
  bool met;
  {
    Working w(mu);
    met = real_MutexAwaitWithDeadline()(mu, cond, t);
  }
  __tsan_acquire(mu);
  return met;
}

// ---- absl::CondVar: the wait gives `mu` up and takes it again ----
STRATA_SHIM(void, CondVarWait, "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE",
            void*, void*)
void CondVarWait(void* cv, void* mu) {
  __tsan_release(mu);
  {
    Working w(mu);
    real_CondVarWait()(cv, mu);
  }
  __tsan_acquire(mu);
}
STRATA_SHIM(bool, CondVarWaitWithTimeout,
            "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE",
            void*, void*, Duration)
bool CondVarWaitWithTimeout(void* cv, void* mu, Duration d) {
  __tsan_release(mu);
  bool timed_out;
  {
    Working w(mu);
    timed_out = real_CondVarWaitWithTimeout()(cv, mu, d);
  }
  __tsan_acquire(mu);
  return timed_out;
}
STRATA_SHIM(bool, CondVarWaitWithDeadline,
            "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE",
            void*, void*, Time)
bool CondVarWaitWithDeadline(void* cv, void* mu, Time t) {
  __tsan_release(mu);
  bool timed_out;
  {
    Working w(mu);
    timed_out = real_CondVarWaitWithDeadline()(cv, mu, t);
  }
  __tsan_acquire(mu);
  return timed_out;
}

// ---- absl::Condition: evaluated with the mutex held ----
STRATA_SHIM(bool, ConditionEval, "_ZNK4absl7debian39Condition4EvalEv",
            const void*)
bool ConditionEval(const void* cond) {
  void* mu = current_mutex;
  if (mu != nullptr) __tsan_acquire(mu);
  bool result = real_ConditionEval()(cond);
  if (mu != nullptr) __tsan_release(mu);
  return result;
}

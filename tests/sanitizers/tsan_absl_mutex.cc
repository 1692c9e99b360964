// ThreadSanitizer builds only (KVT_SANITIZE=thread; linked into every executable by
// kvt_target_defaults): makes absl::Mutex, absl::CondVar and absl::Notification visible
// to TSan.
//
// Why: Debian's libabsl_synchronization.so is not built with -fsanitize=thread, so TSan
// never sees its lock and unlock (a futex, not pthread), and reports every access to
// data guarded by an absl::Mutex as a race. Here each public locking entry point of that
// library is interposed (an executable's definition wins over the shared library's, also
// for calls from inside the library) and forwards to the real one found with
// dlsym(RTLD_NEXT), adding __tsan_acquire after taking the mutex and __tsan_release
// before letting it go. Readers are treated like writers (over-synchronises readers with
// each other: never a false report, at worst a missed reader/reader race, which cannot
// exist). Not a suppression: a race on unguarded data is still reported.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

template <typename Fn>
Fn Real(const char* mangled) {
  void* p = dlsym(RTLD_NEXT, mangled);
  if (p == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found in libabsl_synchronization\n", mangled);
    std::abort();
  }
  return reinterpret_cast<Fn>(p);
}

#define KVT_REAL(var, type, mangled) static const auto var = Real<type>(mangled)

void Acquire(const void* mu) { __tsan_acquire(const_cast<void*>(mu)); }
void Release(const void* mu) { __tsan_release(const_cast<void*>(mu)); }

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

using Cond = const Condition&;

void Mutex::Lock() {
  KVT_REAL(real, void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  real(this);
  Acquire(this);
}
void Mutex::ReaderLock() {
  KVT_REAL(real, void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  real(this);
  Acquire(this);
}
void Mutex::Unlock() {
  KVT_REAL(real, void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  Release(this);
  real(this);
}
void Mutex::ReaderUnlock() {
  KVT_REAL(real, void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Release(this);
  real(this);
}
bool Mutex::TryLock() {
  KVT_REAL(real, bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  const bool ok = real(this);
  if (ok) Acquire(this);
  return ok;
}
bool Mutex::ReaderTryLock() {
  KVT_REAL(real, bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  const bool ok = real(this);
  if (ok) Acquire(this);
  return ok;
}
// LockWhen*: the condition is published to the thread that will evaluate it (release),
// and the lock is taken on return (acquire) whatever the result.
void Mutex::LockWhen(Cond c) {
  KVT_REAL(real, void (*)(Mutex*, Cond), "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  Release(this);
  real(this, c);
  Acquire(this);
}
void Mutex::ReaderLockWhen(Cond c) {
  KVT_REAL(real, void (*)(Mutex*, Cond),
           "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Release(this);
  real(this, c);
  Acquire(this);
}
bool Mutex::LockWhenWithTimeout(Cond c, absl::Duration d) {
  KVT_REAL(real, bool (*)(Mutex*, Cond, absl::Duration),
           "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Release(this);
  const bool r = real(this, c, d);
  Acquire(this);
  return r;
}
bool Mutex::LockWhenWithDeadline(Cond c, absl::Time t) {
  KVT_REAL(real, bool (*)(Mutex*, Cond, absl::Time),
           "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Release(this);
  const bool r = real(this, c, t);
  Acquire(this);
  return r;
}
bool Mutex::ReaderLockWhenWithTimeout(Cond c, absl::Duration d) {
  KVT_REAL(real, bool (*)(Mutex*, Cond, absl::Duration),
           "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Release(this);
  const bool r = real(this, c, d);
  Acquire(this);
  return r;
}
bool Mutex::ReaderLockWhenWithDeadline(Cond c, absl::Time t) {
  KVT_REAL(real, bool (*)(Mutex*, Cond, absl::Time),
           "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Release(this);
  const bool r = real(this, c, t);
  Acquire(this);
  return r;
}
// Await*: releases the mutex while waiting and holds it again on return.
void Mutex::Await(Cond c) {
  KVT_REAL(real, void (*)(Mutex*, Cond), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Release(this);
  real(this, c);
  Acquire(this);
}
bool Mutex::AwaitWithTimeout(Cond c, absl::Duration d) {
  KVT_REAL(real, bool (*)(Mutex*, Cond, absl::Duration),
           "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Release(this);
  const bool r = real(this, c, d);
  Acquire(this);
  return r;
}
bool Mutex::AwaitWithDeadline(Cond c, absl::Time t) {
  KVT_REAL(real, bool (*)(Mutex*, Cond, absl::Time),
           "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Release(this);
  const bool r = real(this, c, t);
  Acquire(this);
  return r;
}
void CondVar::Wait(Mutex* mu) {
  KVT_REAL(real, void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(this, mu);
  Acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration d) {
  KVT_REAL(real, bool (*)(CondVar*, Mutex*, absl::Duration),
           "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool r = real(this, mu, d);
  Acquire(mu);
  return r;
}
bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time t) {
  KVT_REAL(real, bool (*)(CondVar*, Mutex*, absl::Time),
           "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool r = real(this, mu, t);
  Acquire(mu);
  return r;
}

// Notification: its flag is set and read inside the library (fast path without the mutex).
// (HasBeenNotified() is inline and reads the flag directly: not covered.)
void Notification::Notify() {
  KVT_REAL(real, void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv");
  Release(this);
  real(this);
}
void Notification::WaitForNotification() const {
  KVT_REAL(real, void (*)(const Notification*),
           "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(this);
  Acquire(this);
}
bool Notification::WaitForNotificationWithTimeout(absl::Duration d) const {
  KVT_REAL(real, bool (*)(const Notification*, absl::Duration),
           "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool r = real(this, d);
  if (r) Acquire(this);
  return r;
}
bool Notification::WaitForNotificationWithDeadline(absl::Time t) const {
  KVT_REAL(real, bool (*)(const Notification*, absl::Time),
           "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool r = real(this, t);
  if (r) Acquire(this);
  return r;
}

ABSL_NAMESPACE_END
}  // namespace absl

// Clock: the one source of time of the store and kvtierd (lease deadlines, call
// deadlines and backoff, shm stall timeouts, the write-back thread's period, the disk
// tier's commit delay, cache-policy TTLs, record timestamps). The real clock reads the
// system; tests pass a ManualClock and move time by hand, so no test sleeps to make a
// lease expire or asserts how long something took. The shape follows RocksDB's
// SystemClock / MockSystemClock (a small interface, one default instance, a mock whose
// sleeps advance it).
#ifndef KVSTORE_CLOCK_H_
#define KVSTORE_CLOCK_H_

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace kvt {

// Thread-safe.
class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;

  // Monotonic time: deadlines, timeouts, backoff, TTLs. Never goes back.
  virtual TimePoint Now() const = 0;
  // Wall time since the Unix epoch, milliseconds: timestamps stored in records and
  // indexes (ChunkInfo::last_access_unix_ms, EvictSelector's older_than).
  virtual int64_t UnixMillis() const = 0;
  // Blocks the calling thread for `d` of this clock's time (<= 0: returns at once).
  virtual void SleepFor(Duration d) = 0;
  // With `mu` held: waits on `cv` until it is signalled or Now() >= deadline (spurious
  // wake-ups are possible: callers re-check their condition and the time). Returns true
  // when the deadline has passed.
  virtual bool WaitUntil(absl::CondVar& cv, absl::Mutex& mu, TimePoint deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
};

// The process's real clock (std::chrono::steady_clock, system_clock, absl waits). Never
// null; lives for the whole process.
const std::shared_ptr<Clock>& SystemClock();

// `clock` when set, else SystemClock(): what every component does with an options
// field left empty.
inline Clock& ClockOrSystem(const std::shared_ptr<Clock>& clock) {
  return clock != nullptr ? *clock : *SystemClock();
}

// Thread-safe. A clock that moves only when told: Advance, or SleepFor (which advances it
// by the slept time at once, as RocksDB's MockSystemClock does with mock sleeps, so a
// retry loop's backoff costs no real time). Threads in WaitUntil are woken by Advance
// (and re-check at least every 10 ms of real time, so a wake-up racing the wait is never
// lost for long). Starts at an arbitrary fixed point (steady time 1000 s, Unix time
// 2026-01-01 00:00:00 UTC) so results do not depend on when a test runs.
class ManualClock final : public Clock {
 public:
  ManualClock() = default;

  TimePoint Now() const override ABSL_LOCKS_EXCLUDED(mu_);
  int64_t UnixMillis() const override ABSL_LOCKS_EXCLUDED(mu_);
  // Advances the clock by `d` (REQUIRES: d >= 0) and returns; counts in slept().
  void SleepFor(Duration d) override ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitUntil(absl::CondVar& cv, absl::Mutex& mu, TimePoint deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_LOCKS_EXCLUDED(mu_);

  // Moves time forward by `d` (REQUIRES: d >= 0) and wakes every WaitUntil.
  void Advance(Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  // Total time passed in SleepFor calls (what a retry loop backed off).
  Duration slept() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  Duration since_start_ ABSL_GUARDED_BY(mu_){};
  Duration slept_ ABSL_GUARDED_BY(mu_){};
  // Condition variables of the threads in WaitUntil now, with how many wait on each
  // (woken by Advance).
  absl::flat_hash_map<absl::CondVar*, int> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvt

#endif  // KVSTORE_CLOCK_H_

// The real clock and the manual one (kvstore/clock.h).
#include "kvstore/clock.h"

#include <algorithm>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kvt {

namespace {

class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  int64_t UnixMillis() const override { return absl::ToUnixMillis(absl::Now()); }
  void SleepFor(Duration d) override {
    if (d > Duration::zero()) std::this_thread::sleep_for(d);
  }
  bool WaitUntil(absl::CondVar& cv, absl::Mutex& mu, TimePoint deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const Duration left = deadline - Now();
    if (left <= Duration::zero()) return true;
    cv.WaitWithTimeout(&mu, absl::FromChrono(left));
    return Now() >= deadline;
  }
};

// The manual clock's origins (see clock.h).
constexpr std::chrono::seconds kManualSteadyStart{1000};
constexpr int64_t kManualUnixStartMs = 1767225600000;  // 2026-01-01T00:00:00Z
// The longest a ManualClock waiter sleeps in real time before it looks at the clock again.
constexpr absl::Duration kManualRecheck = absl::Milliseconds(10);

}  // namespace

const std::shared_ptr<Clock>& SystemClock() {
  static const std::shared_ptr<Clock>* const clock =
      new std::shared_ptr<Clock>(std::make_shared<RealClock>());
  return *clock;
}

Clock::TimePoint ManualClock::Now() const {
  absl::MutexLock lock(&mu_);
  return TimePoint(kManualSteadyStart) + since_start_;
}

int64_t ManualClock::UnixMillis() const {
  absl::MutexLock lock(&mu_);
  return kManualUnixStartMs +
         std::chrono::duration_cast<std::chrono::milliseconds>(since_start_).count();
}

void ManualClock::SleepFor(Duration d) {
  if (d <= Duration::zero()) return;
  {
    absl::MutexLock lock(&mu_);
    slept_ += d;
  }
  Advance(d);
}

Clock::Duration ManualClock::slept() const {
  absl::MutexLock lock(&mu_);
  return slept_;
}

void ManualClock::Advance(Duration d) {
  absl::MutexLock lock(&mu_);
  if (d > Duration::zero()) since_start_ += d;
  // A CondVar's Signal does not take the waiter's mutex, so this cannot deadlock with a
  // waiter that registers under its own mutex (order: waiter's mu, then mu_).
  for (const auto& [cv, n] : waiting_) cv->SignalAll();
}

bool ManualClock::WaitUntil(absl::CondVar& cv, absl::Mutex& mu, TimePoint deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (TimePoint(kManualSteadyStart) + since_start_ >= deadline) return true;
    ++waiting_[&cv];
  }
  // An Advance between the check above and this wait signals no one: the bounded wait
  // notices it at the next re-check.
  cv.WaitWithTimeout(&mu, kManualRecheck);
  absl::MutexLock lock(&mu_);
  if (auto it = waiting_.find(&cv); --it->second == 0) waiting_.erase(it);
  return TimePoint(kManualSteadyStart) + since_start_ >= deadline;
}

}  // namespace kvt

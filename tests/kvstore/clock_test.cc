// kvstore/clock.h: the manual clock moves only when told, its sleeps advance it, and
// its waits wake when it passes their deadline; the real clock's past deadlines return
// at once. No test here sleeps or reads the wall time.
#include "kvstore/clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace kvt {
namespace {

using namespace std::chrono_literals;

TEST(ManualClockTest, MovesOnlyWhenAdvanced) {
  ManualClock clock;
  const Clock::TimePoint t0 = clock.Now();
  const int64_t u0 = clock.UnixMillis();
  EXPECT_EQ(u0, 1767225600000);  // 2026-01-01T00:00:00Z: the same in every run
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(5s);
  EXPECT_EQ(clock.Now() - t0, 5s);
  EXPECT_EQ(clock.UnixMillis() - u0, 5000);
  clock.Advance(-1s);  // never goes back
  EXPECT_EQ(clock.Now() - t0, 5s);
}

TEST(ManualClockTest, SleepForAdvancesAtOnceAndCountsTheSleptTime) {
  ManualClock clock;
  const Clock::TimePoint t0 = clock.Now();
  clock.SleepFor(20ms);
  clock.SleepFor(40ms);
  clock.SleepFor(-3ms);  // nothing
  EXPECT_EQ(clock.Now() - t0, 60ms);
  EXPECT_EQ(clock.slept(), 60ms);
  clock.Advance(1s);  // not a sleep
  EXPECT_EQ(clock.slept(), 60ms);
}

TEST(ManualClockTest, WaitUntilReturnsOnceTheClockPassesTheDeadline) {
  ManualClock clock;
  absl::Mutex mu;
  absl::CondVar cv;
  const Clock::TimePoint deadline = clock.Now() + 100ms;
  bool done = false;
  int wakeups = 0;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    while (!clock.WaitUntil(cv, mu, deadline)) ++wakeups;
    done = true;
  });
  clock.Advance(99ms);
  {
    absl::MutexLock lock(&mu);
    EXPECT_FALSE(done);  // 1 ms short of the deadline: still waiting
  }
  clock.Advance(1ms);
  waiter.join();
  EXPECT_TRUE(done);
  // A deadline already passed returns at once.
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(clock.WaitUntil(cv, mu, deadline));
}

TEST(SystemClockTest, PastDeadlineReturnsAtOnceAndSleepsOfZeroDoNothing) {
  Clock& clock = *SystemClock();
  EXPECT_EQ(&clock, SystemClock().get());  // one instance
  absl::Mutex mu;
  absl::CondVar cv;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(clock.WaitUntil(cv, mu, clock.Now() - 1s));
  clock.SleepFor(0s);
  const Clock::TimePoint a = clock.Now();
  EXPECT_GE(clock.Now(), a);  // monotonic
  EXPECT_EQ(&ClockOrSystem(nullptr), &clock);
  auto manual = std::make_shared<ManualClock>();
  std::shared_ptr<Clock> as_clock = manual;
  EXPECT_EQ(&ClockOrSystem(as_clock), manual.get());
}

}  // namespace
}  // namespace kvt

// kvstore/supervised_thread.h + health_registry.h: a background thread that throws is
// reported (name, failed, its error) and its owner told; restarts and heartbeats are
// counted; a joined thread leaves the registry.
#include "kvstore/supervised_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "absl/synchronization/notification.h"
#include "kvstore/health_registry.h"

namespace kvt {
namespace {

TEST(SupervisedThreadTest, ThrowingBodyIsReportedFailedWithItsError) {
  auto health = std::make_shared<HealthRegistry>();
  std::string told;
  {
    SupervisedThread t;
    t.Start({.name = "disk-commit",
             .health = health,
             .on_failure = [&](const std::string& error) { told = error; }},
            [] { throw std::runtime_error("fdatasync: EIO"); });
    // The entry exists from Start on; wait for the failure (an event, no time asserted).
    while (t.state() != ThreadState::kFailed) std::this_thread::yield();
    std::vector<ThreadHealth> threads = health->Snapshot();
    ASSERT_EQ(threads.size(), 1u);
    EXPECT_EQ(threads[0].name, "disk-commit");
    EXPECT_EQ(threads[0].state, ThreadState::kFailed);
    EXPECT_EQ(threads[0].last_error, "fdatasync: EIO");
    EXPECT_EQ(threads[0].restarts, 0u);
    std::string detail;
    EXPECT_FALSE(health->Healthy(&detail));
    EXPECT_EQ(detail, "disk-commit failed: fdatasync: EIO; ");
    t.Join();
    EXPECT_EQ(told, "fdatasync: EIO");  // on_failure ran on the thread before it ended
  }
  EXPECT_TRUE(health->Snapshot().empty());  // joined: gone from the registry
  EXPECT_TRUE(health->Healthy());
}

TEST(SupervisedThreadTest, NonStdExceptionIsReportedToo) {
  auto health = std::make_shared<HealthRegistry>();
  SupervisedThread t;
  t.Start({.name = "x", .health = health}, [] { throw 42; });
  while (t.state() != ThreadState::kFailed) std::this_thread::yield();
  EXPECT_EQ(health->Snapshot()[0].last_error, "a non-std exception");
}

TEST(SupervisedThreadTest, BodyIsRestartedWhileRestartsAreLeft) {
  auto health = std::make_shared<HealthRegistry>();
  std::atomic<int> runs{0};
  SupervisedThread t;
  t.Start({.name = "metrics-http", .health = health, .max_restarts = 3}, [&] {
    const int run = ++runs;
    if (run <= 2) throw std::runtime_error("bind failed " + std::to_string(run));
  });
  while (t.state() == ThreadState::kRunning) std::this_thread::yield();
  std::vector<ThreadHealth> threads = health->Snapshot();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads[0].state, ThreadState::kStopped);  // the third run returned
  EXPECT_EQ(threads[0].restarts, 2u);
  EXPECT_EQ(threads[0].last_error, "bind failed 2");
  EXPECT_EQ(runs.load(), 3);
  EXPECT_TRUE(health->Healthy());  // stopped is not failed

  // Restarts spent: the next throw fails it.
  SupervisedThread u;
  std::atomic<int> u_runs{0};
  u.Start({.name = "u", .health = health, .max_restarts = 1}, [&] {
    ++u_runs;
    throw std::runtime_error("always");
  });
  while (u.state() != ThreadState::kFailed) std::this_thread::yield();
  EXPECT_EQ(u_runs.load(), 2);
  EXPECT_FALSE(health->Healthy());
}

TEST(SupervisedThreadTest, HeartbeatsAreCountedAndEntriesSortedByName) {
  auto health = std::make_shared<HealthRegistry>();
  absl::Notification beaten, stop;
  SupervisedThread b;
  SupervisedThread a;
  b.Start({.name = "worker-1", .health = health}, [&] {
    for (int i = 0; i < 5; ++i) b.Beat();
    beaten.Notify();
    stop.WaitForNotification();
  });
  a.Start({.name = "worker-0", .health = health}, [&] { stop.WaitForNotification(); });
  beaten.WaitForNotification();
  std::vector<ThreadHealth> threads = health->Snapshot();
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].name, "worker-0");
  EXPECT_EQ(threads[0].heartbeats, 0u);
  EXPECT_EQ(threads[1].name, "worker-1");
  EXPECT_EQ(threads[1].heartbeats, 5u);
  EXPECT_EQ(threads[1].state, ThreadState::kRunning);
  EXPECT_EQ(ThreadStateName(threads[1].state), "running");
  stop.Notify();
  a.Join();
  b.Join();
  EXPECT_TRUE(health->Snapshot().empty());
  EXPECT_EQ(a.state(), ThreadState::kStopped);
}

}  // namespace
}  // namespace kvt

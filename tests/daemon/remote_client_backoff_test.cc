// RemoteClient's retry budget, backoff and cool-down run on RemoteClientOptions::clock: on a
// ManualClock the backoff costs no real time and every figure below is exact. The target
// is a unix socket nobody listens on (connect fails at once).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "kvstore/clock.h"
#include "kvstore/remote_client.h"

namespace kvt {
namespace {

using namespace std::chrono_literals;

std::string DeadTarget() {
  return "unix://" + (std::filesystem::path(::testing::TempDir()) /
                      ("kvt_no_daemon_" + std::to_string(::getpid()) + ".sock"))
                         .string();
}

bool IsMiss(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

TEST(RemoteClientBackoffTest, RetriesBackOffOnTheClockDoublingUpToTheMax) {
  auto clock = std::make_shared<ManualClock>();
  RemoteClientOptions o;
  o.target = DeadTarget();
  o.max_attempts = 4;
  o.initial_backoff = 5ms;
  o.max_backoff = 8ms;  // also bounds each retry's real wait for the connection (16 ms)
  o.clock = clock;
  auto client = RemoteClient::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<RemoteHealth> h = (*client)->Health();
  EXPECT_TRUE(IsMiss(h.status())) << h.status();
  EXPECT_EQ((*client)->rpcs(), 4u);  // max_attempts
  EXPECT_EQ(clock->slept(), 21ms);   // 5 + 8 + 8: doubled, capped at max_backoff
}

TEST(RemoteClientBackoffTest, TheDeadlineBudgetIsCountedOnTheClock) {
  auto clock = std::make_shared<ManualClock>();
  RemoteClientOptions o;
  o.target = DeadTarget();
  o.deadline = 100ms;
  o.max_attempts = 10;
  o.initial_backoff = 40ms;
  o.max_backoff = 80ms;
  o.clock = clock;
  auto client = RemoteClient::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(IsMiss((*client)->Health().status()));
  // Attempt 1, back off 40 ms (60 ms left), attempt 2; the next backoff (80 ms) would
  // not fit in what is left, so the call ends there.
  EXPECT_EQ((*client)->rpcs(), 2u);
  EXPECT_EQ(clock->slept(), 40ms);
}

TEST(RemoteClientBackoffTest, AfterRepeatedFailuresCallsFailAtOnceUntilTheCoolDownEnds) {
  auto clock = std::make_shared<ManualClock>();
  RemoteClientOptions o;
  o.target = DeadTarget();
  o.max_attempts = 1;
  o.rebuild_after_failures = 3;
  o.max_backoff = 250ms;  // cool-down 4 x 250 ms
  o.clock = clock;
  auto client = RemoteClient::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(IsMiss((*client)->Health().status())) << i;
  EXPECT_EQ((*client)->rpcs(), 3u);
  // The circuit is open: refused without an RPC.
  absl::Status refused = (*client)->Health().status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("cool-down"), std::string_view::npos) << refused;
  EXPECT_EQ((*client)->rpcs(), 3u);
  clock->Advance(999ms);
  EXPECT_EQ((*client)->Health().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*client)->rpcs(), 3u);
  clock->Advance(1ms);  // the cool-down is over: one probe goes out
  EXPECT_TRUE(IsMiss((*client)->Health().status()));
  EXPECT_EQ((*client)->rpcs(), 4u);
  EXPECT_EQ((*client)->Health().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*client)->rpcs(), 4u);  // and the next cool-down began
  EXPECT_EQ(clock->slept(), 0ms);    // one attempt per call: no backoff
}

}  // namespace
}  // namespace kvt

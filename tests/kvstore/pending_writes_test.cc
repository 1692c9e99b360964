// PendingWrites (private to the store): writes found by key until they land, the byte
// bound (blocking, refused or dropped), a demotion carried by the write-through it
// races, Cancel against a write in flight, and the writer's death and stop.
#include "pending_writes.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/clock.h"
#include "test_records.h"

namespace kvt::internal {
namespace {

using ::kvt::testing::Bytes32PerTokenLayout;
using ::kvt::testing::TestRecord;

const NamespaceId kNs{5, 6};
ChunkKey Key(uint64_t i) { return ChunkKey{i + 1, 77}; }

// A 1024-byte record of key i whose payload bytes are `fill`.
std::vector<std::byte> Record(uint64_t i, uint8_t fill) {
  std::vector<std::byte> payload(896, std::byte{fill});
  return TestRecord(kNs, Bytes32PerTokenLayout(), Key(i), ChunkKey{}, 28, payload);
}

RecordBuffer Buffer(const std::vector<std::byte>& bytes) { return RecordBuffer::CopyOf(bytes); }

TieredStoreStats Stats(const PendingWrites& w) {
  TieredStoreStats s;
  w.FillStats(s);
  return s;
}

class PendingWritesTest : public ::testing::Test {
 protected:
  std::shared_ptr<BufferPool> pool_ = std::make_shared<BufferPool>(1 << 20);
  ManualClock clock_;
};

TEST_F(PendingWritesTest, AQueuedRecordIsFoundWithItsTierUntilItLands) {
  PendingWrites w(0, pool_);
  const std::vector<std::byte> rec = Record(0, 0x11);
  w.Enqueue(Buffer(rec), rec.size(), Key(0), 1, 2);
  EXPECT_EQ(Stats(w).pending_write_bytes, rec.size());
  EXPECT_EQ(Stats(w).held_write_bytes, rec.size());

  std::vector<std::byte> out;
  size_t target = 9;
  ASSERT_EQ(w.Find(Key(0), {}, &out, &target).value(), rec.size());
  EXPECT_EQ(out, rec);
  EXPECT_EQ(target, 1u);
  std::vector<std::byte> small(100);
  EXPECT_TRUE(absl::IsOutOfRange(w.Find(Key(0), small, nullptr, &target).status()));
  EXPECT_TRUE(absl::IsNotFound(w.Find(Key(1), {}, &out, &target).status()));

  std::vector<ChunkKey> keys = {Key(0), Key(1)};
  std::vector<int> where = {-1, -1};
  std::vector<uint64_t> bytes(2, 0);
  std::vector<NamespaceId> ns(2);
  w.Stat(keys, where, bytes, ns);
  EXPECT_EQ(where, (std::vector<int>{1, -1}));
  EXPECT_EQ(bytes[0], rec.size());
  EXPECT_EQ(ns[0], kNs);

  // In flight: still found, until it has landed.
  bool stopped = false;
  PendingWrites::WritePtr next = w.Next(clock_, clock_.Now(), &stopped);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->key, Key(0));
  EXPECT_EQ(next->last_tier, 2u);
  EXPECT_TRUE(w.Find(Key(0), {}, &out, &target).ok());
  EXPECT_FALSE(w.Written(*next, absl::OkStatus(), /*ok=*/2, 0, 0));
  w.Landed(next);
  EXPECT_TRUE(absl::IsNotFound(w.Find(Key(0), {}, &out, &target).status()));
  EXPECT_EQ(Stats(w).writebacks, 2u);
  EXPECT_EQ(Stats(w).pending_write_bytes, 0u);
  EXPECT_EQ(Stats(w).held_write_bytes, 0u);
  w.Flush();  // nothing pending: returns
}

TEST_F(PendingWritesTest, TheNewestQueuedRecordOfAKeyIsFound) {
  PendingWrites w(0, pool_);
  const std::vector<std::byte> old_rec = Record(0, 0x11), new_rec = Record(0, 0x22);
  w.Enqueue(Buffer(old_rec), old_rec.size(), Key(0), 1, 1);
  w.Enqueue(Buffer(new_rec), new_rec.size(), Key(0), 1, 1);
  std::vector<std::byte> out;
  size_t target = 0;
  ASSERT_TRUE(w.Find(Key(0), {}, &out, &target).ok());
  EXPECT_EQ(out, new_rec);
}

TEST_F(PendingWritesTest, AsyncAdmissionRefusesDuplicateKeysAndBytesPastTheBound) {
  PendingWrites w(1000, pool_);
  using A = PendingWrites::Admission;
  EXPECT_EQ(w.Admit(Key(0), 600, 0), A::kAdmitted);
  EXPECT_EQ(w.Admit(Key(0), 10, 0), A::kAlreadyQueued);
  EXPECT_EQ(w.Admit(Key(1), 500, 0), A::kQueueFull);
  EXPECT_EQ(w.Admit(Key(1), 300, /*limit_bytes=*/800), A::kQueueFull);  // the smaller bound
  EXPECT_EQ(w.Admit(Key(1), 300, 0), A::kAdmitted);
  EXPECT_EQ(Stats(w).pending_write_bytes, 900u);
  EXPECT_EQ(Stats(w).held_write_bytes, 900u);
  w.CancelAdmission(Key(0), 600);
  EXPECT_EQ(Stats(w).pending_write_bytes, 300u);
  EXPECT_EQ(w.Admit(Key(0), 600, 0), A::kAdmitted);  // the key is free again
}

TEST_F(PendingWritesTest, ADemotionIsCarriedByTheWriteThroughWaitingForItsBytes) {
  PendingWrites w(4096, pool_);
  const std::vector<std::byte> rec = Record(0, 0x33);
  w.Enqueue({}, rec.size(), Key(0), 1, 2);  // a write-through to read back from tier 0
  EXPECT_EQ(Stats(w).held_write_bytes, 0u);
  w.AddDemotion(0, Victim{Key(0), Buffer(rec)});  // tier 0 evicted it meanwhile
  EXPECT_EQ(Stats(w).demotions_queued, 1u);
  EXPECT_EQ(Stats(w).held_write_bytes, rec.size());
  bool stopped = false;
  PendingWrites::WritePtr next = w.Next(clock_, clock_.Now(), &stopped);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->record.span().size(), rec.size());  // the write carries the bytes...
  EXPECT_EQ(next->last_tier, 2u);                     // ...to every tier it names
  w.Written(*next, absl::OkStatus(), 2, 0, 0);
  w.Landed(next);
  std::vector<std::byte> out;
  size_t target = 0;
  EXPECT_TRUE(absl::IsNotFound(w.Find(Key(0), {}, &out, &target).status()));

  // Past the bound: dropped, counted, nothing held.
  w.AddDemotion(0, Victim{Key(1), RecordBuffer::Make(4097)});
  EXPECT_EQ(Stats(w).demotions_dropped, 1u);
  EXPECT_EQ(Stats(w).held_write_bytes, 0u);
}

TEST_F(PendingWritesTest, ADemotionRacingAWriteThroughInFlightGoesToEveryTierItNames) {
  PendingWrites w(0, pool_);
  const std::vector<std::byte> rec = Record(0, 0x44);
  w.Enqueue({}, rec.size(), Key(0), 1, 3);
  bool stopped = false;
  PendingWrites::WritePtr through = w.Next(clock_, clock_.Now(), &stopped);
  ASSERT_NE(through, nullptr);
  w.AddDemotion(0, Victim{Key(0), Buffer(rec)});
  w.Written(*through, absl::OkStatus(), 0, 0, /*gone=*/1);
  w.Landed(through);
  PendingWrites::WritePtr demotion = w.Next(clock_, clock_.Now(), &stopped);
  ASSERT_NE(demotion, nullptr);
  EXPECT_TRUE(demotion->demotion);
  EXPECT_EQ(demotion->first_tier, 1u);
  EXPECT_EQ(demotion->last_tier, 3u);
  EXPECT_EQ(Stats(w).writebacks_skipped, 1u);
}

TEST_F(PendingWritesTest, CancelDropsQueuedWritesAndWaitsForTheOneInFlight) {
  PendingWrites w(0, pool_);
  const std::vector<std::byte> rec = Record(0, 0x55);
  // An async write of key 1, queued: dropped and told Cancelled.
  ASSERT_EQ(w.Admit(Key(1), rec.size(), 0), PendingWrites::Admission::kAdmitted);
  auto async = std::make_shared<PendingWrite>();
  async->record = Buffer(Record(1, 0x66));
  async->record_bytes = rec.size();
  async->key = Key(1);
  async->submitted = true;
  async->finished = true;
  absl::Status told;
  async->done = [&told](const absl::Status& s) { told = s; };
  ASSERT_EQ(w.Submit(std::move(async)), nullptr);
  w.Cancel(Key(1));
  EXPECT_TRUE(absl::IsCancelled(told));
  std::vector<std::byte> out;
  size_t target = 0;
  EXPECT_TRUE(absl::IsNotFound(w.Find(Key(1), {}, &out, &target).status()));
  EXPECT_EQ(Stats(w).pending_write_bytes, 0u);

  // Key 0 in flight: Cancel returns only once it has landed.
  w.Enqueue(Buffer(rec), rec.size(), Key(0), 1, 1);
  bool stopped = false;
  PendingWrites::WritePtr next = w.Next(clock_, clock_.Now(), &stopped);
  ASSERT_NE(next, nullptr);
  std::atomic<bool> returned{false};
  std::thread canceller([&] {
    w.Cancel(Key(0));
    returned = true;
  });
  while (!absl::IsNotFound(w.Find(Key(0), {}, &out, &target).status())) {
    std::this_thread::yield();  // cancelled in flight: no longer found
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(returned);
  EXPECT_TRUE(w.Written(*next, absl::OkStatus(), 1, 0, 0));  // it was cancelled meanwhile
  w.Landed(next);
  canceller.join();
  EXPECT_TRUE(returned);
}

TEST_F(PendingWritesTest, EnqueueBlocksWhileThePendingBytesWouldPassTheBound) {
  PendingWrites w(1500, pool_);
  const std::vector<std::byte> rec = Record(0, 0x77);
  w.Enqueue(Buffer(rec), rec.size(), Key(0), 1, 1);
  std::atomic<bool> queued{false};
  std::thread producer([&] {
    w.Enqueue(Buffer(rec), rec.size(), Key(1), 1, 1);  // 2048 > 1500: waits
    queued = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(queued);
  bool stopped = false;
  PendingWrites::WritePtr next = w.Next(clock_, clock_.Now(), &stopped);
  w.Written(*next, absl::OkStatus(), 1, 0, 0);
  w.Landed(next);
  producer.join();
  EXPECT_TRUE(queued);
  EXPECT_EQ(Stats(w).pending_write_bytes, rec.size());
}

TEST_F(PendingWritesTest, ALandedAsyncWriteReturnsItsBufferToThePool) {
  PendingWrites w(0, pool_);
  ASSERT_EQ(w.Admit(Key(0), 1024, 0), PendingWrites::Admission::kAdmitted);
  auto async = std::make_shared<PendingWrite>();
  async->record = pool_->Take(1024);
  async->record_bytes = 1024;
  async->key = Key(0);
  async->submitted = true;
  ASSERT_EQ(w.Submit(std::move(async)), nullptr);
  EXPECT_EQ(Stats(w).writes_submitted, 1u);
  bool stopped = false;
  PendingWrites::WritePtr next = w.Next(clock_, clock_.Now(), &stopped);
  ASSERT_NE(next, nullptr);
  w.MarkFinished(*next);
  w.Written(*next, absl::InternalError("tier 0 refused"), 0, 0, 0);
  w.Landed(next);
  EXPECT_EQ(Stats(w).writes_failed, 1u);
  EXPECT_EQ(pool_->pooled_buffers(), 1u);
  EXPECT_EQ(w.Admit(Key(0), 1024, 0), PendingWrites::Admission::kAdmitted);
}

TEST_F(PendingWritesTest, AfterTheWritersDeathAsyncWritesComeBackAndOthersAreDropped) {
  PendingWrites w(0, pool_);
  const std::vector<std::byte> rec = Record(0, 0x12);
  w.Enqueue(Buffer(rec), rec.size(), Key(0), 1, 1);
  ASSERT_EQ(w.Admit(Key(1), rec.size(), 0), PendingWrites::Admission::kAdmitted);
  auto async = std::make_shared<PendingWrite>();
  async->record = Buffer(Record(1, 0x13));
  async->record_bytes = rec.size();
  async->key = Key(1);
  async->submitted = true;
  ASSERT_EQ(w.Submit(async), nullptr);

  std::vector<PendingWrites::WritePtr> back = w.MarkDead();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0]->key, Key(1));
  EXPECT_FALSE(w.healthy());
  w.Forget(*back[0]);
  w.Flush();  // returns: the writer is dead
  w.Enqueue(Buffer(rec), rec.size(), Key(2), 1, 1);
  EXPECT_EQ(Stats(w).writes_dropped, 1u);
  // A later async write is handed back to be written on the caller's thread.
  auto late = std::make_shared<PendingWrite>();
  late->key = Key(3);
  late->submitted = true;
  PendingWrites::WritePtr here = w.Submit(late);
  ASSERT_NE(here, nullptr);
  w.WrittenHere(*here, absl::OkStatus(), 1, 0);
  EXPECT_EQ(Stats(w).writebacks, 1u);
}

TEST_F(PendingWritesTest, AfterStopTheQueueDrainsThenNextStops) {
  PendingWrites w(0, pool_);
  const std::vector<std::byte> rec = Record(0, 0x21);
  w.Enqueue(Buffer(rec), rec.size(), Key(0), 1, 1);
  w.Stop();
  w.Enqueue(Buffer(rec), rec.size(), Key(1), 1, 1);
  EXPECT_EQ(Stats(w).writes_dropped, 1u);
  bool stopped = false;
  PendingWrites::WritePtr next = w.Next(clock_, clock_.Now() + std::chrono::hours(1), &stopped);
  ASSERT_NE(next, nullptr);
  EXPECT_FALSE(stopped);
  w.Written(*next, absl::OkStatus(), 1, 0, 0);
  w.Landed(next);
  EXPECT_EQ(w.Next(clock_, clock_.Now() + std::chrono::hours(1), &stopped), nullptr);
  EXPECT_TRUE(stopped);
}

TEST_F(PendingWritesTest, NextReturnsNothingWhenItsDeadlinePasses) {
  PendingWrites w(0, pool_);
  bool stopped = false;
  std::thread advancer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    clock_.Advance(std::chrono::milliseconds(100));
  });
  EXPECT_EQ(w.Next(clock_, clock_.Now() + std::chrono::milliseconds(100), &stopped), nullptr);
  EXPECT_FALSE(stopped);
  advancer.join();
}

}  // namespace
}  // namespace kvt::internal

// LeaseBook and the move-only Lease (kvstore/lease.h): pins held until the holder drops
// them or the deadline passes (a fake clock: no sleeps), counted once per chunk.
#include "lease_book.h"

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/clock.h"
#include "kvstore/host_tier.h"
#include "store_test_util.h"
#include "test_records.h"

namespace kvt {
namespace {

using internal::LeaseBook;
using internal::LeasePin;

const NamespaceId kNs{0x1ea5e, 0xb00c};
ChunkKey Key(uint64_t i) { return ChunkKey{i * 0x9E3779B97F4A7C15ull + 11, i + 5}; }

std::vector<std::byte> Record(uint64_t i) {
  std::vector<std::byte> payload(32 * 12, static_cast<std::byte>(i));
  return testing::TestRecord(kNs, testing::Bytes32PerTokenLayout(), Key(i), RootKey(kNs), 12,
                             payload);
}
constexpr uint64_t kRecordBytes = kChunkHeaderBytes + 32 * 12;

class LeaseBookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tier_ = testing::MakeHostTier(1 << 20);
    ASSERT_NE(tier_, nullptr);
    for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(tier_->Put(Record(i)).ok());
  }
  // Pins keys [first, last) in the tier.
  std::vector<LeasePin> Pins(uint64_t first, uint64_t last) {
    std::vector<LeasePin> pins;
    for (uint64_t i = first; i < last; ++i) {
      PinHandle h = tier_->Pin(Key(i));
      EXPECT_TRUE(h);
      pins.push_back(LeasePin{0, Key(i), h.record_bytes(), std::move(h)});
    }
    return pins;
  }
  std::shared_ptr<LeaseBook> MakeBook() {
    return std::make_shared<LeaseBook>(std::chrono::seconds(10), clock_);
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::unique_ptr<HostTier> tier_;
};

TEST_F(LeaseBookTest, NoPinsGiveAnEmptyLease) {
  auto book = MakeBook();
  Lease lease = book->Grant({});
  EXPECT_FALSE(lease);
  EXPECT_FALSE(lease.live());
  EXPECT_EQ(lease.size(), 0u);
  EXPECT_EQ(book->size(), 0u);
}

TEST_F(LeaseBookTest, DroppingTheLeaseReleasesItsPinsAndAChunkCountsOnce) {
  auto book = MakeBook();
  {
    Lease a = book->Grant(Pins(0, 3));
    Lease b = book->Grant(Pins(1, 2));  // chunk 1 pinned twice
    ASSERT_TRUE(a);
    EXPECT_TRUE(a.live());
    EXPECT_EQ(a.size(), 3u);
    EXPECT_EQ(book->pinned_bytes(), 3 * kRecordBytes);
    EXPECT_EQ(tier_->stats().pinned_bytes, 3 * kRecordBytes);
    EXPECT_EQ(tier_->Erase(Key(1)).code(), absl::StatusCode::kFailedPrecondition);
    Lease moved = std::move(a);  // the pins move with the handle
    EXPECT_FALSE(a);             // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(moved.size(), 3u);
    moved.Release();
    EXPECT_EQ(book->pinned_bytes(), kRecordBytes);  // b still pins chunk 1
  }
  EXPECT_EQ(book->pinned_bytes(), 0u);
  EXPECT_EQ(tier_->stats().pinned_bytes, 0u);
  EXPECT_EQ(book->size(), 0u);
  EXPECT_EQ(book->expired(), 0u);
}

TEST_F(LeaseBookTest, ShrinkKeepsTheFirstPins) {
  auto book = MakeBook();
  Lease lease = book->Grant(Pins(0, 4));
  lease.Shrink(2);
  EXPECT_EQ(lease.size(), 2u);
  EXPECT_EQ(book->pinned_bytes(), 2 * kRecordBytes);
  EXPECT_TRUE(tier_->Erase(Key(3)).ok());  // released
  EXPECT_EQ(tier_->Erase(Key(1)).code(), absl::StatusCode::kFailedPrecondition);
  lease.Shrink(5);  // more than it holds: no-op
  EXPECT_EQ(lease.size(), 2u);
  lease.Shrink(0);  // releases it
  EXPECT_FALSE(lease);
  EXPECT_EQ(book->pinned_bytes(), 0u);
}

TEST_F(LeaseBookTest, DeadlineEndsTheLeaseAndTheStoreReapsIt) {
  auto book = MakeBook();
  Lease lease = book->Grant(Pins(0, 2));
  clock_->Advance(std::chrono::seconds(9));
  EXPECT_TRUE(lease.live());
  clock_->Advance(std::chrono::seconds(1));
  EXPECT_FALSE(lease.live());  // expired at its deadline
  EXPECT_TRUE(lease);          // still the handle of a granted lease
  EXPECT_EQ(lease.size(), 0u);
  book->ReapExpired();
  EXPECT_EQ(book->expired(), 1u);
  EXPECT_EQ(tier_->stats().pinned_bytes, 0u);
  EXPECT_EQ(book->pinned_bytes(), 0u);
  lease.Release();  // no-op: the book released it
  EXPECT_EQ(book->expired(), 1u);
  // A later lease is unaffected by the earlier one's expiry.
  Lease next = book->Grant(Pins(2, 3));
  EXPECT_TRUE(next.live());
  EXPECT_EQ(book->pinned_bytes(), kRecordBytes);
}

// A holder that drops its lease after the deadline, before any reap, does not hide the
// expiry: it counts as expired (kvtierd's lease table forgets expired leases this way).
TEST_F(LeaseBookTest, ReleaseAfterTheDeadlineCountsAsExpired) {
  auto book = MakeBook();
  Lease late = book->Grant(Pins(0, 1));
  Lease on_time = book->Grant(Pins(1, 2));
  on_time.Release();
  EXPECT_EQ(book->expired(), 0u);
  clock_->Advance(std::chrono::seconds(10));
  late.Release();
  EXPECT_EQ(book->expired(), 1u);
  book->ReapExpired();
  EXPECT_EQ(book->expired(), 1u);  // not twice
  EXPECT_EQ(book->pinned_bytes(), 0u);
  EXPECT_EQ(tier_->stats().pinned_bytes, 0u);
}

TEST_F(LeaseBookTest, ALeaseOutlivingItsBookHoldsNothing) {
  auto book = MakeBook();
  Lease lease = book->Grant(Pins(0, 1));
  book->Clear();  // what the store does before its tiers go
  EXPECT_EQ(tier_->stats().pinned_bytes, 0u);
  book.reset();
  EXPECT_FALSE(lease.live());
  EXPECT_EQ(lease.size(), 0u);
  lease.Shrink(0);
  lease.Release();
}

}  // namespace
}  // namespace kvt

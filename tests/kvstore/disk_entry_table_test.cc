// DiskEntryTable: the disk tier's in-memory records without any I/O: admission, room by
// new files or eviction in the policy's order (pinned records skipped), readers that
// keep a replaced record's extent, and the group commit's bookkeeping.
#include "disk_entry_table.h"

#include <memory>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kvstore/cache_policy.h"

namespace kvt::internal {
namespace {

ChunkKey Key(uint64_t i) { return ChunkKey{i * 0x9E3779B97F4A7C15ull + 3, i + 1}; }

IndexEntry At(const Extent& ext, uint64_t record_bytes = 4000) {
  IndexEntry e;
  e.file_id = ext.file_id;
  e.offset = ext.offset;
  e.record_bytes = record_bytes;
  return e;
}

class DiskEntryTableTest : public ::testing::Test {
 protected:
  // Four 4 KiB blocks in one file, LRU.
  void SetUp() override {
    DiskTierOptions o;
    o.capacity_bytes = 4 * 4096;
    o.file_bytes = 4 * 4096;
    auto policy = MakeCachePolicy(CachePolicyOptions{}, o.capacity_bytes);
    ASSERT_TRUE(policy.ok());
    table_ = std::make_unique<DiskEntryTable>(o, std::move(*policy));
  }

  // Stores key i in a fresh extent (asking for a new file first when none is free).
  uint64_t Store(uint64_t i, bool committed = true) {
    std::optional<Extent> ext = table_->Allocate(4096);
    if (!ext) {
      auto room = table_->MakeRoom(4096);
      EXPECT_TRUE(room.ok());
      if (room->new_file_bytes > 0) table_->AddFile(room->new_file_id, room->new_file_bytes);
      ext = table_->Allocate(4096);
    }
    EXPECT_TRUE(ext.has_value());
    auto p = table_->Publish(Key(i), At(*ext), 4096, committed, 0);
    EXPECT_TRUE(p.ok());
    return p->gen;
  }

  std::unique_ptr<DiskEntryTable> table_;
};

TEST_F(DiskEntryTableTest, RoomComesFromANewFileThenFromTheLeastRecentUnpinnedRecords) {
  auto room = table_->MakeRoom(4096);
  ASSERT_TRUE(room.ok());
  EXPECT_EQ(room->new_file_bytes, 4 * 4096u);  // no file yet: create one
  for (uint64_t i = 0; i < 4; ++i) Store(i);
  EXPECT_EQ(table_->stats().chunks, 4u);
  EXPECT_EQ(table_->stats().used_bytes, 4 * 4096u);
  PinHandle pin = table_->Pin(Key(0));  // the oldest is pinned (and used)
  ASSERT_TRUE(pin);
  ASSERT_TRUE(table_->BeginRead(Key(1), 4096, /*client_read=*/true).ok());  // key 1 used

  room = table_->MakeRoom(2 * 4096);
  ASSERT_TRUE(room.ok());
  ASSERT_EQ(room->victims.size(), 2u);
  EXPECT_EQ(room->victims[0].first, Key(2));  // LRU order, pinned key 0 skipped
  EXPECT_EQ(room->victims[1].first, Key(3));
  EXPECT_EQ(table_->stats().chunks, 2u);
  std::vector<ChunkKey> keys{Key(2), Key(3)};
  table_->Evicted(keys);
  table_->ReleaseVictims(room->victims);
  EXPECT_EQ(table_->stats().evictions, 2u);
  EXPECT_TRUE(table_->Allocate(2 * 4096).has_value());
}

TEST_F(DiskEntryTableTest, AllPinnedIsResourceExhaustedAndFailedEvictionsReattach) {
  for (uint64_t i = 0; i < 4; ++i) Store(i);
  std::vector<PinHandle> pins;
  for (uint64_t i = 0; i < 3; ++i) pins.push_back(table_->Pin(Key(i)));
  auto room = table_->MakeRoom(4096);
  ASSERT_TRUE(room.ok());
  ASSERT_EQ(room->victims.size(), 1u);
  table_->Reattach(room->victims);  // its index deletion failed: it stays
  EXPECT_EQ(table_->stats().chunks, 4u);
  pins.push_back(table_->Pin(Key(3)));
  room = table_->MakeRoom(4096);
  EXPECT_TRUE(absl::IsResourceExhausted(room.status())) << room.status();
}

TEST_F(DiskEntryTableTest, AReaderKeepsAnErasedRecordsExtentUntilItIsDone) {
  Store(0);
  auto read = table_->BeginRead(Key(0), 4096, /*client_read=*/false);
  ASSERT_TRUE(read.ok());
  for (uint64_t i = 1; i < 4; ++i) Store(i);
  EXPECT_FALSE(table_->Allocate(4096).has_value());
  auto e = table_->DetachForErase(Key(0));
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(e->has_value());
  table_->Release(std::span(&**e, 1), absl::OkStatus(), /*expired=*/false);
  EXPECT_FALSE(table_->Allocate(4096).has_value());  // the reader still copies it
  table_->EndRead(Key(0), read->gen, absl::OkStatus(), false, 4000);
  EXPECT_TRUE(table_->Allocate(4096).has_value());
}

TEST_F(DiskEntryTableTest, ReadsCountHitsMissesAndRefuseSmallBuffers) {
  Store(0);
  EXPECT_TRUE(absl::IsNotFound(table_->BeginRead(Key(9), 4096, true).status()));
  EXPECT_TRUE(absl::IsOutOfRange(table_->BeginRead(Key(0), 100, true).status()));
  auto r = table_->BeginRead(Key(0), 4096, true);
  ASSERT_TRUE(r.ok());
  table_->EndRead(Key(0), r->gen, absl::OkStatus(), true, r->idx.record_bytes);
  r = table_->BeginRead(Key(0), 4096, true);
  ASSERT_TRUE(r.ok());
  table_->EndRead(Key(0), r->gen, absl::DataLossError("bad"), true, r->idx.record_bytes);
  const TierStats st = table_->stats();
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 2u);
  EXPECT_EQ(st.integrity_errors, 1u);
  EXPECT_EQ(st.bytes_out, 4000u);
}

TEST_F(DiskEntryTableTest, GroupCommitMarksCurrentRecordsAndFreesDeferredExtents) {
  const uint64_t old_gen = Store(0, /*committed=*/true);
  // Replaced by an uncommitted record: the index still points at the old extent.
  std::optional<Extent> ext = table_->Allocate(4096);
  ASSERT_TRUE(ext.has_value());
  auto p = table_->Publish(Key(0), At(*ext), 4096, /*committed=*/false, 0);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->deferred_gen.has_value());
  EXPECT_EQ(*p->deferred_gen, old_gen);
  EXPECT_EQ(table_->extra_stats().uncommitted, 1u);
  const uint64_t in_use = table_->stats().used_bytes;
  EXPECT_EQ(in_use, 4096u);

  const std::vector<DiskEntryTable::Gen> pending{{Key(0), p->gen}};
  const std::vector<DiskEntryTable::Gen> deferred{{Key(0), old_gen}};
  EXPECT_EQ(table_->FilesOf(pending), std::set<uint32_t>{ext->file_id});
  DiskEntryTable::CommitPlan plan = table_->PrepareCommit(pending, deferred, {}, absl::OkStatus());
  ASSERT_EQ(plan.entries.size(), 1u);
  EXPECT_EQ(plan.to_free.size(), 1u);
  EXPECT_TRUE(plan.still_deferred.empty());
  // A failed index write: retried, and the old extent stays.
  std::vector<DiskEntryTable::Gen> retry = table_->CommitFailed(plan, absl::UnavailableError("x"));
  EXPECT_EQ(retry.size(), 1u);
  EXPECT_EQ(table_->extra_stats().uncommitted, 1u);
  plan = table_->PrepareCommit(retry, plan.to_free, {}, absl::OkStatus());
  table_->CommitDone(plan);
  EXPECT_EQ(table_->extra_stats().uncommitted, 0u);
  EXPECT_EQ(table_->extra_stats().group_commits, 1u);
  // Only the new record's block is in use: the old one is free again.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(table_->Allocate(4096).has_value()) << i;
  EXPECT_FALSE(table_->Allocate(4096).has_value());
}

TEST_F(DiskEntryTableTest, AFailedSyncDropsItsFilesUncommittedRecords) {
  Store(0, /*committed=*/false);
  const std::vector<DiskEntryTable::Gen> pending{{Key(0), 1}};
  DiskEntryTable::CommitPlan plan =
      table_->PrepareCommit(pending, {}, {0}, absl::ResourceExhaustedError("ENOSPC"));
  EXPECT_TRUE(plan.entries.empty());
  ASSERT_EQ(plan.dropped.size(), 1u);
  EXPECT_EQ(table_->stats().chunks, 0u);
  EXPECT_EQ(table_->stats().io_errors, 1u);
  EXPECT_EQ(table_->extra_stats().enospc, 1u);
}

TEST_F(DiskEntryTableTest, ALostFileDropsItsRecordsAndRefusesLatePublishes) {
  Store(0);
  Store(1);
  std::optional<Extent> ext = table_->Allocate(4096);
  ASSERT_TRUE(ext.has_value());
  EXPECT_EQ(table_->DropFile(ext->file_id).size(), 2u);
  EXPECT_EQ(table_->stats().integrity_errors, 2u);
  EXPECT_EQ(table_->extra_stats().files_lost, 1u);
  auto late = table_->Publish(Key(2), At(*ext), 4096, true, 0);
  EXPECT_TRUE(absl::IsUnavailable(late.status())) << late.status();
}

}  // namespace
}  // namespace kvt::internal

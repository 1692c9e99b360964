// DiskRecordMap: the disk tier's records in memory, with the bytes they use, how many
// await their group commit, and whose last-access times are not yet in the index.
#include "disk_record_map.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace kvt::internal {
namespace {

ChunkKey Key(uint64_t i) { return ChunkKey{i * 0x9E3779B97F4A7C15ull + 3, i + 1}; }

DiskRecordMap::Entry At(uint32_t file_id, uint64_t offset, bool committed = true) {
  DiskRecordMap::Entry e;
  e.idx.file_id = file_id;
  e.idx.offset = offset;
  e.idx.record_bytes = 4000;
  e.padded = 4096;
  e.committed = committed;
  return e;
}

TEST(DiskRecordMapTest, EntriesKeepTheirBytesAndUncommittedCountInStep) {
  DiskRecordMap m;
  const uint64_t g0 = m.Insert(Key(0), At(0, 0));
  const uint64_t g1 = m.Insert(Key(1), At(0, 4096, /*committed=*/false));
  EXPECT_NE(g0, g1);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m.used_bytes(), 2 * 4096u);
  EXPECT_EQ(m.uncommitted(), 1u);
  m.Find(Key(0))->pins = 1;
  EXPECT_EQ(m.pinned_bytes(), 4096u);

  DiskRecordMap::Entry e = m.Detach(Key(1));
  EXPECT_EQ(e.gen, g1);
  EXPECT_EQ(e.idx.offset, 4096u);
  EXPECT_EQ(m.uncommitted(), 0u);
  EXPECT_EQ(m.used_bytes(), 4096u);
  EXPECT_FALSE(m.Contains(Key(1)));
  m.Restore(Key(1), e);  // an eviction undone: the same record again
  EXPECT_NE(m.FindCurrent(Key(1), g1), nullptr);
  EXPECT_EQ(m.used_bytes(), 2 * 4096u);
}

TEST(DiskRecordMapTest, AGenNamesOneRecordOfAKey) {
  DiskRecordMap m;
  const uint64_t old_gen = m.Insert(Key(0), At(0, 0));
  m.Detach(Key(0));
  const uint64_t new_gen = m.Insert(Key(0), At(1, 0));
  EXPECT_GT(new_gen, old_gen);
  EXPECT_EQ(m.FindCurrent(Key(0), old_gen), nullptr);
  ASSERT_NE(m.FindCurrent(Key(0), new_gen), nullptr);
  EXPECT_EQ(m.FindCurrent(Key(0), new_gen)->idx.file_id, 1u);
  EXPECT_EQ(m.Find(Key(9)), nullptr);
}

TEST(DiskRecordMapTest, OnlyCommittedRecordsLastAccessTimesAreTakenOnce) {
  DiskRecordMap m;
  m.Insert(Key(0), At(0, 0));
  m.Insert(Key(1), At(0, 4096, /*committed=*/false));
  m.Insert(Key(2), At(0, 8192));
  m.Find(Key(0))->idx.last_access_ms = 1234;
  EXPECT_EQ(m.MarkAccessed(Key(0)), 1u);
  EXPECT_EQ(m.MarkAccessed(Key(1)), 2u);
  EXPECT_EQ(m.MarkAccessed(Key(0)), 2u);  // one time per record
  EXPECT_EQ(m.MarkAccessed(Key(2)), 3u);
  m.Detach(Key(2));  // gone: nothing to write
  auto batch = m.TakeDirtyAccess();
  ASSERT_EQ(batch.size(), 1u);  // the uncommitted one is written by its commit
  EXPECT_EQ(batch[0].first, Key(0));
  EXPECT_EQ(batch[0].second.last_access_ms, 1234);
  EXPECT_TRUE(m.TakeDirtyAccess().empty());
}

TEST(DiskRecordMapTest, ACommitMarksCurrentRecordsSkipsFailedFilesAndSplitsDeferredExtents) {
  DiskRecordMap m;
  const uint64_t a = m.Insert(Key(0), At(0, 0, false));
  const uint64_t b = m.Insert(Key(1), At(1, 0, false));
  const uint64_t replaced = m.Insert(Key(2), At(0, 4096, false));
  m.Detach(Key(2));
  const uint64_t c = m.Insert(Key(2), At(0, 8192, false));  // replaced again, not pending
  const std::vector<DiskRecordMap::Gen> pending = {{Key(0), a}, {Key(1), b}, {Key(2), replaced}};
  EXPECT_EQ(m.FilesOf(pending), (std::set<uint32_t>{0, 1}));

  std::vector<std::pair<ChunkKey, IndexEntry>> entries;
  std::vector<DiskRecordMap::Gen> written;
  std::vector<ChunkKey> failed = m.MarkCommitted(pending, /*failed_files=*/{1}, entries, written);
  EXPECT_EQ(failed, std::vector<ChunkKey>{Key(1)});
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0], (DiskRecordMap::Gen{Key(0), a}));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_TRUE(m.Find(Key(0))->committed);
  EXPECT_FALSE(m.Find(Key(1))->committed);

  // Deferred extents: key 0's is freed by this commit, key 2's waits (its current record
  // is not covered), key 3's key is gone.
  const std::vector<DiskRecordMap::Gen> deferred = {{Key(0), 90}, {Key(2), 91}, {Key(3), 92}};
  std::vector<DiskRecordMap::Gen> to_free, still;
  m.SplitDeferred(deferred, written, to_free, still);
  EXPECT_EQ(to_free, (std::vector<DiskRecordMap::Gen>{{Key(0), 90}, {Key(3), 92}}));
  EXPECT_EQ(still, (std::vector<DiskRecordMap::Gen>{{Key(2), 91}}));

  EXPECT_EQ(m.uncommitted(), 3u);  // a (in its commit), b, c
  // The commit failed: a is uncommitted again and retried.
  EXPECT_EQ(m.Uncommit(written), written);
  EXPECT_FALSE(m.Find(Key(0))->committed);
  EXPECT_EQ(m.uncommitted(), 3u);
  m.MarkCommitted(pending, {}, entries, written);
  m.CommitDone(2);  // a and b durable
  EXPECT_EQ(m.uncommitted(), 1u);
  EXPECT_EQ(m.FindCurrent(Key(2), c)->committed, false);
}

TEST(DiskRecordMapTest, KeysInFileNamesTheRecordsOfOneFile) {
  DiskRecordMap m;
  m.Insert(Key(0), At(0, 0));
  m.Insert(Key(1), At(1, 0));
  m.Insert(Key(2), At(1, 4096));
  std::vector<ChunkKey> keys = m.KeysInFile(1);
  EXPECT_EQ(std::set<ChunkKey>(keys.begin(), keys.end()), (std::set<ChunkKey>{Key(1), Key(2)}));
  EXPECT_TRUE(m.KeysInFile(7).empty());
}

}  // namespace
}  // namespace kvt::internal

// DiskSpace: the disk tier's extents, when a new record file may be created, and the
// extents of records still being read (freed by their last reader).
#include "disk_space.h"

#include "gtest/gtest.h"

namespace kvt::internal {
namespace {

TEST(DiskSpaceTest, NewFilesUpToCapacityThenNone) {
  DiskSpace space(/*capacity_bytes=*/5 * 4096, /*file_bytes=*/2 * 4096);
  auto f = space.NextFile(4096);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->id, 0u);
  EXPECT_EQ(f->bytes, 2 * 4096u);
  space.AddFile(f->id, f->bytes);
  auto g = space.NextFile(4096);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->id, 1u);
  space.AddFile(g->id, g->bytes);
  auto last = space.NextFile(4096);  // one block of capacity left: a smaller last file
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->id, 2u);
  EXPECT_EQ(last->bytes, 4096u);
  space.AddFile(last->id, last->bytes);
  EXPECT_FALSE(space.NextFile(4096).has_value());  // capacity reached: evict instead
  EXPECT_EQ(space.total_bytes(), 5 * 4096u);
  EXPECT_EQ(space.free_bytes(), 5 * 4096u);
}

TEST(DiskSpaceTest, NoNewFilesOnceTheFilesystemIsFullOrWhenTooLarge) {
  DiskSpace space(1 << 20, 1 << 20);
  EXPECT_FALSE(space.NextFile((1 << 20) + 4096).has_value());
  space.SetNextFileId(7);  // files found at Open up to rec-6
  auto f = space.NextFile(4096);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->id, 7u);
  space.StopNewFiles();
  EXPECT_FALSE(space.NextFile(4096).has_value());
}

TEST(DiskSpaceTest, AReleasedExtentIsReusedOnlyAfterItsLastReader) {
  DiskSpace space(8192, 8192);
  space.AddFile(0, 8192);
  auto a = space.Allocate(8192);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(space.Allocate(4096).has_value());
  space.Release(*a, /*gen=*/1, /*readers=*/2);
  EXPECT_FALSE(space.Allocate(4096).has_value());  // two readers still copy it
  space.ReaderDone(1);
  EXPECT_FALSE(space.Allocate(4096).has_value());
  space.ReaderDone(1);
  auto again = space.Allocate(8192);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->offset, 0u);
  space.ReaderDone(1);  // an unknown reader changes nothing
  EXPECT_EQ(space.free_bytes(), 0u);
}

TEST(DiskSpaceTest, EvictionVictimsReadersAreHandedOnToTheRelease) {
  DiskSpace space(8192, 8192);
  space.AddFile(0, 8192);
  auto a = space.Allocate(8192);
  ASSERT_TRUE(a.has_value());
  space.HoldEvicting(/*gen=*/5, /*readers=*/2);
  space.ReaderDone(5);  // one reader finished while the victim was being evicted
  const uint32_t left = space.TakeEvicting(5);
  EXPECT_EQ(left, 1u);
  EXPECT_EQ(space.TakeEvicting(5), 0u);
  space.Release(*a, 5, left);
  EXPECT_FALSE(space.Allocate(4096).has_value());
  space.ReaderDone(5);
  EXPECT_TRUE(space.Allocate(8192).has_value());
}

TEST(DiskSpaceTest, ClaimRefusesOverlapsAndALostFileIsForgotten) {
  DiskSpace space(1 << 20, 1 << 20);
  space.AddFile(3, 4 * 4096);
  EXPECT_TRUE(space.Claim(Extent{3, 4096, 8192}));
  EXPECT_FALSE(space.Claim(Extent{3, 8192, 4096}));  // overlaps the first
  EXPECT_FALSE(space.Claim(Extent{4, 0, 4096}));     // no such file
  EXPECT_TRUE(space.HasFile(3));
  space.RemoveFile(3);
  EXPECT_FALSE(space.HasFile(3));
  EXPECT_EQ(space.total_bytes(), 0u);
}

}  // namespace
}  // namespace kvt::internal

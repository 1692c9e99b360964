// The tiers' shared extent allocator and LRU list (private headers in libkvstore/src).
#include "extent_allocator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lru_list.h"

namespace kvt::internal {
namespace {

// Frees two holes of 100 and 40 bytes, in that order of offset, in a 1000-byte file.
ExtentAllocator WithHoles(ExtentAllocator::Fit fit) {
  ExtentAllocator a(fit);
  a.AddFile(0, 1000);
  EXPECT_TRUE(a.Claim({0, 0, 1000}));
  a.Free({0, 100, 100});  // hole [100, 200)
  a.Free({0, 500, 40});   // hole [500, 540)
  EXPECT_EQ(a.free_bytes(), 140u);
  return a;
}

TEST(ExtentAllocatorTest, FirstFitTakesTheLowestHoleThatFits) {
  ExtentAllocator a = WithHoles(ExtentAllocator::Fit::kFirst);
  auto e = a.Allocate(40);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->offset, 100u);
  EXPECT_EQ(a.free_bytes(), 100u);
}

TEST(ExtentAllocatorTest, BestFitTakesTheSmallestHoleThatFits) {
  ExtentAllocator a = WithHoles(ExtentAllocator::Fit::kBest);
  auto e = a.Allocate(40);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->offset, 500u);
  auto f = a.Allocate(60);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->offset, 100u);
  EXPECT_FALSE(a.Allocate(41).has_value());  // 40 left at [160, 200)
  EXPECT_EQ(a.free_bytes(), 40u);
}

TEST(ExtentAllocatorTest, FreeCoalescesWithBothNeighbours) {
  for (auto fit : {ExtentAllocator::Fit::kFirst, ExtentAllocator::Fit::kBest}) {
    ExtentAllocator a(fit);
    a.AddFile(3, 300);
    auto x = a.Allocate(100), y = a.Allocate(100), z = a.Allocate(100);
    ASSERT_TRUE(x && y && z);
    EXPECT_FALSE(a.Allocate(1).has_value());
    a.Free(*x);
    a.Free(*z);
    a.Free(*y);  // joins [0,100) + [100,200) + [200,300)
    auto all = a.Allocate(300);
    ASSERT_TRUE(all.has_value());
    EXPECT_EQ(all->file_id, 3u);
    EXPECT_EQ(all->offset, 0u);
  }
}

TEST(ExtentAllocatorTest, FilesAndClaims) {
  ExtentAllocator a(ExtentAllocator::Fit::kBest);
  a.AddFile(1, 4096);
  a.AddFile(2, 8192);
  EXPECT_EQ(a.total_bytes(), 12288u);
  EXPECT_TRUE(a.Claim({2, 4096, 4096}));
  EXPECT_FALSE(a.Claim({2, 4096, 1}));    // already used
  EXPECT_FALSE(a.Claim({9, 0, 1}));       // unknown file
  EXPECT_FALSE(a.Claim({1, 4000, 200}));  // runs past the file
  auto e = a.Allocate(4096);              // ties of length go to the lowest file
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->file_id, 1u);
  a.RemoveFile(2);
  EXPECT_EQ(a.total_bytes(), 4096u);
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_FALSE(a.Allocate(4096).has_value());
  a.Free({2, 4096, 4096});  // a removed file's extent is ignored
  EXPECT_EQ(a.free_bytes(), 0u);
}

TEST(LruListTest, TouchMovesToFrontAndEvictionOrderIsOldestFirst) {
  LruList<std::string> lru;
  auto a = lru.Insert("a");
  lru.Insert("b");
  auto c = lru.Insert("c");
  lru.Touch(a);  // order, most recent first: a c b
  lru.Remove(c);
  std::vector<std::string> oldest_first(lru.rbegin(), lru.rend());
  EXPECT_EQ(oldest_first, (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(lru.size(), 2u);
}

}  // namespace
}  // namespace kvt::internal

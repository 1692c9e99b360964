// BufferPool (the store's record buffers) and the store's placement over capabilities:
// private parts of TieredStore, tested on their own.
#include "buffer_pool.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "store_placement.h"

namespace kvt {
namespace {

using internal::BufferPool;

TEST(BufferPoolTest, TakeReusesARecycledBufferOfTheSameSize) {
  BufferPool pool(1 << 20);
  RecordBuffer a = pool.Take(8192);
  ASSERT_EQ(a.size, 8192u);
  const std::byte* first = a.data.get();
  pool.Recycle(std::move(a));
  EXPECT_EQ(pool.pooled_bytes(), 8192u);
  EXPECT_EQ(pool.pooled_buffers(), 1u);
  RecordBuffer other = pool.Take(4096);  // another size: a new buffer
  EXPECT_EQ(other.size, 4096u);
  EXPECT_EQ(pool.pooled_buffers(), 1u);
  RecordBuffer again = pool.Take(8192);
  EXPECT_EQ(again.data.get(), first);
  EXPECT_EQ(pool.pooled_bytes(), 0u);
}

TEST(BufferPoolTest, KeepsNoMoreThanItsBound) {
  BufferPool pool(12288);
  pool.Recycle(pool.Take(8192));
  pool.Recycle(pool.Take(4096));
  EXPECT_EQ(pool.pooled_bytes(), 12288u);
  std::vector<RecordBuffer> held;
  held.push_back(RecordBuffer::Make(4096));
  pool.Recycle(std::move(held.back()));  // would pass 12288: freed
  EXPECT_EQ(pool.pooled_bytes(), 12288u);
  EXPECT_EQ(pool.pooled_buffers(), 2u);
  pool.Recycle(RecordBuffer{});  // an empty buffer is not kept
  EXPECT_EQ(pool.pooled_buffers(), 2u);

  BufferPool none(0);
  none.Recycle(none.Take(4096));
  EXPECT_EQ(none.pooled_buffers(), 0u);
}

TEST(BufferPoolTest, ALentViewShowsTheBytesAndReturnsTheBufferWhenReleased) {
  auto pool = std::make_shared<BufferPool>(1 << 20);
  RecordBuffer b = pool->Take(8192);
  std::memset(b.data.get(), 0x5a, 8192);
  RecordView view = pool->Lend(std::move(b), 5000);
  ASSERT_TRUE(view);
  EXPECT_EQ(view.bytes().size(), 5000u);
  EXPECT_EQ(view.bytes()[4999], std::byte{0x5a});
  EXPECT_EQ(pool->pooled_buffers(), 0u);
  view.Release();
  EXPECT_EQ(pool->pooled_buffers(), 1u);
  EXPECT_EQ(pool->pooled_bytes(), 8192u);
}

TEST(BufferPoolTest, AViewMayOutliveItsOwnersHandleOnThePool) {
  auto pool = std::make_shared<BufferPool>(1 << 20);
  std::weak_ptr<BufferPool> weak = pool;
  RecordView view = pool->Lend(pool->Take(4096), 4096);
  pool.reset();
  EXPECT_FALSE(weak.expired());  // the view keeps it
  view.Release();
  EXPECT_TRUE(weak.expired());
}

TierCaps Caps(bool durable, bool remote) {
  return TierCaps{.name = "t", .durable = durable, .remote = remote};
}

TEST(StorePlacementTest, WriteThroughAndTheDurableTierFollowCapabilities) {
  const std::vector<TierCaps> caps = {Caps(false, false), Caps(true, false), Caps(false, true)};
  internal::Placement all = internal::PlaceWrites(caps, {.write_through = WriteThrough::kAll});
  EXPECT_EQ(all.through_first, 1u);
  EXPECT_EQ(all.through_last, 2u);
  EXPECT_EQ(all.first_durable, 1u);
  internal::Placement local = internal::PlaceWrites(caps, {.write_through = WriteThrough::kLocal});
  EXPECT_EQ(local.through_first, 1u);
  EXPECT_EQ(local.through_last, 1u);  // the remote tier is skipped
  internal::Placement none = internal::PlaceWrites(caps, {.write_through = WriteThrough::kNone});
  EXPECT_GT(none.through_first, none.through_last);  // empty range
  EXPECT_EQ(none.first_durable, 1u);
}

TEST(StorePlacementTest, OneTierOrNoDurableTier) {
  const std::vector<TierCaps> one = {Caps(false, false)};
  internal::Placement p = internal::PlaceWrites(one, {});
  EXPECT_GT(p.through_first, p.through_last);
  EXPECT_EQ(p.first_durable, 1u);  // none: caps.size()
  const std::vector<TierCaps> remote_only = {Caps(false, false), Caps(false, true)};
  p = internal::PlaceWrites(remote_only, {.write_through = WriteThrough::kLocal});
  EXPECT_GT(p.through_first, p.through_last);
}

}  // namespace
}  // namespace kvt

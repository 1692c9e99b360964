// The shm Put's copy-then-check pieces: the one-pass copy and payload hash, and the pool
// of staging buffers.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>
#include <vector>

#include "kvstore/chunk_codec.h"
#include "shm_copy.h"
#include "staging_pool.h"

namespace kvt::daemon {
namespace {

TEST(ShmCopyTest, CopiesEveryByteAndHashesThePayloadOfTheCopy) {
  std::mt19937_64 rng(1);
  // Header only, inside one block, exactly one block, blocks plus a remainder.
  for (size_t n : {kChunkHeaderBytes, kChunkHeaderBytes + 1, size_t{4096}, size_t{64} << 10,
                   (size_t{64} << 10) + 1, (size_t{3} << 20) + 777}) {
    std::vector<std::byte> src(n), dst(n);
    for (auto& b : src) b = static_cast<std::byte>(rng());
    const uint64_t h = CopyRecordHashingPayload(src, dst);
    EXPECT_EQ(dst, src) << n;
    EXPECT_EQ(h, XXH3_64bits(src.data() + kChunkHeaderBytes, n - kChunkHeaderBytes)) << n;
  }
}

TEST(StagingPoolTest, ReusesHandedBackBuffersWithinTheCap) {
  StagingPool pool(8 << 20);
  std::byte* first = nullptr;
  {
    StagingPool::Buffer a = pool.Take(3 << 20);
    ASSERT_TRUE(a);
    EXPECT_EQ(a.capacity(), 4u << 20);  // rounded up to 2 MiB
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 4096, 0u);
    first = a.data();
    a.data()[(3 << 20) - 1] = std::byte{7};
  }
  EXPECT_EQ(pool.cached_bytes(), 4u << 20);
  StagingPool::Buffer b = pool.Take(1 << 20);  // the cached 4 MiB one fits
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  StagingPool::Buffer c = pool.Take(6 << 20);
  StagingPool::Buffer d = pool.Take(6 << 20);
  b.reset();
  c.reset();  // 4 + 6 MiB > 8 MiB: c is freed, not cached
  EXPECT_EQ(pool.cached_bytes(), 4u << 20);
  StagingPool::Buffer moved = std::move(d);
  EXPECT_FALSE(d);  // NOLINT(bugprone-use-after-move): a moved-from buffer is empty
  moved.reset();
  EXPECT_EQ(pool.cached_bytes(), 4u << 20);  // 4 + 6 > 8 again
}

}  // namespace
}  // namespace kvt::daemon

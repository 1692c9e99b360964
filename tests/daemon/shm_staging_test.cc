// The shm Put's copy-then-check piece: the one-pass copy and payload hash (the copy goes
// into the daemon's reused record buffers, record_buffers.h, like a gRPC Put's record).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>
#include <vector>

#include "kvstore/chunk_codec.h"
#include "shm_copy.h"

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

}  // namespace
}  // namespace kvt::daemon

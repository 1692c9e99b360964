// ChunkChecksum / ChunkChecksummer (run-time dispatched XXH3-64) against a scalar XXH3
// compiled into this test: the record format's checksum values must not depend on which
// kernel (AVX-512, AVX2, SSE2, scalar) the CPU picks.
//
// The reference: xxHash's own header, inlined (XXH_INLINE_ALL renames its symbols, so it
// does not clash with libxxhash) with the portable scalar kernel forced (XXH_VECTOR 0).
#define XXH_INLINE_ALL
#define XXH_VECTOR 0  // XXH_SCALAR
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kvstore/chunk_codec.h"
#include "kvstore/types.h"

namespace kvt {
namespace {

static_assert(XXH_VECTOR == XXH_SCALAR, "the reference must be the scalar kernel");

uint64_t Scalar(const std::byte* p, size_t n) { return XXH3_64bits(p, n); }

std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

// Sizes around every XXH3 code path boundary (0, 1–3, 4–8, 9–16, 17–128, 129–240, long
// input with its 64-byte stripes and 1024-byte blocks), and record-sized inputs.
const std::vector<size_t>& Sizes() {
  static const std::vector<size_t> s = {0,
                                        1,
                                        3,
                                        4,
                                        8,
                                        9,
                                        16,
                                        17,
                                        64,
                                        128,
                                        129,
                                        240,
                                        241,
                                        255,
                                        256,
                                        1023,
                                        1024,
                                        1025,
                                        4095,
                                        4096,
                                        65536,
                                        65537,
                                        1 << 20,
                                        (1 << 20) + 128,
                                        (3 << 20) + 7};
  return s;
}

TEST(ChunkChecksumTest, OneShotEqualsScalarForSizesAndAlignments) {
  const std::vector<std::byte> buf = RandomBytes((3 << 20) + 7 + 64, 1);
  for (size_t n : Sizes()) {
    for (size_t align : {0, 1, 7, 8, 31, 63}) {
      ASSERT_LE(align + n, buf.size());
      const std::byte* p = buf.data() + align;
      EXPECT_EQ(ChunkChecksum(std::span<const std::byte>(p, n)), Scalar(p, n))
          << "size " << n << ", offset " << align;
    }
  }
}

TEST(ChunkChecksumTest, StreamingEqualsScalarForAnySlicing) {
  const std::vector<std::byte> buf = RandomBytes((3 << 20) + 7 + 64, 2);
  std::mt19937 rng(3);
  for (size_t n : Sizes()) {
    for (size_t align : {0, 5}) {
      const std::byte* p = buf.data() + align;
      const uint64_t want = Scalar(p, n);
      // Fixed slices (the disk tier's I/O pieces and in-order slices) and random ones.
      for (size_t slice : {1, 63, 4096, 256 << 10, 1 << 20, 0}) {
        ChunkChecksummer sum;
        size_t off = 0;
        while (off < n) {
          size_t len = slice != 0 ? slice : 1 + rng() % 70000;
          len = std::min(len, n - off);
          sum.Update(std::span<const std::byte>(p + off, len));
          off += len;
        }
        EXPECT_EQ(sum.Digest(), want)
            << "size " << n << ", offset " << align << ", slice " << slice;
      }
    }
  }
}

TEST(ChunkChecksumTest, EncodedRecordCarriesTheScalarChecksum) {
  // A record encoded by this build stores the scalar kernel's values, so any build (or
  // any other XXH3 implementation) verifies it.
  const KvLayout layout{2, 2, 64, DType::kF16, LayoutKind::kFlashAttnNHD};
  const uint32_t tokens = 37;
  const std::vector<std::byte> payload = RandomBytes(layout.payload_bytes(tokens), 4);
  ChunkHeader h;
  h.ns = NamespaceId{1, 2};
  h.key = ChunkKey{3, 4};
  h.parent = ChunkKey{5, 6};
  h.token_count = tokens;
  h.layout = layout;
  auto rec = EncodeChunk(h, payload);
  ASSERT_TRUE(rec.ok()) << rec.status();
  auto got = DecodeChunkHeader(*rec);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->payload_checksum, Scalar(payload.data(), payload.size()));
  uint64_t stored_header_csum;
  std::memcpy(&stored_header_csum, rec->data() + 120, 8);
  EXPECT_EQ(stored_header_csum, Scalar(rec->data(), 120));
  EXPECT_TRUE(VerifyChunk(*rec, DecodeExpectations{h.ns, h.key, &layout}).ok());
  // One flipped payload bit is caught.
  (*rec)[kChunkHeaderBytes + 11] ^= std::byte{0x10};
  EXPECT_EQ(VerifyChunk(*rec, DecodeExpectations{h.ns, h.key, &layout}).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvt

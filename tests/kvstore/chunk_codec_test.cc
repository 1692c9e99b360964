#include "kvstore/chunk_codec.h"

#include <xxhash.h>

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kvstore/chunk_key.h"

namespace kvt {
namespace {

struct Fixture {
  NamespaceId ns;
  ChunkHeader header;
  std::vector<std::byte> payload;
  std::vector<std::byte> record;
};

// A real-shaped record: 4 layers x 2 KV heads x head_dim 64, f16, 256 tokens (256 KiB).
Fixture MakeRecord(uint32_t seed = 1) {
  Fixture f;
  NamespaceParams p;
  p.model_id = "test-model";
  p.layout = {4, 2, 64, DType::kF16, LayoutKind::kFlashAttnNHD};
  f.ns = ComputeNamespace(p);
  std::vector<TokenId> tokens(256);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<TokenId>(i + seed);
  f.header.ns = f.ns;
  f.header.parent = RootKey(f.ns);
  f.header.key = ComputeChunkKeys(f.ns, tokens)[0];
  f.header.token_count = 256;
  f.header.layout = p.layout;
  f.payload.resize(p.layout.payload_bytes(256));
  std::mt19937_64 rng(seed);
  for (auto& b : f.payload) b = static_cast<std::byte>(rng());
  f.record = *EncodeChunk(f.header, f.payload);
  return f;
}

DecodeExpectations Expect(const Fixture& f) { return {f.ns, f.header.key, &f.header.layout}; }

TEST(ChunkCodecTest, RoundTripReturnsHeaderAndIdenticalPayload) {
  Fixture f = MakeRecord();
  ASSERT_EQ(f.record.size(), kChunkHeaderBytes + 4u * 2 * 256 * 2 * 64 * 2);
  absl::StatusOr<ChunkHeader> h = VerifyChunk(f.record, Expect(f));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->key, f.header.key);
  EXPECT_EQ(h->parent, f.header.parent);
  EXPECT_EQ(h->ns, f.ns);
  EXPECT_EQ(h->token_count, 256u);
  EXPECT_EQ(h->layout, f.header.layout);
  EXPECT_EQ(h->payload_bytes, f.payload.size());
  EXPECT_EQ(std::memcmp(f.record.data() + kChunkHeaderBytes, f.payload.data(), f.payload.size()),
            0);
}

TEST(ChunkCodecTest, EncodeRejectsWrongPayloadSize) {
  Fixture f = MakeRecord();
  f.payload.pop_back();
  EXPECT_EQ(EncodeChunk(f.header, f.payload).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChunkCodecTest, WrongNamespaceKeyOrLayoutIsFailedPrecondition) {
  Fixture f = MakeRecord();
  DecodeExpectations e = Expect(f);
  e.ns.lo ^= 1;
  EXPECT_EQ(VerifyChunk(f.record, e).status().code(), absl::StatusCode::kFailedPrecondition);
  e = Expect(f);
  e.key.hi ^= 1;
  EXPECT_EQ(VerifyChunk(f.record, e).status().code(), absl::StatusCode::kFailedPrecondition);
  KvLayout other = f.header.layout;
  other.dtype = DType::kBF16;
  e = Expect(f);
  e.layout = &other;
  EXPECT_EQ(VerifyChunk(f.record, e).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ChunkCodecTest, NewerFormatVersionIsFailedPrecondition) {
  // A record written by a future build: intact header checksum, version 2.
  Fixture f = MakeRecord();
  const uint16_t v2 = 2;
  std::memcpy(f.record.data() + 4, &v2, 2);
  const uint64_t csum = XXH3_64bits(f.record.data(), kChunkHeaderBytes - 8);
  std::memcpy(f.record.data() + kChunkHeaderBytes - 8, &csum, 8);
  absl::Status s = VerifyChunk(f.record, Expect(f)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(std::string(s.message()).find("version 2"), std::string::npos) << s;
}

TEST(ChunkCodecTest, EveryHeaderByteFlipIsRejected) {
  Fixture f = MakeRecord();
  const uint64_t errors_before = IntegrityErrorCount();
  int rejected = 0;
  for (size_t byte = 0; byte < kChunkHeaderBytes; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::byte> r = f.record;
      r[byte] ^= std::byte(1u << bit);
      absl::StatusOr<ChunkHeader> h = VerifyChunk(r, Expect(f));
      ASSERT_FALSE(h.ok()) << "flip of byte " << byte << " bit " << bit << " was accepted";
      const absl::StatusCode c = h.status().code();
      EXPECT_TRUE(c == absl::StatusCode::kDataLoss || c == absl::StatusCode::kFailedPrecondition)
          << c;
      ++rejected;
    }
  }
  EXPECT_EQ(IntegrityErrorCount() - errors_before, static_cast<uint64_t>(rejected));
}

TEST(ChunkCodecTest, RandomPayloadBitFlipsAreDataLoss) {
  Fixture f = MakeRecord(7);
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<std::byte> r = f.record;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const size_t pos = kChunkHeaderBytes + rng() % f.payload.size();
      r[pos] ^= std::byte(1u << (rng() % 8));
    }
    if (r == f.record) continue;  // flips cancelled out
    EXPECT_EQ(VerifyChunk(r, Expect(f)).status().code(), absl::StatusCode::kDataLoss)
        << "trial " << trial;
  }
}

TEST(ChunkCodecTest, TruncationAtEveryBoundaryAndExtraBytesAreDataLoss) {
  Fixture f = MakeRecord(3);
  // Every length inside the header, then a stride through the payload, and its last bytes.
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= kChunkHeaderBytes; ++n) lengths.push_back(n);
  for (size_t n = kChunkHeaderBytes; n < f.record.size(); n += 4093) lengths.push_back(n);
  for (size_t n = f.record.size() - 8; n < f.record.size(); ++n) lengths.push_back(n);
  for (size_t n : lengths) {
    std::span<const std::byte> r(f.record.data(), n);
    EXPECT_EQ(VerifyChunk(r, Expect(f)).status().code(), absl::StatusCode::kDataLoss) << n;
  }
  std::vector<std::byte> longer = f.record;
  longer.push_back(std::byte{0});
  EXPECT_EQ(VerifyChunk(longer, Expect(f)).status().code(), absl::StatusCode::kDataLoss);
}

TEST(ChunkCodecTest, ShorterValidRecordUnderExpectedTokenCountIsRejected) {
  // A valid 128-token record where a full 256-token chunk is expected.
  Fixture f = MakeRecord();
  ChunkHeader h = f.header;
  h.token_count = 128;
  EXPECT_EQ(EncodeChunk(h, f.payload).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<std::byte>> half =
      EncodeChunk(h, std::span(f.payload).subspan(0, f.payload.size() / 2));
  ASSERT_TRUE(half.ok());
  DecodeExpectations e = Expect(f);
  e.token_count = 256;
  EXPECT_EQ(VerifyChunk(*half, e).status().code(), absl::StatusCode::kFailedPrecondition);
  e.token_count = 128;
  EXPECT_TRUE(VerifyChunk(*half, e).ok());
}

}  // namespace
}  // namespace kvt

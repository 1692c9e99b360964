#include "kvstore/chunk_chain.h"

#include <gtest/gtest.h>

#include <vector>

#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"

namespace kvt {
namespace {

KvLayout Layout() { return {1, 1, 8, DType::kBytes, LayoutKind::kFlashAttnNHD}; }  // 16 B/token

TEST(ChunkChainTest, EachRecordsParentIsThePreviousKeyAndTheFirstsIsTheRoot) {
  const NamespaceId ns{0x51, 0x52};
  std::vector<TokenId> tokens(12);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<TokenId>(i * 7);
  const std::vector<ChunkKey> keys = ComputeChunkKeys(ns, tokens, {.chunk_tokens = 4});
  ASSERT_EQ(keys.size(), 3u);
  ChunkChainEncoder chain(ns, Layout());
  std::vector<std::byte> payload(Layout().payload_bytes(4), std::byte{0x5a});
  for (size_t i = 0; i < keys.size(); ++i) {
    // Keying from the tokens gives the same keys as ComputeChunkKeys.
    EXPECT_EQ(chain.NextKey(std::span(tokens).subspan(4 * i, 4)), keys[i]);
    auto rec = chain.EncodeNext(std::span<const TokenId>(tokens).subspan(4 * i, 4), payload);
    ASSERT_TRUE(rec.ok()) << rec.status();
    auto h = VerifyChunk(*rec, {ns, keys[i]});
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->parent, i == 0 ? RootKey(ns) : keys[i - 1]);
    EXPECT_EQ(h->token_count, 4u);
    EXPECT_EQ(rec->size(), kChunkHeaderBytes + 64);
    // ChainHeader over the key vector says the same.
    const ChunkHeader ch = ChainHeader(ns, Layout(), keys, i, 4);
    EXPECT_EQ(ch.parent, h->parent);
    EXPECT_EQ(ch.key, keys[i]);
    EXPECT_EQ(ch.payload_bytes, 64u);
  }
  EXPECT_EQ(chain.parent(), keys[2]);
}

TEST(ChunkChainTest, ARefusedRecordDoesNotAdvanceTheChain) {
  const NamespaceId ns{1, 2};
  const ChunkKey start{7, 8};
  ChunkChainEncoder chain(ns, Layout(), start);
  std::vector<std::byte> short_payload(10);
  auto rec = chain.EncodeNext(ChunkKey{9, 9}, 4, short_payload);
  EXPECT_EQ(rec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(chain.parent(), start);
  std::vector<std::byte> out(kChunkHeaderBytes + 63);
  std::vector<std::byte> payload(64);
  EXPECT_EQ(chain.EncodeNext(ChunkKey{9, 9}, 4, payload, out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(chain.parent(), start);
}

}  // namespace
}  // namespace kvt

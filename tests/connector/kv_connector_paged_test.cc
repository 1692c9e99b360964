// KVConnector paged level (RegisterKvView / Store / Load) over CPU copy kernels, checked
// against independent index arithmetic for vLLM FlashAttention NHD and FlashInfer.
#include <cstring>
#include <memory>
#include <vector>

#include "connectors/kv_connector.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/host_tier.h"

namespace kvt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint32_t kChunk = 16;
constexpr uint32_t kLayers = 2, kHeads = 2, kHeadDim = 4, kBlock = 4, kBlocks = 32;
constexpr size_t kElem = 2;  // fp16

KvLayout Layout(LayoutKind kind) {
  KvLayout l;
  l.num_layers = kLayers;
  l.num_kv_heads = kHeads;
  l.head_dim = kHeadDim;
  l.dtype = DType::kF16;
  l.kind = kind;
  return l;
}

std::shared_ptr<TieredStore> MakeStore() {
  HostTierOptions ho;
  ho.capacity_bytes = 4 << 20;
  ho.use_pinned_memory = false;
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory(ho));
  return std::shared_ptr<TieredStore>(std::move(*TieredStore::Create(std::move(tiers), {})));
}

std::unique_ptr<KVConnector> MakeConnector(std::shared_ptr<TieredStore> store, LayoutKind kind) {
  ConnectorOptions o;
  o.ns.model_id = "paged-test";
  o.ns.layout = Layout(kind);
  o.ns.chunk_tokens = kChunk;
  o.use_cost_model = false;
  auto c = KVConnector::Create(o, std::move(store));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

// A CPU paged cache: one tensor per layer, [2, N, B, H, D] (NHD) or [N, 2, B, H, D]
// (FlashInfer), fp16 elements as bytes.
struct PagedCache {
  LayoutKind kind;
  std::vector<std::vector<std::byte>> layers;
  static constexpr size_t kTensorBytes = size_t{2} * kBlocks * kBlock * kHeads * kHeadDim * kElem;

  explicit PagedCache(LayoutKind k, std::byte init) : kind(k) {
    layers.assign(kLayers, std::vector<std::byte>(kTensorBytes, init));
  }
  void FillPattern(uint32_t seed) {
    for (size_t l = 0; l < kLayers; ++l) {
      for (size_t i = 0; i < kTensorBytes; ++i) {
        layers[l][i] = static_cast<std::byte>((i * 37 + l * 101 + seed) % 251);
      }
    }
  }
  // Byte offset of element (plane, slot, head, dim, byte) — independent of the kernels.
  size_t Offset(size_t plane, int64_t slot, size_t h, size_t d) const {
    const size_t b = slot / kBlock, off = slot % kBlock;
    size_t e;
    if (kind == LayoutKind::kFlashAttnNHD) {
      e = (((plane * kBlocks + b) * kBlock + off) * kHeads + h) * kHeadDim + d;
    } else {  // kFlashInfer
      e = (((b * 2 + plane) * kBlock + off) * kHeads + h) * kHeadDim + d;
    }
    return e * kElem;
  }
  // All bytes of token KV at `slot` in layer l, plane p.
  std::vector<std::byte> Row(size_t l, size_t p, int64_t slot) const {
    std::vector<std::byte> r;
    for (size_t h = 0; h < kHeads; ++h) {
      for (size_t d = 0; d < kHeadDim; ++d) {
        size_t o = Offset(p, slot, h, d);
        r.insert(r.end(), layers[l].begin() + o, layers[l].begin() + o + kElem);
      }
    }
    return r;
  }
  PagedKvView View() {
    PagedKvView v;
    v.device = KvDevice::kCpu;
    v.layout = Layout(kind);
    v.block_size = kBlock;
    v.num_blocks = kBlocks;
    for (auto& t : layers) v.layer_base.push_back(t.data());
    return v;
  }
};

std::vector<TokenId> Prompt(size_t n) {
  std::vector<TokenId> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<TokenId>(500 + i * 13);
  return t;
}

// Slots for `n` tokens over the blocks listed (block_size kBlock each).
std::vector<int64_t> Slots(const std::vector<int64_t>& blocks, size_t n) {
  std::vector<int64_t> s;
  for (size_t i = 0; i < n; ++i) s.push_back(blocks[i / kBlock] * kBlock + i % kBlock);
  return s;
}

class PagedTest : public ::testing::TestWithParam<LayoutKind> {};

TEST_P(PagedTest, StoreLoadRoundTripMatchesIndexArithmetic) {
  const LayoutKind kind = GetParam();
  auto store = MakeStore();
  auto conn = MakeConnector(store, kind);
  PagedCache src(kind, std::byte{0});
  src.FillPattern(7);
  ASSERT_TRUE(conn->RegisterKvView(src.View()).ok());
  const std::vector<TokenId> tokens = Prompt(4 * kChunk + 3);
  // Scattered source blocks (17 blocks for 67 tokens).
  const std::vector<int64_t> src_blocks = {30, 2,  17, 5,  9,  11, 0,  28, 3,
                                           21, 14, 6,  25, 19, 1,  12, 8};
  const std::vector<int64_t> src_slots = Slots(src_blocks, tokens.size());
  auto taken = conn->Store(tokens, src_slots);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 4u);
  conn->Flush();

  // The stored payloads are in codec order [layer][k|v][token][head][dim].
  std::vector<std::vector<std::byte>> payloads;
  auto got = conn->LoadPayloads(tokens, 4 * kChunk, [&](size_t, std::span<const std::byte> p) {
    payloads.emplace_back(p.begin(), p.end());
    return absl::OkStatus();
  });
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(payloads.size(), 4u);
  for (size_t c = 0; c < 4; ++c) {
    std::vector<std::byte> expected;
    for (size_t l = 0; l < kLayers; ++l) {
      for (size_t p = 0; p < 2; ++p) {
        for (size_t t = 0; t < kChunk; ++t) {
          auto row = src.Row(l, p, src_slots[c * kChunk + t]);
          expected.insert(expected.end(), row.begin(), row.end());
        }
      }
    }
    EXPECT_EQ(payloads[c], expected) << "chunk " << c;
  }

  // Another engine instance with a different block table loads them.
  auto conn2 = MakeConnector(store, kind);
  PagedCache dst(kind, std::byte{0});
  ASSERT_TRUE(conn2->RegisterKvView(dst.View()).ok());
  const std::vector<int64_t> dst_blocks = {4,  7,  10, 13, 16, 20, 23, 26, 29,
                                           31, 15, 18, 22, 24, 27, 0,  1};
  const std::vector<int64_t> dst_slots = Slots(dst_blocks, tokens.size());
  auto lookup = conn2->Lookup(tokens, 0);
  ASSERT_EQ(lookup->load_tokens, 4 * kChunk);
  auto loaded = conn2->Load(tokens, lookup->load_tokens, dst_slots, 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->loaded_tokens, 4 * kChunk);
  EXPECT_TRUE(loaded->failed_chunks.empty());
  PagedCache expect(kind, std::byte{0});
  for (size_t t = 0; t < 4 * kChunk; ++t) {
    for (size_t l = 0; l < kLayers; ++l) {
      for (size_t p = 0; p < 2; ++p) {
        EXPECT_EQ(dst.Row(l, p, dst_slots[t]), src.Row(l, p, src_slots[t])) << t;
        auto row = src.Row(l, p, src_slots[t]);
        for (size_t h = 0; h < kHeads; ++h) {
          for (size_t d = 0; d < kHeadDim; ++d) {
            std::memcpy(expect.layers[l].data() + expect.Offset(p, dst_slots[t], h, d),
                        row.data() + (h * kHeadDim + d) * kElem, kElem);
          }
        }
      }
    }
  }
  // Every byte not addressed by a loaded slot is untouched (still zero).
  EXPECT_EQ(dst.layers, expect.layers);
}

INSTANTIATE_TEST_SUITE_P(Layouts, PagedTest,
                         ::testing::Values(LayoutKind::kFlashAttnNHD, LayoutKind::kFlashInfer),
                         [](const auto& info) { return std::string(LayoutKindName(info.param)); });

TEST(KVConnectorPagedTest, LoadNeverWritesBelowNumComputedTokens) {
  auto store = MakeStore();
  auto conn = MakeConnector(store, LayoutKind::kFlashAttnNHD);
  PagedCache src(LayoutKind::kFlashAttnNHD, std::byte{0});
  src.FillPattern(3);
  ASSERT_TRUE(conn->RegisterKvView(src.View()).ok());
  const std::vector<TokenId> tokens = Prompt(4 * kChunk + 1);
  const std::vector<int64_t> slots =
      Slots({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, tokens.size());
  ASSERT_EQ(*conn->Store(tokens, slots), 4u);
  conn->Flush();

  PagedCache dst(LayoutKind::kFlashAttnNHD, std::byte{0xAB});  // the engine's own KV
  ASSERT_TRUE(conn->RegisterKvView(dst.View()).ok());
  const uint64_t computed = kChunk + 4;  // 20 tokens already held
  auto lookup = conn->Lookup(tokens, computed);
  ASSERT_EQ(lookup->load_tokens, 4 * kChunk);
  auto loaded = conn->Load(tokens, lookup->load_tokens, slots, computed);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->loaded_tokens, 4 * kChunk);
  const std::vector<std::byte> untouched(kHeads * kHeadDim * kElem, std::byte{0xAB});
  for (size_t t = 0; t < 4 * kChunk; ++t) {
    for (size_t l = 0; l < kLayers; ++l) {
      for (size_t p = 0; p < 2; ++p) {
        if (t < computed) {
          EXPECT_EQ(dst.Row(l, p, slots[t]), untouched) << "token " << t << " was overwritten";
        } else {
          EXPECT_EQ(dst.Row(l, p, slots[t]), src.Row(l, p, slots[t])) << t;
        }
      }
    }
  }
  // Chunk 0 (wholly below computed) was not fetched: 3 chunks loaded.
  EXPECT_EQ(conn->stats().load_chunks_ok, 3u);
}

TEST(KVConnectorPagedTest, FailedChunkLeavesItsBlocksUntouchedAndIsReported) {
  auto store = MakeStore();
  auto conn = MakeConnector(store, LayoutKind::kFlashAttnNHD);
  PagedCache src(LayoutKind::kFlashAttnNHD, std::byte{0});
  src.FillPattern(11);
  ASSERT_TRUE(conn->RegisterKvView(src.View()).ok());
  const std::vector<TokenId> tokens = Prompt(4 * kChunk + 1);
  const std::vector<int64_t> slots =
      Slots({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, tokens.size());
  ASSERT_EQ(*conn->Store(tokens, slots), 4u);
  conn->Flush();
  std::vector<ChunkKey> keys = ComputeChunkKeys(conn->ns(), tokens, {.chunk_tokens = kChunk});
  ASSERT_TRUE(store->Erase(keys[2]).ok());  // vanished before the load

  PagedCache dst(LayoutKind::kFlashAttnNHD, std::byte{0});
  ASSERT_TRUE(conn->RegisterKvView(dst.View()).ok());
  auto loaded = conn->Load(tokens, 4 * kChunk, slots, 0);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->loaded_tokens, 2 * kChunk);
  EXPECT_THAT(loaded->failed_chunks, ElementsAre(2, 3));
  const std::vector<std::byte> zero(kHeads * kHeadDim * kElem, std::byte{0});
  for (size_t t = 0; t < 4 * kChunk; ++t) {
    for (size_t l = 0; l < kLayers; ++l) {
      if (t < 2 * kChunk) {
        EXPECT_EQ(dst.Row(l, 0, slots[t]), src.Row(l, 0, slots[t])) << t;
      } else {
        EXPECT_EQ(dst.Row(l, 0, slots[t]), zero) << "token " << t << " looks loaded";
        EXPECT_EQ(dst.Row(l, 1, slots[t]), zero) << "token " << t << " looks loaded";
      }
    }
  }
}

TEST(KVConnectorPagedTest, RegisterRejectsViewThatDoesNotMatchDeclaredLayout) {
  auto conn = MakeConnector(MakeStore(), LayoutKind::kFlashAttnNHD);
  PagedCache cache(LayoutKind::kFlashAttnNHD, std::byte{0});
  PagedKvView v = cache.View();
  v.layout.num_kv_heads = 4;
  absl::Status s = conn->RegisterKvView(v);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(v.layout.DebugString()));
  EXPECT_THAT(s.message(), HasSubstr(conn->ns_params().layout.DebugString()));
  // A view malformed in itself: one layer pointer for two layers.
  v = cache.View();
  v.layer_base.pop_back();
  s = conn->RegisterKvView(v);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("layer_base"));
}

TEST(KVConnectorPagedTest, PagedCallsValidateArguments) {
  auto conn = MakeConnector(MakeStore(), LayoutKind::kFlashAttnNHD);
  const std::vector<TokenId> tokens = Prompt(2 * kChunk);
  std::vector<int64_t> slots = Slots({0, 1, 2, 3, 4, 5, 6, 7}, tokens.size());
  EXPECT_EQ(conn->Store(tokens, slots).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(conn->Load(tokens, kChunk, slots, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  PagedCache cache(LayoutKind::kFlashAttnNHD, std::byte{0});
  ASSERT_TRUE(conn->RegisterKvView(cache.View()).ok());
  slots[5] = -1;
  auto r = conn->Store(tokens, slots);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("slot_mapping[5] = -1"));
  slots[5] = int64_t{kBlocks} * kBlock;  // one past the end
  EXPECT_EQ(conn->Store(tokens, slots).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(conn->Store(tokens, std::span<const int64_t>(slots).first(10)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(conn->Load(tokens, kChunk, slots, 0).status().code(),
            absl::StatusCode::kInvalidArgument);  // slot 5 out of range
  EXPECT_EQ(conn->stats().store_chunks_taken, 0u);
}

}  // namespace
}  // namespace kvt

// The C ABI's block-region level (kvt_register_block_view / kvt_store_blocks /
// kvt_load_blocks, the per-layer kvt_fetch_blocks / kvt_fetched_scatter_layer), kvt_get_stats,
// the daemon options and the cost model's probe option and decision counters, as the vLLM
// connector uses them.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "connectors/kvtier_c.h"

namespace {

constexpr uint32_t kLayers = 2, kHeads = 2, kHeadDim = 32, kBlock = 128, kBlocks = 8;
constexpr uint64_t kBlockBytes = uint64_t{kHeads} * kBlock * 2 * kHeadDim * 2;  // bf16

kvt_options Options() {
  kvt_options o;
  kvt_options_init(&o);
  o.model_id = "test-model@fp";
  o.num_layers = kLayers;
  o.num_kv_heads = kHeads;
  o.head_dim = kHeadDim;
  o.dtype = KVT_DTYPE_BF16;
  o.layout_kind = KVT_LAYOUT_FLASH_INFER;
  o.chunk_tokens = 256;
  o.engine_extra = "vllm-cpu;packing=vec;block_size=128";
  o.host_capacity_bytes = 16u << 20;
  o.use_cost_model = 0;
  return o;
}

struct Cache {
  std::vector<std::vector<uint8_t>> layers;
  std::vector<void*> ptrs;
  explicit Cache(uint8_t seed) {
    for (uint32_t l = 0; l < kLayers; ++l) {
      layers.emplace_back(kBlocks * kBlockBytes);
      for (size_t i = 0; i < layers.back().size(); ++i)
        layers.back()[i] = uint8_t(seed + i * 7 + l);
    }
    for (auto& l : layers) ptrs.push_back(l.data());
  }
  kvt_block_view View() const {
    return kvt_block_view{kLayers, kBlock, kBlocks, kBlockBytes, ptrs.data(), ptrs.size()};
  }
  const uint8_t* Block(uint32_t l, int32_t b) const { return layers[l].data() + b * kBlockBytes; }
};

std::vector<int32_t> Tokens(size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t(3 + i * 13 % 997);
  return t;
}

class BlocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kvt_options o = Options();
    ASSERT_EQ(kvt_create(&o, &c_), KVT_OK) << kvt_last_error();
  }
  void TearDown() override { kvt_destroy(c_); }
  kvt_connector* c_ = nullptr;
};

TEST_F(BlocksTest, StoreThenLoadCopiesWholeRegionsIntoOtherBlocks) {
  Cache src(1), dst(200);
  kvt_block_view v = src.View();
  ASSERT_EQ(kvt_register_block_view(c_, &v), KVT_OK) << kvt_last_error();
  const auto tokens = Tokens(600);  // 2 complete chunks = 4 blocks
  const int32_t from[] = {5, 2, 7, 0};
  size_t taken = 0;
  ASSERT_EQ(kvt_store_blocks(c_, tokens.data(), tokens.size(), from, 4, &taken), KVT_OK);
  EXPECT_EQ(taken, 2u);
  kvt_flush(c_);
  uint64_t load = 0, cached = 0;
  ASSERT_EQ(kvt_lookup(c_, tokens.data(), tokens.size(), 0, &load, &cached), KVT_OK);
  EXPECT_EQ(cached, 512u);
  EXPECT_EQ(load, 512u);

  v = dst.View();
  ASSERT_EQ(kvt_register_block_view(c_, &v), KVT_OK);
  const int32_t to[] = {1, 3, 4, 6};
  uint64_t loaded = 0;
  // skip_tokens = 128: block 1 (tokens 0..127) is the engine's own and is not written.
  std::vector<uint8_t> keep(dst.Block(0, 1), dst.Block(0, 1) + kBlockBytes);
  ASSERT_EQ(kvt_load_blocks(c_, tokens.data(), tokens.size(), 512, to, 4, 128, &loaded), KVT_OK)
      << kvt_last_error();
  EXPECT_EQ(loaded, 512u);
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (int j = 1; j < 4; ++j) {
      EXPECT_EQ(std::memcmp(dst.Block(l, to[j]), src.Block(l, from[j]), kBlockBytes), 0)
          << "layer " << l << " block " << j;
    }
  }
  EXPECT_EQ(std::memcmp(dst.Block(0, 1), keep.data(), kBlockBytes), 0);
  kvt_stats s{};
  ASSERT_EQ(kvt_get_stats(c_, &s, sizeof(s)), KVT_OK);
  EXPECT_EQ(s.store_chunks_put, 2u);
  EXPECT_EQ(s.load_chunks_ok, 2u);
  EXPECT_EQ(s.lookup_hit_tokens, 512u);
}

// The per-layer load: the fetch verifies and holds the chunks but writes nothing; each
// scatter writes exactly its layer; a chunk that cannot be delivered (here: never stored)
// and every chunk after it are never written.
TEST_F(BlocksTest, FetchWritesNothingThenEachLayerScattersOnlyThatLayer) {
  Cache src(1), dst(200);
  kvt_block_view v = src.View();
  ASSERT_EQ(kvt_register_block_view(c_, &v), KVT_OK) << kvt_last_error();
  const auto tokens = Tokens(900);  // 3 complete chunks; only the first 2 are stored
  const int32_t from[] = {5, 2, 7, 0};
  ASSERT_EQ(kvt_store_blocks(c_, tokens.data(), 600, from, 4, nullptr), KVT_OK);
  kvt_flush(c_);

  v = dst.View();
  ASSERT_EQ(kvt_register_block_view(c_, &v), KVT_OK);
  const Cache before(200);
  const int32_t to[] = {1, 3, 4, 6, 2, 5};
  kvt_fetched* f = nullptr;
  uint64_t loaded = 0;
  ASSERT_EQ(kvt_fetch_blocks(c_, tokens.data(), tokens.size(), 768, to, 6, 128, &f, &loaded),
            KVT_OK)
      << kvt_last_error();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(loaded, 512u);  // chunk 2 is not in the cache
  for (uint32_t l = 0; l < kLayers; ++l) {
    EXPECT_EQ(dst.layers[l], before.layers[l]) << "the fetch wrote layer " << l;
  }
  ASSERT_EQ(kvt_fetched_scatter_layer(f, 0), KVT_OK) << kvt_last_error();
  for (int j = 1; j < 4; ++j) {
    EXPECT_EQ(std::memcmp(dst.Block(0, to[j]), src.Block(0, from[j]), kBlockBytes), 0) << j;
  }
  EXPECT_EQ(dst.layers[1], before.layers[1]) << "scattering layer 0 wrote layer 1";
  EXPECT_EQ(std::memcmp(dst.Block(0, 1), before.Block(0, 1), kBlockBytes), 0)
      << "block below skip_tokens written";
  ASSERT_EQ(kvt_fetched_scatter_layer(f, 1), KVT_OK);
  for (int j = 1; j < 4; ++j) {
    EXPECT_EQ(std::memcmp(dst.Block(1, to[j]), src.Block(1, from[j]), kBlockBytes), 0) << j;
  }
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (int j = 4; j < 6; ++j) {  // chunk 2's blocks: not delivered, not written
      EXPECT_EQ(std::memcmp(dst.Block(l, to[j]), before.Block(l, to[j]), kBlockBytes), 0);
    }
  }
  EXPECT_EQ(kvt_fetched_scatter_layer(f, 2), KVT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvt_last_error()).find("layer = 2"), std::string::npos) << kvt_last_error();
  kvt_fetched_free(f);
  kvt_stats s{};
  ASSERT_EQ(kvt_get_stats(c_, &s, sizeof(s)), KVT_OK);
  EXPECT_EQ(s.load_chunks_ok, 2u);
  EXPECT_EQ(s.load_chunks_failed, 1u);
  EXPECT_EQ(s.load_misses, 1u);

  const int32_t bad[] = {1, 3, 4, 6, 2, 8};
  f = reinterpret_cast<kvt_fetched*>(&s);
  EXPECT_EQ(kvt_fetch_blocks(c_, tokens.data(), tokens.size(), 768, bad, 6, 0, &f, &loaded),
            KVT_INVALID_ARGUMENT);
  EXPECT_EQ(f, nullptr);
  EXPECT_NE(std::string(kvt_last_error()).find("block_ids[5] = 8"), std::string::npos);
}

TEST_F(BlocksTest, BlockSizeThatDoesNotDivideTheChunkNamesBoth) {
  Cache src(1);
  kvt_block_view v = src.View();
  v.block_size = 96;
  v.block_bytes = uint64_t{kHeads} * 96 * 2 * kHeadDim * 2;
  EXPECT_EQ(kvt_register_block_view(c_, &v), KVT_INVALID_ARGUMENT);
  const std::string e = kvt_last_error();
  EXPECT_NE(e.find("block size 96"), std::string::npos) << e;
  EXPECT_NE(e.find("chunk size 256"), std::string::npos) << e;
}

TEST_F(BlocksTest, WrongRegionBytesOrLayersAreRefused) {
  Cache src(1);
  kvt_block_view v = src.View();
  v.block_bytes -= 2;
  EXPECT_EQ(kvt_register_block_view(c_, &v), KVT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvt_last_error()).find("block_bytes"), std::string::npos);
  v = src.View();
  v.num_layers = 3;
  EXPECT_EQ(kvt_register_block_view(c_, &v), KVT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvt_last_error()).find("num_layers = 3"), std::string::npos);
}

TEST_F(BlocksTest, WithoutViewOrWithBadBlockIdsNothingHappens) {
  const auto tokens = Tokens(300);
  const int32_t ids[] = {0, 1};
  size_t taken = 7;
  EXPECT_EQ(kvt_store_blocks(c_, tokens.data(), tokens.size(), ids, 2, &taken),
            KVT_FAILED_PRECONDITION);
  Cache src(1);
  kvt_block_view v = src.View();
  ASSERT_EQ(kvt_register_block_view(c_, &v), KVT_OK);
  const int32_t bad[] = {0, 8};
  EXPECT_EQ(kvt_store_blocks(c_, tokens.data(), tokens.size(), bad, 2, &taken),
            KVT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvt_last_error()).find("block_ids[1] = 8"), std::string::npos)
      << kvt_last_error();
  EXPECT_EQ(kvt_store_blocks(c_, tokens.data(), tokens.size(), ids, 1, &taken),
            KVT_INVALID_ARGUMENT);  // 2 blocks needed for 1 chunk
  EXPECT_EQ(taken, 7u);
  kvt_flush(c_);
  uint64_t load = 0, cached = 0;
  ASSERT_EQ(kvt_lookup(c_, tokens.data(), tokens.size(), 0, &load, &cached), KVT_OK);
  EXPECT_EQ(cached, 0u);
}

TEST(DaemonOptionsTest, DaemonAndDiskTogetherAreRefused) {
  kvt_options o = Options();
  o.daemon_address = "unix:///tmp/nowhere.sock";
  o.disk_dir = "/tmp/x";
  kvt_connector* c = nullptr;
  EXPECT_EQ(kvt_create(&o, &c), KVT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvt_last_error()).find("disk_dir"), std::string::npos);
  o.disk_dir = nullptr;
  o.daemon_deadline_ms = 0;
  EXPECT_EQ(kvt_create(&o, &c), KVT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvt_last_error()).find("daemon_deadline_ms = 0"), std::string::npos);
}

TEST(DaemonOptionsTest, AbsentDaemonIsAMissNotAHang) {
  kvt_options o = Options();
  o.daemon_address = "unix:///tmp/kvtier-no-such-daemon.sock";
  o.daemon_deadline_ms = 200;
  kvt_connector* c = nullptr;
  ASSERT_EQ(kvt_create(&o, &c), KVT_OK) << kvt_last_error();
  const auto tokens = Tokens(600);
  uint64_t load = 9, cached = 9;
  ASSERT_EQ(kvt_lookup(c, tokens.data(), tokens.size(), 0, &load, &cached), KVT_OK);
  EXPECT_EQ(load, 0u);
  EXPECT_EQ(cached, 0u);
  kvt_destroy(c);
}

// ---- The cost model through the C ABI (kvt_options.cost_probe_after, kvt_stats.cost_*).
// Chunks here are 128 KiB (2 layers x K,V x 256 tokens x 2 heads x 32 x bf16): a host-tier
// load is predicted at 20 us + 128 KiB / 8 GB/s = 36 us per chunk. At the default prefill
// model (1 ms per token) recomputing a chunk costs 256 ms, so loading wins; at 1e-12 s per
// token it costs 0.26 ns, so recomputing wins and only probes load.

constexpr double kCheapPrefill = 1e-12;  // seconds per token: recomputing is ~free

int FillBytes(void*, size_t chunk, void* payload, size_t bytes) {
  std::memset(payload, int(0x40 + chunk), bytes);
  return KVT_OK;
}

// A connector with the cost model on whose store holds the first 2 chunks of `tokens`.
kvt_connector* CostConnector(const std::vector<int32_t>& tokens, uint32_t probe_after,
                             double prefill_s_per_token, bool use_cost_model = true) {
  kvt_options o = Options();
  o.use_cost_model = use_cost_model ? 1 : 0;
  o.cost_probe_after = probe_after;
  o.prefill_s_per_token = prefill_s_per_token;
  kvt_connector* c = nullptr;
  EXPECT_EQ(kvt_create(&o, &c), KVT_OK) << kvt_last_error();
  if (c == nullptr) return nullptr;
  size_t taken = 0;
  EXPECT_EQ(kvt_store_payloads(c, tokens.data(), tokens.size(), FillBytes, nullptr, &taken), KVT_OK)
      << kvt_last_error();
  EXPECT_EQ(taken, 2u);
  kvt_flush(c);
  return c;
}

kvt_stats Stats(const kvt_connector* c) {
  kvt_stats s{};
  EXPECT_EQ(kvt_get_stats(c, &s, sizeof(s)), KVT_OK) << kvt_last_error();
  return s;
}

// load_tokens of `n` lookups of the whole prompt.
std::vector<uint64_t> Lookups(kvt_connector* c, const std::vector<int32_t>& tokens, int n) {
  std::vector<uint64_t> loads;
  for (int i = 0; i < n; ++i) {
    uint64_t load = 99, cached = 0;
    EXPECT_EQ(kvt_lookup(c, tokens.data(), tokens.size(), 0, &load, &cached), KVT_OK);
    EXPECT_EQ(cached, 512u);
    loads.push_back(load);
  }
  return loads;
}

TEST(CostModelCApiTest, OptionsInitProbesAfter32Recomputes) {
  kvt_options o;
  std::memset(&o, 0xff, sizeof(o));
  kvt_options_init(&o);
  EXPECT_EQ(o.cost_probe_after, 32u);
  EXPECT_EQ(o.use_cost_model, 1);
}

TEST(CostModelCApiTest, DearRecomputeLoadsEveryChunkAndCountsLoadAll) {
  const auto tokens = Tokens(600);                  // 2 complete chunks and a tail
  kvt_connector* c = CostConnector(tokens, 32, 0);  // 0: the default prefill model
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(Lookups(c, tokens, 2), (std::vector<uint64_t>{512, 512}));
  uint64_t load = 0, cached = 0;
  // Chunk 0 already computed: the rest (chunk 1) is still every chunk left to load.
  ASSERT_EQ(kvt_lookup(c, tokens.data(), tokens.size(), 256, &load, &cached), KVT_OK);
  EXPECT_EQ(load, 512u);
  // Nothing cached past what the engine holds, and a prompt with nothing cached: the cost
  // model is not asked, so no decision is counted.
  ASSERT_EQ(kvt_lookup(c, tokens.data(), tokens.size(), 512, &load, &cached), KVT_OK);
  std::vector<int32_t> fresh(600);
  for (size_t i = 0; i < fresh.size(); ++i) fresh[i] = int32_t(5000 + i);
  ASSERT_EQ(kvt_lookup(c, fresh.data(), fresh.size(), 0, &load, &cached), KVT_OK);
  EXPECT_EQ(cached, 0u);
  const kvt_stats s = Stats(c);
  EXPECT_EQ(s.lookups, 5u);
  EXPECT_EQ(s.cost_load_all, 3u);
  EXPECT_EQ(s.cost_load_partial, 0u);
  EXPECT_EQ(s.cost_recompute, 0u);
  EXPECT_EQ(s.cost_probe, 0u);
  kvt_destroy(c);
}

TEST(CostModelCApiTest, CheapRecomputeProbesOneChunkAfterEveryProbeAfterRecomputes) {
  const auto tokens = Tokens(600);
  kvt_connector* c = CostConnector(tokens, 2, kCheapPrefill);
  ASSERT_NE(c, nullptr);
  // Two recomputes, then a probe of the first chunk; again; then a recompute.
  EXPECT_EQ(Lookups(c, tokens, 7), (std::vector<uint64_t>{0, 0, 256, 0, 0, 256, 0}));
  const kvt_stats s = Stats(c);
  EXPECT_EQ(s.cost_recompute, 5u);
  EXPECT_EQ(s.cost_probe, 2u);
  EXPECT_EQ(s.cost_load_partial, 2u);  // a probe loads 1 of the 2 cached chunks
  EXPECT_EQ(s.cost_load_all, 0u);
  EXPECT_EQ(s.lookup_load_tokens, 512u);
  kvt_destroy(c);
}

TEST(CostModelCApiTest, DefaultProbesThe33rdAndZeroNeverProbes) {
  const auto tokens = Tokens(600);
  kvt_options o;
  kvt_options_init(&o);
  kvt_connector* c = CostConnector(tokens, o.cost_probe_after, kCheapPrefill);
  ASSERT_NE(c, nullptr);
  std::vector<uint64_t> want(33, 0);
  want[32] = 256;
  EXPECT_EQ(Lookups(c, tokens, 33), want);
  kvt_stats s = Stats(c);
  EXPECT_EQ(s.cost_recompute, 32u);
  EXPECT_EQ(s.cost_probe, 1u);
  kvt_destroy(c);

  c = CostConnector(tokens, 0, kCheapPrefill);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(Lookups(c, tokens, 40), std::vector<uint64_t>(40, 0));
  s = Stats(c);
  EXPECT_EQ(s.cost_recompute, 40u);
  EXPECT_EQ(s.cost_probe, 0u);
  EXPECT_EQ(s.cost_load_partial, 0u);
  EXPECT_EQ(s.lookup_load_tokens, 0u);
  kvt_destroy(c);
}

TEST(CostModelCApiTest, WithoutTheCostModelEveryChunkLoadsAndNoDecisionIsCounted) {
  const auto tokens = Tokens(600);
  kvt_connector* c = CostConnector(tokens, 2, kCheapPrefill, /*use_cost_model=*/false);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(Lookups(c, tokens, 3), (std::vector<uint64_t>{512, 512, 512}));
  const kvt_stats s = Stats(c);
  EXPECT_EQ(s.cost_load_all + s.cost_load_partial + s.cost_recompute + s.cost_probe, 0u);
  kvt_destroy(c);
}

// A caller built against the kvt_stats before the cost fields passes the old size: only
// that much is written.
TEST(CostModelCApiTest, OldStatsSizeLeavesTheCostFieldsUnwritten) {
  const auto tokens = Tokens(600);
  kvt_connector* c = CostConnector(tokens, 32, 0);
  ASSERT_NE(c, nullptr);
  Lookups(c, tokens, 1);
  kvt_stats s;
  std::memset(&s, 0xab, sizeof(s));
  ASSERT_EQ(kvt_get_stats(c, &s, offsetof(kvt_stats, cost_load_all)), KVT_OK);
  EXPECT_EQ(s.lookups, 1u);
  EXPECT_EQ(s.cost_load_all, 0xababababababababull);
  EXPECT_EQ(Stats(c).cost_load_all, 1u);
  kvt_destroy(c);
}

}  // namespace

// KVConnector over a host-memory TieredStore: payload level, paged level (CPU copy
// kernels), leases, integrity failures, async store back-pressure.
#include "connectors/kv_connector.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/tiered_store.h"
#include "store_test_util.h"

namespace kvt {
namespace {

using ::kvt::testing::PutRecord;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uint32_t kChunk = 16;

// 2 layers, 2 KV heads, head_dim 4, fp16: 64 bytes per token, 1 KiB per chunk.
KvLayout SmallLayout() {
  KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 4;
  l.dtype = DType::kF16;
  l.kind = LayoutKind::kFlashAttnNHD;
  return l;
}

ConnectorOptions Options() {
  ConnectorOptions o;
  o.ns.model_id = "test-model@rev1";
  o.ns.layout = SmallLayout();
  o.ns.chunk_tokens = kChunk;
  return o;
}

using kvt::testing::GatedTier;

// A directory removed with everything in it at scope exit.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/kvt-conn-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

DiskTierOptions DiskOptions(const std::string& dir) {
  DiskTierOptions o;
  o.dir = dir;
  o.capacity_bytes = 16 << 20;
  o.file_bytes = 4 << 20;
  return o;
}

// A store over a disk tier in `dir` (16 MiB, 4 MiB files), under a host tier of
// `host_bytes` when non-zero; *disk points at the disk tier (owned by the store).
std::shared_ptr<TieredStore> DiskStore(const std::string& dir, uint64_t host_bytes,
                                       DiskTier** disk) {
  std::vector<TierFactory> tiers;
  if (host_bytes > 0) tiers.push_back(HostTier::Factory({.capacity_bytes = host_bytes}));
  tiers.push_back(kvt::testing::Capturing(DiskTier::Factory(DiskOptions(dir)), disk));
  auto created = TieredStore::Create(std::move(tiers), TieredStoreOptions{});
  EXPECT_TRUE(created.ok()) << created.status();
  return created.ok() ? std::shared_ptr<TieredStore>(std::move(*created)) : nullptr;
}

std::unique_ptr<Tier> MakeHost() {
  HostTierOptions o;
  o.capacity_bytes = 4 << 20;
  o.use_pinned_memory = false;
  auto t = HostTier::Create(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

std::shared_ptr<TieredStore> MakeStore(std::unique_ptr<Tier> tier0 = nullptr) {
  std::vector<TierFactory> tiers;
  tiers.push_back(UseTier(tier0 ? std::move(tier0) : MakeHost()));
  auto s = TieredStore::Create(std::move(tiers), TieredStoreOptions{});
  EXPECT_TRUE(s.ok()) << s.status();
  return std::shared_ptr<TieredStore>(std::move(*s));
}

std::unique_ptr<KVConnector> MakeConnector(std::shared_ptr<TieredStore> store,
                                           ConnectorOptions o = Options()) {
  auto c = KVConnector::Create(o, std::move(store));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

std::vector<TokenId> Prompt(size_t n, TokenId seed = 1000) {
  std::vector<TokenId> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = seed + static_cast<TokenId>(i * 7 % 32000);
  return t;
}

// Deterministic payload byte j of chunk i.
std::byte PayloadByte(size_t chunk, size_t j) {
  return static_cast<std::byte>((chunk * 131 + j * 7 + 3) & 0xff);
}
std::vector<std::byte> ExpectedPayload(size_t chunk, size_t bytes) {
  std::vector<std::byte> p(bytes);
  for (size_t j = 0; j < bytes; ++j) p[j] = PayloadByte(chunk, j);
  return p;
}

struct Filler {
  std::atomic<int> calls{0};
  std::vector<size_t> chunks;
  ChunkFill fn() {
    return [this](size_t chunk, std::span<std::byte> payload) {
      ++calls;
      chunks.push_back(chunk);
      for (size_t j = 0; j < payload.size(); ++j) payload[j] = PayloadByte(chunk, j);
      return absl::OkStatus();
    };
  }
};

struct Consumer {
  std::vector<size_t> chunks;
  std::vector<std::vector<std::byte>> payloads;
  ChunkConsume fn() {
    return [this](size_t chunk, std::span<const std::byte> payload) {
      chunks.push_back(chunk);
      payloads.emplace_back(payload.begin(), payload.end());
      return absl::OkStatus();
    };
  }
};

TEST(KVConnectorTest, CreateRejectsBadOptionsAndNullStore) {
  ConnectorOptions o = Options();
  o.ns.model_id = "";
  auto c = KVConnector::Create(o, MakeStore());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("model_id"));
  o = Options();
  o.cost.ewma_alpha = 2;
  EXPECT_EQ(KVConnector::Create(o, MakeStore()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KVConnector::Create(Options(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KVConnectorTest, StoreThenLoadReturnsIdenticalPayloads) {
  auto store = MakeStore();
  auto conn = MakeConnector(store);
  const uint64_t payload = conn->chunk_payload_bytes();
  ASSERT_EQ(payload, 1024u);
  std::vector<TokenId> tokens = Prompt(4 * kChunk + 5);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 4u);
  EXPECT_THAT(fill.chunks, ElementsAre(0, 1, 2, 3));
  conn->Flush();

  auto lookup = conn->Lookup(tokens, 0);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->cached_tokens, 4 * kChunk);
  EXPECT_EQ(lookup->load_tokens, 4 * kChunk);
  EXPECT_GT(lookup->predicted_recompute_s, lookup->predicted_load_s);
  EXPECT_TRUE(lookup->lease);

  Consumer consume;
  auto loaded = conn->LoadPayloads(tokens, lookup->load_tokens, consume.fn());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->loaded_tokens, 4 * kChunk);
  EXPECT_THAT(loaded->failed_chunks, IsEmpty());
  EXPECT_TRUE(loaded->first_error.ok());
  ASSERT_THAT(consume.chunks, ElementsAre(0, 1, 2, 3));
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(consume.payloads[i], ExpectedPayload(i, payload)) << i;

  ConnectorStats s = conn->stats();
  EXPECT_EQ(s.store_chunks_taken, 4u);
  EXPECT_EQ(s.store_chunks_put, 4u);
  EXPECT_EQ(s.load_chunks_ok, 4u);
  EXPECT_EQ(s.load_bytes, 4 * (payload + kChunkHeaderBytes));
  EXPECT_EQ(s.cost.transfers_observed, 4u);
  // The engine holds the lookup (its lease) until its load is done, then drops it.
  EXPECT_EQ(store->stats().pinned_bytes, 4 * (payload + kChunkHeaderBytes));
  lookup->lease.Release();
  EXPECT_EQ(store->stats().pinned_bytes, 0u);
}

TEST(KVConnectorTest, LookupAlwaysLeavesTheLastToken) {
  auto conn = MakeConnector(MakeStore());
  std::vector<TokenId> tokens = Prompt(4 * kChunk);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 4u);
  conn->Flush();
  // Exactly 4 chunks cached and the prompt is exactly 4 chunks: the last chunk holds
  // the last token, so only 3 chunks may be loaded.
  EXPECT_EQ(conn->Lookup(tokens, 0)->load_tokens, 3 * kChunk);
  EXPECT_EQ(conn->Lookup(tokens, 0)->cached_tokens, 3 * kChunk);
  std::vector<TokenId> longer = tokens;
  longer.push_back(5);
  EXPECT_EQ(conn->Lookup(longer, 0)->load_tokens, 4 * kChunk);
  // Degenerate prompts.
  EXPECT_EQ(conn->Lookup(std::span<const TokenId>(), 0)->load_tokens, 0u);
  EXPECT_EQ(conn->Lookup(std::span<const TokenId>(tokens).first(1), 0)->load_tokens, 0u);
  EXPECT_EQ(conn->Lookup(std::span<const TokenId>(tokens).first(kChunk), 0)->load_tokens, 0u);
}

TEST(KVConnectorTest, LookupRespectsNumComputedTokens) {
  auto store = MakeStore();
  auto conn = MakeConnector(store);
  std::vector<TokenId> tokens = Prompt(4 * kChunk + 1);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 4u);
  conn->Flush();
  EXPECT_EQ(conn->Lookup(tokens, 20)->load_tokens, 4 * kChunk);  // >= computed
  auto none = conn->Lookup(tokens, 4 * kChunk);                  // holds it all already
  EXPECT_EQ(none->load_tokens, 0u);
  EXPECT_FALSE(none->lease);
  EXPECT_EQ(conn->Lookup(tokens, 4 * kChunk + 1)->load_tokens, 0u);
  auto bad = conn->Lookup(tokens, 4 * kChunk + 2);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("num_computed_tokens = 66"));

  // LoadPayloads skips chunks wholly below skip_tokens.
  Consumer consume;
  auto loaded =
      conn->LoadPayloads(tokens, 4 * kChunk, consume.fn(), /*skip_tokens=*/2 * kChunk + 3);
  ASSERT_TRUE(loaded.ok());
  EXPECT_THAT(consume.chunks, ElementsAre(2, 3));
  EXPECT_EQ(loaded->loaded_tokens, 4 * kChunk);
  // Bad load arguments.
  EXPECT_EQ(conn->LoadPayloads(tokens, kChunk + 1, consume.fn()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(conn->LoadPayloads(tokens, 5 * kChunk, consume.fn()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(conn->LoadPayloads(tokens, kChunk, consume.fn(), 2 * kChunk).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KVConnectorTest, ChunkErasedBetweenLookupAndLoadIsReportedAndLaterChunksNotDelivered) {
  auto store = MakeStore();
  auto conn = MakeConnector(store);
  std::vector<TokenId> tokens = Prompt(4 * kChunk + 1);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 4u);
  conn->Flush();
  auto lookup = conn->Lookup(tokens, 0);
  ASSERT_EQ(lookup->load_tokens, 4 * kChunk);
  // The lease runs out (simulated by releasing it) and chunk 2 is evicted.
  lookup->lease.Release();
  std::vector<ChunkKey> keys = ComputeChunkKeys(conn->ns(), tokens, {.chunk_tokens = kChunk});
  ASSERT_TRUE(store->Erase(keys[2]).ok());

  Consumer consume;
  auto loaded = conn->LoadPayloads(tokens, lookup->load_tokens, consume.fn());
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->loaded_tokens, 2 * kChunk);
  EXPECT_THAT(loaded->failed_chunks, ElementsAre(2, 3));
  EXPECT_EQ(loaded->first_error.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(consume.chunks, ElementsAre(0, 1));  // chunk 3 exists but is not delivered
  ConnectorStats s = conn->stats();
  EXPECT_EQ(s.load_misses, 1u);
  EXPECT_EQ(s.load_chunks_failed, 2u);
  EXPECT_EQ(s.load_chunks_ok, 2u);
}

TEST(KVConnectorTest, PinnedChunkCannotBeErasedUntilTheLookupIsDropped) {
  auto store = MakeStore();
  auto conn = MakeConnector(store);
  std::vector<TokenId> tokens = Prompt(2 * kChunk + 1);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 2u);
  conn->Flush();
  auto lookup = conn->Lookup(tokens, 0);
  ASSERT_EQ(lookup->load_tokens, 2 * kChunk);
  EXPECT_EQ(store->stats().pinned_bytes, 2 * (conn->chunk_payload_bytes() + kChunkHeaderBytes));
  std::vector<ChunkKey> keys = ComputeChunkKeys(conn->ns(), tokens, {.chunk_tokens = kChunk});
  EXPECT_EQ(store->Erase(keys[1]).code(), absl::StatusCode::kFailedPrecondition);
  Consumer consume;
  ASSERT_EQ(conn->LoadPayloads(tokens, 2 * kChunk, consume.fn())->loaded_tokens, 2 * kChunk);
  EXPECT_EQ(store->Erase(keys[1]).code(), absl::StatusCode::kFailedPrecondition);
  { ConnectorLookup done = *std::move(lookup); }  // the engine is done with it
  EXPECT_EQ(store->stats().pinned_bytes, 0u);
  EXPECT_TRUE(store->Erase(keys[1]).ok());
}

// One lease book: a lease the engine keeps too long expires under the store's
// lease_timeout, and the connector reports the store's count.
TEST(KVConnectorTest, LeaseNotReleasedByALoadExpiresInTheStore) {
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory({.capacity_bytes = 64 << 20}));
  auto clock = std::make_shared<ManualClock>();
  auto created = TieredStore::Create(
      std::move(tiers), {.lease_timeout = std::chrono::milliseconds(1), .clock = clock});
  ASSERT_TRUE(created.ok());
  std::shared_ptr<TieredStore> store(std::move(*created));
  auto conn = MakeConnector(store, Options());
  std::vector<TokenId> tokens = Prompt(2 * kChunk + 1);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 2u);
  conn->Flush();
  auto lookup = conn->Lookup(tokens, 0);
  ASSERT_EQ(lookup->load_tokens, 2 * kChunk);
  EXPECT_TRUE(lookup->lease.live());
  clock->Advance(std::chrono::milliseconds(1));  // the lease's deadline
  EXPECT_EQ(store->stats().pinned_bytes, 0u);    // reaps
  EXPECT_EQ(conn->stats().leases_released_by_timeout, 1u);
  EXPECT_FALSE(lookup->lease.live());
  // The late load still loads (nothing was evicted); dropping the expired lease is a no-op.
  Consumer consume;
  ASSERT_EQ(conn->LoadPayloads(tokens, 2 * kChunk, consume.fn())->loaded_tokens, 2 * kChunk);
  lookup->lease.Release();
  EXPECT_EQ(conn->stats().leases_released_by_timeout, 1u);
}

// The lease pins exactly the chunks to load, and lives as long as the lookup result,
// whatever the load does (here it skips every chunk: all computed already).
TEST(KVConnectorTest, LeaseCoversTheChunksToLoadAndLivesAsLongAsTheLookup) {
  auto store = MakeStore();
  ConnectorOptions o = Options();
  auto conn = MakeConnector(store, o);
  std::vector<TokenId> tokens = Prompt(3 * kChunk + 1);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 3u);
  conn->Flush();
  const uint64_t record = conn->chunk_payload_bytes() + kChunkHeaderBytes;
  // Lookup over the first 2 chunks' worth of the prompt (+1 token): 2 chunks pinned.
  std::span<const TokenId> two(tokens.data(), 2 * kChunk + 1);
  auto lookup = conn->Lookup(two, 0);
  ASSERT_EQ(lookup->load_tokens, 2 * kChunk);
  EXPECT_EQ(lookup->lease.size(), 2u);
  EXPECT_EQ(store->stats().pinned_bytes, 2 * record);
  Consumer consume;
  auto r = conn->LoadPayloads(two, 2 * kChunk, consume.fn(), /*skip_tokens=*/2 * kChunk);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->loaded_tokens, 2 * kChunk);
  EXPECT_TRUE(consume.chunks.empty());
  EXPECT_EQ(store->stats().pinned_bytes, 2 * record);  // the engine still holds the lookup
  lookup = absl::StatusOr<ConnectorLookup>();
  EXPECT_EQ(store->stats().pinned_bytes, 0u);
}

ChunkHeader HeaderFor(const KVConnector& conn, const std::vector<ChunkKey>& keys, size_t i) {
  return ChainHeader(conn.ns(), conn.ns_params().layout, keys, i, conn.chunk_tokens());
}

// A corrupted record can only come from outside the process: the disk tier (which
// verifies every read) catches it, the store reports DataLoss, the bytes never reach
// the engine, and the integrity counter counts it once.
TEST(KVConnectorTest, CorruptedChunkFailsVerificationAndItsBytesNeverReachConsume) {
  ScopedTempDir dir;
  DiskTier* disk = nullptr;
  std::shared_ptr<TieredStore> store = DiskStore(dir.path() + "/disk", /*host_bytes=*/0, &disk);
  ASSERT_NE(store, nullptr);
  auto conn = MakeConnector(store);
  std::vector<TokenId> tokens = Prompt(4 * kChunk + 1);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 4u);
  conn->Flush();
  // Flip one payload byte of chunk 1 inside its record file.
  std::vector<ChunkKey> keys = ComputeChunkKeys(conn->ns(), tokens, {.chunk_tokens = kChunk});
  ASSERT_NE(disk, nullptr);
  // Records land in the first record file in store order, each padded to 4 KiB.
  const uint64_t padded = (kChunkHeaderBytes + conn->chunk_payload_bytes() + 4095) / 4096 * 4096;
  {
    const std::string file = dir.path() + "/disk/records/rec-000000.dat";
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << file;
    const std::streamoff at = static_cast<std::streamoff>(padded + kChunkHeaderBytes + 100);
    char b = 0;
    f.seekg(at);
    f.read(&b, 1);
    b ^= 0x40;
    f.seekp(at);
    f.write(&b, 1);
    ASSERT_TRUE(f.good());
  }

  const uint64_t integrity_before = store->stats().integrity_errors;
  auto lookup = conn->Lookup(tokens, 0);
  ASSERT_EQ(lookup->load_tokens, 4 * kChunk);  // lookup cannot know; load must catch it
  Consumer consume;
  auto loaded = conn->LoadPayloads(tokens, lookup->load_tokens, consume.fn());
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->loaded_tokens, kChunk);
  EXPECT_THAT(loaded->failed_chunks, ElementsAre(1, 2, 3));
  EXPECT_EQ(loaded->first_error.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(consume.chunks, ElementsAre(0));
  EXPECT_EQ(conn->stats().load_data_loss, 1u);
  EXPECT_EQ(store->stats().integrity_errors, integrity_before + 1);
}

// Issue 11 #3: Flush returns once the data is durable, not when the connector's own queue
// is empty while the store's write-back is still running.
TEST(KVConnectorTest, FlushWaitsUntilEveryChunkIsOnDisk) {
  ScopedTempDir dir;
  DiskTier* disk = nullptr;
  std::shared_ptr<TieredStore> store =
      DiskStore(dir.path() + "/disk", /*host_bytes=*/1 << 20, &disk);
  ASSERT_NE(store, nullptr);
  auto conn = MakeConnector(store);
  std::vector<TokenId> tokens = Prompt(24 * kChunk + 1);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 24u);
  conn->Flush();
  std::vector<ChunkKey> keys = ComputeChunkKeys(conn->ns(), tokens, {.chunk_tokens = kChunk});
  ASSERT_EQ(keys.size(), 24u);
  size_t on_disk = 0;
  for (const ChunkStat& st : disk->Stat(keys)) on_disk += st.present ? 1 : 0;
  EXPECT_EQ(on_disk, 24u);
  EXPECT_EQ(store->stats().pending_write_bytes, 0u);
}

TEST(KVConnectorTest, RecordOfAnotherNamespaceUnderOurKeyIsAMismatch) {
  auto store = MakeStore();
  auto conn = MakeConnector(store);
  std::vector<TokenId> tokens = Prompt(2 * kChunk + 1);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 2u);
  conn->Flush();
  std::vector<ChunkKey> keys = ComputeChunkKeys(conn->ns(), tokens, {.chunk_tokens = kChunk});
  ChunkHeader h = HeaderFor(*conn, keys, 0);
  NamespaceParams other = conn->ns_params();
  other.model_id = "other-model";
  h.ns = ComputeNamespace(other);
  auto record = EncodeChunk(h, ExpectedPayload(0, conn->chunk_payload_bytes()));
  ASSERT_TRUE(record.ok());
  ASSERT_TRUE(PutRecord(*store, *record).ok());
  Consumer consume;
  auto loaded = conn->LoadPayloads(tokens, 2 * kChunk, consume.fn());
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->loaded_tokens, 0u);
  EXPECT_THAT(loaded->failed_chunks, ElementsAre(0, 1));
  EXPECT_EQ(loaded->first_error.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(consume.chunks, IsEmpty());
  EXPECT_EQ(conn->stats().load_mismatch, 1u);
}

TEST(KVConnectorTest, DivergingPromptInsideChunkKOnlyHitsChunksBeforeK) {
  auto conn = MakeConnector(MakeStore());
  std::vector<TokenId> a = Prompt(5 * kChunk + 1);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(a, fill.fn()), 5u);
  conn->Flush();
  std::vector<TokenId> b = a;
  b[2 * kChunk + 7] += 1;  // diverges inside chunk 2
  auto lookup = conn->Lookup(b, 0);
  EXPECT_EQ(lookup->cached_tokens, 2 * kChunk);
  EXPECT_EQ(lookup->load_tokens, 2 * kChunk);
  // Storing b adds only its chunks 2..4 (chunks 0, 1 are shared and cached).
  Filler fill_b;
  EXPECT_EQ(*conn->StorePayloads(b, fill_b.fn()), 3u);
  EXPECT_THAT(fill_b.chunks, ElementsAre(2, 3, 4));
}

// Stores the first `n` chunks of `tokens` and waits until the store holds them.
void StoreLeadingChunks(KVConnector& conn, std::span<const TokenId> tokens, size_t n) {
  Filler f;
  ASSERT_EQ(*conn.StorePayloads(tokens.first(n * kChunk), f.fn()), n);
  conn.Flush();
}

TEST(KVConnectorTest, StoreSkipsChunksAlreadyCached) {
  auto conn = MakeConnector(MakeStore());
  std::vector<TokenId> tokens = Prompt(6 * kChunk + 1);
  StoreLeadingChunks(*conn, tokens, 4);
  Filler second;
  EXPECT_EQ(*conn->StorePayloads(tokens, second.fn()), 2u);
  EXPECT_THAT(second.chunks, ElementsAre(4, 5));
  EXPECT_EQ(conn->stats().store_chunks_skipped, 4u);
}

// A lookup of the prompt moments before (at prompt start) already says which chunks the
// tiers hold: StorePayloads given its cached_tokens asks the tiers nothing and takes the
// rest. A stale or low held_tokens only re-puts chunks (one copy each), never wrong KV.
TEST(KVConnectorTest, StoreGivenTheLookupsHeldTokensSkipsItsOwnLookup) {
  auto conn = MakeConnector(MakeStore());
  std::vector<TokenId> tokens = Prompt(6 * kChunk + 1);
  StoreLeadingChunks(*conn, tokens, 4);
  EXPECT_EQ(conn->stats().store_lookups, 1u);
  auto lookup = conn->Lookup(tokens, 0);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->looked_up_tokens, 6 * kChunk);
  EXPECT_EQ(lookup->cached_tokens, 4 * kChunk);
  Filler second;
  EXPECT_EQ(*conn->StorePayloads(tokens, second.fn(), lookup->cached_tokens), 2u);
  EXPECT_THAT(second.chunks, ElementsAre(4, 5));
  EXPECT_EQ(conn->stats().store_lookups, 1u);  // not asked again
  EXPECT_EQ(conn->stats().store_calls, 2u);
  conn->Flush();
  // Told less than is held: chunk 3 is taken and put again; every chunk still loads as
  // it was filled.
  Filler third;
  EXPECT_EQ(*conn->StorePayloads(tokens, third.fn(), 3 * kChunk), 3u);
  EXPECT_THAT(third.chunks, ElementsAre(3, 4, 5));
  conn->Flush();
  Consumer consume;
  auto loaded = conn->LoadPayloads(tokens, 6 * kChunk, consume.fn());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->loaded_tokens, 6 * kChunk);
  for (size_t i = 0; i < consume.payloads.size(); ++i) {
    EXPECT_EQ(consume.payloads[i], ExpectedPayload(i, consume.payloads[i].size())) << i;
  }
  EXPECT_EQ(conn->StorePayloads(tokens, third.fn(), kChunk + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A lookup that has nothing to ask (everything up to the last chunk is computed already)
// says so: looked_up_tokens 0, and its cached_tokens is no statement about the tiers.
TEST(KVConnectorTest, LookupWithNothingToAskSaysItAskedNothing) {
  auto conn = MakeConnector(MakeStore());
  std::vector<TokenId> tokens = Prompt(2 * kChunk + 1);
  auto lookup = conn->Lookup(tokens, 2 * kChunk);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->looked_up_tokens, 0u);
}

TEST(KVConnectorTest, FillErrorStopsTheStoreAndIsReturned) {
  auto conn = MakeConnector(MakeStore());
  std::vector<TokenId> tokens = Prompt(3 * kChunk);
  auto r = conn->StorePayloads(tokens, [](size_t chunk, std::span<std::byte> p) {
    if (chunk == 1) return absl::UnavailableError("engine busy");
    std::memset(p.data(), 1, p.size());
    return absl::OkStatus();
  });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("chunk 1"));
  conn->Flush();
  EXPECT_EQ(conn->stats().store_chunks_taken, 1u);
  EXPECT_EQ(conn->stats().store_pending_bytes, 0u);
}

// The store's tier-0 Put is held shut: StorePayloads must still return once every
// chunk has been copied out (fill called), and the copies, not the engine's memory,
// must be what lands in the store.
TEST(KVConnectorTest, AsyncStoreNeverBlocksBeyondTheCopy) {
  auto gated = std::make_unique<GatedTier>(MakeHost());
  GatedTier* gate = gated.get();
  auto store = MakeStore(std::move(gated));
  auto conn = MakeConnector(store);
  std::vector<TokenId> tokens = Prompt(4 * kChunk + 1);
  // The engine's "KV memory" for 4 chunks.
  const size_t payload = conn->chunk_payload_bytes();
  std::vector<std::byte> engine_kv(4 * payload);
  for (size_t i = 0; i < 4; ++i) {
    std::vector<std::byte> p = ExpectedPayload(i, payload);
    std::memcpy(engine_kv.data() + i * payload, p.data(), payload);
  }
  std::atomic<int> fills{0};
  absl::Notification returned;
  absl::StatusOr<size_t> taken;
  std::thread engine([&] {
    taken = conn->StorePayloads(tokens, [&](size_t chunk, std::span<std::byte> out) {
      ++fills;
      std::memcpy(out.data(), engine_kv.data() + chunk * payload, payload);
      return absl::OkStatus();
    });
    returned.Notify();
  });
  const bool did_return = returned.WaitForNotificationWithTimeout(absl::Seconds(20));
  EXPECT_TRUE(did_return) << "StorePayloads blocked on the tier";
  EXPECT_EQ(fills.load(), 4);
  // The engine reuses its blocks right away.
  std::fill(engine_kv.begin(), engine_kv.end(), std::byte{0xEE});
  EXPECT_EQ(conn->stats().store_chunks_put, 0u);  // nothing could reach the store yet
  gate->Open();
  engine.join();
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(*taken, 4u);
  conn->Flush();
  EXPECT_EQ(conn->stats().store_chunks_put, 4u);
  EXPECT_EQ(conn->stats().store_pending_bytes, 0u);
  Consumer consume;
  ASSERT_EQ(conn->LoadPayloads(tokens, 4 * kChunk, consume.fn())->loaded_tokens, 4 * kChunk);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(consume.payloads[i], ExpectedPayload(i, payload));
}

TEST(KVConnectorTest, StoreDropsChunksWhenPendingQueueIsFull) {
  auto gated = std::make_unique<GatedTier>(MakeHost());
  GatedTier* gate = gated.get();
  auto store = MakeStore(std::move(gated));
  ConnectorOptions o = Options();
  o.max_pending_store_bytes = 2 * (1024 + kChunkHeaderBytes);  // room for two chunks
  auto conn = MakeConnector(store, o);
  std::vector<TokenId> tokens = Prompt(4 * kChunk + 1);
  Filler fill;
  absl::StatusOr<size_t> taken;
  std::thread engine([&] { taken = conn->StorePayloads(tokens, fill.fn()); });
  engine.join();  // returns although the tier is shut
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(*taken, 2u);
  EXPECT_EQ(fill.calls.load(), 2);
  EXPECT_EQ(conn->stats().store_chunks_dropped, 2u);
  gate->Open();
  conn->Flush();
  EXPECT_EQ(conn->Lookup(tokens, 0)->cached_tokens, 2 * kChunk);
}

TEST(KVConnectorTest, SyncStorePutsBeforeReturning) {
  ConnectorOptions o = Options();
  o.async_store = false;
  auto conn = MakeConnector(MakeStore(), o);
  std::vector<TokenId> tokens = Prompt(2 * kChunk + 1);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 2u);
  EXPECT_EQ(conn->stats().store_chunks_put, 2u);  // no Flush needed
  EXPECT_EQ(conn->Lookup(tokens, 0)->cached_tokens, 2 * kChunk);
}

TEST(KVConnectorTest, CostModelCanChooseRecomputeAndReleasesThePins) {
  auto store = MakeStore();
  ConnectorOptions o = Options();
  o.cost.tier_defaults[0] = {1e3, 0.1};  // a hopeless "host" tier: 1 KB/s, 100 ms
  auto conn = MakeConnector(store, o);
  std::vector<TokenId> tokens = Prompt(4 * kChunk + 1);
  Filler fill;
  ASSERT_EQ(*conn->StorePayloads(tokens, fill.fn()), 4u);
  conn->Flush();
  auto lookup = conn->Lookup(tokens, 0);
  EXPECT_EQ(lookup->cached_tokens, 4 * kChunk);
  EXPECT_EQ(lookup->load_tokens, 0u);
  EXPECT_EQ(store->stats().pinned_bytes, 0u);
  EXPECT_EQ(conn->stats().cost.decisions_recompute, 1u);
  o.use_cost_model = false;
  auto eager = MakeConnector(store, o);
  EXPECT_EQ(eager->Lookup(tokens, 0)->load_tokens, 4 * kChunk);
}

TEST(KVConnectorTest, ObservedPrefillsFeedTheCostModel) {
  auto conn = MakeConnector(MakeStore());
  for (uint64_t t : {100, 200, 400, 800, 1600, 3200, 6400, 12800}) {
    conn->ObservePrefill(t, 0, std::chrono::duration<double>(2e-5 * t));
  }
  EXPECT_TRUE(conn->cost_model().prefill_model().fitted);
  EXPECT_NEAR(conn->cost_model().PredictPrefillSeconds(0, 1000), 0.02, 1e-9);
}

}  // namespace
}  // namespace kvt

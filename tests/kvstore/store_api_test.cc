// The TieredStore operator API (issue 12): merged List, Evict by selector, peek,
// PutAck::kDurable, queued records found before they land, one integrity count.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/disk_tier.h"
#include "kvstore/evict_selector.h"
#include "kvstore/host_tier.h"
#include "kvstore/store_factory.h"
#include "kvstore/tiered_store.h"
#include "store_test_util.h"
#include "test_records.h"

namespace kvt {
namespace {

using ::kvt::testing::GetRecord;
using ::kvt::testing::PutRecord;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAreArray;

const NamespaceId kNsA{0xa1, 0xa2};
const NamespaceId kNsB{0xb1, 0xb2};

// lo and hi differ in order, so a tier that sorted by (lo, hi) would page differently
// from one that sorts by (hi, lo): the merged listing must not care.
ChunkKey KeyOf(uint64_t i) { return ChunkKey{~i * 0x9E3779B97F4A7C15ull, i * 7919 + 1}; }

// 12 tokens x 32 B + 128 B header = 512 B.
constexpr uint64_t kRec = 512;

std::vector<std::byte> Record(uint64_t i, NamespaceId ns = kNsA, ChunkKey parent = {}) {
  const KvLayout layout = kvt::testing::Bytes32PerTokenLayout();
  std::vector<std::byte> payload(layout.payload_bytes(12), static_cast<std::byte>(i));
  return kvt::testing::TestRecord(ns, layout, KeyOf(i), parent.is_zero() ? RootKey(ns) : parent, 12,
                                  payload);
}

struct Stack {
  std::unique_ptr<TieredStore> store;
  Tier* top = nullptr;
  Tier* lower = nullptr;
};

Stack TwoHostTiers(uint64_t top_records, WriteThrough wt) {
  Stack s;
  HostTierOptions top;
  top.capacity_bytes = top_records * kRec;
  top.name = "top";
  HostTierOptions lower;
  lower.capacity_bytes = 16 << 20;
  lower.name = "lower";
  std::vector<TierFactory> f;
  f.push_back(kvt::testing::Capturing(HostTier::Factory(top), &s.top));
  f.push_back(kvt::testing::Capturing(HostTier::Factory(lower), &s.lower));
  TieredStoreOptions o;
  o.placement.write_through = wt;
  s.store = *TieredStore::Create(std::move(f), o);
  return s;
}

std::vector<ChunkKey> ListAllKeys(TieredStore& store, size_t page_size, int* pages) {
  std::vector<ChunkKey> out;
  StoreListOptions lo;
  lo.page_size = page_size;
  *pages = 0;
  for (int guard = 0; guard < 100000; ++guard) {
    auto page = store.List(lo);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    ++*pages;
    for (const StoredChunk& c : page->chunks) out.push_back(c.info.key);
    if (page->next_page_token.empty()) break;
    lo.page_token = page->next_page_token;
  }
  return out;
}

// Issue 11 #10: following next_page_token returns every chunk exactly once, whatever the
// page size, with chunks in the top tier only, the lower tier only, and both.
TEST(StoreApiTest, ListPagesReturnEveryChunkExactlyOnceAcrossTiers) {
  Stack s = TwoHostTiers(/*top_records=*/600, WriteThrough::kNone);
  constexpr uint64_t kChunks = 2000;
  for (uint64_t i = 0; i < kChunks; ++i) {
    if (i % 3 == 0) {  // lower only
      ASSERT_TRUE(s.lower->Put(Record(i)).ok());
    }
    if (i % 3 == 1) {  // top (some demoted)
      ASSERT_TRUE(PutRecord(*s.store, Record(i)).ok());
    }
    if (i % 3 == 2) {  // both
      ASSERT_TRUE(s.lower->Put(Record(i)).ok());
      ASSERT_TRUE(s.top->Put(Record(i)).ok());
    }
  }
  s.store->Flush();
  std::vector<ChunkKey> want;
  for (uint64_t i = 0; i < kChunks; ++i) want.push_back(KeyOf(i));
  for (size_t page_size : {1u, 7u, 100u, 1000u, 5000u}) {
    SCOPED_TRACE(page_size);
    int pages = 0;
    std::vector<ChunkKey> got = ListAllKeys(*s.store, page_size, &pages);
    EXPECT_EQ(got.size(), kChunks);
    EXPECT_THAT(got, UnorderedElementsAreArray(want));
    EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
    EXPECT_EQ(static_cast<uint64_t>(pages), (kChunks + page_size - 1) / page_size) << "pages";
  }
}

TEST(StoreApiTest, ListReportsEveryTierHoldingAChunkAndFiltersByNamespaceAndVisibility) {
  Stack s = TwoHostTiers(16, WriteThrough::kAll);
  ASSERT_TRUE(PutRecord(*s.store, Record(1, kNsA)).ok());
  ASSERT_TRUE(PutRecord(*s.store, Record(2, kNsB)).ok());
  s.store->Flush();
  StoreListOptions lo;
  auto all = s.store->List(lo);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->chunks.size(), 2u);
  EXPECT_THAT(all->chunks[0].tiers, ElementsAre(0, 1));
  lo.ns = kNsB;
  auto b = s.store->List(lo);
  ASSERT_EQ(b->chunks.size(), 1u);
  EXPECT_EQ(b->chunks[0].info.key, KeyOf(2));
  lo.ns.reset();
  lo.visible = [](const NamespaceId& ns) { return ns == kNsA; };
  auto a = s.store->List(lo);
  ASSERT_EQ(a->chunks.size(), 1u);
  EXPECT_EQ(a->chunks[0].info.key, KeyOf(1));
  lo.page_token = "not-a-token";
  EXPECT_EQ(s.store->List(lo).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StoreApiTest, EvictSelectorsEachTakeWhatTheySay) {
  Stack s = TwoHostTiers(64, WriteThrough::kAll);
  // A prompt 0 -> 1 -> 2 with a branch 1 -> 3, and an unrelated chunk 4 of namespace B.
  ASSERT_TRUE(PutRecord(*s.store, Record(0)).ok());
  ASSERT_TRUE(PutRecord(*s.store, Record(1, kNsA, KeyOf(0))).ok());
  ASSERT_TRUE(PutRecord(*s.store, Record(2, kNsA, KeyOf(1))).ok());
  ASSERT_TRUE(PutRecord(*s.store, Record(3, kNsA, KeyOf(1))).ok());
  ASSERT_TRUE(PutRecord(*s.store, Record(4, kNsB)).ok());
  s.store->Flush();

  EvictSelector prefix;
  prefix.prefix = KeyOf(1);
  auto dry = s.store->Evict(prefix, EvictOptions{.dry_run = true});
  ASSERT_TRUE(dry.ok()) << dry.status();
  std::set<ChunkKey> picked;
  for (const auto& c : dry->selected) picked.insert(c.info.key);
  EXPECT_EQ(picked, (std::set<ChunkKey>{KeyOf(1), KeyOf(2), KeyOf(3)}));
  EXPECT_EQ(dry->bytes, 3 * kRec);
  EXPECT_EQ(s.store->Lookup(std::vector<ChunkKey>{KeyOf(1)}).num_leading_hits, 1u);  // dry: kept
  EXPECT_EQ(s.store->stats().explicit_evictions, 0u);

  // A pinned chunk is reported, not evicted; the rest goes from every tier.
  LookupResult pin = s.store->Lookup(std::vector<ChunkKey>{KeyOf(0), KeyOf(1)}, {.pin = true});
  ASSERT_EQ(pin.num_leading_hits, 2u);
  auto r = s.store->Evict(prefix);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->chunks, 2u);
  ASSERT_EQ(r->failed.size(), 1u);
  EXPECT_EQ(r->failed[0].first, KeyOf(1));
  EXPECT_EQ(r->failed[0].second.code(), absl::StatusCode::kFailedPrecondition);
  for (uint64_t i : {2u, 3u}) {
    ChunkKey k = KeyOf(i);
    EXPECT_FALSE(s.top->Stat(std::span(&k, 1))[0].present) << i;
    EXPECT_FALSE(s.lower->Stat(std::span(&k, 1))[0].present) << i;
  }
  EXPECT_EQ(s.store->stats().explicit_evictions, 2u);
  pin.lease.Release();

  EvictSelector ns;
  ns.ns = kNsB;
  EXPECT_EQ(s.store->Evict(ns)->chunks, 1u);

  // Age: nothing is a minute old; everything is at least 0 ms old via `all`.
  EvictSelector age;
  age.older_than = std::chrono::minutes(1);
  EXPECT_EQ(s.store->Evict(age)->chunks, 0u);
  EvictSelector all;
  all.all = true;
  all.visible = [](const NamespaceId& n) { return n == kNsA; };
  EXPECT_EQ(s.store->Evict(all)->chunks, 2u);  // 0 and 1 (released)
  EXPECT_EQ(s.store->stats().explicit_evictions, 5u);
}

TEST(StoreApiTest, EvictRejectsAmbiguousSelectors) {
  Stack s = TwoHostTiers(4, WriteThrough::kNone);
  EvictSelector none;
  EXPECT_EQ(s.store->Evict(none).status().code(), absl::StatusCode::kInvalidArgument);
  EvictSelector two;
  two.all = true;
  two.ns = kNsA;
  EXPECT_EQ(s.store->Evict(two).status().code(), absl::StatusCode::kInvalidArgument);
  EvictSelector zero;
  zero.keys.push_back(ChunkKey{});
  EXPECT_EQ(s.store->Evict(zero).status().code(), absl::StatusCode::kInvalidArgument);
  EvictSelector age;
  age.older_than = std::chrono::milliseconds(0);
  EXPECT_EQ(s.store->Evict(age).status().code(), absl::StatusCode::kInvalidArgument);
}

// Issue 12 item 7: looking never promotes and is not an engine hit.
TEST(StoreApiTest, PeekNeitherPromotesNorCounts) {
  Stack s = TwoHostTiers(4, WriteThrough::kNone);
  ASSERT_TRUE(s.lower->Put(Record(9)).ok());
  GetInfo info;
  auto got = GetRecord(*s.store, KeyOf(9), &info, GetOptions{.peek = true});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, Record(9));
  EXPECT_EQ(info.tier_index, MakeTierIndex(1));
  EXPECT_FALSE(info.promoted);
  ChunkKey k = KeyOf(9);
  EXPECT_FALSE(s.top->Stat(std::span(&k, 1))[0].present);
  EXPECT_EQ(GetRecord(*s.store, KeyOf(10), nullptr, GetOptions{.peek = true}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(s.store->stats().hits, 0u);
  EXPECT_EQ(s.store->stats().misses, 0u);
  // Lookup with per_key answers every key and its record bytes, and moves nothing.
  LookupResult r = s.store->Lookup(std::vector<ChunkKey>{KeyOf(10), KeyOf(9)}, {.per_key = true});
  EXPECT_EQ(r.num_leading_hits, 0u);
  EXPECT_THAT(r.tier_index, ElementsAre(kNoTier, MakeTierIndex(1)));
  EXPECT_THAT(r.record_bytes, ElementsAre(0u, kRec));
  EXPECT_FALSE(s.top->Stat(std::span(&k, 1))[0].present);
}

using kvt::testing::GatedTier;

// Issue 11 #4: a chunk can be found from the moment Put returns, also while it waits
// for write-back after tier 0 evicted it.
TEST(StoreApiTest, RecordsWaitingForWriteBackAreFoundByLookupAndGet) {
  HostTierOptions top;
  top.capacity_bytes = 2 * kRec;
  HostTierOptions lower_o;
  lower_o.capacity_bytes = 1 << 20;
  auto gated = std::make_unique<GatedTier>(*HostTier::Create(lower_o));
  GatedTier* gate = gated.get();
  std::vector<TierFactory> f;
  f.push_back(HostTier::Factory(top));
  f.push_back(UseTier(std::move(gated)));
  TieredStoreOptions o;
  o.placement.write_through = WriteThrough::kNone;
  auto store = *TieredStore::Create(std::move(f), o);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(PutRecord(*store, Record(i)).ok());
  // Tier 0 holds 2; 6 were evicted and wait (the first in flight) for the gated tier.
  std::vector<ChunkKey> keys;
  for (uint64_t i = 0; i < 8; ++i) keys.push_back(KeyOf(i));
  LookupResult r = store->Lookup(keys, {.pin = true});
  EXPECT_EQ(r.num_leading_hits, 8u);
  for (uint64_t i = 0; i < 8; ++i) {
    GetInfo info;
    auto got = GetRecord(*store, KeyOf(i), &info);
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, Record(i)) << i;
  }
  EXPECT_GT(store->stats().queue_hits, 0u);
  r.lease.Release();
  gate->Open();
  store->Flush();
  for (uint64_t i = 0; i < 8; ++i) EXPECT_EQ(*GetRecord(*store, KeyOf(i)), Record(i)) << i;
}

class DiskStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("kvt_store_api_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  DiskTierOptions Disk() const {
    DiskTierOptions d;
    d.dir = dir_.string();
    d.capacity_bytes = 8ull << 20;
    d.file_bytes = 2ull << 20;
    return d;
  }
  std::filesystem::path dir_;
};

// PutAck::kDurable: acknowledged only once the disk tier holds the record.
TEST_F(DiskStoreTest, DurablePutIsOnDiskWhenItReturns) {
  StoreOptions so;
  so.host.capacity_bytes = 1 << 20;
  so.disk = Disk();
  so.store.placement.write_through = WriteThrough::kNone;  // nothing in the background
  {
    auto store = *OpenTieredStore(so);
    ASSERT_TRUE(PutRecord(*store, Record(1), PutAck::kDurable).ok());
    ASSERT_TRUE(PutRecord(*store, Record(2)).ok());  // tier 0 only
    EXPECT_EQ(store->stats().tiers[1].chunks, 1u);
    EXPECT_TRUE(store->tiers()[1].durable);
  }
  so.host.capacity_bytes = 0;  // the disk alone, reopened
  auto reopened = *OpenTieredStore(so);
  EXPECT_EQ(*GetRecord(*reopened, KeyOf(1)), Record(1));
  EXPECT_EQ(GetRecord(*reopened, KeyOf(2)).status().code(), absl::StatusCode::kNotFound);
}

// Issue 21 #3: a durable Put the durable tier refuses (here: larger than the disk tier)
// returns that tier's error and leaves nothing visible, not even in tier 0.
TEST_F(DiskStoreTest, FailedDurablePutLeavesNothingVisible) {
  StoreOptions so;
  so.host.capacity_bytes = 1 << 20;
  so.disk = Disk();
  so.disk->capacity_bytes = 4096;
  so.disk->file_bytes = 4096;
  so.store.placement.write_through = WriteThrough::kNone;
  auto store = *OpenTieredStore(so);
  const KvLayout layout = kvt::testing::Bytes32PerTokenLayout();
  const std::vector<std::byte> big = kvt::testing::TestRecord(
      kNsA, layout, KeyOf(7), RootKey(kNsA), 200,
      std::vector<std::byte>(layout.payload_bytes(200), std::byte{7}));  // 6528 B > 4096
  EXPECT_EQ(PutRecord(*store, big, PutAck::kDurable).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(GetRecord(*store, KeyOf(7)).status().code(), absl::StatusCode::kNotFound);
  const ChunkKey k = KeyOf(7);
  EXPECT_EQ(store->Lookup(std::span(&k, 1)).num_leading_hits, 0u);
  EXPECT_EQ(store->stats().tiers[0].chunks, 0u);
  EXPECT_EQ(store->stats().tiers[1].chunks, 0u);
  // The same record without kDurable lands in tier 0 (only the durable ack failed).
  EXPECT_TRUE(PutRecord(*store, big).ok());
  EXPECT_EQ(*GetRecord(*store, KeyOf(7)), big);
  // A record that fits is acknowledged durable as before.
  EXPECT_TRUE(PutRecord(*store, Record(1), PutAck::kDurable).ok());
  EXPECT_EQ(store->stats().tiers[1].chunks, 1u);
}

// Issue 11 #10 over the real tiers: the host tier's map and the disk tier's RocksDB
// index (big-endian keys) list in the one ChunkKey order, so pages never repeat or skip.
TEST_F(DiskStoreTest, ListPagesOverHostAndDiskReturnEveryChunkOnce) {
  StoreOptions so;
  so.host.capacity_bytes = 400 * kRec;
  so.disk = Disk();
  so.store.placement.write_through = WriteThrough::kNone;  // most chunks: disk only (demoted)
  auto store = *OpenTieredStore(so);
  constexpr uint64_t kChunks = 1526;
  for (uint64_t i = 0; i < kChunks; ++i) ASSERT_TRUE(PutRecord(*store, Record(i)).ok());
  store->Flush();
  EXPECT_GT(store->stats().tiers[0].chunks, 300u);
  EXPECT_GT(store->stats().tiers[1].chunks, 1000u);
  std::vector<ChunkKey> want;
  for (uint64_t i = 0; i < kChunks; ++i) want.push_back(KeyOf(i));
  for (size_t page_size : {7u, 1000u}) {
    SCOPED_TRACE(page_size);
    int pages = 0;
    std::vector<ChunkKey> got = ListAllKeys(*store, page_size, &pages);
    EXPECT_EQ(got.size(), kChunks);
    EXPECT_THAT(got, UnorderedElementsAreArray(want));
    EXPECT_EQ(static_cast<uint64_t>(pages), (kChunks + page_size - 1) / page_size);
  }
}

TEST_F(DiskStoreTest, FactoryRejectsAStoreWithoutTiers) {
  StoreOptions so;
  so.host.capacity_bytes = 0;
  EXPECT_EQ(OpenTieredStore(so).status().code(), absl::StatusCode::kInvalidArgument);
  so.disk = Disk();
  so.disk->capacity_bytes = 4097;  // not a multiple of 4096
  EXPECT_EQ(OpenTieredStore(so).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt

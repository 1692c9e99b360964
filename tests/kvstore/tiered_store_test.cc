#include "kvstore/tiered_store.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/host_tier.h"
#include "store_test_util.h"
#include "test_records.h"

#if __has_include("kvstore/disk_tier.h")
#include <filesystem>

#include "kvstore/disk_tier.h"
#define KVT_TEST_HAVE_DISK_TIER 1
#endif

namespace kvt {
namespace {

using ::kvt::testing::GetRecord;
using ::kvt::testing::PutRecord;
using ::testing::ElementsAre;

const NamespaceId kNs{0xabc, 0xdef};

// 32 payload bytes per token: a record of t tokens is 128 + 32 t bytes (12 → 512).
KvLayout SmallLayout() { return testing::Bytes32PerTokenLayout(); }

ChunkKey KeyOf(uint64_t i) { return ChunkKey{i * 0x9E3779B97F4A7C15ull + 3, i}; }
constexpr uint64_t kRec12 = 128 + 32 * 12;

std::vector<std::byte> MakeRecord(uint64_t i, uint32_t tokens = 12) {
  std::vector<std::byte> payload(SmallLayout().payload_bytes(tokens));
  std::mt19937_64 rng(i * 17 + tokens);
  for (auto& b : payload) b = static_cast<std::byte>(rng());
  return testing::TestRecord(kNs, SmallLayout(), KeyOf(i), i == 0 ? RootKey(kNs) : KeyOf(i - 1),
                             tokens, payload);
}

TierFactory Host(uint64_t capacity, const char* name) {
  HostTierOptions o;
  o.capacity_bytes = capacity;
  o.name = name;
  o.use_pinned_memory = false;
  return HostTier::Factory(o);
}

// A store plus pointers to its tiers (owned by the store) for tests that look inside.
struct TestStore {
  std::unique_ptr<TieredStore> store;
  std::vector<Tier*> tiers;
  TieredStore* operator->() const { return store.get(); }
  TieredStore& operator*() const { return *store; }
  Tier& tier(size_t i) const { return *tiers.at(i); }
};

TestStore MakeTestStore(std::vector<TierFactory> factories, const TieredStoreOptions& options) {
  TestStore out;
  out.tiers.resize(factories.size(), nullptr);
  std::vector<TierFactory> wrapped;
  for (size_t i = 0; i < factories.size(); ++i) {
    wrapped.push_back(kvt::testing::Capturing(std::move(factories[i]), &out.tiers[i]));
  }
  auto store = TieredStore::Create(std::move(wrapped), options);
  EXPECT_TRUE(store.ok()) << store.status();
  if (store.ok()) out.store = std::move(*store);
  return out;
}

// Host tier of `top_records` 512-byte records over a large host tier standing in as
// the lower tier.
TestStore MakeStore(uint64_t top_records, TieredStoreOptions options = {}) {
  std::vector<TierFactory> tiers;
  tiers.push_back(Host(top_records * kRec12, "top"));
  tiers.push_back(Host(4 << 20, "lower"));
  return MakeTestStore(std::move(tiers), options);
}

TieredStoreOptions NoWriteThrough() {
  TieredStoreOptions o;
  o.placement.write_through = WriteThrough::kNone;
  return o;
}

bool In(Tier& tier, uint64_t i) {
  ChunkKey k = KeyOf(i);
  return tier.Stat(std::span(&k, 1))[0].present;
}

std::vector<std::byte> ReadFrom(Tier& tier, uint64_t i) {
  std::vector<std::byte> out(1 << 16);
  absl::StatusOr<uint64_t> n = tier.Get(KeyOf(i), out);
  if (!n.ok()) return {};
  out.resize(*n);
  return out;
}

TEST(TieredStoreTest, CreateRejectsBadArguments) {
  EXPECT_EQ(TieredStore::Create({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<TierFactory> tiers;
  tiers.push_back(Host(1 << 16, "top"));
  TieredStoreOptions o;
  o.lease_timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(TieredStore::Create(std::move(tiers), o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TieredStoreTest, PutThenGetFromTierZero) {
  auto store = MakeStore(8);
  std::vector<std::byte> rec = MakeRecord(1);
  ASSERT_TRUE(PutRecord(*store, rec).ok());
  std::vector<std::byte> out(rec.size());
  GetInfo info;
  absl::StatusOr<uint64_t> n = store->Get(KeyOf(1), out, &info);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(out, rec);
  EXPECT_EQ(info.tier_index, MakeTierIndex(0));
  EXPECT_FALSE(info.promoted);
  absl::StatusOr<std::vector<std::byte>> again = GetRecord(*store, KeyOf(1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, rec);
  std::vector<std::byte> small(rec.size() - 1);
  EXPECT_EQ(store->Get(KeyOf(1), small).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(GetRecord(*store, KeyOf(2)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->stats().hits, 2u);
  EXPECT_EQ(store->stats().misses, 1u);
}

// The write-back's reads of tier 0 are the store's own: `kvtier stats` of a store whose
// every put is written down must show the engines' hits and misses, not one hit a put.
TEST(TieredStoreTest, WriteBackReadsAreNotCountedAsHits) {
  auto store = MakeStore(8);  // write-through: each put is read back from tier 0
  for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(PutRecord(*store, MakeRecord(i)).ok());
  store->Flush();
  ASSERT_EQ(store->stats().writebacks, 6u);
  for (uint64_t i = 0; i < 6; ++i) EXPECT_EQ(ReadFrom(store.tier(1), i), MakeRecord(i)) << i;
  TierStats top = store.tier(0).stats();
  EXPECT_EQ(top.hits, 0u);
  EXPECT_EQ(top.misses, 0u);
  EXPECT_EQ(top.bytes_out, 0u);
  EXPECT_EQ(store->stats().hits, 0u);
  ASSERT_TRUE(GetRecord(*store, KeyOf(2)).ok());
  EXPECT_EQ(store.tier(0).stats().hits, 1u);
  EXPECT_EQ(store->stats().hits, 1u);
}

TEST(TieredStoreTest, BadRecordIsRejected) {
  auto store = MakeStore(8);
  std::vector<std::byte> rec = MakeRecord(1);
  rec[9] ^= std::byte{1};
  EXPECT_EQ(PutRecord(*store, rec).code(), absl::StatusCode::kDataLoss);
  std::vector<std::byte> good = MakeRecord(1);
  EXPECT_EQ(PutRecord(*store, std::span(good).first(good.size() - 1)).code(),
            absl::StatusCode::kInvalidArgument);
  store->Flush();
  EXPECT_FALSE(In(store.tier(0), 1));
  EXPECT_FALSE(In(store.tier(1), 1));
}

TEST(TieredStoreTest, GetOfRecordOnlyInTierOnePromotesIt) {
  auto store = MakeStore(8);
  std::vector<std::byte> rec = MakeRecord(5);
  ASSERT_TRUE(store.tier(1).Put(rec).ok());
  ASSERT_FALSE(In(store.tier(0), 5));
  GetInfo info;
  absl::StatusOr<std::vector<std::byte>> got = GetRecord(*store, KeyOf(5), &info);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, rec);
  EXPECT_EQ(info.tier_index, MakeTierIndex(1));
  EXPECT_TRUE(info.promoted);
  EXPECT_TRUE(In(store.tier(0), 5));
  EXPECT_EQ(ReadFrom(store.tier(0), 5), rec);
  GetInfo info2;
  ASSERT_TRUE(GetRecord(*store, KeyOf(5), &info2).ok());
  EXPECT_EQ(info2.tier_index, MakeTierIndex(0));
  EXPECT_EQ(store->stats().promotions, 1u);
}

TEST(TieredStoreTest, EvictionFromTierZeroDemotesToTierOne) {
  auto store = MakeStore(4, NoWriteThrough());
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(PutRecord(*store, MakeRecord(i)).ok());
  store->Flush();
  EXPECT_FALSE(In(store.tier(0), 0));  // the LRU one was evicted
  ASSERT_TRUE(In(store.tier(1), 0));
  EXPECT_EQ(ReadFrom(store.tier(1), 0), MakeRecord(0));
  for (uint64_t i = 1; i < 5; ++i) EXPECT_FALSE(In(store.tier(1), i)) << i;  // no write-through
  EXPECT_EQ(store->stats().demotions_queued, 1u);
  EXPECT_EQ(store->stats().writebacks, 1u);
  GetInfo info;
  absl::StatusOr<std::vector<std::byte>> got = GetRecord(*store, KeyOf(0), &info);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, MakeRecord(0));
  EXPECT_EQ(info.tier_index, MakeTierIndex(1));
  EXPECT_TRUE(info.promoted);
}

TEST(TieredStoreTest, DemotionSkipsRecordsTheNextTierAlreadyHolds) {
  auto store = MakeStore(4);  // write-through: tier 1 already has everything
  for (uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(PutRecord(*store, MakeRecord(i)).ok());
  store->Flush();
  TieredStoreStats s = store->stats();
  // Each of the 8 evicted keys was either already written through (demotion skipped
  // without a copy) or not yet (the demotion carries it, the key-only write-through
  // finds it gone); either way every key is written to tier 1 exactly once.
  EXPECT_EQ(s.demotions_queued + s.demotions_skipped, 8u);
  EXPECT_EQ(s.writebacks, 12u);
  EXPECT_EQ(store.tier(1).stats().puts, 12u);
  for (uint64_t i = 0; i < 12; ++i) EXPECT_EQ(ReadFrom(store.tier(1), i), MakeRecord(i));
}

TEST(TieredStoreTest, LookupCountsLeadingHitsAndTheirTiers) {
  auto store = MakeStore(8, NoWriteThrough());
  ASSERT_TRUE(PutRecord(*store, MakeRecord(0)).ok());
  ASSERT_TRUE(store.tier(1).Put(MakeRecord(1)).ok());
  ASSERT_TRUE(PutRecord(*store, MakeRecord(3)).ok());
  std::vector<ChunkKey> keys = {KeyOf(0), KeyOf(1), KeyOf(2), KeyOf(3)};
  LookupResult r = store->Lookup(keys);
  EXPECT_EQ(r.num_leading_hits, 2u);
  EXPECT_THAT(r.tier_index, ElementsAre(MakeTierIndex(0), MakeTierIndex(1)));
  EXPECT_THAT(r.tier_kind, ElementsAre(TierKind::kHost, TierKind::kHost));
  EXPECT_FALSE(r.lease);
  EXPECT_FALSE(In(store.tier(0), 1));  // no data moved
  EXPECT_EQ(store->Lookup(std::span(keys).subspan(2)).num_leading_hits, 0u);
  EXPECT_EQ(store->Lookup(std::span(keys).subspan(3)).num_leading_hits, 1u);
  EXPECT_EQ(store->Lookup({}).num_leading_hits, 0u);
  // Pinning nothing gives no lease.
  EXPECT_FALSE(store->Lookup(std::span(keys).subspan(2), {.pin = true}).lease);
}

TEST(TieredStoreTest, PinsProtectFromEvictionBetweenLookupAndGet) {
  auto store = MakeStore(4, NoWriteThrough());
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(PutRecord(*store, MakeRecord(i)).ok());
  std::vector<ChunkKey> keys = {KeyOf(0), KeyOf(1)};
  LookupResult r = store->Lookup(keys, {.pin = true});
  ASSERT_EQ(r.num_leading_hits, 2u);
  ASSERT_TRUE(r.lease);
  EXPECT_TRUE(r.lease.live());
  EXPECT_EQ(r.lease.size(), 2u);
  EXPECT_EQ(store->stats().pinned_bytes, 2 * kRec12);
  for (uint64_t i = 10; i < 30; ++i) ASSERT_TRUE(PutRecord(*store, MakeRecord(i)).ok());
  for (uint64_t i : {0, 1}) {
    GetInfo info;
    absl::StatusOr<std::vector<std::byte>> got = GetRecord(*store, KeyOf(i), &info);
    ASSERT_TRUE(got.ok()) << i;
    EXPECT_EQ(*got, MakeRecord(i));
    EXPECT_EQ(info.tier_index, MakeTierIndex(0));
  }
  r.lease.Release();
  r.lease.Release();  // second release is a no-op
  EXPECT_FALSE(r.lease.live());
  EXPECT_EQ(store->stats().pinned_bytes, 0u);
  EXPECT_EQ(store.tier(0).stats().pinned_bytes, 0u);
  for (uint64_t i = 30; i < 40; ++i) ASSERT_TRUE(PutRecord(*store, MakeRecord(i)).ok());
  EXPECT_FALSE(In(store.tier(0), 0));
  EXPECT_EQ(store->stats().expired_leases, 0u);
}

TEST(TieredStoreTest, UnreleasedLeasesExpireAndAreCounted) {
  auto clock = std::make_shared<ManualClock>();
  TieredStoreOptions o;
  o.lease_timeout = std::chrono::milliseconds(50);
  o.clock = clock;
  auto store = MakeStore(8, o);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(PutRecord(*store, MakeRecord(i)).ok());
  std::vector<ChunkKey> keys = {KeyOf(0), KeyOf(1), KeyOf(2), KeyOf(3), KeyOf(99)};
  std::vector<Lease> held;  // never released: they expire
  for (int i = 0; i < 1000; ++i) {
    LookupResult r = store->Lookup(keys, {.pin = true});
    ASSERT_EQ(r.num_leading_hits, 4u);
    ASSERT_TRUE(r.lease);
    held.push_back(std::move(r.lease));
  }
  EXPECT_EQ(store->stats().pinned_bytes, 4 * kRec12);  // distinct chunks count once
  EXPECT_EQ(store->Erase(KeyOf(0)).code(), absl::StatusCode::kFailedPrecondition);
  clock->Advance(std::chrono::milliseconds(49));
  EXPECT_TRUE(held[999].live());
  EXPECT_EQ(store->stats().pinned_bytes, 4 * kRec12);
  clock->Advance(std::chrono::milliseconds(1));  // the deadline of every lease
  // stats() reaps, or waits for the background thread's reap under way to have
  // unpinned the tier.
  EXPECT_EQ(store->stats().pinned_bytes, 0u);
  EXPECT_EQ(store->stats().expired_leases, 1000u);
  EXPECT_EQ(store.tier(0).stats().pinned_bytes, 0u);
  EXPECT_TRUE(store->Erase(KeyOf(0)).ok());
  EXPECT_FALSE(held[0].live());
  EXPECT_EQ(held[0].size(), 0u);
  held.clear();  // releasing an expired lease does nothing
  EXPECT_EQ(store->stats().expired_leases, 1000u);
}

TEST(TieredStoreTest, BackgroundThreadReapsExpiredLeasesWithoutCalls) {
  auto clock = std::make_shared<ManualClock>();
  TieredStoreOptions o;
  o.lease_timeout = std::chrono::milliseconds(20);
  o.clock = clock;
  auto store = MakeStore(8, o);
  ASSERT_TRUE(PutRecord(*store, MakeRecord(0)).ok());
  ChunkKey k = KeyOf(0);
  Lease lease = store->Lookup(std::span(&k, 1), {.pin = true}).lease;
  ASSERT_TRUE(lease);
  EXPECT_EQ(store.tier(0).stats().pinned_bytes, kRec12);
  clock->Advance(std::chrono::milliseconds(20));  // wakes the write-back thread
  // Only the tier is observed while waiting (the store's stats() reaps): the
  // write-back thread reaps on its own. Waits for that event (no time is asserted).
  while (store.tier(0).stats().pinned_bytes != 0) {
    std::this_thread::yield();
  }
  EXPECT_EQ(store.tier(0).stats().pinned_bytes, 0u);
  EXPECT_EQ(store->stats().expired_leases, 1u);
  EXPECT_FALSE(lease.live());
}

TEST(TieredStoreTest, FlushMakesEveryPutVisibleInTierOne) {
  TieredStoreOptions o;
  o.max_pending_write_bytes = 3 * kRec12;  // exercise back-pressure
  auto store = MakeStore(16, o);
  for (uint64_t i = 0; i < 100; ++i) ASSERT_TRUE(PutRecord(*store, MakeRecord(i)).ok());
  store->Flush();
  for (uint64_t i = 0; i < 100; ++i) {
    ASSERT_EQ(ReadFrom(store.tier(1), i), MakeRecord(i)) << i;
  }
  TieredStoreStats s = store->stats();
  EXPECT_EQ(s.writebacks, 100u);
  EXPECT_EQ(s.writeback_errors, 0u);
  EXPECT_EQ(s.pending_write_bytes, 0u);
  EXPECT_TRUE(store->stats().healthy);
}

TEST(TieredStoreTest, RecordTooLargeForTierZeroLandsInTierOne) {
  auto store = MakeStore(2);                        // 1024-byte top tier
  std::vector<std::byte> big = MakeRecord(7, 100);  // 3328 bytes
  ASSERT_TRUE(PutRecord(*store, big).ok());
  store->Flush();
  EXPECT_FALSE(In(store.tier(0), 7));
  GetInfo info;
  absl::StatusOr<std::vector<std::byte>> got = GetRecord(*store, KeyOf(7), &info);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, big);
  EXPECT_EQ(info.tier_index, MakeTierIndex(1));
  EXPECT_FALSE(info.promoted);
}

TEST(TieredStoreTest, EraseRemovesFromEveryTier) {
  auto store = MakeStore(8);
  ASSERT_TRUE(PutRecord(*store, MakeRecord(1)).ok());
  store->Flush();
  ASSERT_TRUE(In(store.tier(1), 1));
  ASSERT_TRUE(store->Erase(KeyOf(1)).ok());
  store->Flush();
  EXPECT_FALSE(In(store.tier(0), 1));
  EXPECT_FALSE(In(store.tier(1), 1));
  EXPECT_EQ(GetRecord(*store, KeyOf(1)).status().code(), absl::StatusCode::kNotFound);
}

TEST(TieredStoreTest, ConcurrentPutAndGetOfTheSameKeyNeverSeePartialRecords) {
  auto store = MakeStore(6);
  std::vector<std::vector<std::byte>> records;
  for (uint64_t i = 0; i < 16; ++i) records.push_back(MakeRecord(i, 4 + i * 3));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> verified{0}, misses{0}, failures{0};
  std::thread writer([&] {
    std::mt19937 rng(1);
    for (int op = 0; op < 3000; ++op) {
      const uint64_t i = rng() % 4 == 0 ? 0 : rng() % records.size();
      if (!PutRecord(*store, records[i]).ok()) failures++;
      if (op % 97 == 0 && !store->Erase(KeyOf(i)).ok()) failures++;
    }
    stop = true;
  });
  auto reader = [&](int seed) {
    std::mt19937 rng(seed);
    std::vector<std::byte> out(1 << 14);
    while (!stop) {
      const uint64_t i = rng() % 2 == 0 ? 0 : rng() % records.size();
      absl::StatusOr<uint64_t> n = store->Get(KeyOf(i), out);
      if (!n.ok()) {
        (n.status().code() == absl::StatusCode::kNotFound ? misses : failures)++;
        continue;
      }
      if (VerifyChunk(std::span(out).first(*n), {kNs, KeyOf(i)}).ok() && *n == records[i].size() &&
          std::memcmp(out.data(), records[i].data(), *n) == 0) {
        verified++;
      } else {
        failures++;
      }
    }
  };
  std::thread r1(reader, 2), r2(reader, 3);
  writer.join();
  r1.join();
  r2.join();
  store->Flush();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_GT(verified.load(), 0u);
  EXPECT_EQ(store->stats().integrity_errors, 0u);
  EXPECT_TRUE(store->stats().healthy);
}

// A lower tier whose Put throws: the write-back thread dies, visibly.
class ThrowingTier final : public Tier {
 public:
  TierCaps caps() const override {
    return TierCaps{.name = "throwing", .kind = TierKind::kDisk, .durable = true};
  }
  using Tier::Put;
  absl::StatusOr<PutResult> Put(std::span<const std::byte>, const PutContext&) override {
    throw std::runtime_error("injected failure");
  }
  absl::StatusOr<uint64_t> Get(const ChunkKey&, std::span<std::byte>) override {
    return absl::NotFoundError("");
  }
  std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys) override {
    return std::vector<ChunkStat>(keys.size());
  }
  absl::Status Erase(const ChunkKey&) override { return absl::OkStatus(); }
  absl::StatusOr<ListPage> List(const ListOptions&) override { return ListPage{}; }
  TierStats stats() const override { return {}; }
  PinHandle Pin(const ChunkKey&) override { return PinHandle(); }
};

TEST(TieredStoreTest, DeadWriteBackThreadIsVisibleAndPutsStillLandInTierZero) {
  std::vector<TierFactory> tiers;
  tiers.push_back(Host(1 << 16, "top"));
  tiers.push_back(UseTier(std::make_unique<ThrowingTier>()));
  auto health = std::make_shared<HealthRegistry>();
  auto store = TieredStore::Create(std::move(tiers), {.health = health});
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->stats().healthy);
  ASSERT_EQ(health->Snapshot().size(), 1u);
  EXPECT_EQ(health->Snapshot()[0].name, "write-back");
  EXPECT_EQ(health->Snapshot()[0].state, ThreadState::kRunning);
  ASSERT_TRUE(PutRecord(**store, MakeRecord(1)).ok());
  (*store)->Flush();  // returns: the thread died on this item
  EXPECT_FALSE((*store)->stats().healthy);
  // The supervisor reported it: name, state and the exception's message.
  std::vector<ThreadHealth> threads = health->Snapshot();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads[0].state, ThreadState::kFailed);
  EXPECT_EQ(threads[0].last_error, "injected failure");
  std::string detail;
  EXPECT_FALSE(health->Healthy(&detail));
  EXPECT_EQ(detail, "write-back failed: injected failure; ");
  ASSERT_TRUE(PutRecord(**store, MakeRecord(2)).ok());
  (*store)->Flush();
  EXPECT_EQ((*store)->stats().writes_dropped, 1u);
  EXPECT_EQ(GetRecord(**store, KeyOf(2)).value(), MakeRecord(2));
}

#ifdef KVT_TEST_HAVE_DISK_TIER
// Host memory over a real DiskTier in a fresh directory under the test temp dir.
class HostOverDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("kvt_tiered_disk_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  TestStore Make(uint64_t top_records, TieredStoreOptions options) {
    DiskTierOptions d;
    d.dir = dir_.string();
    d.capacity_bytes = 16ull << 20;
    d.file_bytes = 4ull << 20;
    std::vector<TierFactory> tiers;
    tiers.push_back(Host(top_records * kRec12, "host"));
    tiers.push_back(DiskTier::Factory(d));
    return MakeTestStore(std::move(tiers), options);
  }

  std::filesystem::path dir_;
};

TEST_F(HostOverDiskTest, EvictedChunksAreDemotedToDiskAndPromotedBack) {
  auto store = Make(4, NoWriteThrough());
  ASSERT_NE(store.store, nullptr);
  EXPECT_EQ(store.tier(1).caps().kind, TierKind::kDisk);
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(PutRecord(*store, MakeRecord(i)).ok());
  store->Flush();
  for (uint64_t i = 0; i < 6; ++i) {
    EXPECT_FALSE(In(store.tier(0), i)) << i;
    EXPECT_EQ(ReadFrom(store.tier(1), i), MakeRecord(i)) << i;
  }
  std::vector<ChunkKey> keys = {KeyOf(0), KeyOf(1), KeyOf(8), KeyOf(42)};
  LookupResult r = store->Lookup(keys);
  EXPECT_EQ(r.num_leading_hits, 3u);
  EXPECT_THAT(r.tier_kind, ElementsAre(TierKind::kDisk, TierKind::kDisk, TierKind::kHost));
  GetInfo info;
  absl::StatusOr<std::vector<std::byte>> got = GetRecord(*store, KeyOf(0), &info);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, MakeRecord(0));
  EXPECT_EQ(info.tier_index, MakeTierIndex(1));
  EXPECT_TRUE(info.promoted);
  EXPECT_TRUE(In(store.tier(0), 0));
  EXPECT_EQ(store->stats().writeback_errors, 0u);
}

// Verify once: the disk tier (bytes from outside the process) verifies; the store trusts
// it, reports the loss as DataLoss (not a plain miss), never promotes the bad record,
// and the one integrity count shows it.
TEST_F(HostOverDiskTest, CorruptDiskRecordIsDataLossErasedAndNeverPromoted) {
  auto store = Make(8, NoWriteThrough());
  ASSERT_NE(store.store, nullptr);
  std::vector<std::byte> rec = MakeRecord(3);
  rec[kChunkHeaderBytes + 5] ^= std::byte{0xff};  // payload only: the header still parses
  ASSERT_TRUE(store.tier(1).Put(rec).ok());
  EXPECT_EQ(GetRecord(*store, KeyOf(3)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(store->stats().integrity_errors, 1u);
  EXPECT_FALSE(In(store.tier(1), 3));
  EXPECT_FALSE(In(store.tier(0), 3));
  EXPECT_EQ(GetRecord(*store, KeyOf(3)).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(HostOverDiskTest, FlushMakesEveryPutVisibleOnDisk) {
  auto store = Make(8, TieredStoreOptions{});
  ASSERT_NE(store.store, nullptr);
  for (uint64_t i = 0; i < 40; ++i) ASSERT_TRUE(PutRecord(*store, MakeRecord(i, 1 + i % 50)).ok());
  store->Flush();
  for (uint64_t i = 0; i < 40; ++i) {
    EXPECT_EQ(ReadFrom(store.tier(1), i), MakeRecord(i, 1 + i % 50)) << i;
  }
  EXPECT_EQ(store->stats().writebacks, 40u);
  EXPECT_EQ(store->stats().writeback_errors, 0u);
}
#endif  // KVT_TEST_HAVE_DISK_TIER

}  // namespace
}  // namespace kvt

// Issue 20: a tier's Put returns the records it evicted (PutResult::victims) and the store
// demotes them after the call; no tier calls back into the store in the middle of a Put.
// A disk tier reads a victim only when the next tier may lack it, and once. A disk hit is
// read once, straight into tier 0's memory, and viewed there (copies counted by the
// tiers' own instrumentation, TierStats::copy_bytes).
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/tiered_store.h"
#include "store_test_util.h"
#include "test_records.h"

namespace kvt {
namespace {

using testing::GetRecord;
using testing::PutRecord;

const NamespaceId kNs{0x3333, 0x4444};

ChunkKey KeyOf(uint64_t i) { return ChunkKey{i * 0x9E3779B97F4A7C15ull + 11, i}; }

std::vector<std::byte> MakeRecord(uint64_t i, uint32_t tokens) {
  const KvLayout layout = testing::Bytes32PerTokenLayout();
  std::vector<std::byte> payload(layout.payload_bytes(tokens));
  std::mt19937_64 rng(i * 131 + tokens);
  for (auto& b : payload) b = static_cast<std::byte>(rng());
  return testing::TestRecord(kNs, layout, KeyOf(i), RootKey(kNs), tokens, payload);
}

// Calls into wrapped tiers running on this thread; a call that starts while another is
// running on the same thread is a re-entry (a tier calling back up into the store, which
// calls a tier). The old eviction listener did exactly that: the host tier's Put called
// the store, which asked the next tier's Stat before the Put returned.
thread_local int t_depth = 0;
std::atomic<int> g_reentries{0};

class Scope {
 public:
  Scope() {
    if (t_depth++ > 0) g_reentries.fetch_add(1);
  }
  ~Scope() { --t_depth; }
};

class ReentryCheckingTier final : public Tier {
 public:
  explicit ReentryCheckingTier(std::unique_ptr<Tier> inner) : inner_(std::move(inner)) {}
  TierCaps caps() const override { return inner_->caps(); }
  using Tier::Put;
  absl::StatusOr<PutResult> Put(std::span<const std::byte> record,
                                const PutContext& context) override {
    Scope s;
    return inner_->Put(record, context);
  }
  absl::StatusOr<uint64_t> Get(const ChunkKey& k, std::span<std::byte> out) override {
    Scope s;
    return inner_->Get(k, out);
  }
  absl::StatusOr<uint64_t> CopyForWriteBack(const ChunkKey& k, std::span<std::byte> out) override {
    Scope s;
    return inner_->CopyForWriteBack(k, out);
  }
  std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys) override {
    Scope s;
    return inner_->Stat(keys);
  }
  absl::Status Erase(const ChunkKey& k) override {
    Scope s;
    return inner_->Erase(k);
  }
  absl::StatusOr<ListPage> List(const ListOptions& o) override {
    Scope s;
    return inner_->List(o);
  }
  TierStats stats() const override { return inner_->stats(); }
  PinHandle Pin(const ChunkKey& k) override {
    Scope s;
    return inner_->Pin(k);
  }

 private:
  std::unique_ptr<Tier> inner_;
};

std::unique_ptr<Tier> Host(uint64_t capacity, const char* name) {
  HostTierOptions o;
  o.capacity_bytes = capacity;
  o.name = name;
  o.use_pinned_memory = false;
  absl::StatusOr<std::unique_ptr<HostTier>> t = HostTier::Create(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TieredStoreOptions Placement(WriteThrough w) {
  TieredStoreOptions o;
  o.placement.write_through = w;
  return o;
}

std::vector<std::byte> ReadAll(Tier& tier, const ChunkKey& key) {
  absl::StatusOr<std::vector<std::byte>> r = testing::ReadRecord(tier, key);
  return r.ok() ? *r : std::vector<std::byte>{};
}

// Every record a Put into tier 0 evicted reaches tier 1 (the only way there: no
// write-through), byte for byte, and no tier was entered while another tier's call was
// running on the same thread.
TEST(TierVictimsTest, StoreDemotesVictimsAfterThePutWithoutReentry) {
  const uint64_t rec = MakeRecord(0, 12).size();
  auto top = std::make_unique<ReentryCheckingTier>(Host(4 * ((rec + 63) / 64 * 64), "top"));
  auto lower = std::make_unique<ReentryCheckingTier>(Host(1 << 20, "lower"));
  Tier* top_ptr = top.get();
  Tier* lower_ptr = lower.get();
  std::vector<TierFactory> tiers;
  tiers.push_back(UseTier(std::move(top)));
  tiers.push_back(UseTier(std::move(lower)));
  auto store = TieredStore::Create(std::move(tiers), Placement(WriteThrough::kNone));
  ASSERT_TRUE(store.ok()) << store.status();
  g_reentries = 0;
  for (uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(PutRecord(**store, MakeRecord(i, 12)).ok());
  (*store)->Flush();
  EXPECT_EQ(g_reentries.load(), 0) << "a tier was entered from inside another tier's call";
  EXPECT_EQ(top_ptr->stats().evictions, 8u);
  EXPECT_EQ((*store)->stats().demotions_queued, 8u);
  for (uint64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(ReadAll(*lower_ptr, KeyOf(i)), MakeRecord(i, 12)) << "victim " << i;
  }
  for (uint64_t i = 8; i < 12; ++i) EXPECT_EQ(ReadAll(*top_ptr, KeyOf(i)), MakeRecord(i, 12));
  // Promotions evict too (Get of a demoted record): their victims are demoted the same way.
  std::vector<std::byte> out(rec);
  GetInfo info;
  ASSERT_TRUE((*store)->Get(KeyOf(0), out, &info).ok());
  EXPECT_TRUE(info.promoted);
  (*store)->Flush();
  EXPECT_EQ(g_reentries.load(), 0);
  EXPECT_EQ(top_ptr->stats().evictions, 9u);
  EXPECT_EQ(ReadAll(*lower_ptr, KeyOf(8)), MakeRecord(8, 12));
}

class DiskVictimsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeScratchDir("kvt_tier_victims");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // host (2 records) -> disk (6 records of 4 KiB) -> host ("lower", large).
  absl::StatusOr<std::unique_ptr<TieredStore>> Make(WriteThrough w) {
    DiskTierOptions d;
    d.dir = dir_;
    d.capacity_bytes = 6 * 4096;
    d.file_bytes = 6 * 4096;
    std::vector<TierFactory> tiers;
    tiers.push_back(UseTier(Host(2 * 1024, "host")));
    tiers.push_back(testing::Capturing(DiskTier::Factory(d), &disk_));
    tiers.push_back(UseTier(Host(1 << 20, "lower")));
    return TieredStore::Create(std::move(tiers), Placement(w));
  }

  std::string dir_;
  DiskTier* disk_ = nullptr;
};

// Every Put is written through to the disk and the tier below it: a disk victim is
// there already, so the disk reads none back (victim_reads stays 0 while it evicts),
// and every record is still found below.
TEST_F(DiskVictimsTest, NoReadWhenTheNextTierHoldsEveryPutAlready) {
  auto store = Make(WriteThrough::kAll);
  ASSERT_TRUE(store.ok()) << store.status();
  for (uint64_t i = 0; i < 16; ++i) ASSERT_TRUE(PutRecord(**store, MakeRecord(i, 20)).ok());
  (*store)->Flush();
  EXPECT_GT(disk_->stats().evictions, 0u);
  EXPECT_EQ(disk_->extra_stats().victim_reads, 0u);
  EXPECT_EQ(disk_->extra_stats().record_reads, 0u);
  for (uint64_t i = 0; i < 16; ++i) {
    absl::StatusOr<std::vector<std::byte>> got = GetRecord(**store, KeyOf(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i, 20));
  }
}

// Nothing is written through: a disk victim exists nowhere else, so the disk reads it
// exactly once (no second read, no hash) and the store demotes it below.
TEST_F(DiskVictimsTest, EachVictimReadOnceWhenTheNextTierLacksIt) {
  auto store = Make(WriteThrough::kNone);
  ASSERT_TRUE(store.ok()) << store.status();
  for (uint64_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(PutRecord(**store, MakeRecord(i, 20)).ok());
    (*store)->Flush();  // one demotion at a time: the disk sees them in put order
  }
  const uint64_t evictions = disk_->stats().evictions;
  EXPECT_EQ(evictions, 16u - 2u - 6u);
  EXPECT_EQ(disk_->extra_stats().victim_reads, evictions);
  EXPECT_EQ(disk_->extra_stats().record_reads, evictions);
  EXPECT_EQ(disk_->stats().integrity_errors, 0u);
  for (uint64_t i = 0; i < 16; ++i) {
    // Each Get promotes into the 2-record tier 0, whose victims cascade down through the
    // write-back thread; a victim is in no tier and not yet queued while the tier that
    // evicted it is still inside its Put (a transient miss, never wrong bytes). Settle
    // the cascade before each read so the test sees every record where it lies.
    (*store)->Flush();
    absl::StatusOr<std::vector<std::byte>> got = GetRecord(**store, KeyOf(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i, 20));
  }
}

// A View of a record only on disk reads it once, straight into tier 0's arena (a
// chunk-sized record starts on a 4096-byte boundary there, so O_DIRECT needs no bounce
// but for the record's last partial block), keeps it there (promoted) and lends it.
TEST_F(DiskVictimsTest, ViewOfADiskHitReadsItOnceIntoTierZero) {
  DiskTierOptions d;
  d.dir = dir_;
  d.capacity_bytes = 16ull << 20;
  d.file_bytes = 16ull << 20;
  HostTier* host = nullptr;
  HostTierOptions h;
  h.capacity_bytes = 8ull << 20;
  h.use_pinned_memory = false;
  std::vector<TierFactory> tiers;
  tiers.push_back(testing::Capturing(HostTier::Factory(h), &host));
  tiers.push_back(testing::Capturing(DiskTier::Factory(d), &disk_));
  auto store = TieredStore::Create(std::move(tiers), {});
  ASSERT_TRUE(store.ok()) << store.status();
  const uint32_t tokens = (1u << 20) / 32 + 100;  // a chunk of ~1 MiB
  // Only on disk (put there directly): tier 0 has room, so the view evicts nothing.
  for (uint64_t i = 0; i < 2; ++i) ASSERT_TRUE(disk_->Put(MakeRecord(i, tokens)).ok());
  const ChunkKey key = KeyOf(0);
  ASSERT_FALSE(testing::Contains(*host, std::vector<ChunkKey>{key})[0]);
  const uint64_t rec = MakeRecord(0, tokens).size();
  const uint64_t before = host->stats().copy_bytes + disk_->stats().copy_bytes;
  GetInfo info;
  absl::StatusOr<RecordView> view = (*store)->View(key, &info);
  ASSERT_TRUE(view.ok()) << view.status();
  const uint64_t copied = host->stats().copy_bytes + disk_->stats().copy_bytes - before;
  EXPECT_EQ(std::vector<std::byte>(view->bytes().begin(), view->bytes().end()),
            MakeRecord(0, tokens));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(view->bytes().data()) % 4096, 0u);
  EXPECT_EQ(info.tier_index, MakeTierIndex(1));
  EXPECT_TRUE(info.promoted);
  EXPECT_TRUE(testing::Contains(*host, std::vector<ChunkKey>{key})[0]);
  // One copy: the read into tier 0, plus at most the last partial 4 KiB block bounced.
  EXPECT_GE(copied, rec);
  EXPECT_LT(copied, rec + 4096);
  EXPECT_EQ((*store)->stats().hits, 1u);
  EXPECT_EQ((*store)->stats().promotions, 1u);
  view->Release();
  // The Get into a plain (unaligned) vector costs more: it bounces every piece.
  std::vector<std::byte> unaligned(rec + 1);
  const uint64_t before_get = disk_->stats().copy_bytes;
  const ChunkKey key1 = KeyOf(1);
  ASSERT_FALSE(testing::Contains(*host, std::vector<ChunkKey>{key1})[0]);
  ASSERT_TRUE(disk_->Get(key1, std::span<std::byte>(unaligned).subspan(1)).ok());
  EXPECT_GE(disk_->stats().copy_bytes - before_get, 2 * rec);
}

}  // namespace
}  // namespace kvt

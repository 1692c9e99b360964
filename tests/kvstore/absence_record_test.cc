// AbsenceRecord (kvstore/absence_record.h): the last reason per key, bounded with
// oldest-first forgetting, hidden from callers who cannot see the key's namespace; and
// the store's Lookup with explain_misses over real tiers that reject, evict, expire and
// erase.
#include "kvstore/absence_record.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "kvstore/clock.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/tiered_store.h"
#include "store_test_util.h"
#include "test_records.h"

namespace kvt {
namespace {

const NamespaceId kNs{0x5151, 0x7272};
const NamespaceId kOtherNs{0x6161, 0x8282};
ChunkKey Key(uint64_t i) { return ChunkKey{i * 0x9E3779B97F4A7C15ull + 3, i + 1}; }
constexpr uint8_t Bit(TierKind k) { return static_cast<uint8_t>(1u << static_cast<unsigned>(k)); }

std::shared_ptr<AbsenceRecord> MakeRecord(size_t entries) {
  auto r = AbsenceRecord::Create(entries);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : nullptr;
}

TEST(AbsenceRecordTest, CreateRejectsAZeroOrHugeBound) {
  EXPECT_EQ(AbsenceRecord::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AbsenceRecord::Create(AbsenceRecord::kMaxEntries + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(AbsenceRecord::Create(1).ok());
}

TEST(AbsenceRecordTest, KeepsTheLastReasonPerKey) {
  auto r = MakeRecord(16);
  EXPECT_EQ(r->Find(Key(1), nullptr).reason, AbsenceReason::kNotStored);

  r->NoteRejected(Key(1), kNs, TierKind::kHost);
  r->NoteRejected(Key(1), kNs, TierKind::kDisk);  // the write-through was declined too
  Absence a = r->Find(Key(1), nullptr);
  EXPECT_EQ(a.reason, AbsenceReason::kRejected);
  EXPECT_EQ(a.tier, TierKind::kDisk);
  EXPECT_EQ(a.rejected_by, Bit(TierKind::kHost) | Bit(TierKind::kDisk));

  r->NoteRemoved(Key(2), kNs, TierKind::kHost, RemoveReason::kEvicted);
  r->NoteRemoved(Key(2), kNs, TierKind::kDisk, RemoveReason::kEvicted);
  a = r->Find(Key(2), nullptr);
  EXPECT_EQ(a.reason, AbsenceReason::kEvicted);
  EXPECT_EQ(a.tier, TierKind::kDisk);
  EXPECT_EQ(a.rejected_by, 0);

  // Evicted from host memory, then declined by the disk it was demoted to: a rejection by
  // the disk alone (the host's earlier decline, if any, no longer counts).
  r->NoteRejected(Key(3), kNs, TierKind::kHost);
  r->NoteRemoved(Key(3), kNs, TierKind::kHost, RemoveReason::kEvicted);
  r->NoteRejected(Key(3), kNs, TierKind::kDisk);
  a = r->Find(Key(3), nullptr);
  EXPECT_EQ(a.reason, AbsenceReason::kRejected);
  EXPECT_EQ(a.rejected_by, Bit(TierKind::kDisk));

  r->NoteRemoved(Key(4), kNs, TierKind::kHost, RemoveReason::kExpired);
  EXPECT_EQ(r->Find(Key(4), nullptr).reason, AbsenceReason::kExpired);
  EXPECT_EQ(r->Find(Key(4), nullptr).tier, TierKind::kHost);
  r->NoteRemoved(Key(4), kNs, TierKind::kDisk, RemoveReason::kErased);
  EXPECT_EQ(r->Find(Key(4), nullptr).reason, AbsenceReason::kErased);
  EXPECT_EQ(r->Find(Key(4), nullptr).tier, TierKind::kDisk);

  // A replaced record is still held: nothing noted.
  r->NoteRemoved(Key(5), kNs, TierKind::kHost, RemoveReason::kReplaced);
  EXPECT_EQ(r->Find(Key(5), nullptr).reason, AbsenceReason::kNotStored);
  EXPECT_EQ(r->size(), 4u);
  EXPECT_EQ(r->forgotten(), 0u);
}

TEST(AbsenceRecordTest, ForgetsTheOldestNoteOnceFullAndSaysSo) {
  auto r = MakeRecord(3);
  for (uint64_t i = 1; i <= 3; ++i) {
    r->NoteRemoved(Key(i), kNs, TierKind::kHost, RemoveReason::kEvicted);
  }
  EXPECT_EQ(r->Find(Key(99), nullptr).reason, AbsenceReason::kNotStored);
  // Key 1 noted again: now the newest; key 2 is the oldest.
  r->NoteRemoved(Key(1), kNs, TierKind::kDisk, RemoveReason::kEvicted);
  EXPECT_EQ(r->size(), 2u + 1u);
  EXPECT_EQ(r->forgotten(), 0u);  // key 1's old slot was reused by key 1 itself
  r->NoteRemoved(Key(4), kNs, TierKind::kHost, RemoveReason::kEvicted);
  EXPECT_EQ(r->size(), 3u);
  EXPECT_EQ(r->forgotten(), 1u);
  EXPECT_EQ(r->Find(Key(2), nullptr).reason, AbsenceReason::kNoRecord);   // forgotten
  EXPECT_EQ(r->Find(Key(99), nullptr).reason, AbsenceReason::kNoRecord);  // unknown now
  EXPECT_EQ(r->Find(Key(1), nullptr).reason, AbsenceReason::kEvicted);
  EXPECT_EQ(r->Find(Key(1), nullptr).tier, TierKind::kDisk);
  EXPECT_EQ(r->Find(Key(3), nullptr).reason, AbsenceReason::kEvicted);
  EXPECT_EQ(r->Find(Key(4), nullptr).reason, AbsenceReason::kEvicted);
}

TEST(AbsenceRecordTest, MemoryStaysWithinItsDocumentedBound) {
  constexpr size_t kEntries = 1000;
  auto r = MakeRecord(kEntries);
  for (uint64_t i = 0; i < 20 * kEntries; ++i) {
    r->NoteRemoved(Key(i), kNs, TierKind::kDisk, RemoveReason::kEvicted);
  }
  EXPECT_EQ(r->size(), kEntries);
  EXPECT_EQ(r->forgotten(), 19 * kEntries);
  EXPECT_GT(r->memory_bytes(), kEntries * 16);
  EXPECT_LE(r->memory_bytes(), kEntries * AbsenceRecord::kMaxBytesPerEntry);
  EXPECT_EQ(r->Find(Key(20 * kEntries - 1), nullptr).reason, AbsenceReason::kEvicted);
  EXPECT_EQ(r->Find(Key(0), nullptr).reason, AbsenceReason::kNoRecord);
}

TEST(AbsenceRecordTest, AnotherNamespacesKeyReadsAsNeverNoted) {
  auto r = MakeRecord(8);
  r->NoteRemoved(Key(1), kOtherNs, TierKind::kHost, RemoveReason::kEvicted);
  const auto mine = [](const NamespaceId& ns) { return ns == kNs; };
  // The same answer as a key nobody noted: nothing about the other tenant's key leaks.
  EXPECT_EQ(r->Find(Key(1), mine).reason, r->Find(Key(2), mine).reason);
  EXPECT_EQ(r->Find(Key(1), mine).reason, AbsenceReason::kNotStored);
  EXPECT_EQ(r->Find(Key(1), nullptr).reason, AbsenceReason::kEvicted);
}

// ---------------------------------------------------------------- over a store

// "lru" that declines the keys in `reject`.
class DecliningPolicy final : public CachePolicy {
 public:
  DecliningPolicy(std::unique_ptr<CachePolicy> inner, absl::flat_hash_set<ChunkKey> reject)
      : inner_(std::move(inner)), reject_(std::move(reject)) {}
  std::string_view name() const override { return "declining"; }
  bool Admit(const CacheEntryInfo& e, AdmitReason r) override {
    return !reject_.contains(e.key) && inner_->Admit(e, r);
  }
  void OnInsert(const CacheEntryInfo& e) override { inner_->OnInsert(e); }
  void OnAccess(const ChunkKey& k) override { inner_->OnAccess(k); }
  void OnRemove(const ChunkKey& k, RemoveReason r) override { inner_->OnRemove(k, r); }
  void VisitVictims(const std::function<bool(const ChunkKey&)>& visit) const override {
    inner_->VisitVictims(visit);
  }
  size_t size() const override { return inner_->size(); }

 private:
  std::unique_ptr<CachePolicy> inner_;
  absl::flat_hash_set<ChunkKey> reject_;
};

CachePolicyFactory Declining(absl::flat_hash_set<ChunkKey> reject) {
  return [reject](uint64_t capacity) -> absl::StatusOr<std::unique_ptr<CachePolicy>> {
    auto lru = MakeCachePolicy(CachePolicyOptions{}, capacity);
    if (!lru.ok()) return lru.status();
    return std::unique_ptr<CachePolicy>(new DecliningPolicy(std::move(*lru), reject));
  };
}

// 128 + 32 * 28 = 1024 bytes.
std::vector<std::byte> Record(uint64_t i, const NamespaceId& ns = kNs) {
  std::vector<std::byte> payload(32ull * 28, static_cast<std::byte>(i + 1));
  return testing::TestRecord(ns, testing::Bytes32PerTokenLayout(), Key(i), RootKey(ns), 28,
                             payload);
}

Absence Explain(TieredStore& store, uint64_t i,
                std::function<bool(const NamespaceId&)> visible = nullptr) {
  const ChunkKey k = Key(i);
  LookupResult r = store.Lookup(
      std::span(&k, 1), {.per_key = true, .visible = std::move(visible), .explain_misses = true});
  EXPECT_EQ(r.absence.size(), 1u);
  EXPECT_EQ(r.tier_index.size(), 1u);
  if (r.absence.size() != 1 || r.tier_index.size() != 1) return {};
  EXPECT_EQ(r.tier_index[0], kNoTier) << "key " << i << " is held";
  return r.absence[0];
}

HostTierOptions SmallHost(std::shared_ptr<AbsenceRecord> absence) {
  HostTierOptions h;
  h.capacity_bytes = 1500;  // one 1024-byte record
  h.use_pinned_memory = false;
  h.absence = std::move(absence);
  return h;
}

TEST(AbsenceRecordTest, StoreExplainsRejectionEvictionAndErasureOverHostAndDisk) {
  const std::string dir = testing::MakeScratchDir("absence");
  ASSERT_FALSE(dir.empty());
  auto absence = MakeRecord(1024);
  HostTierOptions h = SmallHost(absence);
  h.cache_policy_factory = Declining({Key(100)});
  DiskTierOptions d;
  d.dir = dir;
  d.capacity_bytes = 2 * 4096;  // two records (each padded to 4096)
  d.file_bytes = 2 * 4096;
  d.direct_io = false;
  d.force_pread = true;
  d.cache_policy_factory = Declining({Key(100)});
  d.absence = absence;
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory(h));
  tiers.push_back(DiskTier::Factory(d));
  auto store = TieredStore::Create(std::move(tiers), TieredStoreOptions{.absence = absence});
  ASSERT_TRUE(store.ok()) << store.status();

  ASSERT_TRUE(testing::PutRecord(**store, Record(100)).ok());
  (*store)->Flush();
  Absence a = Explain(**store, 100);
  EXPECT_EQ(a.reason, AbsenceReason::kRejected);
  EXPECT_EQ(a.rejected_by, Bit(TierKind::kHost) | Bit(TierKind::kDisk));

  for (uint64_t i = 1; i <= 4; ++i) {
    ASSERT_TRUE(testing::PutRecord(**store, Record(i)).ok());
    (*store)->Flush();
  }
  // Key 1 left host memory for key 2 and the disk for key 3: its last copy was evicted.
  a = Explain(**store, 1);
  EXPECT_EQ(a.reason, AbsenceReason::kEvicted);
  EXPECT_EQ(a.tier, TierKind::kDisk);

  // An operator's eviction of a held key.
  EvictSelector sel;
  sel.keys = {Key(4)};
  ASSERT_TRUE((*store)->Evict(sel).ok());
  a = Explain(**store, 4);
  EXPECT_EQ(a.reason, AbsenceReason::kErased);

  EXPECT_EQ(Explain(**store, 77).reason, AbsenceReason::kNotStored);
  // Another namespace's view of the rejected key: as if never noted.
  EXPECT_EQ(Explain(**store, 100, [](const NamespaceId& ns) { return ns == kOtherNs; }).reason,
            AbsenceReason::kNotStored);
  // Without explain_misses nothing is added.
  const ChunkKey k = Key(1);
  EXPECT_TRUE((*store)->Lookup(std::span(&k, 1), {.per_key = true}).absence.empty());
  store->reset();
  std::filesystem::remove_all(dir);
}

TEST(AbsenceRecordTest, StoreExplainsHostEvictionAndTtlExpiry) {
  auto clock = std::make_shared<ManualClock>();
  auto absence = MakeRecord(64);
  HostTierOptions h = SmallHost(absence);
  h.cache_policy.ttl = std::chrono::seconds(10);
  h.clock = clock;
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory(h));
  auto store =
      TieredStore::Create(std::move(tiers), TieredStoreOptions{.clock = clock, .absence = absence});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(testing::PutRecord(**store, Record(1)).ok());
  ASSERT_TRUE(testing::PutRecord(**store, Record(2)).ok());  // evicts 1
  Absence a = Explain(**store, 1);
  EXPECT_EQ(a.reason, AbsenceReason::kEvicted);
  EXPECT_EQ(a.tier, TierKind::kHost);
  clock->Advance(std::chrono::seconds(11));
  // Key 2's TTL ran out: dropped at the next put (as expired, not evicted).
  ASSERT_TRUE(testing::PutRecord(**store, Record(3, kNs)).ok());
  a = Explain(**store, 2);
  EXPECT_EQ(a.reason, AbsenceReason::kExpired);
  EXPECT_EQ(a.tier, TierKind::kHost);
}

}  // namespace
}  // namespace kvt

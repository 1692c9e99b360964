// The tiers' CachePolicy seam (kvstore/cache_policy.h): HostTier and DiskTier ask their
// policy to admit, tell it of inserts, uses, misses and removals, evict in its victim
// order and drop what it reports expired; the store tells a tier why a record comes
// (put, demotion, promotion).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/cache_policy.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/tiered_store.h"
#include "store_test_util.h"
#include "test_records.h"

namespace kvt {
namespace {

using ::kvt::testing::PutRecord;
using ::testing::ElementsAre;

// What a ScriptedPolicy was told, and what it answers. Shared with the test, which keeps
// it after the tier took the policy.
struct PolicyScript {
  // Keys Admit declines.
  absl::flat_hash_set<ChunkKey> reject;
  // Keys VisitExpired reports.
  absl::flat_hash_set<ChunkKey> expired;
  // Victim order: newest insert first when true (the opposite of LRU), else oldest first.
  bool newest_first = false;

  std::vector<std::pair<ChunkKey, AdmitReason>> admits;
  std::vector<ChunkKey> inserts, accesses, misses;
  std::vector<std::pair<ChunkKey, RemoveReason>> removes;
  std::vector<ChunkKey> held;  // insert order
};

// A policy that records every call and answers from its script. Not thread-safe (the
// tier calls it under its lock).
class ScriptedPolicy final : public CachePolicy {
 public:
  explicit ScriptedPolicy(std::shared_ptr<PolicyScript> script) : s_(std::move(script)) {}
  std::string_view name() const override { return "scripted"; }
  bool Admit(const CacheEntryInfo& entry, AdmitReason reason) override {
    s_->admits.emplace_back(entry.key, reason);
    return !s_->reject.contains(entry.key);
  }
  void OnInsert(const CacheEntryInfo& entry) override {
    s_->inserts.push_back(entry.key);
    std::erase(s_->held, entry.key);
    s_->held.push_back(entry.key);
  }
  void OnAccess(const ChunkKey& key) override { s_->accesses.push_back(key); }
  void OnMiss(const ChunkKey& key) override { s_->misses.push_back(key); }
  void OnRemove(const ChunkKey& key, RemoveReason reason) override {
    s_->removes.emplace_back(key, reason);
    std::erase(s_->held, key);
  }
  void VisitVictims(const std::function<bool(const ChunkKey&)>& visit) const override {
    std::vector<ChunkKey> order = s_->held;
    if (s_->newest_first) std::reverse(order.begin(), order.end());
    for (const ChunkKey& k : order) {
      if (!visit(k)) return;
    }
  }
  void VisitExpired(std::chrono::steady_clock::time_point,
                    const std::function<void(const ChunkKey&)>& visit) override {
    for (const ChunkKey& k : s_->held) {
      if (s_->expired.contains(k)) visit(k);
    }
  }
  size_t size() const override { return s_->held.size(); }

 private:
  std::shared_ptr<PolicyScript> s_;
};

CachePolicyFactory ScriptedFactory(std::shared_ptr<PolicyScript> script) {
  return [script](uint64_t) -> absl::StatusOr<std::unique_ptr<CachePolicy>> {
    return std::unique_ptr<CachePolicy>(new ScriptedPolicy(script));
  };
}

const NamespaceId kNs{0x5151, 0x7272};
ChunkKey Key(uint64_t i) { return ChunkKey{i * 0x9E3779B97F4A7C15ull + 3, i + 1}; }

// A record of `tokens` tokens of 32 bytes each (128 + 32 t bytes).
std::vector<std::byte> Record(uint64_t i, uint32_t tokens = 28) {
  std::vector<std::byte> payload(32ull * tokens, static_cast<std::byte>(i + 1));
  return testing::TestRecord(kNs, testing::Bytes32PerTokenLayout(), Key(i), RootKey(kNs), tokens,
                             payload);
}

std::unique_ptr<HostTier> ScriptedHostTier(uint64_t capacity,
                                           std::shared_ptr<PolicyScript> script) {
  HostTierOptions o;
  o.capacity_bytes = capacity;
  o.use_pinned_memory = false;
  o.cache_policy_factory = ScriptedFactory(std::move(script));
  absl::StatusOr<std::unique_ptr<HostTier>> t = HostTier::Create(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

bool Holds(Tier& tier, uint64_t i) {
  const ChunkKey k = Key(i);
  return tier.Stat(std::span(&k, 1))[0].present;
}

TEST(TierCachePolicyTest, HostTierDefaultPolicyIsLruAndRejectsAnUnknownName) {
  HostTierOptions o;
  EXPECT_EQ(o.cache_policy.name, "lru");
  o.cache_policy.name = "no-such-policy";
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.Validate().message()), ::testing::HasSubstr("cache_policy"));
  EXPECT_EQ(HostTier::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TierCachePolicyTest, HostTierStoresNothingThePolicyDeclinesAndCountsIt) {
  auto script = std::make_shared<PolicyScript>();
  script->reject.insert(Key(2));
  auto tier = ScriptedHostTier(1 << 20, script);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Put(Record(1)).ok());
  ASSERT_TRUE(tier->Put(Record(2)).ok());  // declined: still OK
  EXPECT_TRUE(Holds(*tier, 1));
  EXPECT_FALSE(Holds(*tier, 2));
  std::vector<std::byte> out(4096);
  EXPECT_EQ(tier->Get(Key(2), out).status().code(), absl::StatusCode::kNotFound);
  const TierStats st = tier->stats();
  EXPECT_EQ(st.admission_rejects, 1u);
  EXPECT_EQ(st.puts, 1u);
  EXPECT_EQ(st.chunks, 1u);
  EXPECT_EQ(st.used_bytes, Record(1).size());  // nothing reserved for the declined one
  EXPECT_THAT(script->inserts, ElementsAre(Key(1)));
  ASSERT_EQ(script->admits.size(), 2u);
  EXPECT_EQ(script->admits[0].second, AdmitReason::kPut);
}

TEST(TierCachePolicyTest, HostTierInPlacePutAsksAdmissionOnceTheHeaderIsWritten) {
  auto script = std::make_shared<PolicyScript>();
  script->reject.insert(Key(3));
  auto tier = ScriptedHostTier(1 << 20, script);
  ASSERT_NE(tier, nullptr);
  const std::vector<std::byte> rec = Record(3);
  absl::StatusOr<ChunkKey> key = tier->PutInPlace(rec.size(), [&](std::span<std::byte> out) {
    std::copy(rec.begin(), rec.end(), out.begin());
    return absl::OkStatus();
  });
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, Key(3));
  EXPECT_FALSE(Holds(*tier, 3));
  EXPECT_EQ(tier->stats().admission_rejects, 1u);
  EXPECT_EQ(tier->stats().used_bytes, 0u);  // the reserved extent was freed
}

TEST(TierCachePolicyTest, HostTierTellsThePolicyOfUsesAndMissesButNotOfStoreReads) {
  auto script = std::make_shared<PolicyScript>();
  auto tier = ScriptedHostTier(1 << 20, script);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Put(Record(1)).ok());
  std::vector<std::byte> out(4096);
  ASSERT_TRUE(tier->Get(Key(1), out).ok());               // access
  ASSERT_TRUE(tier->CopyForWriteBack(Key(1), out).ok());  // not a use
  const ChunkKey k1 = Key(1);
  (void)tier->Stat(std::span(&k1, 1));        // not a use
  { ASSERT_TRUE(tier->View(Key(1)).ok()); }   // access
  { EXPECT_TRUE(tier->Pin(Key(1))); }         // access
  EXPECT_FALSE(tier->Get(Key(9), out).ok());  // miss
  EXPECT_FALSE(tier->Pin(Key(8)));            // miss
  EXPECT_FALSE(tier->View(Key(7)).ok());      // not counted (Get follows)
  EXPECT_THAT(script->accesses, ElementsAre(Key(1), Key(1), Key(1)));
  EXPECT_THAT(script->misses, ElementsAre(Key(9), Key(8)));
  ASSERT_TRUE(tier->Put(Record(1)).ok());  // replaced
  ASSERT_TRUE(tier->Erase(Key(1)).ok());
  EXPECT_THAT(script->removes, ElementsAre(std::pair(Key(1), RemoveReason::kReplaced),
                                           std::pair(Key(1), RemoveReason::kErased)));
  EXPECT_EQ(script->held.size(), 0u);
}

TEST(TierCachePolicyTest, HostTierEvictsInThePolicysOrderSkippingPinned) {
  auto script = std::make_shared<PolicyScript>();
  script->newest_first = true;
  const uint64_t rec = Record(0).size();  // 1024 bytes
  auto tier = ScriptedHostTier(3 * rec, script);
  ASSERT_NE(tier, nullptr);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(tier->Put(Record(i)).ok());
  PinHandle pin = tier->Pin(Key(3));  // the policy's first victim, but pinned
  ASSERT_TRUE(pin);
  ASSERT_TRUE(tier->Put(Record(4)).ok());
  // LRU would have evicted 1; this policy names 3 (pinned, skipped), then 2.
  EXPECT_TRUE(Holds(*tier, 1));
  EXPECT_FALSE(Holds(*tier, 2));
  EXPECT_TRUE(Holds(*tier, 3));
  EXPECT_TRUE(Holds(*tier, 4));
  EXPECT_THAT(script->removes, ElementsAre(std::pair(Key(2), RemoveReason::kEvicted)));
  EXPECT_EQ(tier->stats().evictions, 1u);
  EXPECT_EQ(script->held.size(), tier->stats().chunks);
}

TEST(TierCachePolicyTest, HostTierDropsExpiredRecordsAtTheNextPut) {
  auto script = std::make_shared<PolicyScript>();
  auto tier = ScriptedHostTier(1 << 20, script);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Put(Record(1)).ok());
  ASSERT_TRUE(tier->Put(Record(2)).ok());
  script->expired = {Key(1), Key(2)};
  PinHandle pin = tier->Pin(Key(2));  // pinned: stays although expired
  ASSERT_TRUE(tier->Put(Record(3)).ok());
  EXPECT_FALSE(Holds(*tier, 1));
  EXPECT_TRUE(Holds(*tier, 2));
  EXPECT_TRUE(Holds(*tier, 3));
  EXPECT_EQ(tier->stats().ttl_expired, 1u);
  EXPECT_EQ(tier->stats().evictions, 0u);
  EXPECT_THAT(script->removes, ElementsAre(std::pair(Key(1), RemoveReason::kExpired)));
}

class DiskTierCachePolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeScratchDir("kvt-disk-policy");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::unique_ptr<DiskTier> Open(uint64_t capacity, std::shared_ptr<PolicyScript> script) {
    DiskTierOptions o;
    o.dir = dir_;
    o.capacity_bytes = capacity;
    o.file_bytes = capacity;
    o.direct_io = false;
    o.force_pread = true;
    if (script) o.cache_policy_factory = ScriptedFactory(std::move(script));
    auto t = DiskTier::Open(o);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }
  std::string dir_;
};

TEST_F(DiskTierCachePolicyTest, StoresNothingThePolicyDeclinesAndCountsIt) {
  auto script = std::make_shared<PolicyScript>();
  script->reject.insert(Key(2));
  auto tier = Open(64 * 4096, script);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->Put(Record(1), PutContext{AdmitReason::kDemotion}).ok());
  ASSERT_TRUE(tier->Put(Record(2)).ok());
  EXPECT_TRUE(Holds(*tier, 1));
  EXPECT_FALSE(Holds(*tier, 2));
  EXPECT_EQ(tier->stats().admission_rejects, 1u);
  EXPECT_EQ(tier->stats().used_bytes, 4096u);
  EXPECT_THAT(script->admits, ElementsAre(std::pair(Key(1), AdmitReason::kDemotion),
                                          std::pair(Key(2), AdmitReason::kPut)));
}

TEST_F(DiskTierCachePolicyTest, EvictsInThePolicysOrderAndReportsUsesAndMisses) {
  auto script = std::make_shared<PolicyScript>();
  script->newest_first = true;
  auto tier = Open(3 * 4096, script);  // three 1 KiB records, one 4 KiB block each
  ASSERT_NE(tier, nullptr);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(tier->Put(Record(i)).ok());
  std::vector<std::byte> out(4096);
  ASSERT_TRUE(tier->Get(Key(1), out).ok());
  EXPECT_FALSE(tier->Get(Key(9), out).ok());
  { EXPECT_TRUE(tier->Pin(Key(2))); }
  EXPECT_FALSE(tier->Pin(Key(8)));
  EXPECT_THAT(script->accesses, ElementsAre(Key(1), Key(2)));
  EXPECT_THAT(script->misses, ElementsAre(Key(9), Key(8)));
  ASSERT_TRUE(tier->Put(Record(4)).ok());
  EXPECT_FALSE(Holds(*tier, 3));  // newest first: 3 goes, LRU would have taken 2 (1 was read)
  EXPECT_TRUE(Holds(*tier, 1));
  EXPECT_TRUE(Holds(*tier, 2));
  EXPECT_THAT(script->removes, ElementsAre(std::pair(Key(3), RemoveReason::kEvicted)));
  EXPECT_EQ(script->held.size(), tier->stats().chunks);
}

TEST_F(DiskTierCachePolicyTest, DropsExpiredRecordsAtTheNextPutAndTheyStayGoneAfterReopen) {
  auto script = std::make_shared<PolicyScript>();
  {
    auto tier = Open(64 * 4096, script);
    ASSERT_NE(tier, nullptr);
    ASSERT_TRUE(tier->Put(Record(1)).ok());
    ASSERT_TRUE(tier->Put(Record(2)).ok());
    script->expired = {Key(1)};
    ASSERT_TRUE(tier->Put(Record(3)).ok());
    EXPECT_FALSE(Holds(*tier, 1));
    EXPECT_EQ(tier->stats().ttl_expired, 1u);
    EXPECT_EQ(tier->stats().used_bytes, 2 * 4096u);
    EXPECT_THAT(script->removes, ElementsAre(std::pair(Key(1), RemoveReason::kExpired)));
  }
  auto again = Open(64 * 4096, nullptr);
  ASSERT_NE(again, nullptr);
  EXPECT_FALSE(Holds(*again, 1));
  EXPECT_TRUE(Holds(*again, 2));
  EXPECT_TRUE(Holds(*again, 3));
}

TEST_F(DiskTierCachePolicyTest, OpenTellsThePolicyOfIndexedRecordsOldestAccessFirst) {
  {
    auto tier = Open(64 * 4096, nullptr);
    ASSERT_NE(tier, nullptr);
    for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(tier->Put(Record(i)).ok());
  }
  auto script = std::make_shared<PolicyScript>();
  auto tier = Open(64 * 4096, script);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(script->held.size(), 3u);
  EXPECT_EQ(script->held.size(), tier->stats().chunks);
}

// The store says why a record comes: a client's put, a demotion from tier 0, a
// promotion into tier 0.
TEST(TierCachePolicyTest, StoreTellsEachTierWhyARecordComes) {
  auto top = std::make_shared<PolicyScript>();
  auto below = std::make_shared<PolicyScript>();
  const uint64_t rec = Record(0).size();
  HostTierOptions h0;
  h0.capacity_bytes = 2 * rec;
  h0.use_pinned_memory = false;
  h0.cache_policy_factory = ScriptedFactory(top);
  HostTierOptions h1;
  h1.name = "host2";
  h1.capacity_bytes = 1 << 20;
  h1.use_pinned_memory = false;
  h1.cache_policy_factory = ScriptedFactory(below);
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory(h0));
  tiers.push_back(HostTier::Factory(h1));
  TieredStoreOptions so;
  so.placement.write_through = WriteThrough::kNone;  // lower tier gets demotions only
  auto store = TieredStore::Create(std::move(tiers), so);
  ASSERT_TRUE(store.ok()) << store.status();
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(PutRecord(**store, Record(i)).ok());
  (*store)->Flush();  // 1 was evicted from tier 0 and demoted
  EXPECT_THAT(below->admits, ElementsAre(std::pair(Key(1), AdmitReason::kDemotion)));
  std::vector<std::byte> out(4096);
  GetInfo info;
  ASSERT_TRUE((*store)->Get(Key(1), out, &info).ok());
  EXPECT_TRUE(info.promoted);
  ASSERT_EQ(top->admits.size(), 4u);
  EXPECT_EQ(top->admits[0], std::pair(Key(1), AdmitReason::kPut));
  EXPECT_EQ(top->admits[3], std::pair(Key(1), AdmitReason::kPromotion));
}

// A record tier 0's policy declines still reaches the tier below through the
// write-through, whose own policy decides (its Put is offered there as a kPut).
TEST(TierCachePolicyTest, RecordDeclinedByTierZeroIsWrittenThroughBelow) {
  auto top = std::make_shared<PolicyScript>();
  auto below = std::make_shared<PolicyScript>();
  top->reject.insert(Key(1));
  HostTierOptions h0;
  h0.capacity_bytes = 1 << 20;
  h0.use_pinned_memory = false;
  h0.cache_policy_factory = ScriptedFactory(top);
  HostTierOptions h1 = h0;
  h1.name = "host2";
  h1.cache_policy_factory = ScriptedFactory(below);
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory(h0));
  tiers.push_back(HostTier::Factory(h1));
  auto store = TieredStore::Create(std::move(tiers), TieredStoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(PutRecord(**store, Record(1)).ok());
  ASSERT_TRUE(PutRecord(**store, Record(2)).ok());
  (*store)->Flush();
  EXPECT_EQ((*store)->stats().tiers[0].admission_rejects, 1u);
  EXPECT_EQ((*store)->stats().tiers[0].chunks, 1u);  // only 2
  EXPECT_EQ((*store)->stats().tiers[1].chunks, 2u);  // 1 and 2
  EXPECT_THAT(below->admits, ::testing::UnorderedElementsAre(std::pair(Key(1), AdmitReason::kPut),
                                                             std::pair(Key(2), AdmitReason::kPut)));
  EXPECT_EQ((*store)->stats().writebacks_skipped, 0u);
  std::vector<std::byte> out(4096);
  auto n = (*store)->Get(Key(1), out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(std::vector<std::byte>(out.begin(), out.begin() + *n), Record(1));
}

}  // namespace
}  // namespace kvt

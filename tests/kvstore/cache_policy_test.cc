// The cache policies' decisions on small hand-built sequences (issue 24): what each
// admits, rejects and evicts, and when the TTL expires (a test clock, no sleeps).
#include "kvstore/cache_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kvt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uint64_t kRecord = 4096;

ChunkKey K(uint64_t n) { return ChunkKey{n, 0x5eed}; }

CachePolicyOptions Named(const std::string& name) {
  CachePolicyOptions o;
  o.name = name;
  return o;
}

// What a tier does around its policy, reduced to a set of keys with room for
// `capacity` records of kRecord bytes: Admit, then evict in VisitVictims order until
// there is room, then OnInsert; reads call OnAccess (held) or OnMiss (not held).
class FakeTier {
 public:
  FakeTier(const std::string& name, uint64_t capacity, std::chrono::seconds ttl = {},
           std::shared_ptr<Clock> clock = nullptr)
      : FakeTier(Options(name, ttl, std::move(clock)), capacity) {}
  FakeTier(const CachePolicyOptions& options, uint64_t capacity) : capacity_(capacity) {
    auto p = MakeCachePolicy(options, capacity * kRecord);
    EXPECT_TRUE(p.ok()) << p.status();
    policy_ = std::move(*p);
  }

  static CachePolicyOptions Options(const std::string& name, std::chrono::seconds ttl,
                                    std::shared_ptr<Clock> clock) {
    CachePolicyOptions options;
    options.name = name;
    options.ttl = ttl;
    options.clock = std::move(clock);
    return options;
  }

  // Stores `key` (child of `parent`); false when the policy declined it.
  bool Put(uint64_t key, uint64_t parent = 0) { return Offer(key, parent, AdmitReason::kPut); }
  // What the tier above evicted, offered to this one (TieredStore's demotion).
  bool Demote(uint64_t key) { return Offer(key, 0, AdmitReason::kDemotion); }
  bool Offer(uint64_t key, uint64_t parent, AdmitReason reason) {
    CacheEntryInfo info;
    info.key = K(key);
    if (parent != 0) info.parent = K(parent);
    info.record_bytes = kRecord;
    if (held_.contains(key)) {
      policy_->OnInsert(info);
      return true;
    }
    if (!policy_->Admit(info, reason)) return false;
    while (held_.size() + 1 > capacity_) {
      std::vector<ChunkKey> victims;
      policy_->VisitVictims([&](const ChunkKey& k) {
        victims.push_back(k);
        return false;
      });
      EXPECT_EQ(victims.size(), 1u);
      if (victims.empty()) return false;
      EXPECT_TRUE(held_.contains(victims[0].lo)) << victims[0].lo;
      held_.erase(victims[0].lo);
      evicted_.push_back(victims[0].lo);
      policy_->OnRemove(victims[0], RemoveReason::kEvicted);
    }
    held_.insert(key);
    policy_->OnInsert(info);
    return true;
  }
  // A read: true on a hit.
  bool Get(uint64_t key) {
    if (held_.contains(key)) {
      policy_->OnAccess(K(key));
      return true;
    }
    policy_->OnMiss(K(key));
    return false;
  }
  // Drops what the TTL says has expired at `now`; the keys dropped.
  std::vector<uint64_t> Expire(std::chrono::steady_clock::time_point now) {
    std::vector<uint64_t> out;
    policy_->VisitExpired(now, [&](const ChunkKey& k) { out.push_back(k.lo); });
    for (uint64_t k : out) {
      held_.erase(k);
      policy_->OnRemove(K(k), RemoveReason::kExpired);
    }
    return out;
  }
  // Every held key in the policy's eviction order.
  std::vector<uint64_t> VictimOrder() const {
    std::vector<uint64_t> out;
    policy_->VisitVictims([&](const ChunkKey& k) {
      out.push_back(k.lo);
      return true;
    });
    return out;
  }
  std::vector<uint64_t> TakeEvicted() { return std::exchange(evicted_, {}); }
  bool Holds(uint64_t key) const { return held_.contains(key); }
  size_t held() const { return held_.size(); }
  CachePolicy& policy() { return *policy_; }

 private:
  uint64_t capacity_;
  std::unique_ptr<CachePolicy> policy_;
  std::set<uint64_t> held_;
  std::vector<uint64_t> evicted_;
};

TEST(CachePolicyTest, FactoryKnowsEveryNameAndRejectsOthersNamingThem) {
  for (const std::string& name : CachePolicyNames()) {
    auto p = MakeCachePolicy(Named(name), 1 << 20);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status();
    EXPECT_EQ((*p)->name(), name == "default" ? kDefaultCachePolicy : name);
    EXPECT_EQ((*p)->size(), 0u);
  }
  auto bad = MakeCachePolicy(Named("mru"), 1 << 20);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'mru'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("adaptive"));
  CachePolicyOptions neg;
  neg.ttl = std::chrono::seconds(-1);
  EXPECT_THAT(neg.Validate().message(), HasSubstr("ttl"));
}

TEST(CachePolicyTest, LruEvictsTheLeastRecentlyUsed) {
  FakeTier t("lru", 3);
  EXPECT_TRUE(t.Put(1));
  EXPECT_TRUE(t.Put(2));
  EXPECT_TRUE(t.Put(3));
  EXPECT_TRUE(t.Get(1));
  EXPECT_TRUE(t.Put(4));
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(2));
  EXPECT_THAT(t.VictimOrder(), ElementsAre(3, 1, 4));
}

TEST(CachePolicyTest, LfuEvictsTheLeastUsedThenTheLeastRecent) {
  FakeTier t("lfu", 3);
  t.Put(1);
  t.Put(2);
  t.Put(3);
  t.Get(1);
  t.Get(1);
  t.Get(3);
  t.Put(4);  // uses: 1 -> 3, 2 -> 1, 3 -> 2: 2 goes
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(2));
  t.Put(5);  // 4 (1 use) goes before 3 (2 uses)
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(4));
  EXPECT_THAT(t.VictimOrder(), ElementsAre(5, 3, 1));
}

TEST(CachePolicyTest, ArcMovesReusedKeysToT2AndGrowsT1OnAGhostHit) {
  FakeTier t("arc", 2);
  t.Put(1);
  t.Put(2);
  t.Get(1);  // 1 used again: T2
  t.Put(3);  // T1 (2, 3's room) is over its target share (0): its oldest, 2, goes to B1
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(2));
  EXPECT_FALSE(t.Get(2));  // a B1 hit: T1's share grows to one record, 2 returns to T2
  t.Put(2);
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(1));  // T1 (3) is within its share: T2's 1 goes
  // T1 holds its share (3): T2's 2 would go first.
  EXPECT_THAT(t.VictimOrder(), ElementsAre(2, 3));
}

TEST(CachePolicyTest, S3FifoMovesReadKeysToMainAndRemembersTheOthers) {
  // Room for 10: the small FIFO's share is 1 record.
  FakeTier t("s3fifo", 10);
  for (uint64_t k = 1; k <= 10; ++k) t.Put(k);
  t.Get(1);   // read while in the small FIFO
  t.Put(11);  // 1 moves to main; 2 (never read) is the victim and becomes a ghost
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(2));
  t.Put(2);  // a ghost stored again goes to main; 3 leaves the small FIFO
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(3));
  EXPECT_TRUE(t.Holds(1));
  // The small FIFO (oldest first) down to its share (1 record), then main (1, 2), then
  // the rest.
  EXPECT_THAT(t.VictimOrder(), ElementsAre(4, 5, 6, 7, 8, 9, 10, 1, 2, 11));
}

CachePolicyOptions Declining() {
  CachePolicyOptions o = Named("default");
  o.adaptive_declines_first_seen = true;
  return o;
}

TEST(CachePolicyTest, DefaultStoresFirstSeenChunksOnlyWhileThereIsRoomWhenDeclining) {
  FakeTier t(Declining(), 4);
  for (uint64_t k = 1; k <= 4; ++k) EXPECT_TRUE(t.Put(k)) << k;  // free room: all stored
  EXPECT_FALSE(t.Put(5));  // full, and 5 was never seen: declined, nothing evicted
  // A lookup's miss and the store that follows it are one reference, not two.
  EXPECT_FALSE(t.Get(6));
  EXPECT_FALSE(t.Put(6));
  EXPECT_THAT(t.TakeEvicted(), IsEmpty());
  EXPECT_TRUE(t.Put(5));  // seen before now: stored, in place of the oldest
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(1));
  EXPECT_EQ(t.policy().size(), 4u);
}

TEST(CachePolicyTest, DefaultLearnsToStoreFirstSeenChunksWhenTheirReuseIsMissed) {
  FakeTier t(Declining(), 4);
  for (uint64_t k = 1; k <= 4; ++k) t.Put(k);
  EXPECT_FALSE(t.Put(5));  // declined, remembered as a first-seen key not kept
  EXPECT_FALSE(t.Put(6));
  // 5 is asked for again: keeping first-seen chunks would have hit, so their budget grows
  // (by one record) and 5 is stored (seen before now).
  EXPECT_FALSE(t.Get(5));
  EXPECT_TRUE(t.Put(5));
  EXPECT_TRUE(t.Put(7));  // first seen, but now within the budget
}

TEST(CachePolicyTest, DefaultPassesFirstSeenChunksThroughAndEvictsThemFirst) {
  // Without declining, a first-seen chunk is stored (TieredStore can then write it
  // through to a lower tier) but first-seen chunks go before chunks referenced before.
  FakeTier t("default", 4);
  for (uint64_t k = 1; k <= 4; ++k) EXPECT_TRUE(t.Put(k)) << k;
  EXPECT_TRUE(t.Put(5));
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(1));
  EXPECT_TRUE(t.Put(6));
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(2));
  EXPECT_FALSE(t.Get(1));  // 1 was referenced before: stored into main
  EXPECT_TRUE(t.Put(1));
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(3));
  EXPECT_THAT(t.VictimOrder(), ElementsAre(4, 5, 6, 1));
}

TEST(CachePolicyTest, DefaultCountsALookupsPinAndLoadAsOneReference) {
  // Capacity 1: the frequency sketch forgets (ages) after 10 references. 50 is referenced
  // once (a miss); then three requests each read the held chunk 1. Read as an engine
  // does (pin, then load, then its store), each request is two references and 50 is
  // still remembered: it is stored (a declining tier stores only chunks seen before).
  FakeTier one_each(Declining(), 1);
  EXPECT_TRUE(one_each.Put(1));  // free room
  EXPECT_FALSE(one_each.Get(50));
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(one_each.Get(1));         // the lookup's pin
    EXPECT_TRUE(one_each.Get(1));         // its load: the same reference
    EXPECT_FALSE(one_each.Put(100 + i));  // first seen, tier full: declined
  }
  EXPECT_TRUE(one_each.Put(50));
  // The same reads split by a store are two references each: the sketch ages before 50
  // comes back, and 50 reads as first seen.
  FakeTier split(Declining(), 1);
  EXPECT_TRUE(split.Put(1));
  EXPECT_FALSE(split.Get(50));
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(split.Get(1));
    EXPECT_FALSE(split.Put(100 + i));
    EXPECT_TRUE(split.Get(1));
  }
  EXPECT_FALSE(split.Put(50));
}

TEST(CachePolicyTest, DefaultTakesNoDemotionOfAChunkItLetGo) {
  // The default below another tier (stores first-seen chunks). TieredStore writes every
  // put through to it, so a demotion of a chunk it has seen is one its own order evicted
  // or declined: not written again. A chunk it never saw (a store without write-through)
  // is stored as a put would be.
  FakeTier t("default", 2);
  EXPECT_TRUE(t.Put(1));
  EXPECT_TRUE(t.Put(2));
  EXPECT_TRUE(t.Put(3));
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(1));
  EXPECT_FALSE(t.Demote(1));
  EXPECT_FALSE(t.Holds(1));
  EXPECT_TRUE(t.Demote(7));
  EXPECT_TRUE(t.Holds(7));
  EXPECT_THAT(t.TakeEvicted(), ElementsAre(2));
  EXPECT_EQ(t.policy().size(), 2u);
}

TEST(CachePolicyTest, DefaultEvictsAPromptsChainTailFirst) {
  // The chain 1 <- 2 <- 3 (each the parent of the next), stored parent first as an engine
  // does. LRU evicts the chain's first block first, which orphans the rest; the default
  // policy takes the tail first, so a prefix of the chain stays useful.
  FakeTier lru("lru", 3), def("default", 3);
  for (FakeTier* t : {&lru, &def}) {
    t->Put(1);
    t->Put(2, 1);
    t->Put(3, 2);
    t->Put(9);  // first seen: the default policy evicts a first-seen chunk for it ...
    t->Put(9);  // ... and 9, stored again, is referenced before: main
  }
  EXPECT_THAT(lru.TakeEvicted(), ElementsAre(1));
  EXPECT_THAT(def.TakeEvicted(), ElementsAre(3));
  EXPECT_THAT(def.VictimOrder(), ElementsAre(2, 1, 9));
}

TEST(CachePolicyTest, TtlExpiresRecordsUnusedForTheTtl) {
  using namespace std::chrono_literals;
  for (const char* name : {"lru", "default"}) {
    auto clock = std::make_shared<ManualClock>();  // the test's clock
    const Clock::TimePoint t0 = clock->Now();
    FakeTier t(name, 8, 10s, clock);
    t.Put(1);
    clock->Advance(5s);
    t.Put(2);
    EXPECT_THAT(t.Expire(t0 + 9s), IsEmpty()) << name;
    EXPECT_THAT(t.Expire(t0 + 10s), ElementsAre(1)) << name;
    clock->Advance(7s);
    EXPECT_TRUE(t.Get(2));  // a use restarts 2's TTL
    EXPECT_THAT(t.Expire(t0 + 16s), IsEmpty()) << name;
    EXPECT_THAT(t.Expire(t0 + 22s), ElementsAre(2)) << name;
    EXPECT_EQ(t.policy().size(), 0u) << name;
  }
}

// Every policy's bookkeeping agrees with the tier's after a long mixed sequence: the
// same count, and its victim order lists exactly the held keys.
TEST(CachePolicyTest, EveryPolicyTracksExactlyWhatTheTierHolds) {
  for (const std::string& name : CachePolicyNames()) {
    FakeTier t(name, 64);
    uint64_t x = 12345;
    for (int i = 0; i < 20000; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const uint64_t key = 1 + (x >> 33) % 300;
      if ((x >> 20) % 3 == 0) {
        t.Get(key);
      } else {
        t.Put(key, key > 1 && (x >> 40) % 2 ? key - 1 : 0);
      }
      ASSERT_EQ(t.policy().size(), t.held()) << name << " at step " << i;
    }
    std::vector<uint64_t> order = t.VictimOrder();
    std::sort(order.begin(), order.end());
    EXPECT_EQ(std::adjacent_find(order.begin(), order.end()), order.end()) << name;
    EXPECT_EQ(order.size(), t.held()) << name;
    for (uint64_t k : order) EXPECT_TRUE(t.Holds(k)) << name << " " << k;
  }
}

}  // namespace
}  // namespace kvt

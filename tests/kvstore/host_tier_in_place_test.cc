// HostTier's in-place paths (issue 14 #2 and #4): PutInPlace fills a reserved extent of the
// arena (one copy instead of a buffer and Put's copy) and publishes or abandons it; the
// TieredStore::Write with a fill writes the same bytes through to the lower tiers.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/host_tier.h"
#include "kvstore/tiered_store.h"
#include "store_test_util.h"
#include "test_records.h"

namespace kvt {
namespace {

using ::kvt::testing::GetRecord;
using ::kvt::testing::PutRecord;
using ::testing::HasSubstr;

const NamespaceId kNs{0x1111, 0x2222};

ChunkKey KeyOf(uint64_t i) { return ChunkKey{i * 0x9E3779B97F4A7C15ull + 7, i}; }

// 32 payload bytes per token: a record of t tokens is 128 + 32 t bytes.
std::vector<std::byte> MakeRecord(uint64_t i, uint32_t tokens, uint64_t seed = 0) {
  const KvLayout layout = testing::Bytes32PerTokenLayout();
  std::vector<std::byte> payload(layout.payload_bytes(tokens));
  std::mt19937_64 rng(i * 31 + tokens + seed * 1000003);
  for (auto& b : payload) b = static_cast<std::byte>(rng());
  return testing::TestRecord(kNs, layout, KeyOf(i), RootKey(kNs), tokens, payload);
}

std::unique_ptr<HostTier> MakeTier(uint64_t capacity) { return testing::MakeHostTier(capacity); }

// A fill that copies `rec` and counts its calls.
RecordFill CopyOf(const std::vector<std::byte>& rec, int* calls) {
  return [&rec, calls](std::span<std::byte> dst) {
    ++*calls;
    EXPECT_EQ(dst.size(), rec.size());
    std::memcpy(dst.data(), rec.data(), std::min(dst.size(), rec.size()));
    return absl::OkStatus();
  };
}

std::vector<std::byte> GetAll(Tier& tier, const ChunkKey& key) {
  std::vector<std::byte> out(1 << 16);
  absl::StatusOr<uint64_t> n = tier.Get(key, out);
  if (!n.ok()) return {};
  out.resize(*n);
  return out;
}

uint64_t RoundUp64(uint64_t n) { return (n + 63) / 64 * 64; }

TEST(HostTierInPlaceTest, StoresExactlyTheFilledBytes) {
  auto tier = MakeTier(1 << 20);
  const std::vector<std::byte> rec = MakeRecord(1, 10);
  int calls = 0;
  absl::StatusOr<ChunkKey> key = tier->PutInPlace(rec.size(), CopyOf(rec, &calls));
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, KeyOf(1));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(GetAll(*tier, KeyOf(1)), rec);
  const TierStats s = tier->stats();
  EXPECT_EQ(s.puts, 1u);
  EXPECT_EQ(s.bytes_in, rec.size());
  EXPECT_EQ(s.chunks, 1u);
  EXPECT_EQ(s.used_bytes, RoundUp64(rec.size()));
}

// While `fill` runs, the reservation counts in used_bytes, the new record is invisible
// and the old record of the key is still what Stat/Get answer.
TEST(HostTierInPlaceTest, ReservationIsInvisibleUntilPublished) {
  auto tier = MakeTier(1 << 20);
  const std::vector<std::byte> old_rec = MakeRecord(1, 10);
  const std::vector<std::byte> new_rec = MakeRecord(1, 20, /*seed=*/1);
  ASSERT_TRUE(tier->Put(old_rec).ok());
  absl::StatusOr<ChunkKey> key = tier->PutInPlace(new_rec.size(), [&](std::span<std::byte> dst) {
    std::memcpy(dst.data(), new_rec.data(), new_rec.size());
    const ChunkKey k = KeyOf(1);
    const ChunkStat st = tier->Stat(std::span(&k, 1))[0];
    EXPECT_TRUE(st.present);
    EXPECT_EQ(st.record_bytes, old_rec.size());
    EXPECT_EQ(GetAll(*tier, k), old_rec);
    EXPECT_EQ(tier->stats().used_bytes, RoundUp64(old_rec.size()) + RoundUp64(new_rec.size()));
    return absl::OkStatus();
  });
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(GetAll(*tier, KeyOf(1)), new_rec);
  EXPECT_EQ(tier->stats().used_bytes, RoundUp64(new_rec.size()));
  EXPECT_EQ(tier->stats().chunks, 1u);
}

// A fill that fails (the caller's check) abandons the reservation: its error comes back
// unchanged, the old record stays, and the space is free again.
TEST(HostTierInPlaceTest, FillErrorAbandonsAndKeepsTheOldRecord) {
  auto tier = MakeTier(1 << 20);
  const std::vector<std::byte> old_rec = MakeRecord(1, 10);
  ASSERT_TRUE(tier->Put(old_rec).ok());
  const std::vector<std::byte> new_rec = MakeRecord(1, 10, /*seed=*/2);
  absl::StatusOr<ChunkKey> key = tier->PutInPlace(new_rec.size(), [&](std::span<std::byte> dst) {
    std::memcpy(dst.data(), new_rec.data(), new_rec.size());
    return absl::PermissionDeniedError("tenant check says no");
  });
  EXPECT_EQ(key.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(key.status().message(), "tenant check says no");
  EXPECT_EQ(GetAll(*tier, KeyOf(1)), old_rec);
  EXPECT_EQ(tier->stats().used_bytes, RoundUp64(old_rec.size()));
  EXPECT_EQ(tier->stats().puts, 1u);
}

// The header is checked from the filled bytes: a corrupt header or one whose length
// differs from record_bytes is refused, and nothing is stored.
TEST(HostTierInPlaceTest, BadFilledHeaderIsRefusedAndNothingStored) {
  auto tier = MakeTier(1 << 20);
  const std::vector<std::byte> rec = MakeRecord(1, 10);
  absl::StatusOr<ChunkKey> corrupt = tier->PutInPlace(rec.size(), [&](std::span<std::byte> dst) {
    std::memcpy(dst.data(), rec.data(), rec.size());
    dst[20] ^= std::byte{0x40};  // inside the header: its checksum no longer matches
    return absl::OkStatus();
  });
  EXPECT_FALSE(corrupt.ok());
  EXPECT_THAT(corrupt.status().code(),
              ::testing::AnyOf(absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument,
                               absl::StatusCode::kFailedPrecondition));
  absl::StatusOr<ChunkKey> longer =
      tier->PutInPlace(rec.size() + 64, [&](std::span<std::byte> dst) {
        std::memcpy(dst.data(), rec.data(), rec.size());
        std::memset(dst.data() + rec.size(), 0, 64);
        return absl::OkStatus();
      });
  EXPECT_EQ(longer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(longer.status().message()), HasSubstr("header says"));
  EXPECT_TRUE(GetAll(*tier, KeyOf(1)).empty());
  EXPECT_EQ(tier->stats().used_bytes, 0u);
  EXPECT_EQ(tier->stats().chunks, 0u);
}

TEST(HostTierInPlaceTest, NoRoomOrNoHeaderIsRefusedBeforeFilling) {
  auto tier = MakeTier(4096);
  int calls = 0;
  const std::vector<std::byte> big = MakeRecord(1, 200);  // 6528 bytes > 4096
  EXPECT_EQ(tier->PutInPlace(big.size(), CopyOf(big, &calls)).status().code(),
            absl::StatusCode::kResourceExhausted);
  const std::vector<std::byte> small = MakeRecord(2, 1);
  absl::StatusOr<ChunkKey> tiny = tier->PutInPlace(kChunkHeaderBytes - 1, CopyOf(small, &calls));
  EXPECT_EQ(tiny.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tiny.status().message()), HasSubstr("127"));
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(tier->stats().used_bytes, 0u);
}

// In-place puts evict like Put: they return the exact older records as victims.
TEST(HostTierInPlaceTest, EvictsLeastRecentlyUsedLikePut) {
  std::vector<ChunkKey> evicted;
  const uint64_t rec_bytes = MakeRecord(0, 30).size();  // 1088 bytes
  auto tier = MakeTier(3 * RoundUp64(rec_bytes));
  for (uint64_t i = 0; i < 5; ++i) {
    const std::vector<std::byte> rec = MakeRecord(i, 30);
    int calls = 0;
    absl::StatusOr<PutResult> put =
        tier->PutInPlace(rec.size(), CopyOf(rec, &calls), PutContext{.keep_victims = true});
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_EQ(put->key, KeyOf(i));
    for (const Victim& v : put->victims) {
      EXPECT_EQ(v.record.size, rec_bytes);
      EXPECT_EQ(std::vector<std::byte>(v.record.span().begin(), v.record.span().end()),
                MakeRecord(v.key == KeyOf(0) ? 0 : 1, 30));
      evicted.push_back(v.key);
    }
  }
  EXPECT_EQ(evicted, (std::vector<ChunkKey>{KeyOf(0), KeyOf(1)}));
  for (uint64_t i = 2; i < 5; ++i) EXPECT_EQ(GetAll(*tier, KeyOf(i)), MakeRecord(i, 30));
}

// A source another thread keeps rewriting (a client's shared memory): whatever the fill's
// one copy saw is what the fill checks, what tier 0 stores and what the store writes
// through to the lower tier, byte for byte.
TEST(HostTierInPlaceTest, StoreWritesThroughTheFilledBytesNotTheSource) {
  HostTier* top = nullptr;
  HostTier* lower = nullptr;
  HostTierOptions o;
  o.capacity_bytes = 1 << 20;
  std::vector<TierFactory> tiers;
  tiers.push_back(testing::Capturing(HostTier::Factory(o), &top));
  o.name = "lower";
  tiers.push_back(testing::Capturing(HostTier::Factory(o), &lower));
  auto store = TieredStore::Create(std::move(tiers), {});
  ASSERT_TRUE(store.ok()) << store.status();

  const std::vector<std::byte> a = MakeRecord(1, 20, /*seed=*/1);
  const std::vector<std::byte> b = MakeRecord(1, 20, /*seed=*/2);
  std::vector<std::byte> source = a;
  std::atomic<bool> stop{false};
  std::thread writer([&] {  // flips payload bytes between a's and b's, each state ~20 us
    for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      const std::vector<std::byte>& from = i % 2 ? b : a;
      for (size_t j = kChunkHeaderBytes; j < source.size(); j += 31)
        std::atomic_ref<std::byte>(source[j]).store(from[j], std::memory_order_relaxed);
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
  });
  int accepted = 0, refused = 0;
  // The last round runs with the writer stopped and the source at rest (a), so the
  // comparisons run at least once whatever the scheduler did.
  for (int round = 0; round < 51; ++round) {
    if (round == 50) {
      stop.store(true);
      writer.join();
      source = a;
    }
    std::vector<std::byte> checked;
    absl::StatusOr<ChunkKey> key = (*store)->Write(
        {.record_bytes = source.size(), .fill = [&](std::span<std::byte> dst) -> absl::Status {
           for (size_t j = 0; j < dst.size(); ++j)
             dst[j] = std::atomic_ref<std::byte>(source[j]).load(std::memory_order_relaxed);
           absl::StatusOr<ChunkHeader> h = VerifyChunk(dst, {kNs, KeyOf(1)});
           if (!h.ok()) return h.status();  // a torn mix of a and b: refused
           checked.assign(dst.begin(), dst.end());
           return absl::OkStatus();
         }});
    if (!key.ok()) {
      EXPECT_EQ(key.status().code(), absl::StatusCode::kDataLoss) << key.status();
      ++refused;
      continue;
    }
    ++accepted;
    (*store)->Flush();
    EXPECT_EQ(GetAll(*top, KeyOf(1)), checked);
    EXPECT_EQ(GetAll(*lower, KeyOf(1)), checked);
  }
  std::printf("rewritten source: %d accepted, %d refused\n", accepted, refused);
  EXPECT_EQ(accepted + refused, 51);
  EXPECT_GE(accepted, 1);
  EXPECT_EQ(GetAll(*lower, KeyOf(1)), a);
}

// When tier 0 has no room, the store fills a buffer instead and Put places the record in
// the lower tier (fill called once); a fill error through the store stores nothing.
TEST(HostTierInPlaceTest, StoreFallsBackWhenTierZeroHasNoRoom) {
  HostTier* lower = nullptr;
  HostTierOptions top_o;
  top_o.capacity_bytes = 4096;
  HostTierOptions lower_o;
  lower_o.capacity_bytes = 1 << 20;
  lower_o.name = "lower";
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory(top_o));
  tiers.push_back(testing::Capturing(HostTier::Factory(lower_o), &lower));
  auto store = TieredStore::Create(std::move(tiers), {});
  ASSERT_TRUE(store.ok()) << store.status();
  const std::vector<std::byte> big = MakeRecord(1, 200);
  int calls = 0;
  absl::StatusOr<ChunkKey> key =
      (*store)->Write({.record_bytes = big.size(), .fill = CopyOf(big, &calls)});
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(calls, 1);
  (*store)->Flush();
  EXPECT_EQ(GetAll(*lower, KeyOf(1)), big);

  absl::StatusOr<ChunkKey> refused =
      (*store)->Write({.record_bytes = big.size(),
                       .fill = [](std::span<std::byte>) { return absl::AbortedError("no"); }});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAborted);
  const std::vector<std::byte> small = MakeRecord(2, 10);
  refused = (*store)->Write({.record_bytes = small.size(), .fill = [&](std::span<std::byte> dst) {
                               std::memcpy(dst.data(), small.data(), small.size());
                               return absl::AbortedError("no");
                             }});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAborted);
  (*store)->Flush();
  EXPECT_FALSE(GetRecord(**store, KeyOf(2)).ok());
}

// View lends the record's own bytes and counts a hit; a miss is NotFound and not counted.
TEST(HostTierInPlaceTest, ViewLendsTheStoredBytesAndCountsAHit) {
  auto tier = MakeTier(1 << 20);
  const std::vector<std::byte> rec = MakeRecord(1, 10);
  ASSERT_TRUE(tier->Put(rec).ok());
  {
    absl::StatusOr<RecordView> view = tier->View(KeyOf(1));
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_TRUE(*view);
    EXPECT_TRUE(std::equal(view->bytes().begin(), view->bytes().end(), rec.begin(), rec.end()));
    // Moving a view moves its hold: one release only.
    RecordView moved = std::move(*view);
    EXPECT_FALSE(*view);
    EXPECT_TRUE(view->bytes().empty());
    EXPECT_EQ(moved.bytes().size(), rec.size());
    moved.Release();
    EXPECT_TRUE(moved.bytes().empty());
    moved.Release();  // idempotent
  }
  EXPECT_EQ(tier->View(KeyOf(2)).status().code(), absl::StatusCode::kNotFound);
  const TierStats s = tier->stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.bytes_out, rec.size());
}

// A view keeps its record alive and unchanged across eviction pressure, replacement and
// erase; the extent is freed when the view is released, not before.
TEST(HostTierInPlaceTest, ViewKeepsTheRecordAcrossEvictionReplaceAndErase) {
  const uint64_t rec_bytes = MakeRecord(0, 30).size();  // 1088 bytes
  std::vector<ChunkKey> evicted;
  auto tier = MakeTier(3 * RoundUp64(rec_bytes));
  const std::vector<std::byte> rec0 = MakeRecord(0, 30);
  ASSERT_TRUE(tier->Put(rec0).ok());
  absl::StatusOr<RecordView> view = tier->View(KeyOf(0));
  ASSERT_TRUE(view.ok()) << view.status();
  // Key 0 is the least recently used from here on; the viewed record is skipped.
  for (uint64_t i = 1; i < 6; ++i) {
    absl::StatusOr<PutResult> put = tier->Put(MakeRecord(i, 30), PutContext{.keep_victims = true});
    ASSERT_TRUE(put.ok()) << i << ": " << put.status();
    for (const Victim& v : put->victims) evicted.push_back(v.key);
  }
  EXPECT_EQ(evicted.size(), 3u);
  EXPECT_EQ(std::count(evicted.begin(), evicted.end(), KeyOf(0)), 0);
  EXPECT_TRUE(std::equal(view->bytes().begin(), view->bytes().end(), rec0.begin(), rec0.end()));
  // Replaced and then erased while viewed: the view still reads the old bytes, and the
  // old extent stays counted until it is released.
  const std::vector<std::byte> rec0b = MakeRecord(0, 30, /*seed=*/3);
  ASSERT_TRUE(tier->Put(rec0b).ok());
  EXPECT_EQ(GetAll(*tier, KeyOf(0)), rec0b);
  ASSERT_TRUE(tier->Erase(KeyOf(0)).ok());
  EXPECT_TRUE(GetAll(*tier, KeyOf(0)).empty());
  EXPECT_TRUE(std::equal(view->bytes().begin(), view->bytes().end(), rec0.begin(), rec0.end()));
  const uint64_t used_viewed = tier->stats().used_bytes;
  view->Release();
  EXPECT_EQ(tier->stats().used_bytes, used_viewed - RoundUp64(rec_bytes));
  // With the view gone its space is usable again: three records fit.
  for (uint64_t i = 10; i < 13; ++i) ASSERT_TRUE(tier->Put(MakeRecord(i, 30)).ok()) << i;
  EXPECT_EQ(tier->stats().chunks, 3u);
}

// Everything viewed: a Put that needs the space is ResourceExhausted, nothing is lost.
TEST(HostTierInPlaceTest, ViewedRecordsAreNotEvictable) {
  const uint64_t rec_bytes = MakeRecord(0, 30).size();
  auto tier = MakeTier(2 * RoundUp64(rec_bytes));
  ASSERT_TRUE(tier->Put(MakeRecord(0, 30)).ok());
  ASSERT_TRUE(tier->Put(MakeRecord(1, 30)).ok());
  absl::StatusOr<RecordView> v0 = tier->View(KeyOf(0));
  absl::StatusOr<RecordView> v1 = tier->View(KeyOf(1));
  ASSERT_TRUE(v0.ok() && v1.ok());
  int calls = 0;
  const std::vector<std::byte> rec2 = MakeRecord(2, 30);
  EXPECT_EQ(tier->Put(rec2).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(tier->PutInPlace(rec2.size(), CopyOf(rec2, &calls)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(GetAll(*tier, KeyOf(0)), MakeRecord(0, 30));
  v0->Release();
  EXPECT_TRUE(tier->PutInPlace(rec2.size(), CopyOf(rec2, &calls)).ok());
  EXPECT_EQ(GetAll(*tier, KeyOf(1)), MakeRecord(1, 30));  // still viewed: it stayed
}

// The store views tier 0's records where they lie (a hit counted once); a lower tier's
// record is read once into tier 0 (promoted in place) and viewed there; a record in no
// tier is NotFound and not counted (the caller falls back to Get, which counts it).
TEST(HostTierInPlaceTest, StoreViewsTierZeroAndPromotesLowerHitsInPlace) {
  HostTier* lower = nullptr;
  HostTierOptions o;
  o.capacity_bytes = 1 << 20;
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory(o));
  o.name = "lower";
  tiers.push_back(testing::Capturing(HostTier::Factory(o), &lower));
  auto store = TieredStore::Create(std::move(tiers), {.placement = {WriteThrough::kNone}});
  ASSERT_TRUE(store.ok()) << store.status();
  const std::vector<std::byte> rec = MakeRecord(1, 10);
  ASSERT_TRUE(PutRecord(**store, rec).ok());
  ASSERT_TRUE(lower->Put(MakeRecord(2, 10)).ok());
  GetInfo info;
  absl::StatusOr<RecordView> view = (*store)->View(KeyOf(1), &info);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(info.tier_index, MakeTierIndex(0));
  EXPECT_TRUE(std::equal(view->bytes().begin(), view->bytes().end(), rec.begin(), rec.end()));
  view->Release();
  absl::StatusOr<RecordView> below = (*store)->View(KeyOf(2), &info);
  ASSERT_TRUE(below.ok()) << below.status();
  EXPECT_EQ(info.tier_index, MakeTierIndex(1));
  EXPECT_TRUE(info.promoted);
  const std::vector<std::byte> rec2 = MakeRecord(2, 10);
  EXPECT_TRUE(std::equal(below->bytes().begin(), below->bytes().end(), rec2.begin(), rec2.end()));
  below->Release();
  EXPECT_EQ((*store)->View(KeyOf(3)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->stats().hits, 2u);
  EXPECT_EQ((*store)->stats().promotions, 1u);
  EXPECT_EQ((*store)->stats().misses, 0u);
  // Promoted: tier 0 lends it from now on.
  ASSERT_TRUE((*store)->View(KeyOf(2), &info).ok());
  EXPECT_EQ(info.tier_index, MakeTierIndex(0));

  // A tier that cannot lend its records (the default View).
  auto plain = MakeTier(1 << 20);
  ASSERT_TRUE(plain->Put(rec).ok());
  testing::GatedTier wrapped(std::move(plain));
  wrapped.Open();
  EXPECT_EQ(wrapped.View(KeyOf(1)).status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kvt

#include "kvstore/host_tier.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "store_test_util.h"
#include "test_records.h"

namespace kvt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const NamespaceId kNs{0x1111, 0x2222};

// 32 payload bytes per token: a record of t tokens is 128 + 32 t bytes.
KvLayout SmallLayout() { return testing::Bytes32PerTokenLayout(); }

ChunkKey KeyOf(uint64_t i) { return ChunkKey{i * 0x9E3779B97F4A7C15ull + 7, i}; }

uint64_t RecordBytes(uint32_t tokens) { return kChunkHeaderBytes + 32ull * tokens; }

std::vector<std::byte> MakeRecord(uint64_t i, uint32_t tokens, NamespaceId ns = kNs) {
  std::vector<std::byte> payload(SmallLayout().payload_bytes(tokens));
  std::mt19937_64 rng(i * 31 + tokens);
  for (auto& b : payload) b = static_cast<std::byte>(rng());
  return testing::TestRecord(ns, SmallLayout(), KeyOf(i), RootKey(ns), tokens, payload);
}

std::unique_ptr<HostTier> MakeTier(uint64_t capacity) { return testing::MakeHostTier(capacity); }

bool Has(HostTier& tier, uint64_t i) {
  ChunkKey k = KeyOf(i);
  return tier.Stat(std::span(&k, 1))[0].present;
}

TEST(HostTierTest, OptionsValidateRejectsBadValues) {
  HostTierOptions o;
  o.capacity_bytes = 0;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.Validate().message()), HasSubstr("capacity_bytes"));
  o.capacity_bytes = 4096;
  o.alignment = 48;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.Validate().message()), HasSubstr("alignment"));
  EXPECT_EQ(HostTier::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.alignment = 64;
  EXPECT_TRUE(o.Validate().ok());
}

TEST(HostTierTest, PutThenGetReturnsSameBytes) {
  auto tier = MakeTier(1 << 20);
  std::vector<std::byte> rec = MakeRecord(1, 10);
  ASSERT_TRUE(tier->Put(rec).ok());
  std::vector<std::byte> out(rec.size() + 100);
  absl::StatusOr<uint64_t> n = tier->Get(KeyOf(1), out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, rec.size());
  EXPECT_EQ(0, std::memcmp(out.data(), rec.data(), rec.size()));
  EXPECT_TRUE(VerifyChunk(std::span(out).first(*n), {kNs, KeyOf(1)}).ok());
  EXPECT_EQ(*kvt::testing::RecordSize(*tier, KeyOf(1)), rec.size());
  TierStats s = tier->stats();
  EXPECT_EQ(s.puts, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.chunks, 1u);
  EXPECT_EQ(s.bytes_in, rec.size());
  EXPECT_EQ(s.bytes_out, rec.size());
  EXPECT_EQ(s.used_bytes, (rec.size() + 63) / 64 * 64);
  EXPECT_EQ(s.capacity_bytes, 1u << 20);
  EXPECT_EQ(tier->caps().kind, TierKind::kHost);
  EXPECT_EQ(tier->caps().name, "host");
  EXPECT_FALSE(tier->caps().verifies_reads);
  EXPECT_TRUE(tier->caps().pinnable);
}

TEST(HostTierTest, MissIsNotFound) {
  auto tier = MakeTier(1 << 20);
  std::vector<std::byte> out(4096);
  EXPECT_EQ(tier->Get(KeyOf(9), out).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(kvt::testing::RecordSize(*tier, KeyOf(9)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tier->stats().misses, 1u);
  EXPECT_TRUE(tier->Erase(KeyOf(9)).ok());
  EXPECT_FALSE(static_cast<bool>(tier->Pin(KeyOf(9))));
}

TEST(HostTierTest, GetIntoSmallBufferIsOutOfRangeNamingTheSize) {
  auto tier = MakeTier(1 << 20);
  std::vector<std::byte> rec = MakeRecord(1, 10);
  ASSERT_TRUE(tier->Put(rec).ok());
  std::vector<std::byte> out(rec.size() - 1);
  absl::Status s = tier->Get(KeyOf(1), out).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(s.message()), HasSubstr(std::to_string(rec.size())));
}

TEST(HostTierTest, BadRecordsAreRejectedAndNothingStored) {
  auto tier = MakeTier(1 << 20);
  std::vector<std::byte> rec = MakeRecord(1, 10);
  std::vector<std::byte> bad_header = rec;
  bad_header[20] ^= std::byte{0x5a};
  EXPECT_EQ(tier->Put(bad_header).code(), absl::StatusCode::kDataLoss);
  std::vector<std::byte> longer = rec;
  longer.push_back(std::byte{0});
  EXPECT_EQ(tier->Put(longer).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Put(std::span(rec).first(rec.size() - 1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Has(*tier, 1));
  EXPECT_EQ(tier->stats().used_bytes, 0u);
}

TEST(HostTierTest, RecordLargerThanCapacityIsResourceExhaustedAndNothingLost) {
  auto tier = MakeTier(2048);
  ASSERT_TRUE(tier->Put(MakeRecord(1, 12)).ok());
  absl::Status s = tier->Put(MakeRecord(2, 100));  // 3328 bytes
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("3328"));
  EXPECT_TRUE(Has(*tier, 1));
  EXPECT_EQ(tier->stats().evictions, 0u);
}

TEST(HostTierTest, PuttingTenTimesCapacityNeverFailsNorExceedsCapacity) {
  constexpr uint64_t kCap = 64 * 1024;
  auto tier = MakeTier(kCap);
  std::mt19937 rng(42);
  uint64_t put_bytes = 0;
  uint64_t i = 0;
  uint64_t max_used = 0;
  while (put_bytes < 10 * kCap) {
    const uint32_t tokens = 1 + rng() % 120;  // 160..3968 bytes
    std::vector<std::byte> rec = MakeRecord(i, tokens);
    ASSERT_TRUE(tier->Put(rec).ok()) << "put " << i;
    TierStats s = tier->stats();
    ASSERT_LE(s.used_bytes, kCap) << "put " << i;
    max_used = std::max(max_used, s.used_bytes);
    ASSERT_TRUE(Has(*tier, i));
    put_bytes += rec.size();
    ++i;
  }
  TierStats s = tier->stats();
  EXPECT_EQ(s.puts, i);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_EQ(s.chunks + s.evictions, i);  // every key distinct: each was kept or evicted
  EXPECT_GT(max_used, kCap * 3 / 4);     // the arena really filled up
  // Every chunk still listed reads back verified.
  std::vector<std::byte> out(8192);
  for (uint64_t k = 0; k < i; ++k) {
    absl::StatusOr<uint64_t> n = tier->Get(KeyOf(k), out);
    if (!n.ok()) {
      ASSERT_EQ(n.status().code(), absl::StatusCode::kNotFound);
      continue;
    }
    ASSERT_TRUE(VerifyChunk(std::span(out).first(*n), {kNs, KeyOf(k)}).ok());
  }
}

TEST(HostTierTest, EvictsTheLeastRecentlyUsedKey) {
  std::vector<ChunkKey> evicted;
  auto tier = MakeTier(4 * RecordBytes(12));  // exactly four 512-byte records
  auto put = [&](const std::vector<std::byte>& rec) {
    absl::StatusOr<PutResult> r = tier->Put(rec, PutContext{.keep_victims = true});
    if (!r.ok()) return r.status();
    for (const Victim& v : r->victims) evicted.push_back(v.key);
    return absl::OkStatus();
  };
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(put(MakeRecord(i, 12)).ok());
  EXPECT_EQ(tier->stats().used_bytes, tier->caps().capacity_bytes);
  std::vector<std::byte> out(512);
  ASSERT_TRUE(tier->Get(KeyOf(0), out).ok());  // 0 is now the most recent; 1 the least
  ASSERT_TRUE(put(MakeRecord(4, 12)).ok());
  EXPECT_THAT(evicted, ElementsAre(KeyOf(1)));
  EXPECT_TRUE(Has(*tier, 0));
  EXPECT_FALSE(Has(*tier, 1));
  // Contains does not touch recency: 2 is next.
  ASSERT_TRUE(Has(*tier, 2));
  ASSERT_TRUE(put(MakeRecord(5, 12)).ok());
  EXPECT_THAT(evicted, ElementsAre(KeyOf(1), KeyOf(2)));
  EXPECT_EQ(tier->stats().evictions, 2u);
}

TEST(HostTierTest, PinnedChunkSurvivesEvictionPressure) {
  auto tier = MakeTier(8 * RecordBytes(12));
  ASSERT_TRUE(tier->Put(MakeRecord(0, 12)).ok());
  PinHandle pin1 = tier->Pin(KeyOf(0));
  PinHandle pin2 = tier->Pin(KeyOf(0));  // counted
  ASSERT_TRUE(pin1 && pin2);
  EXPECT_EQ(tier->stats().pinned_bytes, RecordBytes(12));
  for (uint64_t i = 1; i < 100; ++i) ASSERT_TRUE(tier->Put(MakeRecord(i, 12)).ok());
  EXPECT_TRUE(Has(*tier, 0));
  EXPECT_EQ(tier->stats().evictions, 100u - 8u);
  EXPECT_EQ(tier->Erase(KeyOf(0)).code(), absl::StatusCode::kFailedPrecondition);
  pin1.Release();
  EXPECT_EQ(tier->Erase(KeyOf(0)).code(), absl::StatusCode::kFailedPrecondition);
  pin2 = PinHandle();  // releases on reassignment
  EXPECT_EQ(tier->stats().pinned_bytes, 0u);
  EXPECT_TRUE(tier->Erase(KeyOf(0)).ok());
  EXPECT_FALSE(Has(*tier, 0));
}

TEST(HostTierTest, EverythingPinnedIsResourceExhaustedAndNothingLost) {
  auto tier = MakeTier(4 * RecordBytes(12));
  std::vector<PinHandle> pins;
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(tier->Put(MakeRecord(i, 12)).ok());
    pins.push_back(tier->Pin(KeyOf(i)));
    ASSERT_TRUE(pins.back());
  }
  EXPECT_EQ(tier->Put(MakeRecord(4, 12)).code(), absl::StatusCode::kResourceExhausted);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(Has(*tier, i));
  EXPECT_FALSE(Has(*tier, 4));
  EXPECT_EQ(tier->stats().evictions, 0u);
  EXPECT_EQ(tier->stats().pinned_bytes, tier->caps().capacity_bytes);
}

TEST(HostTierTest, PinnedFragmentationIsResourceExhaustedWithoutEvicting) {
  // Slots 0..3 of 512 bytes; pinning 0 and 2 leaves no contiguous 1024 bytes.
  auto tier = MakeTier(4 * RecordBytes(12));
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(tier->Put(MakeRecord(i, 12)).ok());
  PinHandle pin0 = tier->Pin(KeyOf(0));
  PinHandle pin2 = tier->Pin(KeyOf(2));
  ASSERT_TRUE(pin0 && pin2);
  EXPECT_EQ(tier->Put(MakeRecord(9, 28)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(*tier, 1));
  EXPECT_TRUE(Has(*tier, 3));
  EXPECT_EQ(tier->stats().evictions, 0u);
  // A 512-byte record still fits by evicting the LRU unpinned one (1).
  ASSERT_TRUE(tier->Put(MakeRecord(10, 12)).ok());
  EXPECT_FALSE(Has(*tier, 1));
  EXPECT_TRUE(Has(*tier, 3));
}

TEST(HostTierTest, ReplacingAPinnedChunkKeepsItsPins) {
  auto tier = MakeTier(1 << 20);
  ASSERT_TRUE(tier->Put(MakeRecord(1, 12)).ok());
  PinHandle pin = tier->Pin(KeyOf(1));
  ASSERT_TRUE(pin);
  ASSERT_TRUE(tier->Put(MakeRecord(1, 12)).ok());
  EXPECT_EQ(tier->stats().chunks, 1u);
  EXPECT_EQ(tier->stats().used_bytes, RecordBytes(12));
  EXPECT_EQ(tier->stats().pinned_bytes, RecordBytes(12));
  EXPECT_EQ(tier->Erase(KeyOf(1)).code(), absl::StatusCode::kFailedPrecondition);
  pin.Release();
  EXPECT_TRUE(tier->Erase(KeyOf(1)).ok());
  EXPECT_EQ(tier->stats().used_bytes, 0u);
  EXPECT_EQ(tier->stats().pinned_bytes, 0u);
}

// A Put asked for its victims returns the exact evicted records (their bytes copied out
// before the space was reused); the tier calls no one back.
TEST(HostTierTest, PutReturnsTheExactEvictedRecordsAsVictims) {
  std::map<uint64_t, std::vector<std::byte>> evicted;  // by key.hi == index
  auto tier = MakeTier(16 * 1024);
  std::map<uint64_t, uint32_t> tokens_of;
  for (uint64_t i = 0; i < 200; ++i) {
    tokens_of[i] = 1 + (i * 7) % 60;
    absl::StatusOr<PutResult> put =
        tier->Put(MakeRecord(i, tokens_of[i]), PutContext{.keep_victims = true});
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_EQ(put->key, KeyOf(i));
    EXPECT_TRUE(put->stored);
    EXPECT_FALSE(put->view);  // not asked for
    for (Victim& v : put->victims) {
      EXPECT_FALSE(Has(*tier, v.key.hi)) << "a victim is gone from the tier when returned";
      evicted[v.key.hi].assign(v.record.span().begin(), v.record.span().end());
    }
  }
  ASSERT_FALSE(evicted.empty());
  EXPECT_EQ(evicted.size(), tier->stats().evictions);
  for (const auto& [i, rec] : evicted) EXPECT_EQ(rec, MakeRecord(i, tokens_of[i])) << "key " << i;
  EXPECT_EQ(evicted.size() + tier->stats().chunks, 200u);
}

// Without keep_victims a Put evicts without copying anything out: the tier's CPU copies
// (TierStats::copy_bytes) are the Puts' own bytes, however many records were evicted.
TEST(HostTierTest, PutWithoutKeepVictimsCopiesNoVictim) {
  const uint64_t rec = RecordBytes(8);
  auto tier = MakeTier(4 * rec);
  for (uint64_t i = 0; i < 10; ++i) {
    absl::StatusOr<PutResult> put = tier->Put(MakeRecord(i, 8), PutContext{});
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_TRUE(put->victims.empty());
  }
  EXPECT_EQ(tier->stats().evictions, 6u);
  EXPECT_EQ(tier->stats().copy_bytes, 10 * rec);
  // With keep_victims, each victim's copy counts too.
  ASSERT_TRUE(tier->Put(MakeRecord(10, 8), PutContext{.keep_victims = true}).ok());
  EXPECT_EQ(tier->stats().copy_bytes, 12 * rec);
}

// A chunk-sized record (>= kHostIoAlignedRecordBytes) starts on a 4096-byte boundary, so
// a file can be read into it with O_DIRECT; small records keep the 64-byte alignment.
TEST(HostTierTest, ChunkSizedRecordsAre4096Aligned) {
  auto tier = MakeTier(8ull << 20);
  ASSERT_TRUE(tier->Put(MakeRecord(0, 1)).ok());  // small: 64-aligned, shifts the next start
  const uint32_t tokens = static_cast<uint32_t>(kHostIoAlignedRecordBytes / 32) + 5;
  const std::vector<std::byte> big = MakeRecord(1, tokens);
  ASSERT_GE(big.size(), kHostIoAlignedRecordBytes);
  absl::StatusOr<PutResult> put = tier->Put(big, PutContext{.view = true});
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_TRUE(put->view);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(put->view.bytes().data()) % 4096, 0u);
  EXPECT_EQ(std::vector<std::byte>(put->view.bytes().begin(), put->view.bytes().end()), big);
  EXPECT_EQ(tier->stats().hits, 0u);  // the Put's own view is no client read
}

TEST(HostTierTest, ListIsOrderedByKeyAndPaginated) {
  auto tier = MakeTier(1 << 20);
  const NamespaceId other{5, 6};
  for (uint64_t i = 0; i < 25; ++i) ASSERT_TRUE(tier->Put(MakeRecord(i, 3)).ok());
  for (uint64_t i = 100; i < 103; ++i) ASSERT_TRUE(tier->Put(MakeRecord(i, 3, other)).ok());
  std::vector<ChunkKey> seen;
  std::vector<size_t> page_sizes;
  ListOptions lo;
  lo.ns = kNs;
  lo.page_size = 10;
  for (;;) {
    absl::StatusOr<ListPage> page = tier->List(lo);
    ASSERT_TRUE(page.ok()) << page.status();
    page_sizes.push_back(page->chunks.size());
    for (const ChunkInfo& c : page->chunks) {
      seen.push_back(c.key);
      EXPECT_EQ(c.ns, kNs);
      EXPECT_EQ(c.parent, RootKey(kNs));
      EXPECT_EQ(c.token_count, 3u);
      EXPECT_EQ(c.record_bytes, RecordBytes(3));
      EXPECT_GT(c.last_access_unix_ms, 0);
    }
    if (page->next_page_token.empty()) break;
    EXPECT_EQ(page->next_page_token, page->chunks.back().key.ToHex());
    lo.page_token = page->next_page_token;
  }
  EXPECT_THAT(page_sizes, ElementsAre(10, 10, 5));
  std::vector<ChunkKey> expected;
  for (uint64_t i = 0; i < 25; ++i) expected.push_back(KeyOf(i));
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);

  ListOptions all;
  all.page_size = 1000;
  EXPECT_EQ(tier->List(all)->chunks.size(), 28u);
  EXPECT_TRUE(tier->List(all)->next_page_token.empty());
  ListOptions bad;
  bad.page_size = 0;
  EXPECT_EQ(tier->List(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.page_size = 10;
  bad.page_token = "zz";
  EXPECT_EQ(tier->List(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HostTierTest, ConcurrentPutsGetsErasesNeverSeePartialBytes) {
  constexpr uint64_t kCap = 48 * 1024;
  constexpr uint64_t kKeys = 64;
  auto tier = MakeTier(kCap);
  std::vector<std::vector<std::byte>> records(kKeys);
  for (uint64_t i = 0; i < kKeys; ++i) records[i] = MakeRecord(i, 1 + (i * 13) % 90);
  std::atomic<uint64_t> verified{0}, misses{0}, failures{0};
  std::atomic<bool> over_capacity{false};
  auto worker = [&](int seed) {
    std::mt19937 rng(seed);
    std::vector<std::byte> out(4096);
    for (int op = 0; op < 4000; ++op) {
      const uint64_t i = rng() % kKeys;
      const int what = rng() % 10;
      if (what < 4) {
        // Another thread may hold a pin or a read on the only fitting extent for a
        // moment: ResourceExhausted is a legal refusal; anything else is a failure.
        absl::Status put = tier->Put(records[i]);
        if (!put.ok() && put.code() != absl::StatusCode::kResourceExhausted) failures++;
      } else if (what < 9) {
        absl::StatusOr<uint64_t> n = tier->Get(KeyOf(i), out);
        if (!n.ok()) {
          if (n.status().code() == absl::StatusCode::kNotFound) {
            misses++;
          } else {
            failures++;
          }
          continue;
        }
        if (*n != records[i].size() ||
            !VerifyChunk(std::span(out).first(*n), {kNs, KeyOf(i)}).ok() ||
            std::memcmp(out.data(), records[i].data(), *n) != 0) {
          failures++;
        } else {
          verified++;
        }
      } else if (rng() % 2 == 0) {
        // Erase of a key another thread pinned this instant is FailedPrecondition.
        absl::Status erase = tier->Erase(KeyOf(i));
        if (!erase.ok() && erase.code() != absl::StatusCode::kFailedPrecondition) failures++;
      } else if (PinHandle pin = tier->Pin(KeyOf(i))) {
        pin.Release();
      }
      if (tier->stats().used_bytes > kCap) over_capacity = true;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t + 1);
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_FALSE(over_capacity.load());
  EXPECT_GT(verified.load(), 1000u);
  TierStats s = tier->stats();
  EXPECT_GT(s.evictions, 0u);
  EXPECT_EQ(s.pinned_bytes, 0u);
  EXPECT_EQ(s.hits, verified.load());
  EXPECT_EQ(s.misses, misses.load());
}

}  // namespace
}  // namespace kvt

// TieredStore::Write, and the store's one write-back queue as the connector uses it
// (async writes): every request shape, admission, duplicates, back-pressure, fill
// errors, buffer reuse, records findable from the moment they are written, encode
// failures, the memory bound under sustained writes, and Erase racing a write in flight.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/host_tier.h"
#include "kvstore/tiered_store.h"
#include "store_test_util.h"
#include "test_records.h"

namespace kvt {
namespace {

using ::kvt::testing::Bytes32PerTokenLayout;
using ::kvt::testing::Contains;
using ::kvt::testing::GatedTier;
using ::kvt::testing::GetRecord;
using ::kvt::testing::PutRecord;

constexpr uint32_t kTokens = 28;                       // 32 B/token: 1024-byte records
constexpr uint64_t kRecord = kChunkHeaderBytes + 896;  // 128 + 28 * 32
const NamespaceId kNs{5, 6};

ChunkKey Key(uint64_t i) { return ChunkKey{i + 1, 77}; }

ChunkHeader HeaderOf(uint64_t i) {
  std::vector<ChunkKey> keys;
  for (uint64_t j = 0; j <= i; ++j) keys.push_back(Key(j));
  return ChainHeader(kNs, Bytes32PerTokenLayout(), keys, i, kTokens);
}

std::vector<std::byte> Payload(uint64_t i) {
  std::vector<std::byte> p(kRecord - kChunkHeaderBytes);
  for (size_t b = 0; b < p.size(); ++b) p[b] = std::byte(static_cast<uint8_t>(i * 31 + b));
  return p;
}

// The record an async write of chunk i should produce (encoded the ordinary way).
std::vector<std::byte> Expected(uint64_t i) {
  std::vector<std::byte> rec(kRecord);
  std::vector<std::byte> p = Payload(i);
  std::memcpy(rec.data() + kChunkHeaderBytes, p.data(), p.size());
  EXPECT_TRUE(
      EncodeChunk(HeaderOf(i), std::span(rec).subspan(kChunkHeaderBytes), std::span(rec)).ok());
  return rec;
}

struct Outcomes {
  absl::Mutex mu;
  std::vector<absl::StatusCode> codes ABSL_GUARDED_BY(mu);
  std::function<void(const absl::Status&)> fn() {
    return [this](const absl::Status& s) {
      absl::MutexLock lock(&mu);
      codes.push_back(s.code());
    };
  }
  std::vector<absl::StatusCode> get() {
    absl::MutexLock lock(&mu);
    return codes;
  }
};

// An async Write of chunk i (payload filled here, header encoded by the store's thread).
absl::StatusOr<ChunkKey> WriteAsync(TieredStore& store, uint64_t i, Outcomes* out,
                                    uint64_t limit_bytes = 0, int* fills = nullptr,
                                    const std::byte** buffer = nullptr) {
  WriteRequest w;
  w.record_bytes = kRecord;
  w.header = HeaderOf(i);
  w.fill = [i, fills, buffer](std::span<std::byte> payload) {
    if (fills != nullptr) ++*fills;
    if (buffer != nullptr) *buffer = payload.data();
    std::vector<std::byte> p = Payload(i);
    if (payload.size() != p.size()) return absl::InternalError("payload span has the wrong size");
    std::memcpy(payload.data(), p.data(), p.size());
    return absl::OkStatus();
  };
  w.async = true;
  w.limit_bytes = limit_bytes;
  if (out != nullptr) w.done = out->fn();
  return store.Write(std::move(w));
}

std::unique_ptr<TieredStore> HostStore(uint64_t capacity, TieredStoreOptions o = {}) {
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory({.capacity_bytes = capacity}));
  auto s = TieredStore::Create(std::move(tiers), o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// A host store whose tier 0 holds every Put until *gate->Open() (records then wait in
// the write-back queue).
std::unique_ptr<TieredStore> GatedStore(GatedTier** gate, TieredStoreOptions o = {}) {
  auto top = std::make_unique<GatedTier>(*HostTier::Create({.capacity_bytes = 1 << 20}));
  *gate = top.get();
  std::vector<TierFactory> tiers;
  tiers.push_back(UseTier(std::move(top)));
  auto s = TieredStore::Create(std::move(tiers), o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

TEST(StoreWriteTest, AsyncAdmissionDuplicatesBackPressureAndFillErrors) {
  GatedTier* gate = nullptr;
  auto store = GatedStore(&gate, {.max_pending_write_bytes = 2 * kRecord});
  Outcomes out;
  int fills = 0;
  ASSERT_TRUE(WriteAsync(*store, 0, &out, 0, &fills).ok());  // held in tier 0's Put
  EXPECT_EQ(WriteAsync(*store, 0, &out, 0, &fills).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(WriteAsync(*store, 1, &out, 0, &fills).ok());
  EXPECT_EQ(WriteAsync(*store, 2, &out, 0, &fills).status().code(),
            absl::StatusCode::kUnavailable);  // the store's bound
  EXPECT_EQ(fills, 2);                        // refused writes never fill
  EXPECT_EQ(store->stats().pending_write_bytes, 2 * kRecord);
  gate->Open();
  store->Flush();
  EXPECT_EQ(out.get(),
            (std::vector<absl::StatusCode>{absl::StatusCode::kOk, absl::StatusCode::kOk}));
  EXPECT_EQ(store->stats().pending_write_bytes, 0u);
  EXPECT_EQ(store->stats().held_write_bytes, 0u);
  // A caller's own, lower limit: one record fits, two do not.
  EXPECT_EQ(WriteAsync(*store, 3, &out, kRecord - 1).status().code(),
            absl::StatusCode::kUnavailable);
  // A fill's error is returned unchanged; its admission is undone (the key is free).
  WriteRequest bad;
  bad.record_bytes = kRecord;
  bad.header = HeaderOf(4);
  bad.fill = [](std::span<std::byte>) { return absl::AbortedError("engine gone"); };
  bad.async = true;
  EXPECT_EQ(store->Write(std::move(bad)).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store->stats().pending_write_bytes, 0u);
  EXPECT_TRUE(WriteAsync(*store, 4, &out).ok());
  store->Flush();
  EXPECT_EQ(*GetRecord(*store, Key(4)), Expected(4));
}

// A request names exactly one record source; an async fill names its header.
TEST(StoreWriteTest, MalformedRequestsAreInvalidArguments) {
  auto store = HostStore(1 << 20);
  const std::vector<std::byte> rec = Expected(0);
  auto fill = [](std::span<std::byte>) { return absl::OkStatus(); };
  EXPECT_EQ(store->Write(WriteRequest{}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Write({.record = rec, .record_bytes = kRecord, .fill = fill}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Write({.record_bytes = kRecord, .fill = fill, .async = true}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      store
          ->Write({.record_bytes = kRecord + 1, .fill = fill, .header = HeaderOf(0), .async = true})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->stats().pending_write_bytes, 0u);
  EXPECT_EQ(store->Lookup(std::vector<ChunkKey>{Key(0)}).num_leading_hits, 0u);
}

// Every write shape gives the same record: a ready one, a fill of the whole record, a
// fill of the payload with the header encoded by the store, sync or async.
TEST(StoreWriteTest, EveryWriteShapeStoresTheSameRecord) {
  auto store = HostStore(1 << 20);
  const std::vector<std::byte> want = Expected(0);
  ASSERT_EQ(*store->Write({.record = want}), Key(0));
  EXPECT_EQ(*GetRecord(*store, Key(0)), want);
  ASSERT_TRUE(store->Erase(Key(0)).ok());
  auto whole = [&](std::span<std::byte> rec) {
    std::memcpy(rec.data(), want.data(), want.size());
    return absl::OkStatus();
  };
  ASSERT_EQ(*store->Write({.record_bytes = kRecord, .fill = whole}), Key(0));
  EXPECT_EQ(*GetRecord(*store, Key(0)), want);
  ASSERT_TRUE(store->Erase(Key(0)).ok());
  auto payload = [&](std::span<std::byte> p) {
    std::memcpy(p.data(), want.data() + kChunkHeaderBytes, p.size());
    return absl::OkStatus();
  };
  ASSERT_EQ(*store->Write({.record_bytes = kRecord, .fill = payload, .header = HeaderOf(0)}),
            Key(0));
  EXPECT_EQ(*GetRecord(*store, Key(0)), want);
  ASSERT_TRUE(store->Erase(Key(0)).ok());
  ASSERT_EQ(*store->Write({.record = want, .async = true}), Key(0));
  store->Flush();
  EXPECT_EQ(*GetRecord(*store, Key(0)), want);
  EXPECT_EQ(store->stats().writes_submitted, 1u);
}

// From an async Write on, Lookup and Get find the record, also while its header has
// not been encoded: Get finishes a copy, byte-identical to the final record.
TEST(StoreWriteTest, AsyncRecordIsFoundBeforeAndAfterItIsWritten) {
  GatedTier* gate = nullptr;
  auto store = GatedStore(&gate);
  Outcomes out;
  ASSERT_TRUE(WriteAsync(*store, 0, &out).ok());  // the thread waits in tier 0's Put
  ASSERT_TRUE(WriteAsync(*store, 1, &out).ok());  // queued behind it, not encoded
  const std::vector<ChunkKey> keys{Key(0), Key(1)};
  LookupResult r = store->Lookup(keys);
  EXPECT_EQ(r.num_leading_hits, 2u);
  EXPECT_EQ(r.record_bytes, (std::vector<uint64_t>{kRecord, kRecord}));
  GetInfo info;
  absl::StatusOr<std::vector<std::byte>> got = GetRecord(*store, Key(1), &info);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(info.from_queue);
  EXPECT_EQ(*got, Expected(1));
  EXPECT_TRUE(out.get().empty());
  gate->Open();
  store->Flush();
  EXPECT_EQ(out.get(),
            (std::vector<absl::StatusCode>{absl::StatusCode::kOk, absl::StatusCode::kOk}));
  for (uint64_t i : {0, 1}) {
    got = GetRecord(*store, Key(i), &info);
    ASSERT_TRUE(got.ok());
    EXPECT_FALSE(info.from_queue);
    EXPECT_EQ(*got, Expected(i));
  }
  const TieredStoreStats st = store->stats();
  EXPECT_EQ(st.writes_submitted, 2u);
  EXPECT_EQ(st.writes_failed, 0u);
  EXPECT_EQ(st.pending_write_bytes, 0u);
  EXPECT_EQ(st.held_write_bytes, 0u);
}

// A written record's buffer returns to the pool: the next async write fills the same
// (already faulted-in) memory.
TEST(StoreWriteTest, BuffersComeBackThroughThePool) {
  auto store = HostStore(1 << 20, {.buffer_pool_bytes = kRecord});
  Outcomes out;
  const std::byte* first = nullptr;
  const std::byte* second = nullptr;
  ASSERT_TRUE(WriteAsync(*store, 0, &out, 0, nullptr, &first).ok());
  store->Flush();
  ASSERT_TRUE(WriteAsync(*store, 1, &out, 0, nullptr, &second).ok());
  store->Flush();
  EXPECT_EQ(second, first);
  EXPECT_EQ(*GetRecord(*store, Key(1)), Expected(1));
}

// An encode that fails on the thread (a header whose token count disagrees with its
// payload size) is reported through done, counted, and leaves nothing stored.
TEST(StoreWriteTest, EncodeFailureIsReportedCountedAndNothingIsStored) {
  auto store = HostStore(1 << 20);
  Outcomes out;
  WriteRequest w;
  w.header = HeaderOf(0);
  w.header->token_count = kTokens - 1;  // payload_bytes stays: 896 != 27 * 32
  w.record_bytes = kRecord;
  w.fill = [](std::span<std::byte>) { return absl::OkStatus(); };
  w.async = true;
  w.done = out.fn();
  ASSERT_TRUE(store->Write(std::move(w)).ok());
  store->Flush();
  EXPECT_EQ(out.get(), std::vector<absl::StatusCode>{absl::StatusCode::kInvalidArgument});
  EXPECT_EQ(store->stats().writes_failed, 1u);
  EXPECT_EQ(store->Lookup(std::vector<ChunkKey>{Key(0)}).num_leading_hits, 0u);
  EXPECT_TRUE(absl::IsNotFound(GetRecord(*store, Key(0)).status()));
  EXPECT_TRUE(WriteAsync(*store, 0, &out).ok());  // key freed
  store->Flush();
}

// Erase of a queued async record cancels it (done: Cancelled) and leaves nothing.
TEST(StoreWriteTest, EraseCancelsAQueuedAsyncRecord) {
  GatedTier* gate = nullptr;
  auto store = GatedStore(&gate);
  Outcomes out;
  ASSERT_TRUE(WriteAsync(*store, 0, &out).ok());
  ASSERT_TRUE(WriteAsync(*store, 1, &out).ok());
  std::thread eraser([&] { EXPECT_TRUE(store->Erase(Key(1)).ok()); });
  eraser.join();  // chunk 1 was only queued: no wait
  gate->Open();
  store->Flush();
  EXPECT_EQ(out.get(),
            (std::vector<absl::StatusCode>{absl::StatusCode::kCancelled, absl::StatusCode::kOk}));
  EXPECT_TRUE(absl::IsNotFound(GetRecord(*store, Key(1)).status()));
  EXPECT_TRUE(GetRecord(*store, Key(0)).ok());
}

// A lower tier whose Put blocks until released (or 300 ms pass) and whose Erase of a
// key it holds fails: the copy a cancelled write-back leaves there must not be
// reported as erased.
class SlowStickyTier final : public Tier {
 public:
  explicit SlowStickyTier(std::unique_ptr<Tier> inner) : inner_(std::move(inner)) {}
  absl::Notification put_entered, release;
  TierCaps caps() const override {
    TierCaps c = inner_->caps();
    c.name = "sticky";
    return c;
  }
  using Tier::Put;
  absl::StatusOr<PutResult> Put(std::span<const std::byte> record,
                                const PutContext& context) override {
    if (!put_entered.HasBeenNotified()) put_entered.Notify();
    release.WaitForNotificationWithTimeout(absl::Milliseconds(300));
    return inner_->Put(record, context);
  }
  absl::StatusOr<uint64_t> Get(const ChunkKey& k, std::span<std::byte> out) override {
    return inner_->Get(k, out);
  }
  std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys) override {
    return inner_->Stat(keys);
  }
  absl::Status Erase(const ChunkKey& k) override {
    if (inner_->Stat(std::span(&k, 1))[0].present) return absl::DataLossError("EIO on erase");
    return absl::OkStatus();
  }
  absl::StatusOr<ListPage> List(const ListOptions& o) override { return inner_->List(o); }
  TierStats stats() const override { return inner_->stats(); }
  PinHandle Pin(const ChunkKey& k) override { return inner_->Pin(k); }

 private:
  std::unique_ptr<Tier> inner_;
};

// Issue 11 #13: an Erase racing the write-back of the same key waits for it, so either
// no copy survives or the Erase says it failed; before, Erase returned OK and the
// worker's own erase of what it had just written was ignored.
TEST(StoreWriteTest, EraseDuringAWriteBackInFlightNeverReportsSuccessOverASurvivingCopy) {
  auto sticky_owner = std::make_unique<SlowStickyTier>(
      *HostTier::Create({.capacity_bytes = 1 << 20, .name = "lower"}));
  SlowStickyTier* sticky = sticky_owner.get();
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory({.capacity_bytes = 1 << 20}));
  tiers.push_back(UseTier(std::move(sticky_owner)));
  auto store = *TieredStore::Create(std::move(tiers), {});
  ASSERT_TRUE(PutRecord(*store, Expected(0)).ok());
  sticky->put_entered.WaitForNotification();  // the write-back to "lower" is in flight
  absl::Status erased = store->Erase(Key(0));
  sticky->release.Notify();
  store->Flush();
  const bool survives = sticky->Stat(std::vector<ChunkKey>{Key(0)})[0].present;
  EXPECT_TRUE(!survives || !erased.ok())
      << "Erase returned " << erased << " while the lower tier still holds the chunk";
  EXPECT_TRUE(survives);                                  // the sticky tier cannot erase it...
  EXPECT_EQ(erased.code(), absl::StatusCode::kDataLoss);  // ...and Erase says so
}

// Issue 11 #4: under sustained writes into a small host tier over a slow lower tier, the
// queue's memory stays within max_pending_write_bytes, and every chunk is found from
// the moment Write returns until it is evicted from every tier (a demotion the
// bound refuses is counted).
TEST(StoreWriteTest, QueueMemoryStaysWithinItsBoundAndSubmittedChunksAreFound) {
  constexpr uint64_t kBound = 8 * kRecord;
  auto lower =
      std::make_unique<GatedTier>(*HostTier::Create({.capacity_bytes = 4 << 20, .name = "lower"}));
  GatedTier* gate = lower.get();
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory({.capacity_bytes = 4 * kRecord}));
  tiers.push_back(UseTier(std::move(lower)));
  auto store = *TieredStore::Create(std::move(tiers), {.max_pending_write_bytes = kBound});
  uint64_t submitted = 0, refused = 0, missing_right_after = 0, peak_held = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    if (!WriteAsync(*store, i, nullptr).ok()) {
      ++refused;
      continue;
    }
    ++submitted;
    if (store->Lookup(std::vector<ChunkKey>{Key(i)}).num_leading_hits != 1) ++missing_right_after;
    peak_held = std::max(peak_held, store->stats().held_write_bytes);
  }
  EXPECT_LE(peak_held, kBound);
  EXPECT_EQ(missing_right_after, 0u);
  EXPECT_GT(refused, 0u);  // the lower tier is shut: back-pressure must have refused some
  gate->Open();
  store->Flush();
  const TieredStoreStats st = store->stats();
  EXPECT_EQ(st.held_write_bytes, 0u);
  // Every submitted chunk is in some tier, or its demotion was refused (counted).
  uint64_t found = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    absl::StatusOr<std::vector<std::byte>> got = GetRecord(*store, Key(i));
    if (got.ok()) {
      EXPECT_EQ(*got, Expected(i));
      ++found;
    }
  }
  EXPECT_EQ(found + st.demotions_dropped, submitted);
}

}  // namespace
}  // namespace kvt

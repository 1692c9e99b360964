// The store's one write-back queue as the connector uses it (TieredStore::AdmitWrite /
// TakeBuffer / SubmitWrite): admission, duplicates, back-pressure, cancel, buffer reuse,
// records findable from the moment they are submitted, finish failures, the memory
// bound under sustained writes, and Erase racing a write in flight.
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

// The record SubmitWrite should produce for chunk i (encoded the ordinary way).
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

// Admits, fills and submits chunk i; `gate` (when set) holds its finish.
void Submit(TieredStore& store, uint64_t i, Outcomes* out, absl::Notification* gate = nullptr) {
  ASSERT_EQ(store.AdmitWrite(Key(i), kRecord), WriteAdmission::kAdmitted);
  RecordBuffer b = store.TakeBuffer(kRecord);
  std::vector<std::byte> p = Payload(i);
  std::memcpy(b.data.get() + kChunkHeaderBytes, p.data(), p.size());
  const ChunkHeader h = HeaderOf(i);
  store.SubmitWrite(SubmittedWrite{Key(i), std::move(b),
                                   [h, gate](std::span<std::byte> rec) {
                                     if (gate != nullptr) gate->WaitForNotification();
                                     return EncodeChunk(h, rec.subspan(kChunkHeaderBytes), rec);
                                   },
                                   out != nullptr ? out->fn() : nullptr});
}

std::unique_ptr<TieredStore> HostStore(uint64_t capacity, TieredStoreOptions o = {}) {
  std::vector<TierFactory> tiers;
  tiers.push_back(HostTier::Factory({.capacity_bytes = capacity}));
  auto s = TieredStore::Create(std::move(tiers), o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

TEST(StoreWriteTest, AdmissionDuplicatesBackPressureAndCancel) {
  auto store = HostStore(1 << 20, {.max_pending_write_bytes = 2 * kRecord});
  ASSERT_EQ(store->AdmitWrite(Key(0), kRecord), WriteAdmission::kAdmitted);
  EXPECT_EQ(store->AdmitWrite(Key(0), kRecord), WriteAdmission::kAlreadyQueued);
  ASSERT_EQ(store->AdmitWrite(Key(1), kRecord), WriteAdmission::kAdmitted);
  EXPECT_EQ(store->AdmitWrite(Key(2), kRecord), WriteAdmission::kQueueFull);  // store's bound
  EXPECT_EQ(store->stats().pending_write_bytes, 2 * kRecord);
  store->CancelWrite(Key(1), kRecord);
  store->CancelWrite(Key(0), kRecord);
  EXPECT_EQ(store->stats().pending_write_bytes, 0u);
  EXPECT_EQ(store->stats().held_write_bytes, 0u);
  // A caller's own, lower limit.
  ASSERT_EQ(store->AdmitWrite(Key(0), kRecord, kRecord), WriteAdmission::kAdmitted);
  EXPECT_EQ(store->AdmitWrite(Key(1), kRecord, kRecord), WriteAdmission::kQueueFull);
  store->CancelWrite(Key(0), kRecord);
  // Cancelled keys can be admitted again.
  EXPECT_EQ(store->AdmitWrite(Key(1), kRecord), WriteAdmission::kAdmitted);
  store->CancelWrite(Key(1), kRecord);
}

// From SubmitWrite on, Lookup and Get find the record, also while its finish (the
// encoding) has not run: Get finishes a copy, byte-identical to the final record.
TEST(StoreWriteTest, SubmittedRecordIsFoundBeforeAndAfterItIsWritten) {
  auto store = HostStore(1 << 20);
  Outcomes out;
  absl::Notification gate;
  Submit(*store, 0, &out, &gate);  // the thread waits inside chunk 0's finish
  Submit(*store, 1, &out);         // queued behind it, not finished
  const std::vector<ChunkKey> keys{Key(0), Key(1)};
  LookupResult r = store->Lookup(keys);
  EXPECT_EQ(r.num_leading_hits, 2u);
  EXPECT_EQ(r.record_bytes, (std::vector<uint64_t>{kRecord, kRecord}));
  GetInfo info;
  absl::StatusOr<std::vector<std::byte>> got = store->Get(Key(1), &info);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(info.from_queue);
  EXPECT_EQ(*got, Expected(1));
  EXPECT_TRUE(out.get().empty());
  gate.Notify();
  store->Flush();
  EXPECT_EQ(out.get(),
            (std::vector<absl::StatusCode>{absl::StatusCode::kOk, absl::StatusCode::kOk}));
  for (uint64_t i : {0, 1}) {
    got = store->Get(Key(i), &info);
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

TEST(StoreWriteTest, BuffersComeBackThroughThePoolWithinItsBound) {
  auto store = HostStore(1 << 20, {.buffer_pool_bytes = kRecord});
  Outcomes out;
  RecordBuffer probe = store->TakeBuffer(kRecord);
  const std::byte* first = probe.data.get();
  ASSERT_EQ(store->AdmitWrite(Key(0), kRecord), WriteAdmission::kAdmitted);
  std::vector<std::byte> p = Payload(0);
  std::memcpy(probe.data.get() + kChunkHeaderBytes, p.data(), p.size());
  const ChunkHeader h = HeaderOf(0);
  store->SubmitWrite(SubmittedWrite{
      Key(0), std::move(probe),
      [h](std::span<std::byte> rec) { return EncodeChunk(h, rec.subspan(kChunkHeaderBytes), rec); },
      out.fn()});
  store->Flush();
  RecordBuffer reused = store->TakeBuffer(kRecord);
  EXPECT_EQ(reused.data.get(), first);
  RecordBuffer fresh = store->TakeBuffer(kRecord);  // the pool is empty again
  EXPECT_NE(fresh.data.get(), first);
}

TEST(StoreWriteTest, FinishFailureIsReportedCountedAndNothingIsStored) {
  auto store = HostStore(1 << 20);
  Outcomes out;
  ASSERT_EQ(store->AdmitWrite(Key(0), kRecord), WriteAdmission::kAdmitted);
  store->SubmitWrite(SubmittedWrite{
      Key(0), store->TakeBuffer(kRecord),
      [](std::span<std::byte>) { return absl::InvalidArgumentError("bad header"); }, out.fn()});
  store->Flush();
  EXPECT_EQ(out.get(), std::vector<absl::StatusCode>{absl::StatusCode::kInvalidArgument});
  EXPECT_EQ(store->stats().writes_failed, 1u);
  EXPECT_EQ(store->Lookup(std::vector<ChunkKey>{Key(0)}).num_leading_hits, 0u);
  EXPECT_TRUE(absl::IsNotFound(store->Get(Key(0)).status()));
  EXPECT_EQ(store->AdmitWrite(Key(0), kRecord), WriteAdmission::kAdmitted);  // key freed
  store->CancelWrite(Key(0), kRecord);
}

// Erase of a queued, submitted record cancels it (done: Cancelled) and leaves nothing.
TEST(StoreWriteTest, EraseCancelsAQueuedSubmittedRecord) {
  auto store = HostStore(1 << 20);
  Outcomes out;
  absl::Notification gate;
  Submit(*store, 0, &out, &gate);
  Submit(*store, 1, &out);
  std::thread eraser([&] { EXPECT_TRUE(store->Erase(Key(1)).ok()); });
  eraser.join();  // chunk 1 was only queued: no wait
  gate.Notify();
  store->Flush();
  EXPECT_EQ(out.get(),
            (std::vector<absl::StatusCode>{absl::StatusCode::kCancelled, absl::StatusCode::kOk}));
  EXPECT_TRUE(absl::IsNotFound(store->Get(Key(1)).status()));
  EXPECT_TRUE(store->Get(Key(0)).ok());
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
  ASSERT_TRUE(store->Put(Expected(0)).ok());
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
// the moment SubmitWrite returns until it is evicted from every tier (a demotion the
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
    if (store->AdmitWrite(Key(i), kRecord) != WriteAdmission::kAdmitted) {
      ++refused;
      continue;
    }
    RecordBuffer b = store->TakeBuffer(kRecord);
    std::vector<std::byte> p = Payload(i);
    std::memcpy(b.data.get() + kChunkHeaderBytes, p.data(), p.size());
    const ChunkHeader h = HeaderOf(i);
    store->SubmitWrite(SubmittedWrite{Key(i), std::move(b), [h](std::span<std::byte> rec) {
                                        return EncodeChunk(h, rec.subspan(kChunkHeaderBytes), rec);
                                      }});
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
    absl::StatusOr<std::vector<std::byte>> got = store->Get(Key(i));
    if (got.ok()) {
      EXPECT_EQ(*got, Expected(i));
      ++found;
    }
  }
  EXPECT_EQ(found + st.demotions_dropped, submitted);
}

}  // namespace
}  // namespace kvt

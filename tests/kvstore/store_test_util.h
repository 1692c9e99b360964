// Test helpers for building TieredStores whose tiers a test still reaches directly
// (to corrupt a record, check a tier's contents), since the store keeps its tiers private.
#ifndef KVT_TESTS_KVSTORE_STORE_TEST_UTIL_H_
#define KVT_TESTS_KVSTORE_STORE_TEST_UTIL_H_

#include <stdlib.h>

#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "kvstore/host_tier.h"
#include "kvstore/tier.h"
#include "kvstore/tiered_store.h"

namespace kvt::testing {

// Wraps `factory` so that `*out` points at the tier it builds (owned by the store;
// valid while the store lives).
template <typename T>
TierFactory Capturing(TierFactory factory, T** out) {
  return [factory = std::move(factory), out]() -> absl::StatusOr<std::unique_ptr<Tier>> {
    absl::StatusOr<std::unique_ptr<Tier>> t = factory();
    if (t.ok()) *out = static_cast<T*>(t->get());
    return t;
  };
}

// A tier decorator whose Put waits until Open(): proves what does not wait for a tier,
// or keeps records waiting in a store's write-back queue.
class GatedTier final : public Tier {
 public:
  explicit GatedTier(std::unique_ptr<Tier> inner) : inner_(std::move(inner)) {}
  void Open() { gate_.Notify(); }
  TierCaps caps() const override { return inner_->caps(); }
  using Tier::Put;
  absl::StatusOr<PutResult> Put(std::span<const std::byte> record,
                                const PutContext& context) override {
    gate_.WaitForNotification();
    return inner_->Put(record, context);
  }
  absl::StatusOr<uint64_t> Get(const ChunkKey& k, std::span<std::byte> out) override {
    return inner_->Get(k, out);
  }
  std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys) override {
    return inner_->Stat(keys);
  }
  absl::Status Erase(const ChunkKey& k) override { return inner_->Erase(k); }
  absl::StatusOr<ListPage> List(const ListOptions& o) override { return inner_->List(o); }
  TierStats stats() const override { return inner_->stats(); }
  PinHandle Pin(const ChunkKey& k) override { return inner_->Pin(k); }

 private:
  std::unique_ptr<Tier> inner_;
  absl::Notification gate_;
};

// Tier::Stat as the old per-key questions.
inline std::vector<bool> Contains(Tier& tier, std::span<const ChunkKey> keys) {
  std::vector<bool> out;
  for (const ChunkStat& st : tier.Stat(keys)) out.push_back(st.present);
  return out;
}
inline absl::StatusOr<uint64_t> RecordSize(Tier& tier, const ChunkKey& key) {
  std::vector<ChunkStat> st = tier.Stat(std::span<const ChunkKey>(&key, 1));
  if (st.empty() || !st[0].present) return absl::NotFoundError("not in the tier: " + key.ToHex());
  return st[0].record_bytes;
}

// The whole record of `key` read from `tier` (sized by Stat): the bytes, or the tier's
// status (NotFound when absent).
inline absl::StatusOr<std::vector<std::byte>> ReadRecord(Tier& tier, const ChunkKey& key) {
  absl::StatusOr<uint64_t> n = RecordSize(tier, key);
  if (!n.ok()) return n.status();
  std::vector<std::byte> out(*n);
  absl::StatusOr<uint64_t> got = tier.Get(key, out);
  if (!got.ok()) return got.status();
  if (*got != out.size()) return absl::InternalError("record length changed while reading");
  return out;
}

// TieredStore::Write of a ready record, synchronously (the status only).
inline absl::Status PutRecord(TieredStore& store, std::span<const std::byte> record,
                              PutAck ack = PutAck::kTopTier) {
  return store.Write(WriteRequest{.record = record, .ack = ack}).status();
}

// The whole record of `key` through the store's one copy-out Get, sized by Lookup
// (per_key: the fastest holder's size, or 0 for a miss, which Get then answers as a
// miss): the bytes, or Get's status.
inline absl::StatusOr<std::vector<std::byte>> GetRecord(TieredStore& store, const ChunkKey& key,
                                                        GetInfo* info = nullptr,
                                                        const GetOptions& options = {}) {
  for (int attempt = 0; attempt < 3; ++attempt) {  // the size may change under us
    LookupResult where =
        store.Lookup(std::span<const ChunkKey>(&key, 1), LookupOptions{.per_key = true});
    std::vector<std::byte> out(where.record_bytes.empty() ? 0 : where.record_bytes[0]);
    absl::StatusOr<uint64_t> got = store.Get(key, out, info, options);
    if (got.ok()) {
      out.resize(*got);
      return out;
    }
    if (!absl::IsOutOfRange(got.status())) return got.status();
  }
  return absl::UnavailableError("record size kept changing: " + key.ToHex());
}

// A fresh directory `<$TEST_TMPDIR or /tmp>/<tag>-XXXXXX`; "" if it cannot be made.
inline std::string MakeScratchDir(const std::string& tag) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/" + tag + "-XXXXXX";
  return ::mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
}

// A host tier of `capacity` bytes (a test failure, and null, when it cannot be created).
inline std::unique_ptr<HostTier> MakeHostTier(uint64_t capacity) {
  HostTierOptions o;
  o.capacity_bytes = capacity;
  absl::StatusOr<std::unique_ptr<HostTier>> t = HostTier::Create(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

}  // namespace kvt::testing

#endif  // KVT_TESTS_KVSTORE_STORE_TEST_UTIL_H_

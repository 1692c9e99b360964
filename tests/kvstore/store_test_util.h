// Test helpers for building TieredStores whose tiers a test still reaches directly
// (to corrupt a record, check a tier's contents), since the store keeps its tiers private.
#ifndef KVT_TESTS_KVSTORE_STORE_TEST_UTIL_H_
#define KVT_TESTS_KVSTORE_STORE_TEST_UTIL_H_

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kvstore/tier.h"
#include "kvstore/tiered_store.h"

namespace kvt::testing {

// Wraps `factory` so that `*out` points at the tier it builds (owned by the store;
// valid while the store lives).
template <typename T>
TierFactory Capturing(TierFactory factory, T** out) {
  return [factory = std::move(factory), out](EvictionListener l) -> absl::StatusOr<std::unique_ptr<Tier>> {
    absl::StatusOr<std::unique_ptr<Tier>> t = factory(std::move(l));
    if (t.ok()) *out = static_cast<T*>(t->get());
    return t;
  };
}

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

}  // namespace kvt::testing

#endif  // KVT_TESTS_KVSTORE_STORE_TEST_UTIL_H_

// EvictSelector: the one definition of "which chunks does an eviction take", used by
// TieredStore::Evict (kvtierd, the CLI's offline backend) and carried over gRPC by the
// remote client (proto/kvtier.proto EvictRequest). Nothing else selects victims.
#ifndef KVSTORE_EVICT_SELECTOR_H_
#define KVSTORE_EVICT_SELECTOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kvstore/tier.h"
#include "kvstore/types.h"

namespace kvt {

// Exactly one of keys, ns, older_than, prefix, all is set (Validate). `within_ns`
// narrows older_than, prefix and all to one namespace.
struct EvictSelector {
  // These chunks (absent keys are ignored).
  std::vector<ChunkKey> keys;
  // Every chunk of this namespace.
  std::optional<NamespaceId> ns;
  // Chunks idle at least this long: now - last_access >= older_than (ms resolution).
  std::optional<std::chrono::milliseconds> older_than;
  // This chunk and every cached chunk whose parent chain reaches it (the rest of every
  // prompt that continues it).
  std::optional<ChunkKey> prefix;
  // Every chunk (of the namespaces `visible` admits).
  bool all = false;
  // Restricts older_than / prefix / all to one namespace.
  std::optional<NamespaceId> within_ns;
  // Tenancy: chunks whose namespace this rejects are never selected (null = all).
  // Not sent over gRPC: the daemon applies the caller's tenant itself.
  std::function<bool(const NamespaceId&)> visible;

  // InvalidArgument naming the problem unless exactly one selector is set, keys are
  // non-zero, older_than > 0, prefix non-zero.
  absl::Status Validate() const;
};

// One listed chunk with the tiers holding it (fastest first).
struct StoredChunk {
  ChunkInfo info;
  std::vector<int> tiers;       // indexes into the store's tiers (empty from a daemon)
  std::vector<TierKind> kinds;  // their kinds, same order (a daemon reports the fastest)
};

struct EvictResult {
  // The chunks selected, in key order (with a dry run: what would be evicted). May be
  // empty when the answer came from a daemon that reports counts only.
  std::vector<StoredChunk> selected;
  uint64_t chunks = 0;  // chunks evicted (dry run: selected)
  uint64_t bytes = 0;   // their record bytes, one copy each
  // Chunks that could not be evicted (e.g. pinned by a reader) and why.
  std::vector<std::pair<ChunkKey, absl::Status>> failed;
};

// The chunks of `listing` (every chunk of the store, any order, one entry per key) that
// `selector` takes, in listing order. `now_unix_ms` is the clock for older_than.
// REQUIRES: selector.Validate() is OK.
std::vector<size_t> SelectVictims(std::span<const StoredChunk> listing,
                                  const EvictSelector& selector, int64_t now_unix_ms);

}  // namespace kvt

#endif  // KVSTORE_EVICT_SELECTOR_H_

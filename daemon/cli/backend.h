// The cache the CLI talks to, behind one small interface so every command works the
// same against a running kvtierd (gRPC) and against a disk tier directory opened
// offline. Commands are written only against CacheBackend.
#ifndef KVTIER_CLI_BACKEND_H_
#define KVTIER_CLI_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/absence_record.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/evict_selector.h"
#include "kvstore/tier.h"
#include "kvstore/types.h"

namespace kvt::cli {

struct TierSummary {
  std::string name;  // "host", "disk", ...
  TierKind kind = TierKind::kDisk;
  TierStats stats;
};

struct StatsSnapshot {
  std::string source;              // e.g. "kvtierd unix:/run/kvtier.sock" or "disk-dir /data/kv"
  std::vector<TierSummary> tiers;  // fastest first
  // Store-level lookups (a hit in any tier) when the backend counts them separately
  // from the per-tier counters; nullopt offline.
  std::optional<uint64_t> store_hits;
  std::optional<uint64_t> store_misses;
  uint64_t integrity_errors = 0;  // records that failed verification in any tier
  uint64_t pinned_bytes = 0;
  uint64_t explicit_evictions = 0;  // chunks removed by `kvtier evict` (and other Evicts)
  // kvtierd's leases (Lookup with pin) since it started; nullopt offline (no daemon).
  struct Leases {
    uint64_t granted = 0, released = 0, expired = 0, active = 0;
  };
  std::optional<Leases> leases;
};

// One chunk in one tier (a chunk held by two tiers is listed twice).
struct ListedChunk {
  ChunkInfo info;
  TierKind tier = TierKind::kDisk;
};

struct ChunkListRequest {
  std::optional<NamespaceId> ns;
  std::string page_token;  // "" = from the start
  size_t page_size = 1000;
};

struct ChunkListPage {
  std::vector<ListedChunk> chunks;
  std::string next_page_token;  // "" = last page
};

// Where one key is (CacheBackend::Locate).
struct Located {
  std::optional<TierKind> tier;  // the fastest tier holding it now; nullopt = a miss
  // A miss: why it is not held, when the backend can say (a kvtierd keeps a record of
  // recent declines and removals); nullopt when it cannot (a disk directory opened
  // offline, or a kvtierd older than the record).
  std::optional<Absence> why;
};

// Not thread-safe (one CLI command at a time).
class CacheBackend {
 public:
  virtual ~CacheBackend() = default;

  // What this backend is connected to, for messages and --json "source".
  virtual std::string Describe() const = 0;

  // Unavailable when the daemon cannot be reached.
  virtual absl::StatusOr<StatsSnapshot> Stats() = 0;

  // Chunks of every tier (one entry per tier holding a chunk), paginated, stable order.
  // InvalidArgument for a bad page token.
  virtual absl::StatusOr<ChunkListPage> List(const ChunkListRequest& request) = 0;

  // For each key, the fastest tier holding it now, or why it is not held (no data moves,
  // no LRU touch, no pin).
  virtual absl::StatusOr<std::vector<Located>> Locate(std::span<const ChunkKey> keys) = 0;

  // The verified header of a cached chunk (layout, token count, parent), read as an
  // inspection: no promotion, not counted as a hit. NotFound on a miss.
  virtual absl::StatusOr<ChunkHeader> ReadHeader(const ChunkKey& key) = 0;

  // Evicts what `selector` selects (kvstore/evict_selector.h: the one definition of
  // each selector, applied by the store that holds the chunks); with dry_run, selects
  // and counts only. InvalidArgument for a bad selector.
  virtual absl::StatusOr<EvictResult> Evict(const EvictSelector& selector, bool dry_run) = 0;
};

// Lists every chunk (all pages) of `ns` (all namespaces when nullopt).
absl::StatusOr<std::vector<ListedChunk>> ListAll(CacheBackend& backend,
                                                 std::optional<NamespaceId> ns);

}  // namespace kvt::cli

#endif  // KVTIER_CLI_BACKEND_H_

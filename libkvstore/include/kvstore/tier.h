// The Tier interface: one level of the cache hierarchy (host memory, disk, remote).
//
// A tier stores whole chunk records (kvstore/chunk_codec.h) by ChunkKey. It parses the
// record header on Put for its index (namespace, parent, size) but the caller verifies
// records it reads (VerifyChunk) before any byte reaches an engine.
//
// Error codes (kvstore-wide, see STYLE.md): NotFound = miss; Unavailable = retry later;
// DataLoss = checksum/format failure; ResourceExhausted = tier full and nothing evictable;
// InvalidArgument = caller's bad input; OutOfRange = caller buffer too small.
#ifndef KVSTORE_TIER_H_
#define KVSTORE_TIER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/types.h"

namespace kvt {

// Values appear in metrics, protos and the CLI: never renumber.
enum class TierKind : uint8_t { kHost = 0, kDisk = 1, kRemote = 2 };
std::string_view TierKindName(TierKind kind);

// Counters since the tier was opened (monotonic) plus current gauges.
struct TierStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t chunks = 0;
  uint64_t pinned_bytes = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t puts = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t evictions = 0;
  uint64_t integrity_errors = 0;
  uint64_t io_errors = 0;
};

// One cached chunk as listed by a tier.
struct ChunkInfo {
  ChunkKey key;
  NamespaceId ns;
  ChunkKey parent;
  uint32_t token_count = 0;
  uint64_t record_bytes = 0;
  int64_t last_access_unix_ms = 0;
};

struct ListOptions {
  std::optional<NamespaceId> ns;  // only this namespace when set
  std::string page_token;         // "" = from the start; else a previous next_page_token
  size_t page_size = 1000;        // REQUIRES: 1..100000
};

struct ListPage {
  std::vector<ChunkInfo> chunks;
  std::string next_page_token;  // "" when this is the last page
};

// Called by a tier for each record it evicts, before its bytes are freed, so the
// owner can demote it. `record` is valid only during the call. Must not call back
// into the same tier.
using EvictionListener = std::function<void(const ChunkKey& key, std::span<const std::byte> record)>;

// Thread-safe: every implementation allows concurrent calls to all methods.
class Tier {
 public:
  virtual ~Tier() = default;

  virtual std::string_view name() const = 0;
  virtual TierKind kind() const = 0;

  // Stores a whole record (header verified with DecodeChunkHeader; the key is taken
  // from it). Replaces an existing record of the same key. May evict unpinned chunks
  // to make room. InvalidArgument/DataLoss for a bad header; ResourceExhausted when the
  // record can never fit or everything is pinned. On error nothing is stored and no
  // existing chunk is lost except by normal eviction.
  virtual absl::Status Put(std::span<const std::byte> record) = 0;

  // Copies the whole record of `key` into `out` and returns its length.
  // NotFound on a miss; OutOfRange (message names the needed size) when `out` is
  // too small. Never copies a partial or torn record.
  virtual absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out) = 0;

  // Record length of `key` without copying; NotFound on a miss.
  virtual absl::StatusOr<uint64_t> RecordSize(const ChunkKey& key) = 0;

  // For each key, whether the tier holds it now (no data moves, no LRU touch).
  virtual std::vector<bool> Contains(std::span<const ChunkKey> keys) = 0;

  // Removes `key`. OK if it was absent. FailedPrecondition if it is pinned.
  virtual absl::Status Erase(const ChunkKey& key) = 0;

  // Lists chunks, paginated, in a stable order.
  virtual absl::StatusOr<ListPage> List(const ListOptions& options) = 0;

  virtual TierStats stats() const = 0;
  virtual uint64_t capacity_bytes() const = 0;

  // Pins protect chunks from eviction (counted: n Pin calls need n Unpin calls).
  // Pin returns false when the key is absent. Tiers that never evict on their own
  // (remote) may treat these as no-ops returning true.
  virtual bool Pin(const ChunkKey& key) = 0;
  virtual void Unpin(const ChunkKey& key) = 0;

  // Optional: receive evicted records (for demotion). Set before concurrent use.
  virtual void SetEvictionListener(EvictionListener listener) = 0;
};

}  // namespace kvt

#endif  // KVSTORE_TIER_H_

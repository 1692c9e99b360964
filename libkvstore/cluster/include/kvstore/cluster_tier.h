// ClusterTier: a Tier (kvstore/tier.h) over Redis Cluster, shared by every host that
// points at the same cluster. The Redis logic lives in ClusterClient; this adapter
// only maps chunk records to keys.
//
// Storage (docs/scale-out.md): a record of R bytes is split into n = ceil(R / piece_bytes)
// data pieces under one hash tag, so a chunk's pieces live on one shard:
//   kvt:{<keyspace>:<32 hex digits of the key>}:0   the piece header (32 bytes)
//   kvt:{<keyspace>:<key>}:1 .. :n                  the record's bytes, piece_bytes each
//                                                   (the last one shorter)
// Piece header, little-endian: u32 magic "KVCP", u16 version (1), u16 zero,
// u64 record_bytes, u32 piece_count (n), u32 piece_bytes, u64 XXH3-64 of the header's
// first 24 bytes followed by the record's first 128 bytes (the chunk header).
// A Put writes the data pieces, then the header, pipelined on one connection (one
// shard executes them in order), each with the configured expiry. Get reads the
// header and the pieces in one pipelined round trip, checks every piece's length and
// the header checksum, then VerifyChunk: a missing, short or torn piece (an expired
// piece, a master lost, a concurrent re-put) is a miss (NotFound), a record that fails
// verification is DataLoss (counted as an integrity error), never wrong bytes.
//
// Pins are no-ops returning true and a Put returns no victims: Redis
// evicts on its own (maxmemory + allkeys-lru, see docs/scale-out.md).
#ifndef KVSTORE_CLUSTER_TIER_H_
#define KVSTORE_CLUSTER_TIER_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "kvstore/chunk_codec.h"
#include "kvstore/cluster_client.h"
#include "kvstore/tier.h"

namespace kvt {

struct ClusterTierOptions {
  cluster::ClusterClientOptions client;
  // Separates deployments sharing one cluster: [A-Za-z0-9_.-], 1..64 characters.
  std::string keyspace = "default";
  // Bytes per piece (4 MiB: Redis moves 1-4 MiB values several times faster than
  // 16-32 MiB ones on loopback, see docs/scale-out.md). 64 KiB .. 512 MiB.
  uint64_t piece_bytes = 4ull << 20;
  // Bytes of piece values in flight per connection (pipelining window = max(1, this /
  // piece_bytes)); Redis slows down with several multi-MiB values pipelined.
  uint64_t max_pipelined_bytes = 1ull << 20;
  // Expiry of every piece, seconds; 0 = none (maxmemory eviction only).
  uint32_t ttl_s = 86400;
  // Largest record accepted, bytes.
  uint64_t max_record_bytes = 1ull << 30;
  std::string name = "cluster";
  // How long the capacity/used figures (INFO memory of every master) stay fresh.
  std::chrono::milliseconds stats_refresh{2000};

  // InvalidArgument naming the field.
  absl::Status Validate() const;
};

// Thread-safe.
class ClusterTier final : public Tier {
 public:
  // Connects (see ClusterClient::Create for the error codes).
  static absl::StatusOr<std::unique_ptr<ClusterTier>> Create(const ClusterTierOptions& options);
  ~ClusterTier() override;

  // Durable (outlives this process), remote, verifies every read, not pinnable (Redis
  // evicts on its own: allkeys-lru / TTL), reports no evictions. Kind kRemote.
  TierCaps caps() const override;

  // Unavailable when the shard is down or the deadline passed (nothing readable is
  // left: the header is written last); InvalidArgument/DataLoss for a bad record;
  // ResourceExhausted when the record exceeds max_record_bytes or Redis is out of
  // memory (OOM reply).
  using Tier::Put;
  // The context is not sent: admission is the serving process's own tiers' business.
  absl::StatusOr<PutResult> Put(std::span<const std::byte> record,
                                const PutContext& context) override;
  // NotFound on a miss (also a missing, short or torn piece); DataLoss when the
  // record fails VerifyChunk; Unavailable when the shard cannot be reached;
  // OutOfRange when `out` is too small.
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out) override;
  // One pipelined round trip per shard (per key: GET of piece 0 for the record length,
  // and the chunk header at the start of piece 1 for the namespace; the two must agree);
  // keys of an unreachable shard read as absent.
  std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys) override;
  absl::Status Erase(const ChunkKey& key) override;
  // SCANs every master (an operator's command, O(keys in the keyspace)); pages in key
  // order, page_token = the last key's hex. last_access_unix_ms is 0 (not tracked).
  absl::StatusOr<ListPage> List(const ListOptions& options) override;
  // Client-side counters; capacity/used = sums of maxmemory/used_memory over the
  // masters (0 capacity when maxmemory is unset); chunks is 0 (not counted: a
  // cluster-wide count would need a SCAN).
  TierStats stats() const override;
  PinHandle Pin(const ChunkKey&) override { return PinHandle(); }
  // A TieredStore factory (never evicts on its own: no victims).
  static TierFactory Factory(ClusterTierOptions options);

  // The chunk header of `key` (DecodeChunkHeader-checked; the payload is not read, so
  // this is no substitute for Get's verification). NotFound on a miss or a bad header;
  // Unavailable when the shard cannot be reached.
  absl::StatusOr<ChunkHeader> ReadChunkHeader(const ChunkKey& key);

  // "kvt:{<keyspace>:<key hex>}:<piece>" (piece 0 = header).
  std::string PieceKey(const ChunkKey& key, uint32_t piece) const;
  cluster::ClusterClient& client() { return *client_; }

 private:
  ClusterTier(const ClusterTierOptions& options, std::unique_ptr<cluster::ClusterClient> client);
  void RefreshStats() const;
  size_t window() const {
    return static_cast<size_t>(
        std::max<uint64_t>(1, options_.max_pipelined_bytes / options_.piece_bytes));
  }

  const ClusterTierOptions options_;
  std::unique_ptr<cluster::ClusterClient> client_;
  mutable AtomicTierCounters counters_;
  mutable std::atomic<uint64_t> capacity_{0}, used_{0};
  mutable std::atomic<int64_t> stats_at_ms_{-1000000};
};

}  // namespace kvt

#endif  // KVSTORE_CLUSTER_TIER_H_

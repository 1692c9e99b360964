// RemoteTier: a Tier (kvstore/tier.h) backed by kvtierd through RemoteClient.
//
// Every call has the client's deadline (RemoteTierOptions::client.deadline) and retries
// with backoff; a dead, paused or unreachable daemon makes Get answer Unavailable
// (which TieredStore counts as a miss in this tier), Stat answer "absent" and Put
// answer Unavailable — within about the deadline, never a hang, never
// an exception. Records read back are verified with VerifyChunk (header, length,
// payload checksum, key) before Get returns OK; a bad one is DataLoss and counted.
//
// caps(): durable, remote, verifies reads, pinnable, does not report evictions.
// PinMany asks the daemon for one lease on the leading run of its keys (one Lookup RPC
// with pin per kKvtierMaxBatchKeys keys: a store Lookup of a 100k-token prompt costs one
// Stat RPC and one pin RPC), so a TieredStore Lookup with LookupOptions{.pin} holds
// remote chunks too: the daemon evicts neither by capacity nor by Evict until the lease
// ends. The next Get of a pinned key through this tier names the lease, and the daemon
// drops that key from it when the Get finishes (the lease ends when every key was
// read). When a PinHandle is released before its key was read, the lease is queued
// once no handle of it is left, and the next Lookup RPC of this tier (Stat or Pin) asks
// the daemon to release it (LookupRequest.release_leases; nothing blocks on it);
// otherwise it ends at the daemon's lease_timeout_ms. An unreachable daemon, or a chunk
// gone from it: empty handles from there on (the store's leading run ends there).
#ifndef KVSTORE_REMOTE_TIER_H_
#define KVSTORE_REMOTE_TIER_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/remote_client.h"
#include "kvstore/tier.h"

namespace kvt {

struct RemoteTierOptions {
  RemoteClientOptions client;
  std::string name = "remote";
  // How long a cached Stats answer (capacity) stays fresh, ms.
  std::chrono::milliseconds stats_refresh{1000};
  // Same-host fast path: with shm_slots > 0, Put and Get move records through one
  // shared-memory region of shm_slots slots of shm_slot_bytes, with progressive
  // transfers (RemoteClient::PutShmFrom / GetShmInto, docs/daemon.md): the copy into or
  // out of the caller's buffer runs beside the daemon's. The region is attached at the
  // first call that needs it; a daemon that cannot share memory with this process
  // (another host, shm off: FailedPrecondition) is asked again after shm_retry. A record
  // larger than a slot, or a call while every slot is in use, goes through gRPC; so does
  // everything while no region is attached. A region left broken by a failed Get is
  // detached once its last slot is free and a new one attached. 0 = gRPC only.
  uint32_t shm_slots = 0;
  uint64_t shm_slot_bytes = 40ull << 20;  // one 256-token chunk of an 8B model (32 MiB) + room
  std::chrono::milliseconds shm_retry{10000};

  absl::Status Validate() const;
};

// Thread-safe.
class RemoteTier final : public Tier {
 public:
  // Does not contact the daemon (it may be down now and up later).
  static absl::StatusOr<std::unique_ptr<RemoteTier>> Create(const RemoteTierOptions& options);
  // A TieredStore factory (the remote tier never evicts on its own: no victims).
  static TierFactory Factory(RemoteTierOptions options);
  ~RemoteTier() override;

  TierCaps caps() const override;

  using Tier::Put;
  // The context is not sent: admission is the serving process's own tiers' business.
  absl::StatusOr<PutResult> Put(std::span<const std::byte> record,
                                const PutContext& context) override;
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out) override;
  // One per-key Lookup RPC per kKvtierMaxBatchKeys keys. Unreachable daemon: every key
  // reads as absent.
  std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys) override;
  absl::Status Erase(const ChunkKey& key) override;
  // Pages come from the daemon (page tokens are the daemon's).
  absl::StatusOr<ListPage> List(const ListOptions& options) override;
  // Client-side counters; capacity/used/chunks from the daemon's last Stats answer.
  TierStats stats() const override;
  PinHandle Pin(const ChunkKey& key) override;
  std::vector<PinHandle> PinMany(std::span<const ChunkKey> keys) override;
  // Leases held here (taken by Pin, not yet used by a Get or released), and released
  // ones not yet sent to the daemon.
  size_t held_leases() const;
  size_t leases_to_release() const;

  RemoteClient& client() { return *client_; }
  // Records moved through shared memory (Put, Get) since creation.
  uint64_t shm_puts() const { return shm_puts_.load(std::memory_order_relaxed); }
  uint64_t shm_gets() const { return shm_gets_.load(std::memory_order_relaxed); }

 private:
  RemoteTier(const RemoteTierOptions& options, std::unique_ptr<RemoteClient> client);
  void RefreshStats() const;
  static void ReleasePin(void* owner, const ChunkKey& key);
  uint64_t TakeLease(const ChunkKey& key);
  // One handle of lease `id` is done: read by a Get (unread = false) or dropped.
  void DropLeaseRef(uint64_t id, bool unread);
  // The queued releases to send with the next Lookup RPC (at most kKvtierMaxBatchKeys).
  std::vector<uint64_t> TakeReleases();
  // A free shm slot for a record of `bytes`, attaching the region when needed; an empty
  // Slot (session == nullptr) means "use gRPC".
  struct Slot {
    std::shared_ptr<ShmSession> session;
    uint32_t index = 0;
    uint64_t offset = 0;
  };
  Slot TakeSlot(uint64_t bytes);
  static bool RegionLost(const absl::Status& s, ShmSession& session);
  void GiveSlot(const Slot& slot);

  const std::string name_;
  const RemoteTierOptions options_;
  std::unique_ptr<RemoteClient> client_;
  mutable AtomicTierCounters counters_;
  mutable std::atomic<uint64_t> capacity_{0}, used_{0}, chunks_{0};
  mutable std::atomic<int64_t> stats_at_ms_{0};
  mutable absl::Mutex lease_mu_;
  // Daemon lease ids per pinned key, oldest first.
  absl::flat_hash_map<ChunkKey, std::vector<uint64_t>> leases_ ABSL_GUARDED_BY(lease_mu_);
  // Per daemon lease: handles not yet read or dropped, and whether one was dropped unread.
  struct LeaseRef {
    uint32_t handles = 0;
    bool unread = false;
  };
  absl::flat_hash_map<uint64_t, LeaseRef> lease_refs_ ABSL_GUARDED_BY(lease_mu_);
  std::vector<uint64_t> to_release_ ABSL_GUARDED_BY(lease_mu_);
  absl::Mutex shm_mu_;
  std::shared_ptr<ShmSession> shm_
      ABSL_GUARDED_BY(shm_mu_);  // detached when the last user drops it
  std::vector<bool> slot_busy_ ABSL_GUARDED_BY(shm_mu_);
  int64_t shm_next_try_ms_ ABSL_GUARDED_BY(shm_mu_) = 0;
  std::atomic<uint64_t> shm_puts_{0}, shm_gets_{0};
};

}  // namespace kvt

#endif  // KVSTORE_REMOTE_TIER_H_

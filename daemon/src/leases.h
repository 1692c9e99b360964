// LeaseTable: the leases kvtierd hands out over gRPC (LookupRequest.pin). Each wire lease
// id names a store Lease (TieredStore::Lookup with LookupOptions{.pin}): the store's one
// lease book holds the pins and the deadline (TieredStoreOptions::lease_timeout); this
// table only maps ids to those handles. When the store reaps a lease, its wire id stops
// resolving.
//
// A wire lease id is random and non-zero (not the store's), and belongs to the tenant
// that took it: another tenant's Get naming it releases nothing.
#ifndef KVT_DAEMON_LEASES_H_
#define KVT_DAEMON_LEASES_H_

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/tiered_store.h"

namespace kvt::daemon {

struct LeaseCounts {
  uint64_t granted = 0;   // Lookups that pinned something
  uint64_t released = 0;  // by the Get that named them, or dropped by the client
  uint64_t expired = 0;   // lease_timeout passed first (the store's count)
  uint64_t active = 0;    // live now
};

// Thread-safe. Lock order: the table's lock before the store's lease book (a Lease's
// live() is asked under it). Released leases release their pins outside the table's lock;
// forgetting an expired one under it may release pins the store has not reaped yet (the
// tiers never call into the daemon, so no lock cycle).
class LeaseTable {
 public:
  // REQUIRES: `store` outlives the table; `timeout` is the store's lease_timeout (reported
  // to clients only).
  LeaseTable(TieredStore* store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}

  // Takes the store lease `lease` (non-empty) pinning `keys` for `tenant`; returns its
  // wire id.
  uint64_t Add(Lease lease, std::span<const ChunkKey> keys, const std::string& tenant);
  // A Get naming lease `id` read (or tried) `keys`: they are done with. Once every key
  // of the lease is done with, its pins are released (counted as released; returns
  // true). Nothing happens for 0, an unknown, expired or another tenant's lease.
  bool Release(uint64_t id, std::span<const ChunkKey> keys, const std::string& tenant);
  // Releases lease `id` now (the client no longer needs it); same conditions as Release.
  bool Drop(uint64_t id, const std::string& tenant);
  LeaseCounts counts();
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Entry {
    Lease lease;
    absl::flat_hash_set<ChunkKey> pending;  // pinned keys no Get has read yet
    std::string tenant;
  };
  // Forgets entries whose store lease expired (the store released their pins).
  void ForgetExpiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  TieredStore* const store_;
  const std::chrono::milliseconds timeout_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> leases_ ABSL_GUARDED_BY(mu_);
  // Entries at the last sweep: Add sweeps again once the table has doubled since, so a
  // sweep costs O(1) amortized per Add.
  size_t swept_size_ ABSL_GUARDED_BY(mu_) = 0;
  absl::BitGen rng_ ABSL_GUARDED_BY(mu_);
  uint64_t granted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t released_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_LEASES_H_

// LeaseTable: the leases kvtierd hands out over gRPC (LookupRequest.pin), on top of the
// store's own leases (TieredStore::Lookup with LookupOptions{.pin}, which pins the
// chunks and expires them after TieredStoreOptions::lease_timeout on its own).
//
// A wire lease id is random and non-zero (not the store's sequential id), and belongs
// to the tenant that took it: another tenant's Get naming it releases nothing.
#ifndef KVT_DAEMON_LEASES_H_
#define KVT_DAEMON_LEASES_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <span>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/tiered_store.h"

namespace kvt::daemon {

struct LeaseCounts {
  uint64_t granted = 0;   // Lookups that pinned something
  uint64_t released = 0;  // by the Get that named them
  uint64_t expired = 0;   // lease_timeout passed first (the store's count)
  uint64_t active = 0;    // live now
};

// Thread-safe.
class LeaseTable {
 public:
  // REQUIRES: `store` outlives the table; `timeout` is the store's lease_timeout.
  LeaseTable(TieredStore* store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}

  // Registers the store lease `lease` (not kNoLease) pinning `keys` for `tenant`;
  // returns its wire id.
  // `issued`: a time taken before the store's Lookup, so this entry expires no later
  // than the store's lease (a Release never counts a lease the store already expired).
  uint64_t Add(LeaseId lease, std::span<const ChunkKey> keys, const std::string& tenant,
               std::chrono::steady_clock::time_point issued);
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
    LeaseId lease;
    absl::flat_hash_set<ChunkKey> pending;  // pinned keys no Get has read yet
    std::string tenant;
    std::chrono::steady_clock::time_point deadline;
  };
  void ReapLocked(std::chrono::steady_clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  TieredStore* const store_;
  const std::chrono::milliseconds timeout_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> leases_ ABSL_GUARDED_BY(mu_);
  // (deadline, id) in issue order (nearly deadline order: reaping pops the front while
  // it has expired; Release checks the entry's own deadline).
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> by_deadline_
      ABSL_GUARDED_BY(mu_);
  absl::BitGen rng_ ABSL_GUARDED_BY(mu_);
  uint64_t granted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t released_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_LEASES_H_

// Private to libkvstore: LeaseBook, the one book of the store's leases (kvstore/lease.h).
// It holds each lease's tier pins and deadline; a Lease handle names its entry by id.
#ifndef KVSTORE_SRC_LEASE_BOOK_H_
#define KVSTORE_SRC_LEASE_BOOK_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/clock.h"
#include "kvstore/lease.h"
#include "kvstore/tier.h"
#include "kvstore/types.h"

namespace kvt::internal {

// A lease's pin on one chunk in one tier. A chunk found in a tier that cannot pin (or in
// the write-back queue) holds an empty handle and counts in no pinned bytes.
struct LeasePin {
  int tier = 0;
  ChunkKey key;
  uint64_t bytes = 0;  // record size when pinned
  PinHandle handle;
};

// Thread-safe. Pin handles are always released outside the book's lock, so a tier's lock
// is never taken under it. Owned by a shared_ptr (leases hold a weak_ptr to it).
class LeaseBook : public std::enable_shared_from_this<LeaseBook> {
 public:
  // Leases expire `timeout` after they are granted, on `clock` (null = SystemClock();
  // tests pass a ManualClock).
  explicit LeaseBook(Clock::Duration timeout, std::shared_ptr<Clock> clock = nullptr)
      : timeout_(timeout), clock_(clock != nullptr ? std::move(clock) : SystemClock()) {}
  ~LeaseBook();

  // A new lease holding `pins` until it is released or `timeout` passes. An empty Lease
  // when `pins` is empty.
  Lease Grant(std::vector<LeasePin> pins) ABSL_LOCKS_EXCLUDED(mu_);
  // Releases the pins of every lease whose deadline has passed (counted in expired()).
  // Reaps run one at a time: when this returns, every lease expired by then has released
  // its tier pins, also those another thread's reap took (pinned_bytes() and a tier's
  // pinned bytes then agree).
  void ReapExpired() ABSL_LOCKS_EXCLUDED(mu_, reap_mu_);
  // Releases every lease now (the owner's tiers are about to be destroyed).
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

  // Record bytes of the distinct (tier, chunk) pairs pinned by live leases, after reaping
  // (a chunk pinned by several leases counts once).
  uint64_t pinned_bytes() ABSL_LOCKS_EXCLUDED(mu_, reap_mu_);
  // Leases that expired without a release, since creation (a lease released after its
  // deadline, before a reap took it, counts here too).
  uint64_t expired() const ABSL_LOCKS_EXCLUDED(mu_);
  // Leases held now (not released; expired ones until reaped).
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

  // --- for Lease ---
  void Release(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  void Shrink(uint64_t id, size_t keep) ABSL_LOCKS_EXCLUDED(mu_);
  bool Live(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  size_t PinCount(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    Clock::TimePoint deadline;
    std::vector<LeasePin> pins;
  };
  struct PinRef {
    uint32_t count = 0;
    uint64_t bytes = 0;
  };
  void DropPinRefsLocked(std::span<const LeasePin> pins) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock::Duration timeout_;
  const std::shared_ptr<Clock> clock_;
  // Held for a whole ReapExpired, pin releases included (lock order: reap_mu_, then mu_;
  // tiers never call into the book).
  absl::Mutex reap_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> leases_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<std::pair<int, ChunkKey>, PinRef> pin_refs_ ABSL_GUARDED_BY(mu_);
  uint64_t pinned_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t expired_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_LEASE_BOOK_H_

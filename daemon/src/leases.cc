#include "leases.h"

#include <algorithm>

namespace kvt::daemon {

void LeaseTable::ReapLocked(std::chrono::steady_clock::time_point now) {
  // The store unpins (and counts) expired leases itself; this only forgets them.
  while (!by_deadline_.empty() && by_deadline_.front().first <= now) {
    leases_.erase(by_deadline_.front().second);  // no-op when released already
    by_deadline_.pop_front();
  }
}

uint64_t LeaseTable::Add(LeaseId lease, std::span<const ChunkKey> keys, const std::string& tenant,
                         std::chrono::steady_clock::time_point issued) {
  absl::MutexLock lock(&mu_);
  ReapLocked(std::chrono::steady_clock::now());
  uint64_t id = 0;
  while (id == 0 || leases_.contains(id)) id = absl::Uniform<uint64_t>(rng_);
  const auto deadline = issued + timeout_;
  leases_.emplace(
      id, Entry{lease, absl::flat_hash_set<ChunkKey>(keys.begin(), keys.end()), tenant, deadline});
  by_deadline_.emplace_back(deadline, id);
  ++granted_;
  return id;
}

bool LeaseTable::Release(uint64_t id, std::span<const ChunkKey> keys, const std::string& tenant) {
  if (id == 0) return false;
  LeaseId lease;
  {
    absl::MutexLock lock(&mu_);
    ReapLocked(std::chrono::steady_clock::now());
    auto it = leases_.find(id);
    if (it == leases_.end() || it->second.tenant != tenant) return false;
    if (it->second.deadline <= std::chrono::steady_clock::now()) {  // expired, not yet reaped
      leases_.erase(it);
      return false;
    }
    for (const ChunkKey& k : keys) it->second.pending.erase(k);
    if (!it->second.pending.empty()) return false;  // other keys still to be read
    lease = it->second.lease;
    leases_.erase(it);
    ++released_;
  }
  store_->ReleaseLease(lease);  // outside our lock: the store takes its own
  return true;
}

bool LeaseTable::Drop(uint64_t id, const std::string& tenant) {
  if (id == 0) return false;
  LeaseId lease;
  {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(id);
    if (it == leases_.end() || it->second.tenant != tenant) return false;
    const bool live = it->second.deadline > std::chrono::steady_clock::now();
    lease = it->second.lease;
    leases_.erase(it);
    if (!live) return false;
    ++released_;
  }
  store_->ReleaseLease(lease);
  return true;
}

LeaseCounts LeaseTable::counts() {
  LeaseCounts c;
  {
    absl::MutexLock lock(&mu_);
    ReapLocked(std::chrono::steady_clock::now());
    c.granted = granted_;
    c.released = released_;
    c.active = leases_.size();
  }
  c.expired = store_->expired_leases();
  return c;
}

}  // namespace kvt::daemon

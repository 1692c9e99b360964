#include "leases.h"

#include <utility>

namespace kvt::daemon {

void LeaseTable::ForgetExpiredLocked() {
  // The store unpins (and counts) expired leases itself; this only forgets their ids.
  absl::erase_if(leases_, [](const auto& kv) { return !kv.second.lease.live(); });
  swept_size_ = leases_.size();
}

uint64_t LeaseTable::Add(Lease lease, std::span<const ChunkKey> keys, const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  if (leases_.size() >= 2 * swept_size_ + 64) ForgetExpiredLocked();
  uint64_t id = 0;
  while (id == 0 || leases_.contains(id)) id = absl::Uniform<uint64_t>(rng_);
  leases_.emplace(
      id, Entry{std::move(lease), absl::flat_hash_set<ChunkKey>(keys.begin(), keys.end()), tenant});
  ++granted_;
  return id;
}

bool LeaseTable::Release(uint64_t id, std::span<const ChunkKey> keys, const std::string& tenant) {
  if (id == 0) return false;
  Lease lease;  // released on return, outside mu_
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.tenant != tenant) return false;
  if (!it->second.lease.live()) {  // expired: the store releases it
    lease = std::move(it->second.lease);
    leases_.erase(it);
    return false;
  }
  for (const ChunkKey& k : keys) it->second.pending.erase(k);
  if (!it->second.pending.empty()) return false;  // other keys still to be read
  lease = std::move(it->second.lease);
  leases_.erase(it);
  ++released_;
  return true;
}

bool LeaseTable::Drop(uint64_t id, const std::string& tenant) {
  if (id == 0) return false;
  Lease lease;  // released on return, outside mu_
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.tenant != tenant) return false;
  const bool live = it->second.lease.live();
  lease = std::move(it->second.lease);
  leases_.erase(it);
  if (!live) return false;
  ++released_;
  return true;
}

LeaseCounts LeaseTable::counts() {
  LeaseCounts c;
  {
    absl::MutexLock lock(&mu_);
    ForgetExpiredLocked();
    c.granted = granted_;
    c.released = released_;
    c.active = leases_.size();
  }
  c.expired = store_->stats().expired_leases;
  return c;
}

}  // namespace kvt::daemon

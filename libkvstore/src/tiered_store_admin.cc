// TieredStore's operator side: the merged listing (tier_listing.cc), eviction by
// selector, and stats.
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "tier_listing.h"
#include "tiered_store_impl.h"

namespace kvt {

absl::StatusOr<StoreListPage> TieredStore::Impl::List(const StoreListOptions& options) {
  return internal::ListTiers(tiers_, caps_, options);
}

absl::StatusOr<EvictResult> TieredStore::Impl::Evict(const EvictSelector& selector,
                                                     const EvictOptions& options) {
  if (absl::Status s = selector.Validate(); !s.ok()) return s;
  std::vector<StoredChunk> listing;
  StoreListOptions lo;
  lo.visible = selector.visible;
  lo.page_size = 10000;
  if (selector.ns) lo.ns = selector.ns;
  if (selector.within_ns) lo.ns = selector.within_ns;
  do {
    absl::StatusOr<StoreListPage> page = List(lo);
    if (!page.ok()) return page.status();
    for (StoredChunk& c : page->chunks) listing.push_back(std::move(c));
    lo.page_token = page->next_page_token;
  } while (!lo.page_token.empty());

  EvictResult result;
  for (size_t i : SelectVictims(listing, selector, ClockOrSystem(options_.clock).UnixMillis())) {
    StoredChunk& c = listing[i];
    if (!options.dry_run) {
      if (absl::Status s = Erase(c.info.key); !s.ok()) {
        result.failed.emplace_back(c.info.key, s);
        continue;
      }
    }
    ++result.chunks;
    result.bytes += c.info.record_bytes;
    result.selected.push_back(std::move(c));
  }
  if (!options.dry_run && result.chunks > 0) {
    absl::MutexLock lock(&stats_mu_);
    explicit_evictions_ += result.chunks;
  }
  return result;
}

TieredStoreStats TieredStore::Impl::stats() const {
  TieredStoreStats s;
  queue_->FillStats(s);
  {
    absl::MutexLock lock(&stats_mu_);
    s.hits = hits_;
    s.misses = misses_;
    s.promotions = promotions_;
    s.queue_hits = queue_hits_;
    s.explicit_evictions = explicit_evictions_;
  }
  s.pinned_bytes = leases_->pinned_bytes();
  s.expired_leases = leases_->expired();
  s.healthy = queue_->healthy();
  // One integrity count: every tier that verifies feeds it.
  s.integrity_errors = 0;
  for (const auto& tier : tiers_) {
    s.tiers.push_back(tier->stats());
    s.integrity_errors += s.tiers.back().integrity_errors;
  }
  return s;
}

std::vector<TierCaps> TieredStore::Impl::tiers() const {
  std::vector<TierCaps> caps;
  for (const auto& tier : tiers_) caps.push_back(tier->caps());
  return caps;
}

}  // namespace kvt

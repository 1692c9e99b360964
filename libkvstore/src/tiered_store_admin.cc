// TieredStore's operator side: the merged listing, eviction by selector, and stats.
#include <algorithm>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "kvstore/chunk_codec.h"
#include "tiered_store_impl.h"

namespace kvt {

absl::StatusOr<StoreListPage> TieredStore::Impl::List(const StoreListOptions& options) {
  if (options.page_size < 1 || options.page_size > 100000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StoreListOptions.page_size = %d; expected 1..100000", options.page_size));
  }
  if (!options.page_token.empty() && !ChunkKey::FromHex(options.page_token).ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page_token '%s': expected \"\" or a next_page_token (32 hex digits)", options.page_token));
  }
  StoreListPage out;
  std::string token = options.page_token;
  for (;;) {
    // Every tier lists in ChunkKey order from the same token. Below `bound` (the
    // smallest last key of a tier with more pages) every tier's page is complete, so
    // the merge up to it holds each chunk exactly once.
    std::map<ChunkKey, StoredChunk> merged;
    std::optional<ChunkKey> bound;
    const size_t end = options.through_tier
                           ? std::min(tiers_.size(), ToSize(*options.through_tier) + 1)
                           : tiers_.size();
    for (size_t t = 0; t < end; ++t) {
      ListOptions lo;
      lo.ns = options.ns;
      lo.page_token = token;
      lo.page_size = options.page_size;
      absl::StatusOr<ListPage> page = tiers_[t]->List(lo);
      if (!page.ok()) return page.status();
      for (const ChunkInfo& c : page->chunks) {
        auto [it, fresh] = merged.try_emplace(c.key, StoredChunk{c, {}, {}});
        it->second.tiers.push_back(static_cast<int>(t));
        it->second.kinds.push_back(caps_[t].kind);
        if (!fresh && it->second.info.last_access_unix_ms < c.last_access_unix_ms) {
          it->second.info.last_access_unix_ms = c.last_access_unix_ms;
        }
      }
      if (!page->next_page_token.empty() && !page->chunks.empty()) {
        if (!bound || page->chunks.back().key < *bound) bound = page->chunks.back().key;
      }
    }
    for (auto& [key, chunk] : merged) {
      if (bound && *bound < key) break;
      if (options.visible && !options.visible(chunk.info.ns)) continue;
      out.chunks.push_back(std::move(chunk));
      if (out.chunks.size() == options.page_size) {
        // More may follow (in `merged` or beyond `bound`); an empty last page is possible.
        auto next = merged.upper_bound(key);
        const bool more = bound.has_value() || next != merged.end();
        out.next_page_token = more ? key.ToHex() : "";
        return out;
      }
    }
    if (!bound) return out;
    token = bound->ToHex();
  }
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

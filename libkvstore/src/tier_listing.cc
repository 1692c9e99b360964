// The store's merged listing over the tiers' own listings (tier_listing.h).
#include "tier_listing.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_format.h"

namespace kvt::internal {

absl::StatusOr<StoreListPage> ListTiers(std::span<const std::unique_ptr<Tier>> tiers,
                                        std::span<const TierCaps> caps,
                                        const StoreListOptions& options) {
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
                           ? std::min(tiers.size(), ToSize(*options.through_tier) + 1)
                           : tiers.size();
    for (size_t t = 0; t < end; ++t) {
      ListOptions lo;
      lo.ns = options.ns;
      lo.page_token = token;
      lo.page_size = options.page_size;
      absl::StatusOr<ListPage> page = tiers[t]->List(lo);
      if (!page.ok()) return page.status();
      for (const ChunkInfo& c : page->chunks) {
        auto [it, fresh] = merged.try_emplace(c.key, StoredChunk{c, {}, {}});
        it->second.tiers.push_back(static_cast<int>(t));
        it->second.kinds.push_back(caps[t].kind);
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

}  // namespace kvt::internal

#include "kvstore/store_factory.h"

#include "absl/strings/str_cat.h"

namespace kvt {

CachePolicyOptions DefaultCachePolicy(bool below_another_tier) {
  CachePolicyOptions o;
  o.name = std::string(kDefaultCachePolicy);
  o.adaptive_declines_first_seen = !below_another_tier;
  return o;
}

namespace {

// "default" resolved for the tier's place; the caller's TTL and clock are kept.
void ResolveDefaultPolicy(CachePolicyOptions& o, bool below_another_tier) {
  if (o.name != "default") return;
  const CachePolicyOptions d = DefaultCachePolicy(below_another_tier);
  o.name = d.name;
  o.adaptive_declines_first_seen = d.adaptive_declines_first_seen;
}

}  // namespace

absl::Status StoreOptions::Validate() const {
  if (host.capacity_bytes > 0) {
    if (absl::Status s = host.Validate(); !s.ok()) return s;
  } else if (!disk && lower.empty()) {
    return absl::InvalidArgumentError(
        "StoreOptions: host.capacity_bytes = 0 and no disk or lower tier; expected at least one "
        "tier");
  }
  if (disk) {
    if (absl::Status s = disk->Validate(); !s.ok()) return s;
  }
  for (size_t i = 0; i < lower.size(); ++i) {
    if (!lower[i])
      return absl::InvalidArgumentError(absl::StrCat("StoreOptions.lower[", i, "] is null"));
  }
  return store.Validate();
}

absl::StatusOr<std::unique_ptr<TieredStore>> OpenTieredStore(const StoreOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  // Host memory is the top tier: it declines first-seen chunks beyond its budget (the
  // write-through brings them to the tiers below). A disk below host memory stores them.
  const bool disk_below_host = options.host.capacity_bytes > 0;
  std::vector<TierFactory> tiers;
  // One clock and one health registry for the whole store: a tier left without its own
  // takes the store's.
  if (options.host.capacity_bytes > 0) {
    HostTierOptions host = options.host;
    if (host.clock == nullptr) host.clock = options.store.clock;
    if (host.absence == nullptr) host.absence = options.store.absence;
    const bool chosen = host.cache_policy.name != "default";
    ResolveDefaultPolicy(host.cache_policy, /*below_another_tier=*/false);
    // Without a tier below, or without write-through, a declined chunk would reach no
    // tier at all (only evictions are demoted): then host memory stores it, first to go.
    const bool tiers_below = options.disk || !options.lower.empty();
    if (!chosen && (!tiers_below || options.store.placement.write_through == WriteThrough::kNone)) {
      host.cache_policy.adaptive_declines_first_seen = false;
    }
    tiers.push_back(HostTier::Factory(std::move(host)));
  }
  if (options.disk) {
    DiskTierOptions disk = *options.disk;
    if (disk.clock == nullptr) disk.clock = options.store.clock;
    if (disk.health == nullptr) disk.health = options.store.health;
    if (disk.absence == nullptr) disk.absence = options.store.absence;
    ResolveDefaultPolicy(disk.cache_policy, disk_below_host);
    tiers.push_back(DiskTier::Factory(std::move(disk)));
  }
  for (const TierFactory& f : options.lower) tiers.push_back(f);
  return TieredStore::Create(std::move(tiers), options.store);
}

}  // namespace kvt

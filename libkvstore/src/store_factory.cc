#include "kvstore/store_factory.h"

#include "absl/strings/str_cat.h"

namespace kvt {

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
  std::vector<TierFactory> tiers;
  // One clock and one health registry for the whole store: a tier left without its own
  // takes the store's.
  if (options.host.capacity_bytes > 0) {
    HostTierOptions host = options.host;
    if (host.clock == nullptr) host.clock = options.store.clock;
    tiers.push_back(HostTier::Factory(std::move(host)));
  }
  if (options.disk) {
    DiskTierOptions disk = *options.disk;
    if (disk.clock == nullptr) disk.clock = options.store.clock;
    if (disk.health == nullptr) disk.health = options.store.health;
    tiers.push_back(DiskTier::Factory(std::move(disk)));
  }
  for (const TierFactory& f : options.lower) tiers.push_back(f);
  return TieredStore::Create(std::move(tiers), options.store);
}

}  // namespace kvt

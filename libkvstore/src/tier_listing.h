// Private to libkvstore: the store's merged listing, one page over every tier's own
// listing (Tier::List, each in ChunkKey order), each chunk once with the tiers that hold
// it. TieredStore::List and Evict's selection read it.
#ifndef KVSTORE_SRC_TIER_LISTING_H_
#define KVSTORE_SRC_TIER_LISTING_H_

#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "kvstore/tier.h"
#include "kvstore/tiered_store.h"

namespace kvt::internal {

// One page of the merge of tiers[0, through_tier] (all without it): ChunkKey order,
// `tiers`/`kinds` in tier order, last_access_unix_ms the latest of the copies. Tiers are
// called with no lock of the caller's held. InvalidArgument for a bad page_size or
// page_token; a tier's List error as it is.
absl::StatusOr<StoreListPage> ListTiers(std::span<const std::unique_ptr<Tier>> tiers,
                                        std::span<const TierCaps> caps,
                                        const StoreListOptions& options);

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_TIER_LISTING_H_

// Private to libkvstore: the store's placement over its tiers' capabilities (never their
// kind): which tiers a write goes through to, and which tier a kDurable write waits for.
#ifndef KVSTORE_SRC_STORE_PLACEMENT_H_
#define KVSTORE_SRC_STORE_PLACEMENT_H_

#include <cstddef>
#include <span>

#include "kvstore/tier.h"
#include "kvstore/tiered_store.h"

namespace kvt::internal {

struct Placement {
  // The tiers a put is written through to in the background: [through_first,
  // through_last], empty when through_first > through_last.
  size_t through_first = 1;
  size_t through_last = 0;
  // The first durable tier; caps.size() when there is none.
  size_t first_durable = 0;
};

// REQUIRES: caps is not empty.
Placement PlaceWrites(std::span<const TierCaps> caps, const PlacementPolicy& policy);

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_STORE_PLACEMENT_H_

// The store's placement over its tiers' capabilities (store_placement.h).
#include "store_placement.h"

namespace kvt::internal {

Placement PlaceWrites(std::span<const TierCaps> caps, const PlacementPolicy& policy) {
  Placement p;
  p.first_durable = caps.size();
  for (size_t t = 0; t < caps.size(); ++t) {
    if (caps[t].durable) {
      p.first_durable = t;
      break;
    }
  }
  if (policy.write_through == WriteThrough::kNone) return p;
  size_t last = caps.size() - 1;
  if (policy.write_through == WriteThrough::kLocal) {
    while (last >= 1 && caps[last].remote) --last;
  }
  p.through_last = last;
  return p;
}

}  // namespace kvt::internal

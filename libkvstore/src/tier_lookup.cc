// Where chunks are across the tiers, and the pins of the leading hits (tier_lookup.h).
#include "tier_lookup.h"

#include <utility>

namespace kvt::internal {

KeyLocations LocateKeys(std::span<const std::unique_ptr<Tier>> tiers, WriteBackQueue& queue,
                        std::span<const ChunkKey> keys,
                        const std::function<bool(const NamespaceId&)>& visible) {
  KeyLocations loc;
  loc.where.assign(keys.size(), -1);
  loc.bytes.assign(keys.size(), 0);
  loc.ns.assign(keys.size(), NamespaceId{});
  auto shown = [&](const NamespaceId& n) { return !visible || visible(n); };
  loc.queued.assign(keys.size(), false);
  std::vector<size_t> unresolved(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) unresolved[i] = i;
  for (size_t t = 0; t < tiers.size() && !unresolved.empty(); ++t) {
    std::vector<ChunkKey> query;
    query.reserve(unresolved.size());
    for (size_t i : unresolved) query.push_back(keys[i]);
    std::vector<ChunkStat> present = tiers[t]->Stat(query);
    std::vector<size_t> still;
    for (size_t j = 0; j < unresolved.size(); ++j) {
      if (j < present.size() && present[j].present) {
        // Held under a namespace the caller may not see: a miss (not looked for below).
        if (!shown(present[j].ns)) continue;
        loc.where[unresolved[j]] = static_cast<int>(t);
        loc.bytes[unresolved[j]] = present[j].record_bytes;
        loc.ns[unresolved[j]] = present[j].ns;
      } else {
        still.push_back(unresolved[j]);
      }
    }
    unresolved = std::move(still);
    if (t == 0 && !unresolved.empty()) {
      std::vector<int> qwhere(keys.size(), -1);
      queue.Stat(keys, qwhere, loc.bytes, loc.ns);
      std::vector<size_t> rest;
      for (size_t i : unresolved) {
        if (qwhere[i] >= 0 && !shown(loc.ns[i])) continue;  // a miss, as above
        if (qwhere[i] >= 0) {
          loc.where[i] = qwhere[i];
          loc.queued[i] = true;
        } else {
          rest.push_back(i);
        }
      }
      unresolved = std::move(rest);
    }
  }
  while (loc.leading < keys.size() && loc.where[loc.leading] >= 0) ++loc.leading;
  return loc;
}

std::vector<LeasePin> PinLeading(std::span<const std::unique_ptr<Tier>> tiers,
                                 std::span<const TierCaps> caps, std::span<const ChunkKey> keys,
                                 KeyLocations& loc) {
  std::vector<LeasePin> pins;
  pins.reserve(loc.leading);
  // One PinMany per tier over the leading keys it holds, then the pins in prompt order.
  std::vector<PinHandle> handles(loc.leading);
  for (size_t t = 0; t < tiers.size(); ++t) {
    if (!caps[t].pinnable) continue;
    std::vector<size_t> at;
    std::vector<ChunkKey> query;
    for (size_t i = 0; i < loc.leading; ++i) {
      if (loc.where[i] == static_cast<int>(t) && !loc.queued[i]) {
        at.push_back(i);
        query.push_back(keys[i]);
      }
    }
    if (query.empty()) continue;
    std::vector<PinHandle> got = tiers[t]->PinMany(query);
    for (size_t j = 0; j < at.size() && j < got.size(); ++j) handles[at[j]] = std::move(got[j]);
  }
  for (size_t i = 0; i < loc.leading; ++i) {
    const int t = loc.where[i];
    if (caps[t].pinnable && !loc.queued[i]) {
      if (!handles[i]) {  // left that tier since LocateKeys: stop here (later pins drop)
        loc.leading = i;
        break;
      }
      loc.bytes[i] = handles[i].record_bytes();
    }
    pins.push_back(LeasePin{t, keys[i], loc.bytes[i], std::move(handles[i])});
  }
  return pins;
}

}  // namespace kvt::internal

// Private to libkvstore: where a prompt's chunks are across the tiers, and the pins of
// its leading hits; TieredStore::Lookup is these two steps and the lease book's Grant.
// Batched: one Stat per tier over the keys not yet found, and one PinMany per pinnable
// tier (a remote tier answers each in one round trip).
#ifndef KVSTORE_SRC_TIER_LOOKUP_H_
#define KVSTORE_SRC_TIER_LOOKUP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvstore/tier.h"
#include "lease_book.h"
#include "write_back_queue.h"

namespace kvt::internal {

struct KeyLocations {
  std::vector<int> where;       // per key: the first tier holding it; -1 = nowhere
  std::vector<uint64_t> bytes;  // its record size there
  std::vector<NamespaceId> ns;  // its namespace there (ChunkStat::ns)
  std::vector<bool> queued;     // found in the write-back queue (where = its target tier)
  size_t leading = 0;           // keys [0, leading) are all found
};

// Asks tier 0, then the write-back queue (records waiting there are cached too, between
// tier 0 and the tiers below), then each lower tier for the keys still not found. A key
// held under a namespace `visible` rejects (when set) is a miss, not looked for below.
KeyLocations LocateKeys(std::span<const std::unique_ptr<Tier>> tiers, WriteBackQueue& queue,
                        std::span<const ChunkKey> keys,
                        const std::function<bool(const NamespaceId&)>& visible);

// Pins keys [0, loc.leading) where they were found (pinnable tiers; a queued record and
// a key of a tier that cannot pin are leased unpinned), in prompt order. A key that left
// its tier since LocateKeys ends the leading run there: loc.leading shrinks and later
// pins are dropped. bytes of a pinned key become its size when pinned.
std::vector<LeasePin> PinLeading(std::span<const std::unique_ptr<Tier>> tiers,
                                 std::span<const TierCaps> caps, std::span<const ChunkKey> keys,
                                 KeyLocations& loc);

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_TIER_LOOKUP_H_

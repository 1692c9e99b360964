// The one assembly of a TieredStore from options: host memory, then an optional disk
// tier, then any lower tiers (a kvtierd RemoteTier, a cluster tier) given as factories.
// kvtierd, the CLI, the C ABI, kvtier-llama-server, the llama.cpp demo and the benchmarks
// all build stores here (a tier built already, e.g. a throttled or a remote one, goes in
// `lower` through UseTier, with host.capacity_bytes = 0 when it is the only tier).
#ifndef KVSTORE_STORE_FACTORY_H_
#define KVSTORE_STORE_FACTORY_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/tiered_store.h"

namespace kvt {

// The measured per-tier cache policies (docs/cache-policy.md, "Which policy each tier
// should use"): "adaptive" declining first-seen chunks beyond its budget for every tier
// but the lowest tier of a stack (TieredStore writes what tier 0 declines through to the
// tiers below, whose own policies decide: host memory keeps its room for chunks seen
// before), and "adaptive" storing them (first to go) for a tier below another one, the
// last that could catch a first-seen chunk before its first reuse.
CachePolicyOptions DefaultCachePolicy(bool below_another_tier);

struct StoreOptions {
  // Tier 0. capacity_bytes 0 = no host tier (then a disk or lower tier is required).
  // Its cache policy is "default" unless chosen: see OpenTieredStore.
  HostTierOptions host = [] {
    HostTierOptions h;
    h.cache_policy.name = "default";
    return h;
  }();
  // A disk tier below the host tier when set.
  std::optional<DiskTierOptions> disk;
  // Tiers below the disk tier, fastest first (e.g. RemoteTier::Factory(...)).
  std::vector<TierFactory> lower;
  // The store's options; its clock, health registry and absence record also go to the
  // host and disk tiers whose own are null.
  TieredStoreOptions store;

  // InvalidArgument naming the field (host, disk, store) and the problem.
  absl::Status Validate() const;
};

// Builds the tiers in order and the store over them (each tier but the last demotes
// into the next). A host or disk tier whose cache_policy.name is "default" gets
// DefaultCachePolicy for its place (below another tier or not), keeping its ttl and clock. Errors
// of any tier's construction are returned and nothing is kept.
absl::StatusOr<std::unique_ptr<TieredStore>> OpenTieredStore(const StoreOptions& options);

}  // namespace kvt

#endif  // KVSTORE_STORE_FACTORY_H_

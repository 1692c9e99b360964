// kvtier-bench remote's pinned-lookup phase: what an engine's scheduler pays to ask
// kvtierd which chunks of a long prompt it can load, and to pin them (issue 20).
#ifndef KVT_BENCH_PINNED_LOOKUP_H_
#define KVT_BENCH_PINNED_LOOKUP_H_

#include <cstdint>
#include <string>

namespace kvt::bench {

struct PinnedLookupFigures {
  uint64_t chunks = 0;         // leading chunks of the prompt kvtierd holds (all of them)
  uint64_t rpcs = 0;           // RPCs of one TieredStore::Lookup({.pin = true})
  double ms = 0;               // its wall time, median of the rounds
  uint64_t per_key_rpcs = 0;   // the same lookup pinned one key per RPC (the old path)
  double per_key_ms = 0;       // its wall time, median of the rounds
  double cold_prefill_ms = 0;  // the prompt's cold prefill at `prefill_tokens_per_s`
  std::string error;           // empty when the figures are valid
};

// Stores a `prompt_tokens`-token prompt's chunks (`chunk_tokens` each, small payloads:
// a lookup's cost does not depend on record size) in the kvtierd at `target`, then times
// a store Lookup with pin over a RemoteTier to it, `rounds` times, releasing the lease
// after each. `prefill_tokens_per_s` converts the prompt to a cold prefill time: a
// linear extrapolation, so a lower bound of a real cold prefill (attention grows
// faster than linearly) and the lookup's share of it an upper bound.
PinnedLookupFigures MeasurePinnedLookup(const std::string& target, uint64_t prompt_tokens,
                                        uint32_t chunk_tokens, double prefill_tokens_per_s,
                                        int rounds);

}  // namespace kvt::bench

#endif  // KVT_BENCH_PINNED_LOOKUP_H_

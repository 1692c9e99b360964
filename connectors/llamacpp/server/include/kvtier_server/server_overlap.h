// ServerOverlap: load while computing in kvtier-llama-server (--kvtier-overlap; Cake,
// ICML'25; docs/llama-server.md "Load while computing"): at most one split per slot.
//
// The three steps of overlap_load.h, spread over llama-server's own loop:
//   1. Prompt start (SlotRestorer, after the lookup): PickFront prices the split, Start
//      starts a BackLoader that loads chunks [F, K) on its own thread; the sequence is
//      left to llama-server (emptied first when the slot holds a prefix that does not end
//      on a chunk boundary, so the front is computed in the same ubatches as a cold
//      prefill).
//   2. llama-server prefills [start, F) in its normal batches: AtBatch caps this slot's
//      share of each batch at F. A planned split meets in the middle instead
//      (BackLoader::StartFromEnd): one chunk per batch until the loader, walking down
//      from K, has reached the computed tokens.
//   3. The next AtBatch (the front's KV is computed): Wait, read the front out of the
//      sequence, Join, write the joined state into that seq id only; llama-server
//      continues from K. A load that delivered nothing past the front leaves the rest to
//      compute; a join that fails keeps the computed front.
// It counts into ServerStats (overlapped, overlap_*, and the hits, misses, loads and
// failures of the requests it finishes) and learns the join costs the next plans price.
//
// Task-loop thread only (as the hooks that call it). Not thread-safe.
#ifndef KVTIER_SERVER_SERVER_OVERLAP_H_
#define KVTIER_SERVER_SERVER_OVERLAP_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "connectors/kv_connector.h"
#include "kvstore/cost_model.h"
#include "kvtier_server/seq_state_io.h"
#include "kvtier_server/server_options.h"
#include "kvtier_server/server_stats.h"
#include "llama.h"
#include "llamacpp/overlap_load.h"

namespace kvt::llamacpp {

class ServerOverlap {
 public:
  // `mode` and `front_tokens`: --kvtier-overlap and --kvtier-overlap-front (0 = plan).
  // `connector`, `io` and `stats` are borrowed and must outlive this object (the
  // destructor waits for the loaders' threads, which use the connector).
  ServerOverlap(ServerKvtierOptions::Overlap mode, int64_t front_tokens, KVConnector& connector,
                SeqStateIo& io, ServerStats& stats)
      : mode_(mode), front_tokens_(front_tokens), connector_(connector), io_(io), stats_(stats) {}

  // The front of a split for `lookup` (0 = no split): chunk-aligned, > `begin` (where the
  // slot's prefill starts) and < `usable` (the chunk-aligned cached tokens that may be
  // loaded); `want` is what the cost decision loads (tokens). kOff: 0; a fixed front: it,
  // when in range; else (kAuto: only when want < usable; the prefill must start at 0)
  // CostModel::PlanOverlap's front, when the plan beats load only and compute only by
  // 1.15 x.
  uint64_t PickFront(const ConnectorLookup& lookup, uint64_t begin, uint64_t usable, uint64_t want);
  // Starts the back load of tokens [front, usable) of `prompt` (copied) for `seq_id`,
  // taking over the lookup's `lease` (its pins then last until the back load is done).
  // False (nothing started, the lease left with the caller) when the loader cannot start.
  bool Start(int32_t seq_id, std::span<const TokenId> prompt, uint64_t front, uint64_t usable,
             Lease& lease);
  // Forgets `seq_id`'s split, if any (waits for its loader): the slot moved on.
  void Drop(int32_t seq_id) { overlaps_.erase(seq_id); }

  struct BatchStep {
    size_t n_done = 0;     // OnPromptBatch's result: the prompt tokens the sequence holds
    bool cleared = false;  // llama.cpp refused the joined state: the sequence is empty
  };
  // OnPromptBatch for a slot whose sequence holds `prompt`'s tokens [0, n_done): lowers
  // *n_limit while the front is being computed; once it is, joins the loaded back in.
  // A slot without a split, or with one for another prompt (dropped), is left as it is.
  // `model_unchanged` is asked once the split is found to match `prompt`; false drops
  // the split (its chunks name the old weights; the rest is computed).
  BatchStep AtBatch(llama_context* ctx, int32_t seq_id, std::span<const TokenId> prompt,
                    size_t n_done, size_t* n_limit, absl::FunctionRef<bool()> model_unchanged);

 private:
  using Clock = std::chrono::steady_clock;
  struct Overlap {
    std::vector<TokenId> prompt;  // the loader reads it: kept until the loader is gone
    // The lookup's pins on the chunks to load: released after the loader (declared
    // before it, so destroyed after it has waited for its thread).
    Lease lease;
    std::unique_ptr<BackLoader> loader;
    uint64_t front = 0, end = 0;  // the planned (or fixed) front; the loaded end K
    bool from_end = false;        // meet in the middle (StartFromEnd), else the fixed front
    Clock::time_point t0;
  };

  const ServerKvtierOptions::Overlap mode_;
  const int64_t front_tokens_;
  KVConnector& connector_;
  SeqStateIo& io_;
  ServerStats& stats_;
  OverlapJoinCost join_cost_;  // measured join costs for PlanOverlap
  std::map<int32_t, std::unique_ptr<Overlap>> overlaps_;
};

}  // namespace kvt::llamacpp

#endif  // KVTIER_SERVER_SERVER_OVERLAP_H_

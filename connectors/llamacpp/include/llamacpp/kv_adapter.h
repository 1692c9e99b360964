// LlamaKvAdapter: runs prompts through a LlamaEngine with kvtier in front of prefill.
//
// One request (Run):
//   1. Clear seq 0. Lookup(prompt) on the connector: how many leading tokens to load
//      (complete chunks, never the last prompt token — the state holds no logits).
//   2. LoadPayloads those chunks; each verified payload is scattered straight into one
//      prefix state blob (SeqStateBuilder), which is handed to llama_state_seq_set_data
//      once (set_data replaces the whole sequence). If a chunk cannot be delivered
//      (vanished, failed verification) only the chunks before it are used and the rest
//      is recomputed: the logits are the same either way.
//   3. Prefill the rest of the prompt in batches of n_batch starting at the first
//      uncached token; logits for the last token only. ObservePrefill(new, context, time).
//   4. StorePayloads: the connector picks the prompt's complete chunks it does not hold
//      yet and asks for their payloads, which are sliced from llama_state_seq_get_data.
//
// Load while computing (RunOptions::overlap, Cake-style; docs/cost-model.md
// "Load while computing"): instead of step 2, the engine prefills chunks [0, s) of the
// cached prefix [0, k) while a BackLoader thread (overlap_load.h) loads chunks [s, k)
// (by default adaptively: the loader walks down from k while the engine computes up
// from 0, and s is where they meet);
// the computed front is then read out of the engine, joined with the loaded back into
// one k-token state and restored with one set_data, and step 3 prefills from k. s comes
// from CostModel::PlanOverlap over the Lookup's chunk tiers, with the join costs this
// adapter measures. The front is computed in the same batches as a recompute, so the
// logits are bit-identical to a full recompute.
//
// TTFT is measured from the start of step 1 to the logits of the last prompt token
// (sampling excluded; the store in step 4 happens after TTFT).
#ifndef LLAMACPP_KV_ADAPTER_H_
#define LLAMACPP_KV_ADAPTER_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "connectors/kv_connector.h"
#include "kvstore/cost_model.h"
#include "llamacpp/llama_engine.h"

namespace kvt::llamacpp {

enum class OverlapMode : uint8_t {
  kOff,  // load what the connector's Lookup decided, compute the rest
  // Plan a split only when the Lookup's cost decision loads less than the cached prefix
  // (the cost model saw it load slower than it computes). A connector with its cost
  // model off always loads everything, so this never splits there.
  kWhenLoadSlower,
  kPlan,  // plan a split on every hit (CostModel::PlanOverlap decides)
};

struct RunOptions {
  // Use kvtier (Lookup/Load/Store). false = cold run: the engine alone.
  bool use_kvtier = true;
  // Store the prompt's complete chunks after prefill (kvtier runs only).
  bool store = true;
  // Upper bound on tokens to load (rounded down to whole chunks).
  uint64_t max_load_tokens = std::numeric_limits<uint64_t>::max();
  // Recompute reference: prefill tokens [0, m) first (batches from 0), then the rest
  // exactly as a run that loaded m tokens would. Requires use_kvtier == false.
  std::optional<uint64_t> recompute_prefix_tokens;
  OverlapMode overlap = OverlapMode::kWhenLoadSlower;
  // > 0 forces a split (tests, benchmarks): compute exactly these leading tokens while
  // loading the cached chunks after them. REQUIRES: a multiple of the chunk size and
  // overlap != kOff. Ignored (no split) when fewer cached chunks follow it.
  uint64_t overlap_front_tokens = 0;
  // When the plan splits: true = meet in the middle (the loader walks down from the end
  // of the prefix while the engine computes up from 0, so the realized split follows
  // the actual speeds; BackLoader::StartFromEnd); false = the planned split as is.
  bool overlap_adaptive = true;
  // Split only when the plan predicts at least this gain over the better of load only
  // and compute only (predicted_s * min_gain <= min(load_only_s, compute_only_s)): the
  // plan does not model the two threads slowing each other down on a busy CPU, so a
  // marginal split is not worth the risk. REQUIRES: >= 1.
  double overlap_min_gain = 1.15;
  PrefillProgress progress;
};

struct RunResult {
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;    // Lookup: leading tokens cached in any tier
  uint64_t planned_tokens = 0;   // Lookup decision (after max_load_tokens)
  uint64_t loaded_tokens = 0;    // actually loaded and restored into the engine (overlap: the back)
  uint64_t computed_tokens = 0;  // prefilled by the engine
  std::vector<size_t> failed_chunks;
  size_t stored_chunks = 0;
  double lookup_s = 0;
  double load_s = 0;          // LoadPayloads + building the blob + set_data
  double prefill_s = 0;       // all prefill (recompute prefix + tail)
  double tail_prefill_s = 0;  // prefill of the tokens after the loaded/recomputed prefix
  double ttft_s = 0;
  double store_s = 0;       // get_data + slicing (async store work not included)
  uint64_t load_bytes = 0;  // payload bytes restored
  // The model file changed under the engine (LlamaEngine::CheckModelFile) so that the
  // connector's namespace no longer names it: no lookup, load or store was done (or,
  // if it changed during prefill, no store), and the run was computed by the engine.
  bool model_changed = false;
  std::vector<float> logits;  // next-token logits after the prompt
  // Load while computing: tokens [0, overlap_front_tokens) were computed while the
  // cached tokens after them loaded (0: no split; adaptive: where the two sides met);
  // planned_tokens is then the planned (or forced) back.
  uint64_t overlap_front_tokens = 0;
  double front_prefill_s = 0;  // prefill of the front (included in prefill_s)
  double join_s = 0;           // front get_data + join + set_data (after both finished)
  OverlapPlan overlap_plan;    // the plan, when one was made (total_chunks > 0)
};

// Not thread-safe (drives one engine); the connector may be shared with other adapters.
class LlamaKvAdapter {
 public:
  // `engine` is borrowed and must outlive the adapter. `connector` may be null (then
  // only cold runs are possible). FailedPrecondition when the connector's namespace
  // layout differs from the engine's, its chunk size is 0, or flash attention is on and
  // the engine's n_batch differs from the chunk size (the flash-attention kernel's
  // result depends on the batch a token is computed in; chunk-sized batches keep
  // loaded KV identical to recomputed KV).
  static absl::StatusOr<std::unique_ptr<LlamaKvAdapter>> Create(
      LlamaEngine* engine, std::shared_ptr<KVConnector> connector);

  // Runs one prompt (see the file comment). InvalidArgument also for an
  // overlap_front_tokens that is not a multiple of the chunk size or comes with kOff. Before the
  // lookup and again before the store, checks the model file (LlamaEngine::CheckModelFile): once it
  // changed, the connector's namespace is the old model's, so kvtier is skipped (model_changed).
  // InvalidArgument for an empty prompt or ids outside the vocabulary; errors from the engine.
  // kvtier failures (a tier error, a chunk that fails verification or a state blob llama.cpp
  // rejects) never fail the request: the tokens are recomputed instead.
  absl::StatusOr<RunResult> Run(std::span<const TokenId> prompt, const RunOptions& options);

  LlamaEngine& engine() { return *engine_; }
  // Measured join costs fed to CostModel::PlanOverlap (EWMA over runs; seeded from the
  // state's bytes per token at 4 GB/s for a restore and 2 GB/s for a front join), and
  // the slowdowns of loading / computing beside each other measured in split runs
  // against the cost model's prediction for each alone (EWMA, clamped to [1, 10]).
  const OverlapJoinCost& join_cost() const { return join_cost_; }
  KVConnector* connector() { return connector_.get(); }

 private:
  LlamaKvAdapter(LlamaEngine* engine, std::shared_ptr<KVConnector> connector);
  // Loads up to `tokens` leading tokens into seq 0; returns how many were restored.
  uint64_t LoadPrefix(std::span<const TokenId> prompt, uint64_t tokens, RunResult* result);
  size_t StoreChunks(std::span<const TokenId> prompt);
  // The front tokens of a split for this lookup (0: no split); fills result->overlap_plan.
  // Sets *want = 0 when the plan is to compute everything and *want was all of `usable`.
  uint64_t PickOverlapFront(const ConnectorLookup& lookup, uint64_t usable, uint64_t* want,
                            const RunOptions& options, RunResult* result);
  // Computes [0, front) while loading [front, end) (front == 0: meet in the middle),
  // joins and restores; returns the tokens seq 0 then holds, or nullopt when the loader
  // could not start (nothing done).
  absl::StatusOr<std::optional<uint64_t>> RunOverlap(std::span<const TokenId> prompt,
                                                     std::span<const TierKind> tiers,
                                                     uint64_t front, uint64_t end,
                                                     const RunOptions& options, RunResult* result);
  void ObserveRestore(uint64_t tokens, double seconds);
  // Recurrent/hybrid models: prefills `tokens` from `first_pos` in batches that stop at
  // every chunk boundary and keeps the snapshot taken there in snapshots_ (when
  // `capture`); other models: Prefill as is.
  absl::Status PrefillAligned(std::span<const TokenId> tokens, uint32_t first_pos, bool want_logits,
                              const PrefillProgress& progress, bool capture);
  // False when the model file changed so the connector's namespace no longer names it
  // (or the file cannot be checked).
  bool ModelStillMatches();

  LlamaEngine* engine_;
  std::shared_ptr<KVConnector> connector_;
  OverlapJoinCost join_cost_;
  // Recurrent/hybrid models: the snapshot at the end of chunk i of the current Run's
  // prompt, for the chunks it computed (empty where it loaded or did not capture).
  std::vector<std::vector<std::byte>> snapshots_;
};

}  // namespace kvt::llamacpp

#endif  // LLAMACPP_KV_ADAPTER_H_

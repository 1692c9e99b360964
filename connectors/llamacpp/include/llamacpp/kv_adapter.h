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
#include "llamacpp/llama_engine.h"

namespace kvt::llamacpp {

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
  PrefillProgress progress;
};

struct RunResult {
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;    // Lookup: leading tokens cached in any tier
  uint64_t planned_tokens = 0;   // Lookup decision (after max_load_tokens)
  uint64_t loaded_tokens = 0;    // actually loaded and restored into the engine
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

  // Runs one prompt (see the file comment). Before the lookup and again before the
  // store, checks the model file (LlamaEngine::CheckModelFile): once it changed, the
  // connector's namespace is the old model's, so kvtier is skipped (model_changed). InvalidArgument
  // for an empty prompt or ids outside the vocabulary; errors from the engine. kvtier failures (a
  // tier error, a chunk that fails verification or a state blob llama.cpp rejects) never fail the
  // request: the tokens are recomputed instead.
  absl::StatusOr<RunResult> Run(std::span<const TokenId> prompt, const RunOptions& options);

  LlamaEngine& engine() { return *engine_; }
  KVConnector* connector() { return connector_.get(); }

 private:
  LlamaKvAdapter(LlamaEngine* engine, std::shared_ptr<KVConnector> connector)
      : engine_(engine), connector_(std::move(connector)) {}
  // Loads up to `tokens` leading tokens into seq 0; returns how many were restored.
  uint64_t LoadPrefix(std::span<const TokenId> prompt, uint64_t tokens, RunResult* result);
  size_t StoreChunks(std::span<const TokenId> prompt);
  // False when the model file changed so the connector's namespace no longer names it
  // (or the file cannot be checked).
  bool ModelStillMatches();

  LlamaEngine* engine_;
  std::shared_ptr<KVConnector> connector_;
};

}  // namespace kvt::llamacpp

#endif  // LLAMACPP_KV_ADAPTER_H_

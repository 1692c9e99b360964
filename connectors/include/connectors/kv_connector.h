// KVConnector: the engine-facing API of kvtier.
//
// An engine calls Lookup before prefill to learn how many prompt tokens to load
// instead of computing, Load to fill its KV for those tokens, and Store after
// prefill to offer the prompt's complete chunks. Tokens are grouped in chunks of
// NamespaceParams::chunk_tokens; only complete chunks are stored or loaded.
//
// Three levels:
//  * payload level (any engine): StorePayloads / LoadPayloads hand the caller each
//    chunk's payload in codec order [layer][k|v][token][kv_head][head_dim]
//    (kvstore/chunk_codec.h); used by the llama.cpp adapter.
//  * paged level (vLLM-style engines): RegisterKvView + Store / Load over a paged KV
//    cache and a slot mapping, using the copy kernels (kernels/kv_copy.h).
//  * block-region level (engines whose blocks are opaque): RegisterBlockView +
//    StoreBlocks / LoadBlocks / FetchBlocks over whole (layer, block) regions.
#ifndef CONNECTORS_KV_CONNECTOR_H_
#define CONNECTORS_KV_CONNECTOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/kv_copy.h"
#include "kvstore/chunk_key.h"
#include "kvstore/cost_model.h"
#include "kvstore/tiered_store.h"

namespace kvt {

struct ConnectorOptions {
  // Identity of the engine's KV (model, layout, tp, chunk size, tenant, engine facts).
  NamespaceParams ns;
  // Cost model defaults (per-tier bandwidth/latency, prefill model).
  CostModelOptions cost;
  // When false, Lookup loads every cached leading chunk regardless of cost.
  bool use_cost_model = true;
  // Store hands each copied-out chunk to the store's write-back thread, which encodes
  // and puts it (TieredStore::Write, async); false = copied into tier 0's own memory,
  // encoded and put on the caller's thread.
  bool async_store = true;
  // Stores are dropped (counted), not queued, while the store's write-back queue holds
  // more than this many bytes (or the store's own max_pending_write_bytes, whichever is
  // lower), so a slow tier never blocks decode. 0 = only the store's bound.
  // The record buffers come from the store's pool (TieredStoreOptions::buffer_pool_bytes);
  // a Lookup's lease lives as long as its ConnectorLookup (or the store's lease_timeout).
  uint64_t max_pending_store_bytes = 1ull << 30;
  // Copy-kernel knobs for the paged level (threads, CUDA stream).
  KvCopyOptions copy;

  // InvalidArgument naming the field: ns (NamespaceParams::Validate), cost
  // (CostModelOptions::Validate), copy (KvCopyOptions).
  absl::Status Validate() const;
};

// Monotonic counters since creation (relaxed atomics) plus the cost model's.
struct ConnectorStats {
  uint64_t lookups = 0;
  uint64_t lookup_hit_tokens = 0;           // sum of ConnectorLookup::cached_tokens
  uint64_t lookup_load_tokens = 0;          // sum of ConnectorLookup::load_tokens
  uint64_t leases_released_by_timeout = 0;  // the store's expired leases (all its users)
  uint64_t store_calls = 0;
  uint64_t store_lookups = 0;         // store calls that asked the tiers what they hold
  uint64_t store_chunks_taken = 0;    // copied out and queued (or put, when sync)
  uint64_t store_chunks_skipped = 0;  // already cached or already queued
  uint64_t store_chunks_dropped = 0;  // pending queue over max_pending_store_bytes
  uint64_t store_chunks_put = 0;      // reached the store
  uint64_t store_put_errors = 0;      // encode or TieredStore::Put failed (logged)
  uint64_t store_pending_bytes = 0;   // gauge: the store's write-back bytes (all its users)
  uint64_t load_chunks_ok = 0;        // fetched, verified and consumed
  uint64_t load_chunks_failed = 0;    // requested but not delivered (incl. after a failure)
  uint64_t load_misses = 0;           // chunk vanished (NotFound) at load time
  uint64_t load_data_loss = 0;        // record failed verification (DataLoss)
  uint64_t load_mismatch = 0;         // wrong namespace/key/layout (FailedPrecondition)
  uint64_t load_other_errors = 0;     // any other tier or consume error
  uint64_t load_bytes = 0;            // record bytes fetched and verified
  CostModelStats cost;
};

struct ConnectorLookup {
  // Tokens the engine should load (a multiple of chunk_tokens, <= tokens.size() - 1,
  // >= num_computed_tokens or 0). The last prompt token is always left to compute.
  uint64_t load_tokens = 0;
  // Leading tokens cached in any tier (complete chunks), before the cost decision.
  uint64_t cached_tokens = 0;
  // Tokens whose chunks this lookup asked the tiers about ((n - 1) / chunk_tokens chunks of
  // an n-token prompt); 0 when it answered without asking (nothing past
  // num_computed_tokens to look up). When > 0, cached_tokens is what StorePayloads'
  // `held_tokens` takes for the same prompt.
  uint64_t looked_up_tokens = 0;
  // The fastest tier holding each of those cached_tokens / chunk_tokens leading chunks
  // (for load-while-compute planning, CostModel::PlanOverlap).
  std::vector<TierKind> chunk_tiers;
  // Predicted seconds: loading load_tokens vs recomputing them.
  double predicted_load_s = 0;
  double predicted_recompute_s = 0;
  // The store's pins on the load_tokens / chunk_tokens chunks to load (kvstore/lease.h;
  // one lease book: the store's). They hold while this result (or the lease moved out of
  // it) lives, so keep it until the load of those chunks has returned, then drop it; the
  // store's lease_timeout ends it otherwise. Empty when load_tokens == 0. Makes
  // ConnectorLookup move-only.
  Lease lease;
};

struct ConnectorLoadResult {
  // Leading tokens whose KV was delivered verified (multiple of chunk_tokens, from 0).
  uint64_t loaded_tokens = 0;
  // Chunk indices that were requested but could not be delivered (vanished, failed
  // verification, timed out). Every chunk at or after the first failure is NOT
  // delivered, so the engine recomputes [loaded_tokens, num_tokens).
  std::vector<size_t> failed_chunks;
  // Why the first failed chunk failed (OK when nothing failed): NotFound (vanished),
  // DataLoss (checksum/format), FailedPrecondition (namespace/key/layout mismatch),
  // or the tier's / consume's error.
  absl::Status first_error;
};

// Verified chunk payloads that FetchPayloads fetched, owned by the caller (the payload
// level's per-layer load: an engine writes layer 0 of every chunk, lets its forward
// start on layer 0, then writes layer 1, ...; a chunk is verified as a whole, so every
// chunk is fetched and verified before any layer is written). Move-only.
struct FetchedPayloads {
  // As LoadPayloads': loaded_tokens = tokens held once every delivered chunk is written
  // (skipped + delivered), failed_chunks, first_error.
  ConnectorLoadResult result;
  // Chunk index of the first delivered chunk (chunks below skip_tokens are not fetched);
  // chunks [first_chunk, first_chunk + num_chunks()) were delivered, verified.
  size_t first_chunk = 0;
  uint32_t num_layers = 0;
  uint64_t payload_bytes = 0;  // of one chunk (KVConnector::chunk_payload_bytes())
  // One record (chunk header + payload, codec order) per delivered chunk.
  std::vector<std::unique_ptr<std::byte[]>> records;

  size_t num_chunks() const { return records.size(); }
  // Bytes of one layer inside a payload: payload_bytes / num_layers (codec order is
  // layer-major, [layer][k|v][token][kv_head][head_dim]).
  uint64_t layer_bytes() const { return num_layers == 0 ? 0 : payload_bytes / num_layers; }
  // Layer `layer`'s bytes of delivered chunk `chunk_index`.
  // REQUIRES: first_chunk <= chunk_index < first_chunk + num_chunks(), layer < num_layers.
  std::span<const std::byte> LayerPayload(size_t chunk_index, uint32_t layer) const;
};

// A block-region view of an engine's paged KV cache (engines whose paged KV packs a
// block opaquely, e.g. vLLM's CPU backend; the C ABI's kvt_block_view): per layer l,
// num_blocks regions of block_bytes each, region (l, b) at layer_base[l] + b *
// block_bytes, each holding block_size tokens in the engine's own packing (copied, not
// interpreted). A chunk's payload is its [layer][block j of the chunk] regions in order.
// Borrowed: the memory must stay allocated while the view is registered or copied into
// a FetchedBlocks.
struct BlockRegionView {
  uint32_t block_size = 0;             // tokens per block; must divide chunk_tokens
  uint32_t num_blocks = 0;             // blocks per layer
  uint64_t block_bytes = 0;            // bytes of one (layer, block) region
  std::vector<std::byte*> layer_base;  // one per layer, non-null
};

// Chunks FetchBlocks fetched and verified, with a copy of the block view and block ids,
// written into the engine's blocks layer by layer by ScatterLayer. Move-only.
struct FetchedBlocks {
  FetchedPayloads payloads;
  BlockRegionView view;
  std::vector<int32_t> block_ids;  // the ids of tokens [0, num_tokens), checked
  uint64_t skip_tokens = 0;        // blocks wholly below it are never written

  // Writes layer `layer`'s regions of every delivered chunk into their blocks. Needs no
  // connector (thread-safe against other FetchedBlocks); any layer order, repeating a
  // layer writes the same bytes. InvalidArgument for layer >= num_layers.
  // REQUIRES: the view's memory is still allocated.
  absl::Status ScatterLayer(uint32_t layer) const;
};

// Called with one chunk's payload buffer to fill (store) — REQUIRES: the callee writes
// exactly payload.size() bytes in codec order before returning.
using ChunkFill = std::function<absl::Status(size_t chunk_index, std::span<std::byte> payload)>;
// Called with one verified chunk payload (load). The span is valid during the call only.
using ChunkConsume =
    std::function<absl::Status(size_t chunk_index, std::span<const std::byte> payload)>;

// Thread-safe.
class KVConnector {
 public:
  // `store` is shared (several connectors may share one store).
  static absl::StatusOr<std::unique_ptr<KVConnector>> Create(const ConnectorOptions& options,
                                                             std::shared_ptr<TieredStore> store);
  virtual ~KVConnector() = default;

  // Decides how many leading tokens to load (cost model applied chunk by chunk).
  // `num_computed_tokens`: tokens the engine already holds (never reloaded).
  virtual absl::StatusOr<ConnectorLookup> Lookup(std::span<const TokenId> tokens,
                                                 uint64_t num_computed_tokens) = 0;

  // Offers the complete chunks of `tokens`: for each chunk not yet cached, calls
  // `fill` synchronously (the engine's memory is not read after this returns), then
  // encodes and stores asynchronously (async_store). Returns the number of chunks
  // taken for storing. Which chunks are cached is one lookup of the tiers (a kvtierd
  // round trip when the store is remote), unless `held_tokens` says it: the
  // ConnectorLookup::cached_tokens of a Lookup of the same prompt moments before (e.g. at
  // prompt start; only when its looked_up_tokens > 0). Chunks below it are then skipped
  // and every chunk from there on is taken without asking; one stored since by someone
  // else is put again (the tier keeps one copy), so the choice costs at most a copy,
  // never KV. InvalidArgument when held_tokens is not a multiple of chunk_tokens.
  virtual absl::StatusOr<size_t> StorePayloads(
      std::span<const TokenId> tokens, const ChunkFill& fill,
      std::optional<uint64_t> held_tokens = std::nullopt) = 0;

  // Fetches and verifies chunks covering tokens [0, num_tokens) (num_tokens a multiple
  // of chunk_tokens) and calls `consume` for each in order, stopping at the first chunk
  // that cannot be delivered. Chunks below `skip_tokens` (already held) are not fetched.
  virtual absl::StatusOr<ConnectorLoadResult> LoadPayloads(std::span<const TokenId> tokens,
                                                           uint64_t num_tokens,
                                                           const ChunkConsume& consume,
                                                           uint64_t skip_tokens = 0) = 0;

  // LoadPayloads without the consume: fetches and verifies the same chunks (same
  // counters, same stop at the first chunk that cannot be
  // delivered) and hands back their records instead, so the caller can write them in
  // another order (by layer, FetchedPayloads). Costs one record of memory per chunk
  // (LoadPayloads: one in total); no extra copy. Errors as LoadPayloads'.
  virtual absl::StatusOr<FetchedPayloads> FetchPayloads(std::span<const TokenId> tokens,
                                                        uint64_t num_tokens,
                                                        uint64_t skip_tokens = 0) = 0;

  // Feeds the cost model one observed prefill: `new_tokens` computed on top of
  // `context_tokens` already present, taking `elapsed`.
  virtual void ObservePrefill(uint64_t new_tokens, uint64_t context_tokens,
                              std::chrono::duration<double> elapsed) = 0;

  // Blocks until every async store has reached the store and the store's write-back has
  // written it down to every lower tier (TieredStore::Flush): durable where a durable
  // tier exists.
  virtual void Flush() = 0;

  virtual const NamespaceParams& ns_params() const = 0;
  virtual NamespaceId ns() const = 0;
  virtual uint32_t chunk_tokens() const = 0;

  // ---- Paged level (vLLM-style engines) -------------------------------------------
  // Registers the engine's paged KV cache (replaces an earlier registration; REQUIRES:
  // no Store/Load running concurrently with the replacement). The view borrows the
  // engine's memory: it must stay allocated until replaced or the connector is destroyed.
  // Errors: InvalidArgument when view.Validate() fails (kernels/kv_copy.h), when
  // view.layout differs from the declared ns_params().layout (the message names both
  // layouts), or for a kCuda view in a process without a usable CUDA device.
  virtual absl::Status RegisterKvView(const PagedKvView& view) = 0;

  // Store at the paged level: StorePayloads with a fill that gathers each chunk's
  // slots from the registered view (GatherChunk). `slot_mapping[i]` is the slot of
  // token i (vLLM convention: block_id * block_size + offset, int64).
  // REQUIRES: slot_mapping.size() >= number of complete chunks * chunk_tokens.
  // Errors: FailedPrecondition without a registered view; InvalidArgument for a short
  // slot mapping, a padding slot (-1) or out-of-range slot inside a complete chunk
  // (index and value named; nothing is stored); copy errors from the kernels.
  // Returns the number of chunks taken for storing (as StorePayloads).
  virtual absl::StatusOr<size_t> Store(std::span<const TokenId> tokens,
                                       std::span<const int64_t> slot_mapping) = 0;

  // Load at the paged level: LoadPayloads with a consume that scatters each verified
  // chunk into the registered view at its slots (ScatterChunk). Positions below
  // `num_computed_tokens` are never written (their slots are treated as padding); slots
  // of -1 are skipped. A chunk is scattered only after it verified, so every chunk
  // reported as loaded holds verified KV; tokens
  // [max(result.loaded_tokens, num_computed_tokens), num_tokens) were NOT loaded and
  // must be recomputed (listed by chunk in result.failed_chunks). Chunks wholly below
  // num_computed_tokens are not fetched.
  // REQUIRES: num_tokens % chunk_tokens == 0, num_tokens <= tokens.size(),
  // slot_mapping.size() >= num_tokens.
  // Errors (nothing written): FailedPrecondition without a registered view;
  // InvalidArgument for the REQUIRES above or a slot out of range (checked up front).
  virtual absl::StatusOr<ConnectorLoadResult> Load(std::span<const TokenId> tokens,
                                                   uint64_t num_tokens,
                                                   std::span<const int64_t> slot_mapping,
                                                   uint64_t num_computed_tokens) = 0;

  // ---- Block-region level (BlockRegionView) -----------------------------------------
  // Registers (replaces) the block view; calls running meanwhile use the view they
  // started with. InvalidArgument naming the field: layer count or pointers, block_size
  // not dividing chunk_tokens (both numbers named), block_bytes not matching the layout.
  virtual absl::Status RegisterBlockView(const BlockRegionView& view) = 0;
  // StorePayloads gathering each chunk from its blocks: block_ids[i] holds tokens
  // [i*block_size, (i+1)*block_size). FailedPrecondition without a block view;
  // InvalidArgument for fewer than complete chunks * chunk_tokens / block_size ids or an
  // id out of range (index and value named; nothing stored).
  virtual absl::StatusOr<size_t> StoreBlocks(std::span<const TokenId> tokens,
                                             std::span<const int32_t> block_ids) = 0;
  // LoadPayloads scattering each verified chunk into its blocks (blocks wholly below
  // skip_tokens are never written). Errors as StoreBlocks and LoadPayloads (nothing
  // written); block_ids.size() >= num_tokens / block_size.
  virtual absl::StatusOr<ConnectorLoadResult> LoadBlocks(std::span<const TokenId> tokens,
                                                         uint64_t num_tokens,
                                                         std::span<const int32_t> block_ids,
                                                         uint64_t skip_tokens) = 0;
  // FetchPayloads for a per-layer block load: the chunks LoadBlocks would load, fetched
  // and verified, nothing written yet (FetchedBlocks::ScatterLayer writes them). Errors
  // as LoadBlocks.
  virtual absl::StatusOr<FetchedBlocks> FetchBlocks(std::span<const TokenId> tokens,
                                                    uint64_t num_tokens,
                                                    std::span<const int32_t> block_ids,
                                                    uint64_t skip_tokens) = 0;

  // Counters (see ConnectorStats) and the live cost model (for observations and tests).
  virtual ConnectorStats stats() const = 0;
  virtual CostModel& cost_model() = 0;
  // Bytes of one chunk's payload: ns_params().layout.payload_bytes(chunk_tokens()).
  virtual uint64_t chunk_payload_bytes() const = 0;
};

}  // namespace kvt

#endif  // CONNECTORS_KV_CONNECTOR_H_

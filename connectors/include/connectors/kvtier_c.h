/* kvtier C ABI: the engine-facing connector for engines written in other languages.
 *
 * A kvt_connector owns its own tiered store (a host-memory tier, plus a disk tier when
 * disk_dir is given; or kvtierd's remote tier alone when daemon_address is given) and a
 * KVConnector (connectors/kv_connector.h) over it. Semantics
 * of every call are those of the C++ method named beside it; see docs/connector.md.
 *
 * Errors: every function returning int returns a kvt_status code (0 = KVT_OK; the
 * other values are absl::StatusCode's). On an error, kvt_last_error() returns a
 * message naming the bad value; the string belongs to the calling thread and stays
 * valid until that thread's next kvtier call. Out-parameters are written only on
 * KVT_OK. Functions never abort the process on bad input.
 *
 * Thread-safety: a kvt_connector may be used from several threads at once, except that
 * kvt_destroy must not race any other call on the same handle.
 *
 * Token ids are int32 (llama.cpp llama_token, vLLM token ids). Payload order in the
 * callbacks is the chunk codec's: [layer][k|v][token][kv_head][head_dim] (kMLA:
 * [layer][token][latent]), elements of the declared dtype, little-endian.
 */
#ifndef CONNECTORS_KVTIER_C_H_
#define CONNECTORS_KVTIER_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: the values of absl::StatusCode. */
typedef enum kvt_status {
  KVT_OK = 0,
  KVT_CANCELLED = 1,
  KVT_UNKNOWN = 2,
  KVT_INVALID_ARGUMENT = 3,
  KVT_DEADLINE_EXCEEDED = 4,
  KVT_NOT_FOUND = 5,
  KVT_ALREADY_EXISTS = 6,
  KVT_PERMISSION_DENIED = 7,
  KVT_RESOURCE_EXHAUSTED = 8,
  KVT_FAILED_PRECONDITION = 9,
  KVT_ABORTED = 10,
  KVT_OUT_OF_RANGE = 11,
  KVT_UNIMPLEMENTED = 12,
  KVT_INTERNAL = 13,
  KVT_UNAVAILABLE = 14,
  KVT_DATA_LOSS = 15,
} kvt_status;

/* Element types and layout kinds: the values of kvt::DType and kvt::LayoutKind
 * (kvstore/types.h), which are part of the on-disk format and never renumbered. */
enum {
  KVT_DTYPE_F32 = 0,
  KVT_DTYPE_F16 = 1,
  KVT_DTYPE_BF16 = 2,
  KVT_DTYPE_FP8_E4M3 = 3,
  KVT_DTYPE_FP8_E5M2 = 4,
  KVT_DTYPE_I8 = 5,
  KVT_DTYPE_BYTES = 6,
};
enum {
  KVT_LAYOUT_FLASH_ATTN_NHD = 0, /* per layer [2, num_blocks, block_size, heads, head_dim] */
  KVT_LAYOUT_FLASH_ATTN_HND = 1, /* per layer [2, num_blocks, heads, block_size, head_dim] */
  KVT_LAYOUT_FLASH_INFER = 2,    /* per layer [num_blocks, 2, block_size, heads, head_dim] */
  KVT_LAYOUT_MLA = 3,            /* per layer [num_blocks, block_size, latent] (heads = 1) */
  KVT_LAYOUT_CROSS_LAYER = 4,    /* one tensor [num_blocks, layers, 2, block_size, heads, hd] */
  KVT_LAYOUT_LLAMACPP_ROWS = 5,  /* per layer K and V [cells, heads*head_dim] */
};
enum { KVT_DEVICE_CPU = 0, KVT_DEVICE_CUDA = 1 };

typedef struct kvt_options {
  /* Model identity (name + revision or weights fingerprint). Required, copied. */
  const char* model_id;
  /* KV layout of one token position. */
  uint32_t num_layers;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  int32_t dtype;       /* KVT_DTYPE_* */
  int32_t layout_kind; /* KVT_LAYOUT_* */
  uint32_t tp_rank;
  uint32_t tp_world_size;
  /* Tokens per chunk (default 256). */
  uint32_t chunk_tokens;
  /* Tenant ("" or NULL = default) and engine facts that change KV bytes; copied. */
  const char* tenant;
  const char* engine_extra;
  /* Host-memory tier capacity in bytes (default 1 GiB). */
  uint64_t host_capacity_bytes;
  /* Optional disk tier: directory (NULL or "" = none) and capacity in bytes (a multiple of
   * 4096; 0 = 8 GiB, kvtierd's default disk_capacity). */
  const char* disk_dir;
  uint64_t disk_capacity_bytes;
  /* 1 = apply the retrieve-vs-recompute cost model in lookup (default); 0 = load every
   * cached chunk. */
  int32_t use_cost_model;
  /* 1 = stores are encoded and written on a background thread (default). */
  int32_t async_store;
  /* Prefill model defaults (seconds per token; per attended token pair), 0 = built-in. */
  double prefill_s_per_token;
  double prefill_s_per_token_ctx;
  /* ---- Appended fields: new ones go below, never reordered. ---- */
  /* kvtierd address ("unix:///path/kvtierd.sock" or "127.0.0.1:7470"; NULL or "" = no
   * daemon). When set, the store is kvtierd's remote tier alone (shared by every process
   * using that daemon); disk_dir must then be NULL or "" (KVT_INVALID_ARGUMENT otherwise).
   * Needs a build with the daemon (KVT_BUILD_DAEMON): KVT_UNIMPLEMENTED without it. */
  const char* daemon_address;
  /* Bearer token sent to kvtierd ("" or NULL = none); copied. */
  const char* daemon_token;
  /* Deadline of one kvtierd call including its retries, ms (default 2000, 1..600000). A
   * stopped or dead daemon costs at most this per call: the chunk is a miss. */
  uint32_t daemon_deadline_ms;
  /* Cost model probes (CostModelOptions::probe_after_recomputes, docs/cost-model.md):
   * after this many lookups in a row that chose to recompute although chunks were cached,
   * the next such lookup loads the first cached chunk anyway, so that its tier's estimate
   * is measured again (default 32; 0 = never probe). Only with use_cost_model = 1. */
  uint32_t cost_probe_after;
} kvt_options;

/* Fills *options with the defaults above (model_id NULL: the caller must set it). */
void kvt_options_init(kvt_options* options);

typedef struct kvt_connector kvt_connector;

/* Creates a connector and its store. KVT_INVALID_ARGUMENT for bad options (message
 * names the field); KVT_RESOURCE_EXHAUSTED when the host arena cannot be allocated;
 * disk-tier errors as reported by the disk tier. */
int kvt_create(const kvt_options* options, kvt_connector** out);
/* Drains pending stores and frees everything. NULL is ignored. */
void kvt_destroy(kvt_connector* connector);

/* Message of the calling thread's last error ("" when none). */
const char* kvt_last_error(void);

/* Bytes of one chunk's payload (layout bytes per token x chunk_tokens). */
uint64_t kvt_chunk_payload_bytes(const kvt_connector* connector);
uint32_t kvt_chunk_tokens(const kvt_connector* connector);

/* KVConnector::Lookup. *load_tokens: tokens to load (multiple of chunk_tokens,
 * < n_tokens, >= num_computed_tokens or 0). cached_tokens may be NULL. Pins nothing past
 * the call (kvt_lookup_pinned keeps the chunks to load from eviction until the load). */
int kvt_lookup(kvt_connector* connector, const int32_t* tokens, size_t n_tokens,
               uint64_t num_computed_tokens, uint64_t* load_tokens, uint64_t* cached_tokens);

/* The store's pins on the chunks a kvt_lookup_pinned promised (its lease). */
typedef struct kvt_lease kvt_lease;
/* kvt_lookup that also hands back its lease: *lease pins the *load_tokens / chunk_tokens
 * chunks to load until kvt_lease_release (call it once the load has returned) or the
 * store's lease timeout (10 s). *lease is NULL when *load_tokens == 0, and on error.
 * REQUIRES: every lease is released before kvt_destroy of its connector. */
int kvt_lookup_pinned(kvt_connector* connector, const int32_t* tokens, size_t n_tokens,
                      uint64_t num_computed_tokens, uint64_t* load_tokens, uint64_t* cached_tokens,
                      kvt_lease** lease);
/* Releases a lease's pins and frees it. NULL is ignored. */
void kvt_lease_release(kvt_lease* lease);

/* Store callback: write exactly `bytes` bytes of chunk `chunk_index`'s payload into
 * `payload`; return 0 on success or a kvt_status (the store stops there). */
typedef int (*kvt_fill_fn)(void* user, size_t chunk_index, void* payload, size_t bytes);
/* Load callback: a verified payload, valid during the call only; return 0 or a
 * kvt_status (the load stops there and the chunk counts as not loaded). */
typedef int (*kvt_consume_fn)(void* user, size_t chunk_index, const void* payload, size_t bytes);

/* KVConnector::StorePayloads. *chunks_taken (may be NULL): chunks copied for storing. */
int kvt_store_payloads(kvt_connector* connector, const int32_t* tokens, size_t n_tokens,
                       kvt_fill_fn fill, void* user, size_t* chunks_taken);
/* KVConnector::LoadPayloads. *loaded_tokens: leading tokens held after the call
 * (skipped + delivered); tokens [*loaded_tokens, num_tokens) must be recomputed. */
int kvt_load_payloads(kvt_connector* connector, const int32_t* tokens, size_t n_tokens,
                      uint64_t num_tokens, uint64_t skip_tokens, kvt_consume_fn consume, void* user,
                      uint64_t* loaded_tokens);

/* Paged KV view (kernels/kv_copy.h PagedKvView). Pointer arrays are copied; the memory
 * they point at is borrowed and must outlive its use. For every layout but
 * KVT_LAYOUT_LLAMACPP_ROWS set layer_base (num_layers pointers; 1 for cross-layer) and
 * leave k_base/v_base NULL; for llama.cpp rows set k_base and v_base (num_layers each). */
typedef struct kvt_kv_view {
  int32_t device; /* KVT_DEVICE_* */
  uint32_t num_layers;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  int32_t dtype;
  int32_t layout_kind;
  uint32_t block_size;
  uint32_t num_blocks;
  void* const* layer_base;
  size_t n_layer_base;
  void* const* k_base;
  void* const* v_base;
  size_t n_kv_base;
} kvt_kv_view;

/* KVConnector::RegisterKvView. KVT_INVALID_ARGUMENT when the view is malformed or its
 * layout differs from the connector's (both named). */
int kvt_register_kv_view(kvt_connector* connector, const kvt_kv_view* view);
/* KVConnector::Store: slots[i] = slot of token i (int64, vLLM convention). */
int kvt_store(kvt_connector* connector, const int32_t* tokens, size_t n_tokens,
              const int64_t* slots, size_t n_slots, size_t* chunks_taken);
/* KVConnector::Load. *loaded_tokens as in kvt_load_payloads; positions below
 * num_computed_tokens are never written. */
int kvt_load(kvt_connector* connector, const int32_t* tokens, size_t n_tokens, uint64_t num_tokens,
             const int64_t* slots, size_t n_slots, uint64_t num_computed_tokens,
             uint64_t* loaded_tokens);

/* ---- Block-region level (engines whose paged KV packs a block opaquely) ----------
 * For KV caches where the bytes of one (layer, block) are contiguous but their order
 * inside the block is the engine's own (vLLM's CPU backend packs each (block, head) tile
 * per CPU ISA). Whole regions are copied as opaque bytes: a chunk's payload is
 * [layer][block j of the chunk] regions of block_bytes each. The packing is not
 * interpreted, so put what determines it (packing kind, block size) in engine_extra.
 * REQUIRES of the connector's layout: chunk_payload_bytes == num_layers *
 * (chunk_tokens / block_size) * block_bytes, i.e. one region holds block_size tokens. */
typedef struct kvt_block_view {
  uint32_t num_layers;  /* == options.num_layers */
  uint32_t block_size;  /* tokens per block; must divide chunk_tokens */
  uint32_t num_blocks;  /* blocks per layer */
  uint64_t block_bytes; /* bytes of one (layer, block) region */
  /* num_layers pointers; region (l, b) starts at layer_base[l] + b * block_bytes */
  void* const* layer_base;
  size_t n_layer_base;
} kvt_block_view;

/* Registers (replaces) the block view (KVConnector::RegisterBlockView: calls running
 * meanwhile keep the view they started with); its memory is borrowed and must outlive
 * its use.
 * KVT_INVALID_ARGUMENT naming the field: layer count or pointers, block_size not
 * dividing chunk_tokens (both numbers named), block_bytes not matching the layout. */
int kvt_register_block_view(kvt_connector* connector, const kvt_block_view* view);
/* Stores the complete chunks of tokens; block_ids[i] is the block holding tokens
 * [i*block_size, (i+1)*block_size). REQUIRES: n_block_ids >= complete chunks *
 * chunk_tokens / block_size. KVT_FAILED_PRECONDITION without a block view,
 * KVT_INVALID_ARGUMENT for a short or out-of-range block id list (index and value
 * named; nothing stored). Regions are copied before the call returns. */
int kvt_store_blocks(kvt_connector* connector, const int32_t* tokens, size_t n_tokens,
                     const int32_t* block_ids, size_t n_block_ids, size_t* chunks_taken);
/* Loads verified chunks covering tokens [0, num_tokens) (a multiple of chunk_tokens) into
 * the blocks named by block_ids (as for kvt_store_blocks; n_block_ids >= num_tokens /
 * block_size). Blocks wholly below skip_tokens are never written. A chunk's regions are
 * written only after it verified. *loaded_tokens: leading tokens held after the call;
 * blocks of tokens [max(*loaded_tokens, skip_tokens), num_tokens) were NOT written and
 * must be recomputed. Errors as kvt_store_blocks (nothing written). */
int kvt_load_blocks(kvt_connector* connector, const int32_t* tokens, size_t n_tokens,
                    uint64_t num_tokens, const int32_t* block_ids, size_t n_block_ids,
                    uint64_t skip_tokens, uint64_t* loaded_tokens);

/* Per-layer block load, in two phases (KVConnector::FetchPayloads). Phase 1,
 * kvt_fetch_blocks: fetches and verifies the chunks kvt_load_blocks would load (same
 * arguments, same counters; the block ids and the block view are copied) into buffers
 * the returned handle owns, and writes nothing into the engine's blocks.
 * *loaded_tokens: leading tokens held once every layer is scattered; blocks of tokens
 * [max(*loaded_tokens, skip_tokens), num_tokens) will NOT be written and must be
 * recomputed. On success *fetched is a handle to free with kvt_fetched_free (also when
 * nothing was delivered); on error it is NULL. Errors as kvt_load_blocks. */
typedef struct kvt_fetched kvt_fetched;
int kvt_fetch_blocks(kvt_connector* connector, const int32_t* tokens, size_t n_tokens,
                     uint64_t num_tokens, const int32_t* block_ids, size_t n_block_ids,
                     uint64_t skip_tokens, kvt_fetched** fetched, uint64_t* loaded_tokens);
/* Phase 2: writes layer `layer`'s regions of every delivered chunk into the blocks
 * (blocks wholly below skip_tokens are never written). Any layer order; repeating a layer
 * writes the same bytes. Needs no connector call (thread-safe against other handles);
 * REQUIRES: the engine memory of the block view registered at fetch time is still
 * allocated. KVT_INVALID_ARGUMENT for layer >= num_layers (named). */
int kvt_fetched_scatter_layer(kvt_fetched* fetched, uint32_t layer);
void kvt_fetched_free(kvt_fetched* fetched);

/* Connector counters (KVConnector::stats(), connectors/kv_connector.h ConnectorStats). */
typedef struct kvt_stats {
  uint64_t lookups;
  uint64_t lookup_hit_tokens;
  uint64_t lookup_load_tokens;
  uint64_t store_chunks_taken;
  uint64_t store_chunks_skipped;
  uint64_t store_chunks_dropped;
  uint64_t store_chunks_put;
  uint64_t store_put_errors;
  uint64_t load_chunks_ok;
  uint64_t load_chunks_failed;
  uint64_t load_misses;
  uint64_t load_data_loss;
  uint64_t load_mismatch;
  uint64_t load_other_errors;
  uint64_t load_bytes;
  /* ---- Appended fields: new ones go below, never reordered. ---- */
  /* The cost model's decisions on lookups with cached chunks past num_computed_tokens
   * (ConnectorStats::cost, kvstore/cost_model.h CostModelStats; none with
   * use_cost_model = 0): load every cached chunk, load a leading part of them, recompute
   * them all. A probe (kvt_options.cost_probe_after) is also counted as load_all or
   * load_partial, by the chunks it loads. */
  uint64_t cost_load_all;
  uint64_t cost_load_partial;
  uint64_t cost_recompute;
  uint64_t cost_probe;
} kvt_stats;
/* Writes min(out_size, sizeof(kvt_stats)) bytes of the counters (pass sizeof(kvt_stats);
 * fields are only ever appended). KVT_INVALID_ARGUMENT for NULL arguments. */
int kvt_get_stats(const kvt_connector* connector, kvt_stats* out, size_t out_size);

/* KVConnector::ObservePrefill (seconds). */
void kvt_observe_prefill(kvt_connector* connector, uint64_t new_tokens, uint64_t context_tokens,
                         double seconds);
/* KVConnector::Flush: waits until every async store reached the store and the store's
 * write-back has written it to every lower tier (the disk tier when there is one): after
 * it returns, stored chunks survive the process and are found by a fresh one. */
void kvt_flush(kvt_connector* connector);

/* ---- Appended functions (issue 21): new ones go below. ---- */

/* Parses a byte size with kvtier's one parser (kvstore/byte_size.h), so a size means the
 * same number of bytes in every engine as in kvtierd and the kvtier CLI: an optional
 * decimal fraction and a case-insensitive unit; B; K M G T and KiB MiB GiB TiB are powers
 * of 2 ("4G" = 4 GiB = 4294967296); KB MB GB TB are powers of 10 ("4GB" = 4000000000). The
 * result must be a whole number of bytes. KVT_INVALID_ARGUMENT for NULL arguments or any
 * other text, with the parser's message naming `text` (kvt_last_error). */
int kvt_parse_byte_size(const char* text, uint64_t* bytes);

/* The connector's namespace id as 32 lowercase hex digits and a NUL in `out`: the value
 * that `kvtier ls/inspect/evict --ns` take and that kvtier-llama-server's GET /kvtier
 * reports as "namespace". KVT_INVALID_ARGUMENT for NULL arguments or out_size < 33. */
int kvt_namespace_hex(const kvt_connector* connector, char* out, size_t out_size);

/* Whether the connector's kvtierd (options.daemon_address) answers now: one Health call
 * that waits at most min(timeout_ms, options.daemon_deadline_ms) ms (timeout_ms >= 1).
 * KVT_OK when it answers and serves, and for a connector without a daemon. Otherwise the
 * code of the failed call (KVT_UNAVAILABLE or KVT_DEADLINE_EXCEEDED for a daemon that is
 * down, paused or not started yet; KVT_FAILED_PRECONDITION for one that answers but is
 * not serving) with a message naming the address. The connector itself is unaffected:
 * lookups miss and stores are dropped while the daemon does not answer. */
int kvt_daemon_check(const kvt_connector* connector, uint32_t timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* CONNECTORS_KVTIER_C_H_ */

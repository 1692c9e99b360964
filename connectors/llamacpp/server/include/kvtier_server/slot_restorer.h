// SlotRestorer: a new prompt's cached prefix restored into its llama-server slot (the body
// of OnPromptStart; docs/llama-server.md).
//
// Lookup (cost model applied) and load of the longest cached chunk prefix straight into
// the slot's sequence (one llama_state_seq_set_data_ext on that seq id: other slots' KV
// is untouched). A failed or partial load only shortens what is restored; llama-server
// prefills the rest.
//  * Tail records (tail_records.h): a prompt whose chunks all load also restores tokens
//    [T, n - 1) from its tail record, so only the last token is computed, as after
//    llama-server's own RAM-cache restore. Without a tail the remainder is prefilled from
//    the chunk boundary: the answer is bit for bit the cold one.
//  * Load while computing: when ServerOverlap picks a split of the cached prefix, the
//    back load is started there and the sequence left to llama-server (server_overlap.h).
//  * Recurrent and hybrid models (slot_snapshots.h): chunks only up to
//    SnapshotBoundaryLimit, each chunk's attention rows plus the last chunk's snapshot;
//    then the tail record's rows and snapshot, up to where llama-server's last prompt
//    batch begins (a recurrent model's tail alone).
// Counts requests, hits, tail hits, misses, cost skips, loads, load failures and dropped
// prefixes into ServerStats.
//
// Task-loop thread only (as the hooks that call it). Not thread-safe.
#ifndef KVTIER_SERVER_SLOT_RESTORER_H_
#define KVTIER_SERVER_SLOT_RESTORER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "connectors/kv_connector.h"
#include "kvtier_server/seq_state_io.h"
#include "kvtier_server/server_overlap.h"
#include "kvtier_server/server_stats.h"
#include "kvtier_server/slot_snapshots.h"
#include "kvtier_server/tail_records.h"
#include "llama.h"

namespace kvt::llamacpp {

class SlotRestorer {
 public:
  // Every pointer and reference is borrowed and must outlive this object. `tails`: null
  // without tail records; `snapshots`: non-null for a recurrent or hybrid model;
  // `n_batch`, `n_ubatch`: the server context's.
  SlotRestorer(KVConnector& connector, SeqStateIo& io, TailRecords* tails, SlotSnapshots* snapshots,
               ServerOverlap& overlap, ServerStats& stats, uint32_t n_batch, uint32_t n_ubatch)
      : connector_(connector),
        io_(io),
        tails_(tails),
        snapshots_(snapshots),
        overlap_(overlap),
        stats_(stats),
        n_batch_(n_batch),
        n_ubatch_(n_ubatch) {}

  struct Outcome {
    // OnPromptStart's result (server-kvtier-hooks.h): > 0 the sequence now holds exactly
    // prompt[0, result); 0 unchanged; < 0 emptied.
    int64_t result = 0;
    // A back load started (load while computing): the token the slot's prefill begins at
    // (its prefill then waits on the load: not a prefill sample).
    std::optional<uint64_t> overlap_begin;
    // This prompt's lookup (when it asked the tiers): its leading tokens in complete
    // chunks that kvtier holds. OnPromptDone passes it to StorePayloads, which then skips
    // its own lookup of the same prompt (a kvtierd round trip on the task loop).
    std::optional<uint64_t> held_tokens;
  };
  // Restores what kvtier holds of `prompt` beyond the `n_have` tokens `seq_id` holds.
  // REQUIRES: prompt.size() >= 2; the model file is unchanged (the caller checked).
  // Errors are never returned: a lookup, load or set_data that fails is logged and
  // counted, and the prompt is computed (from what the sequence then holds).
  Outcome Restore(llama_context* ctx, int32_t seq_id, std::span<const TokenId> prompt,
                  uint64_t n_have);

 private:
  // Restore for models without snapshots; `held` gets what the prompt's lookup found
  // held, when it asked the tiers (Outcome::held_tokens).
  Outcome RestorePlain(llama_context* ctx, int32_t seq_id, std::span<const TokenId> prompt,
                       uint64_t n_have, std::optional<uint64_t>& held);
  // Recurrent/hybrid models: Restore after its common checks (lookup of the chunks up to
  // SnapshotBoundaryLimit, then the tail record when every chunk before it loads).
  int64_t StartWithSnapshots(llama_context* ctx, int32_t seq_id, std::span<const TokenId> prompt,
                             uint64_t n_have);
  // The connector's lookup of `prompt` past `n_have` tokens; a failed lookup is logged,
  // counted as a miss and answered nullopt (the prompt is then computed).
  std::optional<ConnectorLookup> LookupOrMiss(std::span<const TokenId> prompt, uint64_t n_have);
  // Recurrent/hybrid models: loads up to `want` leading tokens of `prompt` (chunk rows and
  // the last chunk's snapshot) into `seq_id`, then, when `tail` is given and every chunk
  // loaded, the tail's rows and snapshot (up to TailEnd; a recurrent model's tail alone).
  int64_t RestoreWithSnapshot(llama_context* ctx, int32_t seq_id, std::span<const TokenId> prompt,
                              uint64_t want, uint64_t n_have,
                              const std::vector<std::byte>* tail = nullptr);
  // Loads up to `want` leading tokens of `prompt` (complete chunks) through `put`, after
  // checking each payload is `chunk_bytes` long; returns the tokens of the leading chunks
  // that all arrived and went in (a multiple of the chunk size). A short or failed load
  // is logged and counted in load_failures (the rest is then computed).
  uint64_t LoadChunks(std::span<const TokenId> prompt, uint64_t want, uint64_t chunk_bytes,
                      const ChunkConsume& put);
  // Writes a restored state (`loaded` tokens) into `seq_id`. When llama.cpp refuses it:
  // warns, clears the sequence, counts a load failure and a miss, and returns false (the
  // prompt is then computed from token 0).
  bool ApplyRestoredState(llama_context* ctx, int32_t seq_id, std::span<const std::byte> state,
                          uint64_t loaded);

  // A miss whose slot holds at most this many tokens off a ubatch boundary drops them.
  static constexpr size_t kMaxDroppedPrefix = 16;

  KVConnector& connector_;
  SeqStateIo& io_;
  TailRecords* const tails_;
  SlotSnapshots* const snapshots_;
  ServerOverlap& overlap_;
  ServerStats& stats_;
  const uint32_t n_batch_, n_ubatch_;
  // The blob a restore builds for llama_state_seq_set_data, reused so a restore of a long
  // prompt allocates nothing and pays no page faults (grows to the largest state seen).
  std::vector<std::byte> restore_blob_;
};

}  // namespace kvt::llamacpp

#endif  // KVTIER_SERVER_SLOT_RESTORER_H_

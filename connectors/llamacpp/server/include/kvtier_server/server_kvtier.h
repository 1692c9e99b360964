// ServerKvtier: kvtier behind llama-server's prompt cache (issue 10, docs/llama-server.md).
//
// Installed as g_kvtier_server_hooks by kvtier-llama-server's main:
//  * OnContextReady: probes the server context's sequence-state format with a one-token
//    decode (then clears it), builds the same namespace as the llama.cpp adapter
//    (LlamaEngine::MakeNamespaceParams on a small second context of the same model,
//    types and flash-attention setting, whose state format must match the server's), and
//    opens the connector over the tiers chosen by the flags.
//  * OnPromptStart (a new prompt in a slot): when the slot holds fewer tokens than kvtier
//    has complete chunks for, Lookup (cost model applied) and load the longest cached
//    chunk prefix straight into that slot's sequence (one llama_state_seq_set_data_ext on
//    that seq id: other slots' KV is untouched). A failed or partial load only shortens
//    what is restored; llama-server prefills the rest.
//    With tail records (default; --kvtier-no-tail turns them off) a prompt whose chunks
//    all load also restores tokens [T, n - 1) from its tail record (tail_records.h), so
//    only the last token is computed, as after llama-server's own RAM-cache restore, and
//    the answer is bit for bit that of a RAM-cache hit. Without a tail (or with the flag)
//    the remainder is prefilled from the chunk boundary: the answer is bit for bit the
//    cold one.
//  * OnPromptDone / OnPromptSave: the complete chunks of the evaluated prompt that kvtier
//    does not hold yet are sliced from llama_state_seq_get_data_ext and stored (copied
//    synchronously, encoded and put on the connector's background thread); OnPromptDone
//    also queues the prompt's tail record when the prefill began on a ubatch boundary at
//    or before it (so the tail was computed as in a cold prefill).
//  * Load while computing (--kvtier-overlap; server_overlap.cc): when the cost model sees
//    the cached prefix load slower than it computes, OnPromptStart starts a BackLoader
//    (llamacpp/overlap_load.h) for chunks [F, K) and leaves the sequence to llama-server,
//    which prefills the front [0, F) in its own batches (OnPromptBatch caps the slot's
//    batch at F); at the next batch OnPromptBatch waits for the loader, joins the
//    computed front with the loaded back (llama_state_seq_get_data of the front, Join,
//    llama_state_seq_set_data on that seq id) and llama-server continues after K. A
//    back load that fails only leaves the rest to compute.
//  * Model families (docs/models.md): an iSWA model (with --swa-full, one KV stream) is
//    read from the whole-context state (SeqStateFromContextState: llama_state_seq_get_data
//    writes only the window of its sliding-window layers); a recurrent or hybrid model
//    (one KV stream) stores and restores boundary snapshots (slot_snapshots.h): its
//    batches stop at chunk boundaries (OnPromptBatch), where each slot's recurrent state
//    is read; a record is the chunk's attention rows plus that snapshot. Their tail
//    record ends 4 tokens before the prompt's end, where llama-server's last prompt batch
//    begins (the snapshot there is read by the same hook; tail_records.h). Other memory
//    kinds are refused: the server runs as plain llama-server (GET /kvtier says why).
//  * Counters for /metrics (kvtier_* lines) and GET /kvtier.
//  * The model file (issue 21 item 1): OnContextReady opens a ModelFileWatch on the file
//    the server loaded; before every lookup/load (OnPromptStart) and every store
//    (OnPromptDone, OnPromptSave) the watch is asked whether the file changed (one fstat;
//    the file is hashed again only when its stamp moved). Once it changed, kvtier is off
//    for this server for good: no lookup, no load, no store under the namespace that
//    names the old weights. Logged once as an error, shown in /kvtier ("state":
//    "model_changed") and /metrics (kvtier_model_changed 1). Restart the server to use
//    kvtier with the new file.
//  * kvtierd at start-up (issue 21 item 11; server_tiers.h): Create starts a thread that asks
//  kvtierd's
//    Health; when it does not answer, one warning says the server runs cold until it
//    does, and the thread asks every second until it answers, then logs that once.
// A tier that fails (kvtierd missing, dead or paused) is a miss: the prompt is computed.
#ifndef KVTIER_SERVER_SERVER_KVTIER_H_
#define KVTIER_SERVER_SERVER_KVTIER_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "connectors/kv_connector.h"
#include "kvstore/cost_model.h"
#include "kvstore/tiered_store.h"
#include "kvtier_server/server_options.h"
#include "kvtier_server/server_stats.h"
#include "kvtier_server/server_tiers.h"
#include "kvtier_server/slot_snapshots.h"
#include "kvtier_server/tail_records.h"
#include "llamacpp/model_file_watch.h"
#include "llamacpp/overlap_load.h"
#include "llamacpp/seq_state.h"
#include "server-kvtier-hooks.h"  // from llama-server.patch (tools/server/)

namespace kvt::llamacpp {

// Thread-safe for the hooks' threading contract (server_hooks.h).
class ServerKvtier final : public KvtierServerHooks {
 public:
  // Opens the tiers named by `options` (REQUIRES: options.enabled()). The disk tier's
  // directory is created; kvtierd is not contacted (it may start later). InvalidArgument
  // naming the flag when a tier cannot be opened (e.g. --kvtier-dir not writable).
  static absl::StatusOr<std::unique_ptr<ServerKvtier>> Create(const ServerKvtierOptions& options);
  ~ServerKvtier() override;

  bool OnContextReady(llama_context* ctx, const char* model_path) override;
  int64_t OnPromptStart(llama_context* ctx, int32_t seq_id, const llama_token* tokens,
                        size_t n_tokens, size_t n_have) override;
  void OnPromptDone(llama_context* ctx, int32_t seq_id, const llama_token* tokens,
                    size_t n_tokens) override;
  void OnPromptSave(llama_context* ctx, int32_t seq_id, const llama_token* tokens,
                    size_t n_tokens) override;
  size_t OnPromptBatch(llama_context* ctx, int32_t seq_id, const llama_token* tokens,
                       size_t n_tokens, size_t n_done, size_t* n_limit) override;
  std::string MetricsText() const override;
  std::string StatusJson() const override;

  // Waits until every queued store reached the tiers (called at shutdown).
  void Flush();

 private:
  using Clock = std::chrono::steady_clock;
  explicit ServerKvtier(const ServerKvtierOptions& options) : options_(options) {}
  size_t StoreSeq(llama_context* ctx, int32_t seq_id, std::span<const TokenId> tokens);
  // Whether the model file still holds the bytes the namespace names (task-loop thread).
  // False, for good, once it changed (logged once); false for this call on an I/O error.
  bool ModelUnchanged();
  // Reads sequence `seq_id`'s state (single stream) into state_scratch_ and parses it.
  absl::StatusOr<SeqStateView> ReadSeqState(llama_context* ctx, int32_t seq_id);
  void StoreTail(llama_context* ctx, int32_t seq_id, std::span<const TokenId> prompt);
  // What the reports show besides stats_ (HTTP threads: reads only what ready_ publishes).
  ServerReportState ReportState() const;
  // Reads sequence `seq_id`'s state as one stream (a span of state_scratch_ or
  // single_stream_, valid until the next read).
  absl::StatusOr<std::span<const std::byte>> ReadSingleStream(llama_context* ctx, int32_t seq_id);
  // Restores a single-stream blob into `seq_id` (framed for n_stream_ > 1); false when
  // llama.cpp refused it.
  bool SetSeqState(llama_context* ctx, int32_t seq_id, std::span<const std::byte> blob);
  // Writes a restored state (`loaded` tokens) into `seq_id`. When llama.cpp refuses it:
  // warns, clears the sequence, counts a load failure and a miss, and returns false (the
  // prompt is then computed from token 0).
  bool ApplyRestoredState(llama_context* ctx, int32_t seq_id, std::span<const std::byte> state,
                          uint64_t loaded);
  // Recurrent/hybrid models: OnPromptStart after its common checks (lookup of the chunks
  // up to SnapshotBoundaryLimit, then the tail record when every chunk before it loads).
  int64_t StartWithSnapshots(llama_context* ctx, int32_t seq_id, std::span<const TokenId> prompt,
                             uint64_t n_have);
  // The connector's lookup of `prompt` past `n_have` tokens; a failed lookup is logged,
  // counted as a miss and answered nullopt (the prompt is then computed).
  std::optional<ConnectorLookup> LookupOrMiss(std::span<const TokenId> prompt, uint64_t n_have);
  // Recurrent/hybrid models: loads up to `want` leading tokens of `prompt` (chunk rows and
  // the last chunk's snapshot) into `seq_id`, then, when `tail` is given and every chunk
  // loaded, the tail's rows and snapshot (up to TailEnd; a recurrent model's tail alone);
  // OnPromptStart's result.
  int64_t RestoreWithSnapshot(llama_context* ctx, int32_t seq_id, std::span<const TokenId> prompt,
                              uint64_t want, uint64_t n_have,
                              const std::vector<std::byte>* tail = nullptr);

  // Load while computing (server_overlap.cc). The front of a split for this lookup (0 =
  // no split): chunk-aligned, > `begin` (where the slot's prefill starts) and < `usable`.
  uint64_t PickOverlapFront(const ConnectorLookup& lookup, uint64_t begin, uint64_t usable,
                            uint64_t want);
  // Starts the back load of [front, usable) for `seq_id`, taking over the lookup's
  // `lease` (its pins then last until the back load is done); false (nothing started,
  // the lease left with the caller) when the loader cannot start.
  bool StartOverlap(int32_t seq_id, std::span<const TokenId> prompt, uint64_t front,
                    uint64_t usable, Lease& lease);
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

  struct PromptStart {
    Clock::time_point t0;
    uint64_t context_tokens = 0;  // tokens held when the prefill started
    bool overlapped = false;      // the prefill waited on a back load: not a prefill sample
  };

  const ServerKvtierOptions options_;
  std::shared_ptr<TieredStore> store_;
  std::shared_ptr<KVConnector> connector_;  // set by OnContextReady, then read-only
  std::unique_ptr<TailRecords> tails_;      // likewise (null with --kvtier-no-tail)
  uint32_t n_ubatch_ = 1, n_batch_ = 1;     // the server context's (OnContextReady)
  // Set (release) once OnContextReady has finished: HTTP threads answer /kvtier while the
  // model is still loading, and read connector_, spec_, ns_hex_ only after this (acquire).
  std::atomic<bool> ready_{false};
  // Set once (release) by OnContextReady when the model's memory kind is one kvtier cannot
  // restore exactly (CheckMemorySupported); refused_why_ is written before and never after.
  std::atomic<bool> refused_{false};
  std::string refused_why_;
  std::unique_ptr<ServerTiers> tiers_;  // the store's tiers and the kvtierd check
  SeqStateSpec spec_;
  uint32_t n_stream_ = 1;  // KV streams of the server's context (non-unified: one per slot)
  // An iSWA model (accepted with --swa-full and one stream): its state is read from the
  // whole-context state (SeqStateFromContextState).
  bool iswa_ = false;
  // A recurrent or hybrid model: boundary snapshots per slot (null otherwise).
  std::unique_ptr<SlotSnapshots> snapshots_;
  std::string ns_hex_;
  std::unique_ptr<ModelFileWatch> model_watch_;  // set by OnContextReady; task-loop thread
  std::atomic<bool> model_changed_{false};
  std::map<int32_t, PromptStart> prompt_start_;   // task-loop thread only
  std::map<int32_t, size_t> last_prompt_tokens_;  // task-loop thread only
  // Reused buffers (task-loop thread only), so a restore or a store of a long prompt
  // allocates nothing and pays no page faults: the blob a restore builds for
  // llama_state_seq_set_data, and the state a store reads. Each grows to the largest
  // sequence state seen (at most n_ctx x bytes per token) and is kept.
  std::vector<std::byte> restore_blob_;
  std::vector<std::byte> state_scratch_;
  std::vector<std::byte> single_stream_;  // n_stream_ > 1 or iswa_: the state as one stream

  ServerStats stats_;  // counters, and the /kvtier and /metrics reports
  static constexpr size_t kMaxDroppedPrefix = 16;
  OverlapJoinCost join_cost_;  // task-loop thread only: measured join costs for PlanOverlap
  // Last: destroyed first, so a loader's thread ends before the connector it uses.
  std::map<int32_t, std::unique_ptr<Overlap>> overlaps_;  // task-loop thread only
};

}  // namespace kvt::llamacpp

#endif  // KVTIER_SERVER_SERVER_KVTIER_H_

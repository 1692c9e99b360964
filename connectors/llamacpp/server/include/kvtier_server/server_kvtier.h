// ServerKvtier: kvtier behind llama-server's prompt cache (issue 10, docs/llama-server.md).
//
// Installed as g_kvtier_server_hooks by kvtier-llama-server's main:
//  * OnContextReady: probes the server context's sequence-state format with a one-token
//    decode (then clears it), builds the same namespace as the llama.cpp adapter
//    (LlamaEngine::MakeNamespaceParams on a small second context of the same model,
//    types and flash-attention setting, whose state format must match the server's), and
//    opens the connector over the tiers chosen by the flags.
//  * OnPromptStart (a new prompt in a slot): when the slot holds fewer tokens than kvtier
//    has complete chunks for, SlotRestorer (slot_restorer.h) looks up and loads the longest
//    cached chunk prefix, and with tail records (default; --kvtier-no-tail turns them
//    off) the prompt's tail record, straight into that slot's sequence. A failed or
//    partial load only shortens what is restored; llama-server prefills the rest.
//  * OnPromptDone / OnPromptSave: the complete chunks of the evaluated prompt that kvtier
//    does not hold yet are sliced from llama_state_seq_get_data_ext and stored (copied
//    synchronously, encoded and put on the connector's background thread); OnPromptDone
//    also queues the prompt's tail record when the prefill began on a ubatch boundary at
//    or before it (so the tail was computed as in a cold prefill).
//  * Load while computing (--kvtier-overlap; server_overlap.h): when the cost model sees
//    the cached prefix load slower than it computes, the restore starts a back load of
//    the prefix's back and leaves the front to llama-server; OnPromptBatch caps the
//    slot's batches at the front and then joins the loaded back in (ServerOverlap).
//  * Model families (docs/models.md): a slot's state is read and written as one stream
//    (SeqStateIo, seq_state_io.h; an iSWA model, with --swa-full, from the whole-context
//    state); a recurrent or hybrid model (one KV stream) stores and restores boundary
//    snapshots (slot_snapshots.h): its batches stop at chunk boundaries (OnPromptBatch),
//    where each slot's recurrent state is read; a record is the chunk's attention rows
//    plus that snapshot. Their tail record ends 4 tokens before the prompt's end, where
//    llama-server's last prompt batch begins (the snapshot there is read by the same
//    hook; tail_records.h). Other memory kinds are refused: the server runs as plain
//    llama-server (GET /kvtier says why).
//  * Counters for /metrics (kvtier_* lines) and GET /kvtier.
//  * The model file (issue 21 item 1): OnContextReady opens a ModelFileWatch on the file
//    the server loaded; before every lookup/load (OnPromptStart) and every store
//    (OnPromptDone, OnPromptSave) the watch is asked whether the file changed (one fstat;
//    the file is hashed again only when its stamp moved). Once it changed, kvtier is off
//    for this server for good: no lookup, no load, no store under the namespace that
//    names the old weights. Logged once as an error, shown in /kvtier ("state":
//    "model_changed") and /metrics (kvtier_model_changed 1). Restart the server to use
//    kvtier with the new file.
//  * kvtierd at start-up (issue 21 item 11; server_tiers.h): Create starts a thread that
//    asks kvtierd's Health; when it does not answer, one warning says the server runs
//    cold until it does, and the thread asks every second until it answers, then logs
//    that once.
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
#include "kvtier_server/seq_state_io.h"
#include "kvtier_server/server_options.h"
#include "kvtier_server/server_overlap.h"
#include "kvtier_server/server_stats.h"
#include "kvtier_server/server_tiers.h"
#include "kvtier_server/slot_restorer.h"
#include "kvtier_server/slot_snapshots.h"
#include "kvtier_server/tail_records.h"
#include "llamacpp/model_file_watch.h"
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
  // Stores the chunks of `tokens` the store lacks, read from seq_id's state; the count
  // taken. *all_held (optional): whether every chunk is held or taken now (none dropped).
  // `held_tokens`: what a lookup of this prompt found held (KVConnector::StorePayloads),
  // so the store does not ask the tiers again.
  size_t StoreSeq(llama_context* ctx, int32_t seq_id, std::span<const TokenId> tokens,
                  bool* all_held = nullptr, std::optional<uint64_t> held_tokens = std::nullopt);
  // Whether the model file still holds the bytes the namespace names (task-loop thread).
  // False, for good, once it changed (logged once); false for this call on an I/O error.
  bool ModelUnchanged();
  void StoreTail(llama_context* ctx, int32_t seq_id, std::span<const TokenId> prompt);
  // Adds the time since `since` to stats_.store_seconds (the task loop's storing time).
  void AddStoreTime(Clock::time_point since);
  // What the reports show besides stats_ (HTTP threads: reads only what ready_ publishes).
  ServerReportState ReportState() const;

  struct PromptStart {
    Clock::time_point t0;
    uint64_t context_tokens = 0;  // tokens held when the prefill started
    bool overlapped = false;      // the prefill waited on a back load: not a prefill sample
    // What the prompt's lookup found held (SlotRestorer::Outcome::held_tokens): its store
    // then asks the tiers nothing.
    std::optional<uint64_t> held_tokens;
  };

  const ServerKvtierOptions options_;
  std::shared_ptr<TieredStore> store_;
  std::shared_ptr<KVConnector> connector_;  // set by OnContextReady, then read-only
  std::unique_ptr<TailRecords> tails_;      // likewise (null with --kvtier-no-tail)
  uint32_t n_ubatch_ = 1, n_batch_ = 1;     // the server context's (OnContextReady)
  // Set (release) once OnContextReady has finished: HTTP threads answer /kvtier while the
  // model is still loading, and read connector_, io_, ns_hex_ only after this (acquire).
  std::atomic<bool> ready_{false};
  // Set once (release) by OnContextReady when the model's memory kind is one kvtier cannot
  // restore exactly (CheckMemorySupported); refused_why_ is written before and never after.
  std::atomic<bool> refused_{false};
  std::string refused_why_;
  std::unique_ptr<ServerTiers> tiers_;  // the store's tiers and the kvtierd check
  // The slots' state format and its reads and writes (set by OnContextReady; its format
  // is read-only after, so HTTP threads read spec() and iswa()).
  std::unique_ptr<SeqStateIo> io_;
  // A recurrent or hybrid model: boundary snapshots per slot (null otherwise).
  std::unique_ptr<SlotSnapshots> snapshots_;
  std::string ns_hex_;
  std::unique_ptr<ModelFileWatch> model_watch_;  // set by OnContextReady; task-loop thread
  std::atomic<bool> model_changed_{false};
  std::map<int32_t, PromptStart> prompt_start_;  // task-loop thread only
  // A slot's last prompt: its length, and whether OnPromptDone's store left every one of
  // its chunks held (none dropped by back-pressure, no error): OnPromptSave, called when
  // llama-server saves that slot to its RAM cache, then has nothing to add and skips the
  // store's lookup, a kvtierd round trip on the task loop. Task-loop thread only.
  struct LastPrompt {
    size_t tokens = 0;
    bool all_held = false;
  };
  std::map<int32_t, LastPrompt> last_prompt_;
  ServerStats stats_;  // counters, and the /kvtier and /metrics reports
  // Set by OnContextReady; task-loop thread only. Last: destroyed first, so a back
  // loader's thread ends before the connector, io_ and stats_ it uses.
  std::unique_ptr<ServerOverlap> overlap_;
  std::unique_ptr<SlotRestorer> restorer_;  // borrows overlap_ and the parts above
};

}  // namespace kvt::llamacpp

#endif  // KVTIER_SERVER_SERVER_KVTIER_H_

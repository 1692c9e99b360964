#include "kvtier_server/server_kvtier.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "kvtier_server/slot_snapshots.h"
#include "kvtier_server/tail_records.h"
#include "llamacpp/llama_engine.h"
#include "spdlog/spdlog.h"

namespace kvt::llamacpp {
namespace {

std::span<const TokenId> Span(const llama_token* tokens, size_t n) {
  static_assert(sizeof(llama_token) == sizeof(TokenId));
  return {reinterpret_cast<const TokenId*>(tokens), n};
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerKvtier>> ServerKvtier::Create(
    const ServerKvtierOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (!options.enabled()) return absl::InvalidArgumentError("no kvtier tier configured");
  absl::StatusOr<std::unique_ptr<ServerTiers>> tiers = ServerTiers::Open(options);
  if (!tiers.ok()) return tiers.status();
  std::unique_ptr<ServerKvtier> k(new ServerKvtier(options));
  k->store_ = (*tiers)->store();
  k->tiers_ = std::move(*tiers);
  return k;
}

ServerKvtier::~ServerKvtier() {
  tiers_.reset();  // stops the kvtierd check first
  Flush();
}

bool ServerKvtier::ModelUnchanged() {
  if (model_changed_.load(std::memory_order_relaxed)) return false;
  if (!model_watch_) return false;
  absl::StatusOr<bool> changed = model_watch_->Changed();
  if (!changed.ok()) {
    spdlog::warn("kvtier: cannot check the model file, not using kvtier for this request: {}",
                 changed.status().ToString());
    return false;
  }
  if (!*changed) return true;
  model_changed_.store(true, std::memory_order_relaxed);
  spdlog::error(
      "kvtier: model file '{}' changed under the running server (fingerprint {} -> {}): kvtier "
      "is off for this server from now on (no lookup, no load, no store under namespace {}, "
      "which names the old weights); restart kvtier-llama-server to use kvtier with the new "
      "file",
      model_watch_->path(), model_watch_->opened_fingerprint(), model_watch_->fingerprint(),
      ns_hex_);
  return false;
}

void ServerKvtier::Flush() {
  if (connector_) connector_->Flush();
  if (tails_) tails_->Flush();
  if (store_) store_->Flush();
}

bool ServerKvtier::OnContextReady(llama_context* ctx, const char* model_path) {
  // A memory kind kvtier cannot restore exactly: serve without kvtier (never wrong output).
  auto refuse = [this](std::string why) {
    refused_why_ = std::move(why);
    refused_.store(true, std::memory_order_release);
    spdlog::error(
        "kvtier: {}; kvtier-llama-server runs without kvtier (computes every prompt, stores "
        "nothing; docs/models.md)",
        refused_why_);
    return true;
  };
  const llama_model* model = llama_get_model(ctx);
  if (absl::Status s = CheckMemorySupported(model, options_.swa_full, /*boundary_snapshots=*/true);
      !s.ok()) {
    return refuse(std::string(s.message()));
  }
  const bool iswa = llama_model_n_swa(model) > 0;
  const bool snapshots = llama_model_is_recurrent(model) || llama_model_is_hybrid(model);
  uint32_t n_stream = 1;
  uint64_t snapshot_bytes = 0;
  absl::StatusOr<SeqStateSpec> probed =
      ProbeServerContext(ctx, &n_stream, snapshots ? &snapshot_bytes : nullptr);
  if ((iswa || snapshots) && n_stream != 1) {
    // Each section of such a state then has its own streams; kvtier reads one stream.
    return refuse(
        absl::StrCat("kvtier cannot restore '", ModelArchitecture(model),
                     "' models with one KV stream per slot: their ", snapshots ? "hybrid" : "iSWA",
                     " state is read as one stream (missing: run with --kv-unified, or -np 1)"));
  }
  if (!probed.ok()) {
    spdlog::error("kvtier: cannot read this context's sequence state: {}",
                  probed.status().ToString());
    return false;
  }
  const uint32_t chunk = static_cast<uint32_t>(options_.chunk_tokens);
  const bool flash_attn = !probed->v_trans;
  if (flash_attn && (llama_n_ubatch(ctx) != chunk || llama_n_batch(ctx) % chunk != 0)) {
    spdlog::error(
        "kvtier: with flash attention on, the KV of a token depends on the batch it is computed "
        "in; -ub ({}) must equal --kvtier-chunk-tokens ({}) and -b ({}) be a multiple of it, "
        "so loaded KV equals recomputed KV (or pass -fa off)",
        llama_n_ubatch(ctx), chunk, llama_n_batch(ctx));
    return false;
  }
  // The file the server loaded, watched from now on (ModelUnchanged). Opened before the
  // namespace engine reads it, so a change in between shows as two fingerprints.
  absl::StatusOr<std::unique_ptr<ModelFileWatch>> watch = ModelFileWatch::Open(model_path);
  if (!watch.ok()) {
    spdlog::error("kvtier: cannot watch the model file: {}", watch.status().ToString());
    return false;
  }
  // The adapter's namespace: a small engine over the same model, types and flash attention.
  EngineOptions eo;
  eo.model_path = model_path;
  eo.n_ctx = std::max<uint32_t>(2 * chunk, 64);
  eo.n_batch = chunk;
  eo.n_threads = 1;
  eo.flash_attn = flash_attn;
  eo.type_k = ggml_type_name(static_cast<ggml_type>(probed->type_k));
  // An MLA cache has no V (type_v -1): the context's V type is then unused.
  eo.type_v = probed->has_v ? ggml_type_name(static_cast<ggml_type>(probed->type_v)) : "f16";
  ggml_log_callback saved_cb = nullptr;
  void* saved_ud = nullptr;
  llama_log_get(&saved_cb, &saved_ud);
  absl::StatusOr<std::unique_ptr<LlamaEngine>> engine = LlamaEngine::Create(eo);
  llama_log_set(saved_cb, saved_ud);
  if (!engine.ok()) {
    spdlog::error("kvtier: cannot open the model for its namespace: {}",
                  engine.status().ToString());
    return false;
  }
  if ((*engine)->has_snapshots() != snapshots ||
      (snapshots && (*engine)->snapshot_bytes() != snapshot_bytes)) {
    spdlog::error(
        "kvtier: the server's boundary snapshot ({} bytes) differs from the adapter's "
        "({} bytes)",
        snapshot_bytes, (*engine)->snapshot_bytes());
    return false;
  }
  if ((*engine)->model_fingerprint() != (*watch)->opened_fingerprint()) {
    spdlog::error("kvtier: model file '{}' changed while the server started; restart it",
                  model_path);
    return false;
  }
  model_watch_ = std::move(*watch);
  const SeqStateSpec& es = (*engine)->state_spec();
  // (A recurrent model's state has no rows: nothing to compare but the snapshot above.)
  if (probed->n_layer > 0 &&
      (es.n_layer != probed->n_layer || es.type_k != probed->type_k ||
       es.type_v != probed->type_v || es.k_row_bytes != probed->k_row_bytes ||
       es.v_row_bytes != probed->v_row_bytes || es.v_trans != probed->v_trans ||
       es.n_layer_swa != probed->n_layer_swa)) {
    spdlog::error("kvtier: the server's state format {} differs from the adapter's {}",
                  probed->DebugString(), es.DebugString());
    return false;
  }
  io_ = std::make_unique<SeqStateIo>(SeqStateFormat{es, n_stream, iswa, snapshot_bytes});
  ConnectorOptions co;
  co.ns = (*engine)->MakeNamespaceParams(chunk);
  co.ns.tenant = options_.tenant;
  co.use_cost_model = options_.cost_model;
  co.cost.probe_after_recomputes = static_cast<uint32_t>(options_.cost_probe_after);
  auto c = KVConnector::Create(co, store_);
  if (!c.ok()) {
    spdlog::error("kvtier: connector: {}", c.status().ToString());
    return false;
  }
  connector_ = std::shared_ptr<KVConnector>(std::move(*c));
  ns_hex_ = connector_->ns().ToHex();
  n_ubatch_ = llama_n_ubatch(ctx);
  n_batch_ = llama_n_batch(ctx);
  if (snapshots) {
    // A chunk payload: [attention rows][snapshot][zeros] (docs/chunk-format.md). A tail
    // record: the rows up to where llama-server's last prompt batch begins (n - 4) and
    // the snapshot there (tail_records.h).
    const uint64_t rows_per_token = probed->n_layer > 0 ? es.payload_bytes_per_token() : 0;
    snapshots_ = std::make_unique<SlotSnapshots>(chunk, uint64_t{chunk} * rows_per_token,
                                                 snapshot_bytes, connector_->chunk_payload_bytes());
    // Without llama-server's context checkpoints its last prompt batch does not begin at
    // n - 4 (no tail snapshot, and a restored tail would not give its cold answer).
    if (options_.tail && !options_.no_ctx_checkpoints) {
      tails_ = std::make_unique<TailRecords>(
          store_, connector_->ns(), co.ns.layout, chunk, 256ull << 20,
          TailSpan::ForSnapshots(n_batch_, n_ubatch_, rows_per_token, snapshot_bytes,
                                 co.ns.layout.bytes_per_token()));
    }
  } else if (options_.tail) {
    tails_ = std::make_unique<TailRecords>(store_, connector_->ns(), co.ns.layout, chunk);
  }
  overlap_ = std::make_unique<ServerOverlap>(options_.overlap, options_.overlap_front_tokens,
                                             *connector_, *io_, stats_);
  restorer_ = std::make_unique<SlotRestorer>(*connector_, *io_, tails_.get(), snapshots_.get(),
                                             *overlap_, stats_, n_batch_, n_ubatch_);
  ready_.store(true, std::memory_order_release);
  spdlog::info("kvtier: tiers {}, chunk {} tokens, namespace {} ({}), {} B/token", tiers_->names(),
               chunk, ns_hex_, co.ns.engine_extra, es.payload_bytes_per_token());
  return true;
}

int64_t ServerKvtier::OnPromptStart(llama_context* ctx, int32_t seq_id, const llama_token* tokens,
                                    size_t n_tokens, size_t n_have) {
  const Clock::time_point entered = Clock::now();
  if (snapshots_ && n_have > 0 &&
      llama_memory_seq_pos_max(llama_get_memory(ctx), seq_id) + 1 >
          static_cast<llama_pos>(n_have)) {
    // A recurrent state cannot be rolled back to the shared prefix: llama-server would
    // compute the prompt from token 0, so kvtier may restore from 0 (replacing the state).
    n_have = 0;
  }
  prompt_start_[seq_id] = PromptStart{entered, n_have};
  last_prompt_.erase(seq_id);  // the slot's content becomes this prompt's
  // Everything kvtier does before the prefill (lookup, and a restore on a hit) is on this
  // request's path; a miss's share is what kvtier costs a prompt it cannot help.
  absl::Cleanup on_path = [&] {
    ServerStats::Add(stats_.prompt_start_seconds,
                     std::chrono::duration<double>(Clock::now() - entered).count());
  };
  if (overlap_) overlap_->Drop(seq_id);  // a front the slot never finished (e.g. cancelled)
  if (snapshots_) snapshots_->Reset(seq_id);
  if (!connector_ || n_tokens < 2 || !ModelUnchanged()) return 0;
  const SlotRestorer::Outcome r = restorer_->Restore(ctx, seq_id, Span(tokens, n_tokens), n_have);
  if (r.overlap_begin) {
    prompt_start_[seq_id] = PromptStart{entered, *r.overlap_begin, /*overlapped=*/true};
  } else if (r.result != 0) {
    prompt_start_[seq_id].context_tokens = r.result > 0 ? static_cast<uint64_t>(r.result) : 0;
  }
  prompt_start_[seq_id].held_tokens = r.held_tokens;
  return r.result;
}

size_t ServerKvtier::OnPromptBatch(llama_context* ctx, int32_t seq_id, const llama_token* tokens,
                                   size_t n_tokens, size_t n_done, size_t* n_limit) {
  // Recurrent/hybrid models: the batch stops at the next chunk boundary, where the
  // snapshot of the chunk ending there is taken (before the next batch); not past
  // SnapshotBoundaryLimit, where llama-server's own last two batches begin. Where its
  // last batch begins (n - 4) the tail record's snapshot is taken.
  if (snapshots_) {
    const size_t tail_at =
        tails_ && tails_->TailTokens(n_tokens) > 0 ? tails_->TailEnd(n_tokens) : 0;
    const size_t next = snapshots_->AtBatch(ctx, seq_id, n_done, tail_at);
    if (next <= SnapshotBoundaryLimit(n_tokens, n_batch_, n_ubatch_))
      *n_limit = std::min(*n_limit, next);
  }
  if (!overlap_) return n_done;
  const ServerOverlap::BatchStep step = overlap_->AtBatch(
      ctx, seq_id, Span(tokens, n_tokens), n_done, n_limit, [this] { return ModelUnchanged(); });
  if (step.cleared) {
    if (auto p = prompt_start_.find(seq_id); p != prompt_start_.end()) p->second.context_tokens = 0;
  }
  return step.n_done;
}

size_t ServerKvtier::StoreSeq(llama_context* ctx, int32_t seq_id, std::span<const TokenId> tokens,
                              bool* all_held, std::optional<uint64_t> held_tokens) {
  if (all_held) *all_held = false;
  const uint64_t dropped_before = connector_->stats().store_chunks_dropped;
  // Recurrent/hybrid models: snapshots exist only up to SnapshotBoundaryLimit.
  if (snapshots_) {
    tokens = tokens.first(SnapshotBoundaryLimit(tokens.size(), n_batch_, n_ubatch_));
    held_tokens.reset();  // the lookup covered other chunks than these
  }
  std::optional<SeqStateView> view;
  const uint32_t chunk = connector_->chunk_tokens();
  absl::StatusOr<size_t> stored = connector_->StorePayloads(
      tokens,
      [&](size_t chunk_index, std::span<std::byte> payload) -> absl::Status {
        if (snapshots_) {
          if (absl::Status s = snapshots_->Fill(seq_id, chunk_index, payload); !s.ok()) return s;
          if (snapshots_->rows_bytes() == 0) return absl::OkStatus();
          payload = payload.first(snapshots_->rows_bytes());
        }
        if (!view.has_value()) {  // the state is read only when a chunk is wanted
          absl::StatusOr<SeqStateView> v = io_->ReadRows(ctx, seq_id);
          if (!v.ok()) return v.status();
          view = std::move(*v);
        }
        // M-RoPE models: every cell must hold the prompt's own token (what the key names).
        return ExtractChunkPayload(*view, static_cast<uint32_t>(chunk_index * chunk), chunk,
                                   payload, tokens.subspan(chunk_index * chunk, chunk));
      },
      held_tokens);
  if (!stored.ok()) {
    stats_.store_errors.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("kvtier: storing seq {} failed: {}", seq_id, stored.status().ToString());
    return 0;
  }
  stats_.stored_chunks.fetch_add(*stored, std::memory_order_relaxed);
  if (all_held) *all_held = connector_->stats().store_chunks_dropped == dropped_before;
  return *stored;
}

void ServerKvtier::OnPromptDone(llama_context* ctx, int32_t seq_id, const llama_token* tokens,
                                size_t n_tokens) {
  if (!connector_) return;
  const Clock::time_point entered = Clock::now();
  absl::Cleanup timed = [&] { AddStoreTime(entered); };
  overlap_->Drop(seq_id);
  std::optional<uint64_t> start;  // where this prompt's prefill began
  std::optional<uint64_t> held;   // what its lookup found held (no second lookup to store)
  if (auto it = prompt_start_.find(seq_id); it != prompt_start_.end()) {
    const uint64_t context = std::min<uint64_t>(it->second.context_tokens, n_tokens);
    start = context;
    held = it->second.held_tokens;
    if (n_tokens > context && !it->second.overlapped) {
      connector_->ObservePrefill(n_tokens - context, context,
                                 std::chrono::duration<double>(Clock::now() - it->second.t0));
    }
    prompt_start_.erase(it);
  }
  last_prompt_[seq_id] = LastPrompt{n_tokens, false};
  if (!ModelUnchanged()) return;  // never store under a namespace of other weights
  const std::span<const TokenId> prompt = Span(tokens, n_tokens);
  StoreSeq(ctx, seq_id, prompt, &last_prompt_[seq_id].all_held, held);
  // The tail only when its KV was computed the way a cold prefill computes it: the
  // prefill began on a ubatch boundary at or before the tail, so llama.cpp computed the
  // tail in the same ubatch as cold. Measured in the demo (270M model, flash attention
  // on): a tail computed inside a ubatch that began elsewhere (after a slot reuse of a
  // shorter prompt) gave other last bits than the cold prefill's. A prompt whose prefill
  // began elsewhere (e.g. after a reuse of only the BOS token) gets its tail stored by a
  // later request that restores its chunks (its prefill then begins at T).
  // Recurrent/hybrid: where the prefill really began (its first batch: llama-server may
  // have restored one of its own context checkpoints), on a chunk boundary, as the
  // batches then stop where a cold prefill's do.
  if (snapshots_) start = snapshots_->prefill_start(seq_id);
  const uint64_t grid = snapshots_ ? connector_->chunk_tokens() : n_ubatch_;
  if (tails_ && start && n_tokens >= 2 && tails_->TailTokens(n_tokens) > 0 &&
      *start <= tails_->TailStart(n_tokens) && *start % grid == 0 && n_batch_ % n_ubatch_ == 0) {
    StoreTail(ctx, seq_id, prompt);
  }
}

void ServerKvtier::StoreTail(llama_context* ctx, int32_t seq_id, std::span<const TokenId> prompt) {
  const uint32_t first = static_cast<uint32_t>(tails_->TailStart(prompt.size()));
  const uint32_t count = static_cast<uint32_t>(tails_->TailTokens(prompt.size()));
  absl::Status s = tails_->Queue(prompt, [&](std::span<std::byte> payload) -> absl::Status {
    if (snapshots_) {  // [rows][snapshot at the tail's end][zeros]
      const uint64_t end = tails_->TailEnd(prompt.size());
      if (absl::Status f = snapshots_->FillTail(seq_id, end, count, payload); !f.ok()) return f;
      if (snapshots_->rows_bytes() == 0) return absl::OkStatus();
      payload = payload.first(snapshots_->RowsBytes(count));
    }
    absl::StatusOr<SeqStateView> v = io_->ReadRows(ctx, seq_id);
    if (!v.ok()) return v.status();
    return ExtractChunkPayload(*v, first, count, payload, prompt.subspan(first, count));
  });
  if (!s.ok()) {
    stats_.store_errors.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("kvtier: storing the tail of seq {} failed: {}", seq_id, s.ToString());
  }
}

void ServerKvtier::OnPromptSave(llama_context* ctx, int32_t seq_id, const llama_token* tokens,
                                size_t n_tokens) {
  if (!connector_) return;
  // Only the prompt's chunks: generated tokens were decoded one by one, and their KV can
  // differ in the last bits from a prefill of the same tokens.
  // Recurrent/hybrid: OnPromptDone stored what has snapshots already.
  // Nothing to add when OnPromptDone left the whole prompt held (the common case): the
  // slot holds that prompt and what was generated after it.
  auto it = last_prompt_.find(seq_id);
  if (snapshots_ || it == last_prompt_.end() || it->second.all_held || !ModelUnchanged()) return;
  const Clock::time_point entered = Clock::now();
  StoreSeq(ctx, seq_id, Span(tokens, std::min<size_t>(n_tokens, it->second.tokens)));
  AddStoreTime(entered);
}

void ServerKvtier::AddStoreTime(Clock::time_point since) {
  ServerStats::Add(stats_.store_seconds,
                   std::chrono::duration<double>(Clock::now() - since).count());
}

ServerReportState ServerKvtier::ReportState() const {
  ServerReportState r;
  r.refused = refused_.load(std::memory_order_acquire);
  r.tiers = tiers_->names();
  if (r.refused) {
    r.refused_why = refused_why_;
    return r;
  }
  r.ready = ready_.load(std::memory_order_acquire);
  if (!r.ready) return r;
  r.model_changed = model_changed_.load(std::memory_order_relaxed);
  r.model_file = model_watch_ ? model_watch_->path() : "";
  r.ns_hex = ns_hex_;
  r.memory = io_->iswa()                    ? "iswa"
             : !snapshots_                  ? "kv"
             : snapshots_->rows_bytes() > 0 ? "hybrid"
                                            : "recurrent";
  r.chunk_tokens = options_.chunk_tokens;
  r.bytes_per_token = io_->spec().payload_bytes_per_token();
  r.snapshot_bytes = snapshots_ ? snapshots_->snapshot_bytes() : 0;
  r.tail_records = tails_ != nullptr;
  r.overlap_mode = options_.overlap == ServerKvtierOptions::Overlap::kOff    ? "off"
                   : options_.overlap == ServerKvtierOptions::Overlap::kAuto ? "auto"
                                                                             : "always";
  r.connector = connector_->stats();
  if (tails_) r.tails = tails_->stats();
  r.writeback_pending_bytes = store_ ? store_->stats().pending_write_bytes : 0;
  return r;
}

std::string ServerKvtier::MetricsText() const { return stats_.MetricsText(ReportState()); }

std::string ServerKvtier::StatusJson() const { return stats_.StatusJson(ReportState()); }

}  // namespace kvt::llamacpp

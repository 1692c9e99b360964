#include "kvtier_server/server_kvtier.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "kvtier_server/seq_streams.h"
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

// The sequence-state format of `ctx`: decode one token into seq 0 of the (empty) context,
// read its state, clear it again. `snapshot_bytes` non-null (a recurrent or hybrid
// model): the partial state is cut off the end first and its size set there; a
// recurrent model's state then has no rows, returned as a spec with n_layer 0.
absl::StatusOr<SeqStateSpec> ProbeServerContext(llama_context* ctx, uint32_t* n_stream,
                                                uint64_t* snapshot_bytes) {
  llama_memory_t mem = llama_get_memory(ctx);
  if (llama_memory_seq_pos_max(mem, 0) >= 0) {
    return absl::FailedPreconditionError("seq 0 is not empty at start-up");
  }
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  llama_token tok = llama_vocab_bos(vocab);
  if (tok < 0) tok = 0;
  llama_batch batch = llama_batch_get_one(&tok, 1);
  if (int rc = llama_decode(ctx, batch); rc != 0) {
    llama_memory_seq_rm(mem, 0, -1, -1);
    return absl::InternalError(absl::StrCat("probe decode failed (llama_decode ", rc, ")"));
  }
  std::vector<std::byte> blob(llama_state_seq_get_size_ext(ctx, 0, 0));
  const size_t got =
      llama_state_seq_get_data_ext(ctx, reinterpret_cast<uint8_t*>(blob.data()), blob.size(), 0, 0);
  absl::StatusOr<std::vector<std::byte>> snapshot =
      snapshot_bytes != nullptr ? ReadSnapshot(ctx, 0) : std::vector<std::byte>();
  llama_memory_seq_rm(mem, 0, -1, -1);
  if (got != blob.size())
    return absl::InternalError("probe: llama_state_seq_get_data_ext short read");
  if (snapshot_bytes != nullptr) {
    if (!snapshot.ok()) return snapshot.status();
    if (blob.size() < snapshot->size() + 8 ||
        std::memcmp(blob.data() + blob.size() - snapshot->size(), snapshot->data(),
                    snapshot->size()) != 0) {
      return absl::UnimplementedError("the partial state is not the end of the whole state");
    }
    *snapshot_bytes = snapshot->size();
    blob.resize(blob.size() - snapshot->size());
    if (blob.size() == 8) {  // recurrent only: no rows
      *n_stream = 1;
      return SeqStateSpec{};
    }
  }
  absl::StatusOr<uint32_t> n = SeqStateStreamCount(blob);
  if (!n.ok()) return n.status();
  *n_stream = *n;
  absl::StatusOr<std::vector<std::byte>> single = ToSingleStream(blob);
  if (!single.ok()) return single.status();
  return InferSeqStateSpec(*single);
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
  iswa_ = llama_model_n_swa(model) > 0;
  const bool snapshots = llama_model_is_recurrent(model) || llama_model_is_hybrid(model);
  uint64_t snapshot_bytes = 0;
  absl::StatusOr<SeqStateSpec> probed =
      ProbeServerContext(ctx, &n_stream_, snapshots ? &snapshot_bytes : nullptr);
  if ((iswa_ || snapshots) && n_stream_ != 1) {
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
  spec_ = es;
  ConnectorOptions co;
  co.ns = (*engine)->MakeNamespaceParams(chunk);
  co.ns.tenant = options_.tenant;
  co.use_cost_model = options_.cost_model;
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
    const uint64_t rows_per_token = probed->n_layer > 0 ? spec_.payload_bytes_per_token() : 0;
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
  ready_.store(true, std::memory_order_release);
  spdlog::info("kvtier: tiers {}, chunk {} tokens, namespace {} ({}), {} B/token", tiers_->names(),
               chunk, ns_hex_, co.ns.engine_extra, spec_.payload_bytes_per_token());
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
  // Everything kvtier does before the prefill (lookup, and a restore on a hit) is on this
  // request's path; a miss's share is what kvtier costs a prompt it cannot help.
  absl::Cleanup on_path = [&] {
    ServerStats::Add(stats_.prompt_start_seconds,
                     std::chrono::duration<double>(Clock::now() - entered).count());
  };
  overlaps_.erase(seq_id);  // a front the slot never finished (e.g. a cancelled request)
  if (snapshots_) snapshots_->Reset(seq_id);
  if (!connector_ || n_tokens < 2 || !ModelUnchanged()) return 0;
  if (snapshots_) return StartWithSnapshots(ctx, seq_id, Span(tokens, n_tokens), n_have);
  const uint32_t chunk = connector_->chunk_tokens();
  // Complete chunks up to T (the last token is always computed), then the tail record of
  // tokens [T, n - 1) (tail_records.h) when the slot holds no more than T, or, for a
  // prompt shorter than one chunk (T == 0), less than the tail (e.g. only the BOS token).
  const uint64_t chunk_end = (n_tokens - 1) / chunk * chunk;
  const bool try_tail = tails_ && tails_->TailTokens(n_tokens) > 0 &&
                        (n_have <= chunk_end || (chunk_end == 0 && n_have < n_tokens - 1));
  if ((try_tail ? n_tokens - 1 : chunk_end) <= n_have) return 0;
  stats_.requests.fetch_add(1, std::memory_order_relaxed);
  const std::span<const TokenId> prompt = Span(tokens, n_tokens);
  uint64_t want = 0;
  // The lookup's lease pins the chunks it found until this restore has loaded them.
  std::optional<ConnectorLookup> pinned;
  if (chunk_end > 0) {
    std::optional<ConnectorLookup> lookup = LookupOrMiss(prompt, n_have);
    if (!lookup) return 0;
    want = std::min<uint64_t>(lookup->load_tokens, chunk_end);
    want -= want % chunk;
    // Load while computing (server_overlap.cc): the front from where the slot's prefill
    // starts, a chunk boundary (an unaligned prefix is dropped so the front's ubatches
    // are a cold prefill's; only when the front is longer than what is dropped).
    const uint64_t usable = std::min<uint64_t>(lookup->cached_tokens, chunk_end) / chunk * chunk;
    const uint64_t begin = n_have % chunk == 0 ? n_have : 0;
    if (const uint64_t front = PickOverlapFront(*lookup, begin, usable, want);
        front > n_have && StartOverlap(seq_id, prompt, front, usable, lookup->lease)) {
      prompt_start_[seq_id] = PromptStart{entered, begin, /*overlapped=*/true};
      if (begin == n_have) return 0;
      llama_memory_seq_rm(llama_get_memory(ctx), seq_id, -1, -1);
      return -1;
    }
    if (want <= n_have && lookup->cached_tokens > n_have) {
      stats_.cost_skips.fetch_add(1, std::memory_order_relaxed);
    }
    pinned.emplace(std::move(*lookup));
  }
  // The tail follows the chunks' decision: only after every chunk before it is loaded.
  std::optional<std::vector<std::byte>> tail;
  if (try_tail && want == chunk_end) {
    absl::StatusOr<std::vector<std::byte>> t = tails_->Fetch(prompt);
    if (t.ok()) {
      tail = std::move(*t);
    } else if (!absl::IsNotFound(t.status())) {
      spdlog::warn("kvtier: tail record not used: {}", t.status().ToString());
    }
  }
  const uint64_t cells = tail ? n_tokens - 1 : want;
  if (cells <= n_have) {
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    // A miss whose slot holds a few tokens that end off a ubatch boundary (typically just
    // the BOS token of the slot's previous prompt): drop them, so this prompt is computed
    // from token 0 exactly as a cold prefill is and its tail record can be stored
    // (OnPromptDone stores tails only from aligned prefills). Costs recomputing at most
    // kMaxDroppedPrefix tokens.
    if (tails_ && n_have > 0 && n_have <= kMaxDroppedPrefix && n_have % n_ubatch_ != 0 &&
        tails_->TailTokens(n_tokens) > 0) {
      llama_memory_seq_rm(llama_get_memory(ctx), seq_id, -1, -1);
      prompt_start_[seq_id].context_tokens = 0;
      stats_.dropped_prefixes.fetch_add(1, std::memory_order_relaxed);
      return -1;
    }
    return 0;
  }
  const auto t0 = Clock::now();
  absl::StatusOr<SeqStateBuilder> builder = SeqStateBuilder::Create(
      spec_, static_cast<uint32_t>(cells), seq_id, std::move(restore_blob_), prompt);
  // The blob's memory is kept for the next restore, whatever happens below.
  absl::Cleanup keep_blob = [&] {
    if (builder.ok()) restore_blob_ = std::move(*builder).TakeStorage();
  };
  if (!builder.ok()) {
    spdlog::warn("kvtier: cannot build a {}-token state: {}", cells, builder.status().ToString());
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  const uint64_t chunk_bytes = uint64_t{chunk} * spec_.payload_bytes_per_token();
  uint64_t loaded = 0;
  if (want > 0) {
    absl::StatusOr<ConnectorLoadResult> load = connector_->LoadPayloads(
        prompt, want, [&](size_t chunk_index, std::span<const std::byte> payload) -> absl::Status {
          if (payload.size() != chunk_bytes) {
            return absl::DataLossError(absl::StrFormat("chunk %d payload is %d bytes, expected %d",
                                                       chunk_index, payload.size(), chunk_bytes));
          }
          return builder->PutChunk(static_cast<uint32_t>(chunk_index * chunk), chunk, payload);
        });
    loaded = load.ok() ? std::min<uint64_t>(load->loaded_tokens, want) : 0;
    loaded -= loaded % chunk;
    if (!load.ok() || !load->failed_chunks.empty()) {
      stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("kvtier: {} of {} tokens delivered ({}); recomputing the rest", loaded, want,
                   load.ok() ? load->first_error.ToString() : load.status().ToString());
    }
  }
  bool tail_used = false;
  if (tail && loaded == want) {
    absl::Status s =
        builder->PutChunk(static_cast<uint32_t>(want), static_cast<uint32_t>(cells - want), *tail);
    if (s.ok()) {
      loaded = cells;
      tail_used = true;
    } else {
      stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("kvtier: tail record not used: {}", s.ToString());
    }
  }
  if (loaded <= n_have) {
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  std::optional<std::vector<std::byte>> truncated;
  std::span<const std::byte> blob = builder->blob();
  if (loaded < cells) {
    absl::StatusOr<std::vector<std::byte>> t = builder->Truncated(static_cast<uint32_t>(loaded));
    if (!t.ok()) {
      stats_.misses.fetch_add(1, std::memory_order_relaxed);
      return 0;
    }
    truncated = std::move(*t);
    blob = *truncated;
  }
  std::optional<std::vector<std::byte>> framed;
  if (n_stream_ != 1) {
    absl::StatusOr<std::vector<std::byte>> f = ToStreams(blob, n_stream_);
    if (!f.ok()) {
      stats_.misses.fetch_add(1, std::memory_order_relaxed);
      return 0;
    }
    framed = std::move(*f);
    blob = *framed;
  }
  if (!ApplyRestoredState(ctx, seq_id, blob, loaded)) return -1;
  stats_.hits.fetch_add(1, std::memory_order_relaxed);
  if (tail_used) stats_.tail_hits.fetch_add(1, std::memory_order_relaxed);
  stats_.loaded_tokens.fetch_add(loaded, std::memory_order_relaxed);
  stats_.load_bytes.fetch_add(loaded * spec_.payload_bytes_per_token(), std::memory_order_relaxed);
  ServerStats::Add(stats_.load_seconds, std::chrono::duration<double>(Clock::now() - t0).count());
  prompt_start_[seq_id].context_tokens = loaded;
  return static_cast<int64_t>(loaded);
}

int64_t ServerKvtier::StartWithSnapshots(llama_context* ctx, int32_t seq_id,
                                         std::span<const TokenId> prompt, uint64_t n_have) {
  const uint64_t n_tokens = prompt.size();
  const uint32_t chunk = connector_->chunk_tokens();
  // Chunks only up to a boundary where a cold prefill's batches also stop (the rest is
  // then computed in the same batches as there); then the tail record, up to where
  // llama-server's last prompt batch begins, when every chunk before it loads.
  const uint64_t limit = SnapshotBoundaryLimit(n_tokens, n_batch_, n_ubatch_) / chunk * chunk;
  const bool try_tail =
      tails_ && tails_->TailTokens(n_tokens) > 0 && n_have <= tails_->TailStart(n_tokens);
  if ((try_tail ? tails_->TailEnd(n_tokens) : limit) <= n_have) return 0;
  stats_.requests.fetch_add(1, std::memory_order_relaxed);
  uint64_t want = 0;
  // The lookup's lease pins the chunks it found until this restore has loaded them.
  std::optional<ConnectorLookup> lookup;
  if (limit > 0) {
    std::optional<ConnectorLookup> l = LookupOrMiss(prompt, n_have);
    if (!l) return 0;
    want = std::min<uint64_t>(l->load_tokens, limit);
    want -= want % chunk;
    lookup.emplace(std::move(*l));
  }
  std::optional<std::vector<std::byte>> tail;
  if (try_tail && want == tails_->TailStart(n_tokens)) {
    absl::StatusOr<std::vector<std::byte>> t = tails_->Fetch(prompt);
    if (t.ok()) {
      tail = std::move(*t);
    } else if (!absl::IsNotFound(t.status())) {
      spdlog::warn("kvtier: tail record not used: {}", t.status().ToString());
    }
  }
  if (!tail && want <= n_have) {
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  return RestoreWithSnapshot(ctx, seq_id, prompt, want, n_have, tail ? &*tail : nullptr);
}

std::optional<ConnectorLookup> ServerKvtier::LookupOrMiss(std::span<const TokenId> prompt,
                                                          uint64_t n_have) {
  absl::StatusOr<ConnectorLookup> lookup = connector_->Lookup(prompt, n_have);
  if (!lookup.ok()) {
    spdlog::warn("kvtier: lookup failed, computing the prompt: {}", lookup.status().ToString());
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  return std::move(*lookup);
}

int64_t ServerKvtier::RestoreWithSnapshot(llama_context* ctx, int32_t seq_id,
                                          std::span<const TokenId> prompt, uint64_t want,
                                          uint64_t n_have, const std::vector<std::byte>* tail) {
  const auto t0 = Clock::now();
  const uint32_t chunk = connector_->chunk_tokens();
  const bool rows = snapshots_->rows_bytes() > 0;
  const uint64_t tail_end = tail ? tails_->TailEnd(prompt.size()) : 0;
  const uint64_t tail_tokens = tail ? tail_end - want : 0;
  // A recurrent model's tail is the state at its end alone: no chunk is needed.
  if (tail && !rows) want = 0;
  std::optional<SeqStateBuilder> builder;
  if (rows) {
    const uint64_t cells = tail ? tail_end : want;
    absl::StatusOr<SeqStateBuilder> b =
        SeqStateBuilder::Create(spec_, static_cast<uint32_t>(cells), seq_id, {}, prompt);
    if (!b.ok()) {
      spdlog::warn("kvtier: cannot build a {}-token state: {}", cells, b.status().ToString());
      stats_.misses.fetch_add(1, std::memory_order_relaxed);
      return 0;
    }
    builder.emplace(std::move(*b));
  }
  // Rows of chunks 1..k and the snapshot of chunk k (or the tail's rows and snapshot).
  std::vector<std::vector<std::byte>> snaps(want / chunk);
  const uint64_t chunk_bytes = connector_->chunk_payload_bytes();
  uint64_t loaded = 0;
  if (want > 0) {
    absl::StatusOr<ConnectorLoadResult> load = connector_->LoadPayloads(
        prompt, want, [&](size_t chunk_index, std::span<const std::byte> payload) -> absl::Status {
          if (payload.size() != chunk_bytes) {
            return absl::DataLossError(absl::StrFormat("chunk %d payload is %d bytes, expected %d",
                                                       chunk_index, payload.size(), chunk_bytes));
          }
          if (chunk_index < snaps.size()) {
            const std::span<const std::byte> s = snapshots_->SnapshotOf(payload);
            snaps[chunk_index].assign(s.begin(), s.end());
          }
          if (!rows) return absl::OkStatus();
          return builder->PutChunk(static_cast<uint32_t>(chunk_index * chunk), chunk,
                                   payload.first(snapshots_->rows_bytes()));
        });
    loaded = load.ok() ? std::min<uint64_t>(load->loaded_tokens, want) : 0;
    loaded -= loaded % chunk;
    if (!load.ok() || !load->failed_chunks.empty()) {
      stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("kvtier: {} of {} tokens delivered ({}); recomputing the rest", loaded, want,
                   load.ok() ? load->first_error.ToString() : load.status().ToString());
    }
  }
  std::span<const std::byte> snapshot;
  if (loaded > 0) snapshot = snaps[loaded / chunk - 1];
  bool tail_used = false;
  if (tail && loaded == want) {
    const uint64_t tail_rows = snapshots_->RowsBytes(tail_tokens);
    absl::Status s = tail->size() >= tail_rows + snapshots_->snapshot_bytes()
                         ? absl::OkStatus()
                         : absl::DataLossError("tail payload shorter than its rows and snapshot");
    if (s.ok() && rows) {
      s = builder->PutChunk(static_cast<uint32_t>(want), static_cast<uint32_t>(tail_tokens),
                            std::span<const std::byte>(*tail).first(tail_rows));
    }
    if (s.ok()) {
      snapshot = std::span<const std::byte>(*tail).subspan(tail_rows, snapshots_->snapshot_bytes());
      loaded = tail_end;
      tail_used = true;
    } else {
      stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("kvtier: tail record not used: {}", s.ToString());
    }
  }
  if (loaded <= n_have || snapshot.size() != snapshots_->snapshot_bytes()) {
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  std::vector<std::byte> rows_blob;
  const uint64_t cells = tail ? tail_end : want;
  if (rows && loaded == cells) {
    rows_blob.assign(builder->blob().begin(), builder->blob().end());
  } else if (rows) {
    absl::StatusOr<std::vector<std::byte>> t = builder->Truncated(static_cast<uint32_t>(loaded));
    if (!t.ok()) {
      stats_.misses.fetch_add(1, std::memory_order_relaxed);
      return 0;
    }
    rows_blob = std::move(*t);
  }
  const std::vector<std::byte> state = snapshots_->Compose(rows_blob, snapshot, seq_id);
  if (!ApplyRestoredState(ctx, seq_id, state, loaded)) return -1;
  stats_.hits.fetch_add(1, std::memory_order_relaxed);
  if (tail_used) stats_.tail_hits.fetch_add(1, std::memory_order_relaxed);
  stats_.loaded_tokens.fetch_add(loaded, std::memory_order_relaxed);
  stats_.load_bytes.fetch_add(
      tail_used ? want / chunk * chunk_bytes + tail->size() : loaded / chunk * chunk_bytes,
      std::memory_order_relaxed);
  ServerStats::Add(stats_.load_seconds, std::chrono::duration<double>(Clock::now() - t0).count());
  prompt_start_[seq_id].context_tokens = loaded;
  return static_cast<int64_t>(loaded);
}

absl::StatusOr<std::span<const std::byte>> ServerKvtier::ReadSingleStream(llama_context* ctx,
                                                                          int32_t seq_id) {
  if (iswa_) {
    // llama_state_seq_get_data writes only the sliding-window layers' window; the
    // whole-context state has every token's rows of a full-size SWA cache (all slots').
    state_scratch_.resize(llama_state_get_size(ctx));
    const size_t got = llama_state_get_data(ctx, reinterpret_cast<uint8_t*>(state_scratch_.data()),
                                            state_scratch_.size());
    if (got != state_scratch_.size()) return absl::InternalError("llama_state_get_data short read");
    absl::StatusOr<std::vector<std::byte>> seq =
        SeqStateFromContextState(state_scratch_, seq_id, spec_);
    if (!seq.ok()) return seq.status();
    single_stream_ = std::move(*seq);
    return std::span<const std::byte>(single_stream_);
  }
  state_scratch_.resize(llama_state_seq_get_size_ext(ctx, seq_id, 0));
  const size_t got = llama_state_seq_get_data_ext(
      ctx, reinterpret_cast<uint8_t*>(state_scratch_.data()), state_scratch_.size(), seq_id, 0);
  if (got != state_scratch_.size()) {
    return absl::InternalError("llama_state_seq_get_data_ext short read");
  }
  if (n_stream_ == 1) return std::span<const std::byte>(state_scratch_);
  absl::StatusOr<std::vector<std::byte>> single = ToSingleStream(state_scratch_);
  if (!single.ok()) return single.status();
  single_stream_ = std::move(*single);
  return std::span<const std::byte>(single_stream_);
}

absl::StatusOr<SeqStateView> ServerKvtier::ReadSeqState(llama_context* ctx, int32_t seq_id) {
  absl::StatusOr<std::span<const std::byte>> blob = ReadSingleStream(ctx, seq_id);
  if (!blob.ok()) return blob.status();
  if (snapshots_) {  // a hybrid state: the attention rows, then the recurrent state
    if (blob->size() < snapshots_->snapshot_bytes()) {
      return absl::DataLossError("hybrid state shorter than its snapshot");
    }
    return ParseSeqState(blob->first(blob->size() - snapshots_->snapshot_bytes()), spec_);
  }
  return ParseSeqState(*blob, spec_);
}

bool ServerKvtier::SetSeqState(llama_context* ctx, int32_t seq_id,
                               std::span<const std::byte> blob) {
  std::optional<std::vector<std::byte>> framed;
  if (n_stream_ != 1) {
    absl::StatusOr<std::vector<std::byte>> f = ToStreams(blob, n_stream_);
    if (!f.ok()) return false;
    framed = std::move(*f);
    blob = *framed;
  }
  return llama_state_seq_set_data_ext(ctx, reinterpret_cast<const uint8_t*>(blob.data()),
                                      blob.size(), seq_id, 0) == blob.size();
}

bool ServerKvtier::ApplyRestoredState(llama_context* ctx, int32_t seq_id,
                                      std::span<const std::byte> state, uint64_t loaded) {
  if (llama_state_seq_set_data_ext(ctx, reinterpret_cast<const uint8_t*>(state.data()),
                                   state.size(), seq_id, 0) == state.size()) {
    return true;
  }
  spdlog::warn("kvtier: llama.cpp refused a {}-token state for seq {}; recomputing", loaded,
               seq_id);
  llama_memory_seq_rm(llama_get_memory(ctx), seq_id, -1, -1);
  stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
  stats_.misses.fetch_add(1, std::memory_order_relaxed);
  prompt_start_[seq_id].context_tokens = 0;
  return false;
}

size_t ServerKvtier::StoreSeq(llama_context* ctx, int32_t seq_id, std::span<const TokenId> tokens) {
  // Recurrent/hybrid models: snapshots exist only up to SnapshotBoundaryLimit.
  if (snapshots_) tokens = tokens.first(SnapshotBoundaryLimit(tokens.size(), n_batch_, n_ubatch_));
  std::optional<SeqStateView> view;
  const uint32_t chunk = connector_->chunk_tokens();
  absl::StatusOr<size_t> stored = connector_->StorePayloads(
      tokens, [&](size_t chunk_index, std::span<std::byte> payload) -> absl::Status {
        if (snapshots_) {
          if (absl::Status s = snapshots_->Fill(seq_id, chunk_index, payload); !s.ok()) return s;
          if (snapshots_->rows_bytes() == 0) return absl::OkStatus();
          payload = payload.first(snapshots_->rows_bytes());
        }
        if (!view.has_value()) {  // the state is read only when a chunk is wanted
          absl::StatusOr<SeqStateView> v = ReadSeqState(ctx, seq_id);
          if (!v.ok()) return v.status();
          view = std::move(*v);
        }
        return ExtractChunkPayload(*view, static_cast<uint32_t>(chunk_index * chunk), chunk,
                                   payload);
      });
  if (!stored.ok()) {
    stats_.store_errors.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("kvtier: storing seq {} failed: {}", seq_id, stored.status().ToString());
    return 0;
  }
  stats_.stored_chunks.fetch_add(*stored, std::memory_order_relaxed);
  return *stored;
}

void ServerKvtier::OnPromptDone(llama_context* ctx, int32_t seq_id, const llama_token* tokens,
                                size_t n_tokens) {
  if (!connector_) return;
  overlaps_.erase(seq_id);
  std::optional<uint64_t> start;  // where this prompt's prefill began
  if (auto it = prompt_start_.find(seq_id); it != prompt_start_.end()) {
    const uint64_t context = std::min<uint64_t>(it->second.context_tokens, n_tokens);
    start = context;
    if (n_tokens > context && !it->second.overlapped) {
      connector_->ObservePrefill(n_tokens - context, context,
                                 std::chrono::duration<double>(Clock::now() - it->second.t0));
    }
    prompt_start_.erase(it);
  }
  last_prompt_tokens_[seq_id] = n_tokens;
  if (!ModelUnchanged()) return;  // never store under a namespace of other weights
  const std::span<const TokenId> prompt = Span(tokens, n_tokens);
  StoreSeq(ctx, seq_id, prompt);
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
    absl::StatusOr<SeqStateView> v = ReadSeqState(ctx, seq_id);
    if (!v.ok()) return v.status();
    return ExtractChunkPayload(*v, first, count, payload);
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
  auto it = last_prompt_tokens_.find(seq_id);
  if (snapshots_ || it == last_prompt_tokens_.end() || !ModelUnchanged()) return;
  StoreSeq(ctx, seq_id, Span(tokens, std::min<size_t>(n_tokens, it->second)));
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
  r.memory = iswa_                          ? "iswa"
             : !snapshots_                  ? "kv"
             : snapshots_->rows_bytes() > 0 ? "hybrid"
                                            : "recurrent";
  r.chunk_tokens = options_.chunk_tokens;
  r.bytes_per_token = spec_.payload_bytes_per_token();
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

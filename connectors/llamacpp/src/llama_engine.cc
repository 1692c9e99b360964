#include "llamacpp/llama_engine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ggml.h"
#include "llama.h"
#include "spdlog/spdlog.h"

#ifndef KVT_LLAMACPP_COMMIT
#error "KVT_LLAMACPP_COMMIT must be defined by cmake/LlamaCpp.cmake"
#endif
#ifndef KVT_LLAMACPP_VERSION
#error "KVT_LLAMACPP_VERSION must be defined by cmake/LlamaCpp.cmake"
#endif

namespace kvt::llamacpp {
namespace {

bool g_verbose_log = false;

void LogCallback(ggml_log_level level, const char* text, void* /*user*/) {
  if (g_verbose_log || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

void InitBackendOnce(bool verbose) {
  static std::once_flag once;
  g_verbose_log = g_verbose_log || verbose;
  std::call_once(once, [] {
    llama_log_set(LogCallback, nullptr);
    llama_backend_init();
  });
}

absl::StatusOr<ggml_type> ParseCacheType(std::string_view name, std::string_view field) {
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* n = ggml_type_name(static_cast<ggml_type>(t));
    if (n != nullptr && name == n && ggml_type_size(static_cast<ggml_type>(t)) > 0) {
      return static_cast<ggml_type>(t);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("EngineOptions.", std::string(field), " '", std::string(name),
                   "' is not a ggml type name (e.g. f16, f32, q8_0)"));
}

std::string MetaString(const llama_model* model, const std::string& key) {
  char buf[256];
  const int32_t n = llama_model_meta_val_str(model, key.c_str(), buf, sizeof buf);
  return n < 0 ? std::string() : std::string(buf);
}

}  // namespace

std::string ModelArchitecture(const llama_model* model) {
  std::string arch = MetaString(model, "general.architecture");
  return arch.empty() ? "?" : arch;
}

absl::Status CheckMemorySupported(const llama_model* model, bool swa_full,
                                  bool boundary_snapshots) {
  const std::string arch = ModelArchitecture(model);
  const std::string head = absl::StrCat("kvtier cannot restore '", arch, "' models exactly: ");
  constexpr const char* kRows = "kvtier's llama.cpp records hold only per-token KV rows";
  // M-RoPE (qwen35) passes: llama.cpp writes an extension record per cell (2D position,
  // token id), which for a text token is its position and its id; kvtier checks that on
  // store and writes it back on restore (SeqStateSpec::cell_ext, Probe).
  if (boundary_snapshots && (llama_model_is_recurrent(model) || llama_model_is_hybrid(model))) {
    // Records carry the recurrent state at their last token (probed in LlamaEngine).
    return absl::OkStatus();
  }
  if (llama_model_is_recurrent(model)) {
    return absl::UnimplementedError(absl::StrCat(
        head,
        "their memory is recurrent (one fixed-size state per sequence, no per-token rows) "
        "and ",
        kRows, " (missing: a snapshot of the recurrent state at each chunk boundary)"));
  }
  if (llama_model_is_hybrid(model)) {
    return absl::UnimplementedError(absl::StrCat(
        head,
        "their memory is hybrid (attention KV beside recurrent/linear-attention state) "
        "and ",
        kRows, " (missing: a snapshot of the recurrent state at each chunk boundary)"));
  }
  if (const int32_t n_swa = llama_model_n_swa(model); n_swa > 0 && !swa_full) {
    // With a full-size SWA cache (swa_full) llama.cpp keeps every token's sliding-window
    // rows, and kvtier cuts them per token like a plain cache's (two KV sections).
    return absl::UnimplementedError(absl::StrCat(
        head, "their memory is iSWA/SWA (a sliding window of ", n_swa,
        " tokens on some or all layers) and without a full-size SWA cache llama.cpp keeps only "
        "the window, while ",
        kRows,
        " (missing: every token's sliding-window rows: run with --swa-full, or a snapshot of "
        "the sliding-window cache at each chunk boundary)"));
  }
  // MLA (deepseek2: one compressed latent row per token and layer, no V) is plain per-token
  // rows to llama.cpp's state format: Probe reads it as K-only rows (SeqStateSpec::has_v).
  return absl::OkStatus();
}

std::string_view LlamaCppPackageVersion() { return KVT_LLAMACPP_VERSION; }
std::string_view LlamaCppCommit() { return KVT_LLAMACPP_COMMIT; }

absl::Status EngineOptions::Validate() const {
  if (model_path.empty()) return absl::InvalidArgumentError("EngineOptions.model_path is empty");
  if (n_ctx < 16)
    return absl::InvalidArgumentError(absl::StrCat("EngineOptions.n_ctx ", n_ctx, " < 16"));
  if (n_batch == 0 || n_batch > n_ctx) {
    return absl::InvalidArgumentError(
        absl::StrCat("EngineOptions.n_batch ", n_batch, " must be in 1..n_ctx (", n_ctx, ")"));
  }
  if (n_threads < 1)
    return absl::InvalidArgumentError(absl::StrCat("EngineOptions.n_threads ", n_threads, " < 1"));
  if (auto t = ParseCacheType(type_k, "type_k"); !t.ok()) return t.status();
  if (auto t = ParseCacheType(type_v, "type_v"); !t.ok()) return t.status();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LlamaEngine>> LlamaEngine::Create(const EngineOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (!std::filesystem::exists(options.model_path)) {
    return absl::NotFoundError(
        absl::StrCat("model file '", options.model_path, "' does not exist"));
  }
  InitBackendOnce(options.verbose_llama_log);
  std::unique_ptr<LlamaEngine> e(new LlamaEngine());
  e->options_ = options;
  // Held open for the engine's life: it names the inode llama.cpp maps, whatever later
  // happens to the path (see CheckModelFile). Fingerprinted before the load; the stamp is
  // checked again after it.
  absl::StatusOr<std::unique_ptr<ModelFileWatch>> watch = ModelFileWatch::Open(options.model_path);
  if (!watch.ok()) return watch.status();
  e->watch_ = std::move(*watch);

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  // No repacked/extra buffer types: plain CPU buffers (also keeps ggml's AMX path away).
  mp.use_extra_bufts = false;
  e->model_ = llama_model_load_from_file(options.model_path.c_str(), mp);
  if (e->model_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama.cpp could not load model '", options.model_path, "' (see log above)"));
  }
  e->n_vocab_ = llama_vocab_n_tokens(llama_model_get_vocab(e->model_));

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = options.n_ctx;
  cp.n_batch = options.n_batch;
  cp.n_ubatch = options.n_batch;
  cp.n_seq_max = 1;
  cp.n_threads = options.n_threads;
  cp.n_threads_batch = options.n_threads;
  cp.flash_attn_type =
      options.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = *ParseCacheType(options.type_k, "type_k");
  cp.type_v = *ParseCacheType(options.type_v, "type_v");
  cp.offload_kqv = false;
  cp.op_offload = false;
  cp.no_perf = true;
  cp.kv_unified = true;
  cp.swa_full = options.swa_full;
  e->ctx_ = llama_init_from_model(e->model_, cp);
  if (e->ctx_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llama.cpp could not create a context for '%s' (n_ctx=%d, type_k=%s, type_v=%s, "
        "flash_attn=%d; a quantized V cache needs flash attention)",
        options.model_path, options.n_ctx, options.type_k, options.type_v, options.flash_attn));
  }
  if (absl::Status s = CheckMemorySupported(e->model_, options.swa_full,
                                            /*boundary_snapshots=*/true);
      !s.ok()) {
    return s;
  }
  e->n_swa_ = std::max<int32_t>(llama_model_n_swa(e->model_), 0);
  e->memory_kind_ = llama_model_is_recurrent(e->model_) ? MemoryKind::kRecurrent
                    : llama_model_is_hybrid(e->model_)  ? MemoryKind::kHybrid
                    : e->n_swa_ > 0                     ? MemoryKind::kIswa
                                                        : MemoryKind::kKv;
  if (absl::Status s = e->Probe(); !s.ok()) return s;
  absl::StatusOr<bool> moved = e->watch_->StampMoved();
  if (!moved.ok()) return moved.status();
  if (*moved) {
    return absl::UnavailableError(absl::StrFormat(
        "model file '%s' changed while it was being loaded; retry", options.model_path));
  }
  return e;
}

LlamaEngine::~LlamaEngine() {
  if (ctx_ != nullptr) llama_free(ctx_);
  if (model_ != nullptr) llama_model_free(model_);
}

absl::StatusOr<bool> LlamaEngine::CheckModelFile() {
  absl::StatusOr<bool> changed = watch_->Changed();
  if (!changed.ok() || !*changed) return changed;
  if (!change_logged_) {
    change_logged_ = true;
    spdlog::warn(
        "kvtier llama.cpp: model file '{}' changed under the running engine "
        "(fingerprint {} -> {}); kvtier is off for this engine's old namespace",
        options_.model_path, watch_->opened_fingerprint(), watch_->fingerprint());
  }
  return true;
}

absl::Status LlamaEngine::Probe() {
  // One token at position 0 gives a state blob whose headers describe the cache.
  const TokenId probe[1] = {0};
  const auto t0 = std::chrono::steady_clock::now();
  if (absl::Status s = Prefill(probe, 0, /*want_logits=*/true); !s.ok()) return s;
  probe_decode_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // One token: an iSWA cache's window holds it too, so both sections have the same cell.
  absl::StatusOr<std::vector<std::byte>> blob = GetSeqDataOfSeq0();
  if (!blob.ok()) {
    Clear();
    return blob.status();
  }
  if (has_snapshots()) {
    if (absl::Status s = ProbeSnapshot(*blob); !s.ok()) return s;         // clears seq 0
    if (memory_kind_ == MemoryKind::kRecurrent) return absl::OkStatus();  // no rows
    blob->resize(blob->size() - snapshot_bytes_);                         // the attention rows
  } else {
    Clear();
  }
  absl::StatusOr<SeqStateSpec> spec = InferSeqStateSpec(*blob);
  if (!spec.ok()) {
    return absl::UnimplementedError(absl::StrCat(
        "kvtier cannot slice this model's llama.cpp sequence state (only plain KV caches with "
        "uniform layers are supported): ",
        spec.status().message()));
  }
  spec_ = *spec;
  const llama_rope_type rope = llama_model_rope_type(model_);
  const bool mrope = rope == LLAMA_ROPE_TYPE_MROPE || rope == LLAMA_ROPE_TYPE_IMROPE;
  if (spec_.cell_ext != mrope) {
    // Cells with extension records but no M-RoPE: PLE (per-layer embeddings hashed from
    // the token ids), whose record is not a function of the position.
    return absl::UnimplementedError(absl::StrFormat(
        "kvtier cannot restore '%s' models exactly: their KV cells %s extension records "
        "while the model %s M-RoPE (kvtier writes back only the records of M-RoPE text "
        "cells; missing: the cells' extension records)",
        ModelArchitecture(model_), spec_.cell_ext ? "carry" : "carry no",
        mrope ? "uses" : "does not use"));
  }
  if ((spec_.n_layer_swa > 0) != (n_swa_ > 0)) {
    return absl::UnimplementedError(absl::StrFormat(
        "kvtier cannot slice this model's llama.cpp sequence state: n_swa %d but the state has "
        "%d sliding-window layers (%s)",
        n_swa_, spec_.n_layer_swa, spec_.DebugString()));
  }
  const auto tk = static_cast<ggml_type>(spec_.type_k);
  const auto tv = static_cast<ggml_type>(spec_.type_v);
  if (spec_.has_v && !spec_.v_trans) {
    spec_.v_elem_bytes = static_cast<uint32_t>(ggml_type_size(tv));
    spec_.n_embd_v_gqa =
        static_cast<uint32_t>(spec_.v_row_bytes / ggml_type_size(tv) * ggml_blck_size(tv));
  }
  layout_.num_layers = spec_.total_layers();
  layout_.kind = LayoutKind::kLlamaCppRows;
  const int32_t n_head_kv = llama_model_n_head_kv(model_);
  const uint64_t elems = spec_.k_row_bytes / ggml_type_size(tk) * ggml_blck_size(tk);
  const bool plain = tk == GGML_TYPE_F16 || tk == GGML_TYPE_F32 || tk == GGML_TYPE_BF16;
  if (!spec_.has_v) {
    // MLA: one compressed latent row per token and layer (K only).
    layout_.kind = LayoutKind::kMLA;
    layout_.num_kv_heads = 1;
    layout_.dtype = tk == GGML_TYPE_F16    ? DType::kF16
                    : tk == GGML_TYPE_F32  ? DType::kF32
                    : tk == GGML_TYPE_BF16 ? DType::kBF16
                                           : DType::kBytes;
    layout_.head_dim = static_cast<uint32_t>(plain ? elems : spec_.k_row_bytes);
  } else if (spec_.type_k == spec_.type_v && spec_.k_row_bytes == spec_.v_row_bytes && plain &&
             n_head_kv > 0 && elems % static_cast<uint64_t>(n_head_kv) == 0) {
    layout_.dtype = tk == GGML_TYPE_F16   ? DType::kF16
                    : tk == GGML_TYPE_F32 ? DType::kF32
                                          : DType::kBF16;
    layout_.num_kv_heads = static_cast<uint32_t>(n_head_kv);
    layout_.head_dim = static_cast<uint32_t>(elems / static_cast<uint64_t>(n_head_kv));
  } else {
    // Opaque rows: a quantized cache, or K and V of different types (-ctk q8_0 -ctv f16).
    // The payload is still [layer][K rows][V rows]; the layout only has to give its size,
    // 2 * head_dim bytes per token and layer. The types are in engine_extra.
    const uint64_t kv_row = spec_.k_row_bytes + spec_.v_row_bytes;
    if (kv_row % 2 != 0) {
      return absl::UnimplementedError(absl::StrFormat(
          "kvtier's llama.cpp payload needs K + V row bytes even; this cache has K %s x %d "
          "bytes, V %s x %d bytes",
          ggml_type_name(tk), spec_.k_row_bytes, ggml_type_name(tv), spec_.v_row_bytes));
    }
    layout_.dtype = DType::kBytes;
    layout_.num_kv_heads = 1;
    layout_.head_dim = static_cast<uint32_t>(kv_row / 2);
  }
  if (absl::Status s = layout_.Validate(); !s.ok()) return s;
  if (layout_.bytes_per_token() != spec_.payload_bytes_per_token()) {
    return absl::InternalError(absl::StrFormat("layout %s does not match state rows %s",
                                               layout_.DebugString(), spec_.DebugString()));
  }
  return absl::OkStatus();
}

bool LlamaEngine::has_vocab() const {
  return llama_vocab_type(llama_model_get_vocab(model_)) != LLAMA_VOCAB_TYPE_NONE;
}

absl::StatusOr<std::vector<TokenId>> LlamaEngine::Tokenize(std::string_view text,
                                                           bool add_bos) const {
  if (!has_vocab()) {
    return absl::FailedPreconditionError(
        "model has no tokenizer (tokenizer.ggml.model = none): drive it with token ids");
  }
  const llama_vocab* vocab = llama_model_get_vocab(model_);
  std::vector<TokenId> out(text.size() + 8);
  int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                             static_cast<int32_t>(out.size()), add_bos, /*parse_special=*/false);
  if (n < 0) {
    out.resize(static_cast<size_t>(-n));
    n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                       static_cast<int32_t>(out.size()), add_bos, false);
  }
  if (n < 0) return absl::InternalError("llama_tokenize failed");
  out.resize(static_cast<size_t>(n));
  return out;
}

void LlamaEngine::Clear() {
  llama_memory_seq_rm(llama_get_memory(ctx_), 0, -1, -1);
  logits_valid_ = false;
}

uint32_t LlamaEngine::seq_tokens() const {
  const llama_pos max = llama_memory_seq_pos_max(llama_get_memory(ctx_), 0);
  return max < 0 ? 0u : static_cast<uint32_t>(max) + 1;
}

absl::Status LlamaEngine::Prefill(std::span<const TokenId> tokens, uint32_t first_pos,
                                  bool want_logits, const PrefillProgress& progress,
                                  uint32_t stop_every) {
  if (first_pos != seq_tokens()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Prefill at position %d but the sequence holds %d tokens", first_pos, seq_tokens()));
  }
  if (uint64_t{first_pos} + tokens.size() > options_.n_ctx) {
    return absl::InvalidArgumentError(absl::StrFormat("prompt of %d tokens exceeds n_ctx %d",
                                                      uint64_t{first_pos} + tokens.size(),
                                                      options_.n_ctx));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token %d at index %d is outside [0, %d)", tokens[i], i, n_vocab_));
    }
  }
  logits_valid_ = false;
  const uint32_t n_batch = options_.n_batch;
  llama_batch batch = llama_batch_init(static_cast<int32_t>(n_batch), 0, 1);
  absl::Status status;
  for (size_t start = 0, n = 0; start < tokens.size(); start += n) {
    n = std::min<size_t>(n_batch, tokens.size() - start);
    if (stop_every > 0) n = std::min<size_t>(n, stop_every - (first_pos + start) % stop_every);
    batch.n_tokens = static_cast<int32_t>(n);
    for (size_t i = 0; i < n; ++i) {
      batch.token[i] = tokens[start + i];
      batch.pos[i] = static_cast<llama_pos>(first_pos + start + i);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = 0;
    }
    const bool last = start + n == tokens.size();
    if (last && want_logits) batch.logits[n - 1] = 1;
    const int32_t rc = llama_decode(ctx_, batch);
    if (rc != 0) {
      status = absl::InternalError(absl::StrFormat("llama_decode returned %d for tokens [%d, %d)",
                                                   rc, first_pos + start, first_pos + start + n));
      break;
    }
    if (progress) progress(start + n, tokens.size());
  }
  llama_batch_free(batch);
  if (status.ok() && want_logits && !tokens.empty()) logits_valid_ = true;
  return status;
}

absl::StatusOr<std::vector<float>> LlamaEngine::Logits() const {
  if (!logits_valid_)
    return absl::FailedPreconditionError("no logits: the last Prefill did not request them");
  const float* l = llama_get_logits_ith(ctx_, -1);
  if (l == nullptr) return absl::InternalError("llama_get_logits_ith returned null");
  return std::vector<float>(l, l + n_vocab_);
}

absl::Status LlamaEngine::ProbeSnapshot(std::span<const std::byte> full) {
  // Seq 0 holds one token. Its partial state must be the full state's end (the recurrent
  // part written after the attention KV) and keep its size at the next token.
  absl::StatusOr<std::vector<std::byte>> part1 = GetPartialOfSeq0();
  const TokenId next[1] = {0};
  absl::Status s = part1.ok() ? Prefill(next, 1, /*want_logits=*/false) : part1.status();
  absl::StatusOr<std::vector<std::byte>> part2 = s.ok() ? GetPartialOfSeq0() : s;
  Clear();
  if (!part2.ok()) return part2.status();
  const std::string what =
      absl::StrCat("kvtier cannot take boundary snapshots of '", ModelArchitecture(model_), "': ");
  if (part1->size() <= 8 || part1->size() != part2->size()) {
    return absl::UnimplementedError(absl::StrFormat(
        "%sits partial state is %d bytes after 1 token and %d after 2 (kvtier needs a "
        "fixed-size one)",
        what, part1->size(), part2->size()));
  }
  snapshot_bytes_ = part1->size() - 8;  // without magic and seq_id
  if (full.size() < part1->size() || std::memcmp(full.data(), part1->data(), 8) != 0 ||
      std::memcmp(full.data() + full.size() - snapshot_bytes_, part1->data() + 8,
                  snapshot_bytes_) != 0) {
    return absl::UnimplementedError(
        absl::StrCat(what, "its partial state is not the end of its whole state"));
  }
  const bool rows = full.size() > part1->size();
  if (rows != (memory_kind_ == MemoryKind::kHybrid)) {
    return absl::UnimplementedError(
        absl::StrFormat("%sits whole state has %d bytes besides the partial state", what,
                        full.size() - part1->size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::byte>> LlamaEngine::GetPartialOfSeq0() const {
  const size_t size = llama_state_seq_get_size_ext(ctx_, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
  std::vector<std::byte> blob(size);
  const size_t got = llama_state_seq_get_data_ext(ctx_, reinterpret_cast<uint8_t*>(blob.data()),
                                                  size, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
  if (size == 0 || got != size) {
    return absl::InternalError(
        absl::StrFormat("llama_state_seq_get_data_ext (partial) wrote %d of %d bytes", got, size));
  }
  return blob;
}

absl::StatusOr<std::vector<std::byte>> LlamaEngine::GetSnapshot() const {
  if (!has_snapshots()) return absl::FailedPreconditionError("this model has no boundary snapshot");
  absl::StatusOr<std::vector<std::byte>> part = GetPartialOfSeq0();
  if (!part.ok()) return part.status();
  if (part->size() != snapshot_bytes_ + 8) {
    return absl::InternalError(
        absl::StrFormat("partial state is %d bytes, probed %d", part->size(), snapshot_bytes_ + 8));
  }
  part->erase(part->begin(), part->begin() + 8);
  return part;
}

absl::Status LlamaEngine::SetSeqStateWithSnapshot(std::span<const std::byte> rows,
                                                  std::span<const std::byte> snapshot) {
  Clear();
  if (!has_snapshots() || snapshot.size() != snapshot_bytes_ ||
      rows.empty() != (memory_kind_ == MemoryKind::kRecurrent)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SetSeqStateWithSnapshot: %d row bytes and a %d-byte snapshot for a model whose "
        "snapshot is %d bytes",
        rows.size(), snapshot.size(), snapshot_bytes_));
  }
  std::vector<std::byte> full;
  if (rows.empty()) {
    full.resize(8);
    std::memcpy(full.data(), &kSeqStateMagic, 4);  // seq_id 0
  } else {
    if (absl::StatusOr<SeqStateView> v = ParseSeqState(rows, spec_); !v.ok()) return v.status();
    full.assign(rows.begin(), rows.end());
  }
  full.insert(full.end(), snapshot.begin(), snapshot.end());
  const size_t read =
      llama_state_seq_set_data(ctx_, reinterpret_cast<const uint8_t*>(full.data()), full.size(), 0);
  if (read != full.size()) {
    Clear();
    return absl::InternalError(absl::StrFormat(
        "llama_state_seq_set_data read %d of %d bytes (rows and snapshot)", read, full.size()));
  }
  return absl::OkStatus();
}

KvLayout LlamaEngine::ChunkLayout(uint32_t chunk_tokens) const {
  if (!has_snapshots() || chunk_tokens == 0) return layout_;
  // [rows of the chunk's tokens][snapshot][zero padding]: opaque bytes, an even number
  // per token (kBytes, one "layer" of K|V halves).
  const uint64_t rows = memory_kind_ == MemoryKind::kHybrid ? spec_.payload_bytes_per_token() : 0;
  uint64_t per_token = rows + (snapshot_bytes_ + chunk_tokens - 1) / chunk_tokens;
  per_token += per_token % 2;
  KvLayout l;
  l.kind = LayoutKind::kLlamaCppRows;
  l.dtype = DType::kBytes;
  l.num_layers = 1;
  l.num_kv_heads = 1;
  l.head_dim = static_cast<uint32_t>(per_token / 2);
  return l;
}

absl::StatusOr<std::vector<std::byte>> LlamaEngine::GetSeqState() const {
  if (memory_kind_ == MemoryKind::kRecurrent) {
    return absl::FailedPreconditionError("a recurrent model's state has no per-token rows");
  }
  if (memory_kind_ == MemoryKind::kHybrid) {  // the attention rows, without the snapshot
    absl::StatusOr<std::vector<std::byte>> full = GetSeqDataOfSeq0();
    if (!full.ok()) return full.status();
    if (full->size() <= snapshot_bytes_ + 8) {
      return absl::InternalError("the hybrid state holds no attention rows");
    }
    full->resize(full->size() - snapshot_bytes_);
    return full;
  }
  if (n_swa_ == 0) return GetSeqDataOfSeq0();
  // iSWA: llama_state_seq_get_data writes only the window of the sliding-window layers;
  // the whole-context state (no SWA masking) has every token's rows in a full-size cache.
  const size_t size = llama_state_get_size(ctx_);
  if (size == 0) return absl::InternalError("llama_state_get_size returned 0");
  std::vector<std::byte> state(size);
  const size_t got = llama_state_get_data(ctx_, reinterpret_cast<uint8_t*>(state.data()), size);
  if (got != size) {
    return absl::InternalError(
        absl::StrFormat("llama_state_get_data wrote %d of %d bytes", got, size));
  }
  absl::StatusOr<std::vector<std::byte>> blob = SeqStateFromContextState(state, 0, spec_);
  if (!blob.ok()) return blob.status();
  if (const uint32_t n = seq_tokens(); SeqStateBytes(spec_, n) != blob->size()) {
    return absl::InternalError(absl::StrFormat(
        "the context state holds fewer than seq 0's %d tokens in every section (%d bytes, %d "
        "expected; a sliding-window cache that is not full-size?)",
        n, blob->size(), SeqStateBytes(spec_, n)));
  }
  return blob;
}

absl::StatusOr<std::vector<std::byte>> LlamaEngine::GetSeqDataOfSeq0() const {
  const size_t size = llama_state_seq_get_size(ctx_, 0);
  if (size == 0) return absl::InternalError("llama_state_seq_get_size returned 0");
  std::vector<std::byte> blob(size);
  const size_t got =
      llama_state_seq_get_data(ctx_, reinterpret_cast<uint8_t*>(blob.data()), size, 0);
  if (got != size) {
    return absl::InternalError(
        absl::StrFormat("llama_state_seq_get_data wrote %d of %d bytes", got, size));
  }
  return blob;
}

absl::Status LlamaEngine::SetSeqState(std::span<const std::byte> blob) {
  Clear();
  if (has_snapshots()) {
    return absl::FailedPreconditionError(
        "a recurrent or hybrid state is restored with its snapshot (SetSeqStateWithSnapshot)");
  }
  if (absl::StatusOr<SeqStateView> v = ParseSeqState(blob, spec_); !v.ok()) return v.status();
  const size_t read =
      llama_state_seq_set_data(ctx_, reinterpret_cast<const uint8_t*>(blob.data()), blob.size(), 0);
  if (read != blob.size()) {
    Clear();
    return absl::InternalError(
        absl::StrFormat("llama_state_seq_set_data read %d of %d bytes", read, blob.size()));
  }
  return absl::OkStatus();
}

std::string LlamaEngine::engine_extra() const {
  std::string extra = absl::StrFormat(
      "llama.cpp=%s;llama-cpp-python=%s;type_k=%s;type_v=%s;flash_attn=%s;v_trans=%d",
      LlamaCppCommit(), LlamaCppPackageVersion(),
      ggml_type_name(static_cast<ggml_type>(spec_.type_k)),
      spec_.has_v ? ggml_type_name(static_cast<ggml_type>(spec_.type_v)) : "none (MLA)",
      options_.flash_attn ? "on" : "off", spec_.v_trans ? 1 : 0);
  // Cells with M-RoPE records (restored as text cells): never mixed with other records.
  if (spec_.cell_ext) {
    absl::StrAppend(&extra, ";rope=",
                    llama_model_rope_type(model_) == LLAMA_ROPE_TYPE_IMROPE ? "imrope" : "mrope");
  }
  // A plain cache keeps the string it always had (its records stay valid).
  if (has_snapshots()) {
    absl::StrAppendFormat(&extra, ";memory=%s;snapshot_bytes=%d",
                          memory_kind_ == MemoryKind::kHybrid ? "hybrid" : "recurrent",
                          snapshot_bytes_);
  } else if (n_swa_ > 0) {
    absl::StrAppendFormat(&extra, ";memory=iswa;n_swa=%d;swa_layers=%d;swa_full=%d", n_swa_,
                          spec_.n_layer_swa, options_.swa_full ? 1 : 0);
  }
  return extra;
}

NamespaceParams LlamaEngine::MakeNamespaceParams(uint32_t chunk_tokens) const {
  NamespaceParams p;
  p.model_id = "gguf-xxh3:" + model_fingerprint();
  p.layout = ChunkLayout(chunk_tokens);
  p.chunk_tokens = chunk_tokens;
  p.engine_extra = engine_extra();
  return p;
}

}  // namespace kvt::llamacpp

// LlamaEngine: one llama.cpp model + context running a single sequence (seq 0) on the
// CPU, with exactly the calls kvtier's llama.cpp adapter needs: tokenize, clear,
// prefill in fixed batches, read the next-token logits, get/set the sequence state.
//
// Pinned engine: llama.cpp commit 0c1e57098 as carried by llama-cpp-python 0.3.36
// (cmake/LlamaCpp.cmake). Supported models: decoder-only models whose memory is a plain
// (non-recurrent) KV cache with one K and one V row per layer and token (K and V may have
// different types, e.g. q8_0 / f16), or one K-only latent row (MLA, deepseek2), or an
// iSWA cache (gemma3, gpt-oss) with a full-size sliding-window cache (swa_full: every
// token's rows are kept, read from the whole-context state) — e.g. the Llama family;
// recurrent and hybrid models with boundary snapshots (mamba2, granitehybrid, lfm2,
// qwen35); M-RoPE models' cells (2D position and token id per cell, SeqStateSpec::
// cell_ext) for text prompts, written back as a text token's. Others fail
// Create with Unimplemented: CheckMemorySupported names the architecture and what kvtier
// lacks for it (docs/models.md), or the state probe cannot be parsed.
#ifndef LLAMACPP_LLAMA_ENGINE_H_
#define LLAMACPP_LLAMA_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/chunk_key.h"
#include "kvstore/types.h"
#include "llamacpp/model_file_watch.h"
#include "llamacpp/seq_state.h"

struct llama_model;
struct llama_context;

namespace kvt::llamacpp {

// The llama-cpp-python package version and the llama.cpp commit it carries.
std::string_view LlamaCppPackageVersion();
std::string_view LlamaCppCommit();

struct EngineOptions {
  std::string model_path;
  // Context size in tokens (the longest prompt + 1). REQUIRES: >= 16.
  uint32_t n_ctx = 8192;
  // Tokens per llama_decode call during prefill (also n_ubatch). REQUIRES: 1..n_ctx.
  uint32_t n_batch = 512;
  // Threads for decode and batch processing. Keep it fixed when comparing logits: with
  // flash attention a one-token decode depends on the thread count. REQUIRES: >= 1.
  int32_t n_threads = 2;
  bool flash_attn = false;
  // KV cache element types by ggml name ("f16", "f32", "bf16", "q8_0", ...).
  std::string type_k = "f16";
  std::string type_v = "f16";
  // Forward llama.cpp's log output to stderr (otherwise only errors are shown).
  bool verbose_llama_log = false;
  // A full-size sliding-window cache (llama_context_params.swa_full, llama.cpp's default
  // for a context; llama-server's --swa-full). Without it an iSWA model (gemma3, gpt-oss)
  // is refused: llama.cpp then keeps only the window.
  bool swa_full = true;

  absl::Status Validate() const;
};

// Called during prefill with (tokens done, tokens total) after each batch.
using PrefillProgress = std::function<void(uint64_t done, uint64_t total)>;

// How kvtier restores the model's memory (docs/models.md).
enum class MemoryKind : uint8_t {
  kKv,         // one KV cache (also MLA, K and V of different types): rows per token
  kIswa,       // full-attention + full-size sliding-window caches: rows per token
  kHybrid,     // attention rows per token + a recurrent state: rows + boundary snapshot
  kRecurrent,  // a recurrent state only: a boundary snapshot per chunk, no rows
};

// Not thread-safe: one caller at a time (a llama_context is single-threaded API-wise).
class LlamaEngine {
 public:
  // Loads the model (mmap), creates the context and probes the sequence-state format
  // with a one-token decode. NotFound for a missing model file; InvalidArgument for bad
  // options or a file llama.cpp cannot load; Unimplemented for a model or cache type
  // whose state kvtier cannot slice (see the file comment).
  static absl::StatusOr<std::unique_ptr<LlamaEngine>> Create(const EngineOptions& options);
  ~LlamaEngine();

  const EngineOptions& options() const { return options_; }
  llama_context* context() { return ctx_; }
  const llama_model* model() const { return model_; }

  // True when the model carries a tokenizer (tokenizer.ggml.model != "none").
  bool has_vocab() const;
  int32_t n_vocab() const { return n_vocab_; }
  // Text -> token ids with the model's tokenizer; `add_bos` prepends BOS when the vocab
  // uses one. FailedPrecondition when the model has no tokenizer.
  absl::StatusOr<std::vector<TokenId>> Tokenize(std::string_view text, bool add_bos) const;

  // Removes every cell of seq 0.
  void Clear();
  // Number of tokens seq 0 holds (positions 0..n-1).
  uint32_t seq_tokens() const;

  // Decodes `tokens` at positions first_pos, first_pos+1, ... in batches of n_batch
  // tokens (the first batch starts at first_pos), requesting logits only for the last
  // token when `want_logits`. REQUIRES: first_pos == seq_tokens(). InvalidArgument for
  // ids outside [0, n_vocab) or a prompt past n_ctx; Internal when llama_decode fails.
  // `stop_every` > 0: no batch crosses a multiple of it (positions), so progress is
  // called at every such boundary (boundary snapshots of recurrent/hybrid models).
  absl::Status Prefill(std::span<const TokenId> tokens, uint32_t first_pos, bool want_logits,
                       const PrefillProgress& progress = nullptr, uint32_t stop_every = 0);
  // Next-token logits of the last decoded token (n_vocab floats). FailedPrecondition if
  // the last Prefill did not request logits.
  absl::StatusOr<std::vector<float>> Logits() const;

  // The state of seq 0 in the format of seq_state.h: llama_state_seq_get_data for a plain
  // cache; for an iSWA cache, cut from the whole-context state (llama_state_get_data,
  // SeqStateFromContextState) with every token's sliding-window rows. Internal when the
  // cache no longer holds one of seq 0's tokens in every section.
  absl::StatusOr<std::vector<std::byte>> GetSeqState() const;
  // llama_state_seq_set_data into seq 0 after validating `blob` with ParseSeqState.
  // On error seq 0 is empty. DataLoss/FailedPrecondition from the parser; Internal when
  // llama.cpp rejects it. FailedPrecondition for a recurrent/hybrid model (see
  // SetSeqStateWithSnapshot).
  absl::Status SetSeqState(std::span<const std::byte> blob);

  // Recurrent and hybrid models (has_snapshots()): the memory that cannot be cut per
  // token (the recurrent state: llama_state_seq_get_data_ext with
  // LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY, without its 8-byte header), snapshot_bytes()
  // long, the same size at every length (probed at Create). GetSeqState() of a hybrid
  // model is its attention rows only (the whole state without the snapshot at its end);
  // a recurrent model has none (FailedPrecondition).
  MemoryKind memory_kind() const { return memory_kind_; }
  bool has_snapshots() const {
    return memory_kind_ == MemoryKind::kHybrid || memory_kind_ == MemoryKind::kRecurrent;
  }
  uint64_t snapshot_bytes() const { return snapshot_bytes_; }
  absl::StatusOr<std::vector<std::byte>> GetSnapshot() const;
  // Restores seq 0 from attention rows (a GetSeqState-format blob of tokens [0, n);
  // empty for a recurrent model) and the snapshot taken after token n - 1. On error
  // seq 0 is empty: InvalidArgument for sizes that do not fit the model, the parser's
  // errors for the rows, Internal when llama.cpp rejects the state.
  absl::Status SetSeqStateWithSnapshot(std::span<const std::byte> rows,
                                       std::span<const std::byte> snapshot);
  // The layout of a chunk payload of `chunk_tokens` tokens: layout() for models restored
  // from rows alone; for recurrent/hybrid models opaque bytes (kBytes, one layer) holding
  // [the chunk's attention rows, codec order][its last token's snapshot][zero padding].
  KvLayout ChunkLayout(uint32_t chunk_tokens) const;

  // The state format facts probed at Create.
  const SeqStateSpec& state_spec() const { return spec_; }
  // kvtier layout of one chunk payload: kLlamaCppRows, n_layer layers, dtype from
  // type_k (F16 -> kF16, F32 -> kF32, BF16 -> kBF16, num_kv_heads x head_dim); any other
  // type -> kBytes with num_kv_heads = 1 and head_dim = the row's byte size.
  const KvLayout& layout() const { return layout_; }
  // XXH3-128 of the model file (whole file up to 4 GiB; above that, the GGUF metadata
  // plus 1 MiB samples at 256 evenly spaced offsets), as 32 hex digits. Computed at
  // Create and again by CheckModelFile when the file's stamp moves.
  const std::string& model_fingerprint() const { return watch_->fingerprint(); }
  // Whether the model file now holds other bytes than when the engine was created
  // (ModelFileWatch::Changed, logged once). The engine keeps the file open, so this
  // follows the inode llama.cpp mapped: an
  // in-place overwrite (same path, even same size: llama.cpp's shared mapping then
  // sees the new weights) is a change; a replace-by-rename of the path is not (the
  // engine still runs the old inode's weights). Cheap when nothing moved (one fstat);
  // when size, mtime or ctime moved, re-fingerprints the file (reads it) and, if the
  // fingerprint differs, updates model_fingerprint() and stays true from then on
  // (recreate the engine to serve the new model). Internal/NotFound on I/O errors.
  absl::StatusOr<bool> CheckModelFile();
  // "llama.cpp=<commit>;llama-cpp-python=<ver>;type_k=..;type_v=..;flash_attn=on|off;v_trans=0|1",
  // and for an iSWA cache ";memory=iswa;n_swa=<window>;swa_layers=<n>;swa_full=1", for a
  // recurrent/hybrid one ";memory=recurrent|hybrid;snapshot_bytes=<n>".
  std::string engine_extra() const;
  // The model's sliding window (llama_model_n_swa), 0 for none.
  int32_t n_swa() const { return n_swa_; }
  // NamespaceParams for this engine: model_id "gguf-xxh3:<model_fingerprint()>",
  // ChunkLayout(chunk_tokens), chunk_tokens, engine_extra().
  NamespaceParams MakeNamespaceParams(uint32_t chunk_tokens) const;

  // Wall time of one llama_decode of a single token measured at Create (seconds).
  double probe_decode_s() const { return probe_decode_s_; }

 private:
  LlamaEngine() = default;
  absl::Status Probe();
  // llama_state_seq_get_data of seq 0 as llama.cpp writes it; its partial part.
  absl::StatusOr<std::vector<std::byte>> GetSeqDataOfSeq0() const;
  absl::StatusOr<std::vector<std::byte>> GetPartialOfSeq0() const;
  // Seq 0 holds one token whose whole state is `full`: sets snapshot_bytes_, checks the
  // partial state is its end and keeps its size; clears seq 0.
  absl::Status ProbeSnapshot(std::span<const std::byte> full);

  EngineOptions options_;
  llama_model* model_ = nullptr;
  llama_context* ctx_ = nullptr;
  int32_t n_vocab_ = 0;
  int32_t n_swa_ = 0;  // > 0: an iSWA cache (accepted only with options_.swa_full)
  MemoryKind memory_kind_ = MemoryKind::kKv;
  uint64_t snapshot_bytes_ = 0;  // recurrent/hybrid
  bool logits_valid_ = false;
  SeqStateSpec spec_;
  KvLayout layout_;
  double probe_decode_s_ = 0;
  std::unique_ptr<ModelFileWatch> watch_;  // set by Create, never null after it
  bool change_logged_ = false;
};

// The llama.cpp architecture name of `model` (general.architecture), "?" if absent.
std::string ModelArchitecture(const llama_model* model);

// OK when kvtier restores `model`'s memory exactly: one plain KV cache (every layer full
// attention) with K and V rows per token, K-only latent rows (MLA), or an iSWA cache when
// `swa_full` (the context's sliding-window cache is full-size). Otherwise Unimplemented
// with a message that names the architecture, its memory kind and the piece kvtier lacks
// for it, e.g. "kvtier cannot restore 'gemma3' models exactly: their memory is iSWA/SWA (a
// sliding window of 48 tokens on some or all layers) and without a full-size SWA cache
// llama.cpp keeps only the window, while kvtier's llama.cpp records hold only per-token KV
// rows (missing: every token's sliding-window rows: run with --swa-full, or a snapshot of
// the sliding-window cache at each chunk boundary)". Checked from the model's
// hyperparameters (llama_model_is_recurrent / _is_hybrid / _n_swa) before any state is
// read. docs/models.md lists every family.
// `boundary_snapshots`: recurrent and hybrid models are OK too (the caller restores them
// from boundary snapshots, as LlamaEngine and kvtier-llama-server do). M-RoPE passes
// here; cells whose extension record is not M-RoPE's (PLE) are refused by Create's probe.
absl::Status CheckMemorySupported(const llama_model* model, bool swa_full,
                                  bool boundary_snapshots = false);

// XXH3-128 fingerprint of a GGUF file as described at model_fingerprint().
// NotFound / Internal on I/O errors.
absl::StatusOr<std::string> FingerprintModelFile(const std::string& path);

}  // namespace kvt::llamacpp

#endif  // LLAMACPP_LLAMA_ENGINE_H_

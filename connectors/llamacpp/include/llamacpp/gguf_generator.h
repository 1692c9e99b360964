// Synthetic Llama-architecture GGUF models with seeded random weights.
//
// The hub cannot be reached from kvtier's build machines, so tests and the demo run
// on models generated here. A model is a plain GGUF v3 file that llama.cpp loads like
// any other: architecture "llama", RMSNorm weights 1.0, every other weight drawn from
// N(0, init_std) (xoshiro256** + Box-Muller, so the file is byte-identical for a given
// spec on every machine), output head tied to token_embd (no output.weight).
//
// Tokenizer: when `vocab_gguf` names a vocab-only GGUF (llama.cpp ships several in
// models/ggml-vocab-*.gguf; kvtier uses ggml-vocab-llama-spm.gguf, the 32,000-token
// Llama/SentencePiece vocabulary), every `tokenizer.*` key of it is copied into the
// model, so llama_tokenize works on real text. Without one the model gets
// tokenizer.ggml.model = "none" and must be driven by token ids (vocab_size ids).
//
// Keys written (source: llama.cpp src/llama-arch.cpp LLM_KV names, src/llama-model.cpp
// LLM_ARCH_LLAMA hparams and tensors):
//   general.architecture="llama", general.name, general.file_type,
//   llama.{context_length, embedding_length, block_count, feed_forward_length,
//          attention.head_count, attention.head_count_kv, attention.layer_norm_rms_epsilon,
//          rope.dimension_count, rope.freq_base, vocab_size}
// Tensors (ggml ne order, i.e. [columns, rows]):
//   token_embd.weight [n_embd, n_vocab], output_norm.weight [n_embd] (F32),
//   blk.N.attn_norm.weight / ffn_norm.weight [n_embd] (F32),
//   blk.N.attn_q [n_embd, n_embd], attn_k / attn_v [n_embd, head_dim*n_head_kv],
//   attn_output [n_embd, n_embd], ffn_gate / ffn_up [n_embd, n_ff], ffn_down [n_ff, n_embd].
#ifndef LLAMACPP_GGUF_GENERATOR_H_
#define LLAMACPP_GGUF_GENERATOR_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvt::llamacpp {

// Thread-compatible value type.
struct SyntheticModelSpec {
  std::string name = "kvtier-tiny";
  uint32_t n_layer = 4;
  uint32_t n_embd = 256;
  uint32_t n_ff = 768;
  uint32_t n_head = 4;
  uint32_t n_head_kv = 2;
  uint32_t n_ctx_train = 8192;
  // Used only when vocab_gguf is empty (tokenizer "none").
  uint32_t vocab_size = 32000;
  // Weight matrices as F16 (true) or F32 (false). Norm weights are always F32.
  bool f16 = true;
  uint64_t seed = 42;
  // Standard deviation of the random weights: small enough that activations stay
  // finite through every layer (0.02 as in GPT-2/Llama initialisation).
  float init_std = 0.02f;
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  // Path of a vocab-only GGUF whose tokenizer.* keys are copied ("" = no tokenizer).
  std::string vocab_gguf;

  // InvalidArgument naming the field: zero sizes, n_embd % n_head != 0,
  // n_head % n_head_kv != 0, odd head_dim, init_std <= 0.
  absl::Status Validate() const;
  uint32_t head_dim() const { return n_head == 0 ? 0 : n_embd / n_head; }
};

// Named sizes:
//   "tiny": 4 layers, embd 256, FFN 768, 4 heads / 2 KV heads (head_dim 64), F16 —
//           ~10 M parameters with the 32k vocab; prefill ~10k tokens/s on 2 cores; for tests.
//   "demo": 16 layers, embd 1024, FFN 4096, 16 heads / 4 KV heads (head_dim 64), F16 —
//           ~275 M parameters with the 32k vocab (~550 MB file); KV 16 KiB per token (F16).
// InvalidArgument for any other name. `vocab_gguf` is copied into the spec.
absl::StatusOr<SyntheticModelSpec> SyntheticModelPreset(std::string_view name,
                                                        std::string vocab_gguf);

// Writes the model to `path` (a temporary file renamed into place, so a reader never
// sees a partial model). InvalidArgument for a bad spec or a vocab GGUF without
// tokenizer.ggml.tokens; NotFound when vocab_gguf does not exist; Internal on I/O errors.
// Memory: one tensor at a time (the largest: n_vocab * n_embd elements).
absl::Status WriteSyntheticModel(const SyntheticModelSpec& spec, const std::string& path);

// Number of parameters the spec produces (including the embedding, tied output head).
uint64_t SyntheticModelParams(const SyntheticModelSpec& spec, uint32_t n_vocab);

// The vocab-only GGUF shipped with the pinned llama.cpp source that kvtier uses by
// default (models/ggml-vocab-llama-spm.gguf), as located at build time; "" if unknown.
std::string DefaultVocabPath();

}  // namespace kvt::llamacpp

#endif  // LLAMACPP_GGUF_GENERATOR_H_

// Synthetic GGUF models with seeded random weights, for the Llama architecture and the
// other model families kvtier is tested on (--arch: docs/models.md).
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

// Architectures WriteSyntheticModel writes (llama.cpp's general.architecture names), with
// the memory kind llama.cpp gives them:
//   llama          plain KV cache (the hand-written writer below)
//   gemma3         iSWA: full-attention layers + sliding-window layers (pattern, n_swa)
//   gpt-oss        iSWA with attention sinks, mixture of experts
//   qwen35         hybrid: gated delta net (recurrent) layers + full attention every 4th
//   granitehybrid  hybrid: Mamba2 layers + attention layers (head_count_kv 0 = Mamba2)
//   mamba2         recurrent only (Mamba2 SSM state per sequence)
//   lfm2           hybrid: short-convolution layers + attention layers
//   deepseek2      MLA: one compressed latent row per token and layer (no separate V)
// Every architecture but llama is written through llama.cpp itself
// (llama_model_init_from_user + llama_model_save_to_file): kvtier writes the
// hyperparameter keys and llama.cpp's own loader decides which tensors, of which shapes,
// the architecture has; every weight is F32, drawn as below (norm weights 1.0, SSM A
// negative), so llama.cpp's loader and kvtier never disagree on a tensor list.
inline constexpr const char* kSyntheticArchs[] = {
    "llama", "gemma3", "gpt-oss", "qwen35", "granitehybrid", "mamba2", "lfm2", "deepseek2"};

// Thread-compatible value type.
struct SyntheticModelSpec {
  std::string arch = "llama";  // one of kSyntheticArchs
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

  // Family parameters (ignored by architectures that have no such part).
  uint32_t n_swa = 0;          // sliding window in tokens (gemma3, gpt-oss)
  uint32_t swa_pattern = 0;    // every swa_pattern-th layer is full attention (gemma3)
  uint32_t attn_interval = 0;  // hybrids: every attn_interval-th layer is attention
  uint32_t n_expert = 0;       // MoE experts per layer (gpt-oss, deepseek2)
  uint32_t n_expert_used = 0;  // experts routed per token
  uint32_t n_ff_exp = 0;       // FFN width of one expert
  uint32_t ssm_d_conv = 4;     // SSM convolution kernel
  uint32_t ssm_d_inner = 0;    // SSM inner size (Mamba2: 2 * n_embd)
  uint32_t ssm_d_state = 0;    // SSM state size per head
  uint32_t ssm_n_head = 0;     // SSM heads (time_step_rank)
  uint32_t ssm_n_group = 1;    // SSM groups
  uint32_t kv_lora_rank = 0;   // MLA latent (deepseek2)
  uint32_t q_lora_rank = 0;    // MLA query compression
  uint32_t mla_rope_dim = 0;   // MLA rotary part of a key head
  uint32_t mla_key_nope = 0;   // MLA non-rotary part of a key head
  uint32_t mla_value_dim = 0;  // MLA value head

  // InvalidArgument naming the field: zero sizes, n_embd % n_head != 0,
  // n_head % n_head_kv != 0, odd head_dim, init_std <= 0.
  absl::Status Validate() const;
  uint32_t head_dim() const { return n_head == 0 ? 0 : n_embd / n_head; }
};

// Named sizes of the llama architecture:
//   "tiny": 4 layers, embd 256, FFN 768, 4 heads / 2 KV heads (head_dim 64), F16 —
//           ~10 M parameters with the 32k vocab; prefill ~10k tokens/s on 2 cores; for tests.
//   "demo": 16 layers, embd 1024, FFN 4096, 16 heads / 4 KV heads (head_dim 64), F16 —
//           ~275 M parameters with the 32k vocab (~550 MB file); KV 16 KiB per token (F16).
// InvalidArgument for any other name. `vocab_gguf` is copied into the spec.
absl::StatusOr<SyntheticModelSpec> SyntheticModelPreset(std::string_view name,
                                                        std::string vocab_gguf);

// The same sizes for any architecture of kSyntheticArchs ("llama" gives the presets above
// unchanged). tiny: 4 layers (gemma3: n_swa 48, every 2nd layer full; hybrids: attention
// every 2nd layer; gpt-oss: 4 experts, 2 used, n_swa 48; deepseek2: latent 64 + 32 rotary,
// 4 experts); demo: 8 layers, embd 1024. InvalidArgument naming an unknown size or
// architecture.
absl::StatusOr<SyntheticModelSpec> SyntheticArchPreset(std::string_view arch, std::string_view size,
                                                       std::string vocab_gguf);

// Writes the model to `path` (a temporary file renamed into place, so a reader never
// sees a partial model). InvalidArgument for a bad spec or a vocab GGUF without
// tokenizer.ggml.tokens; NotFound when vocab_gguf does not exist; Internal on I/O errors.
// Memory: one tensor at a time (the largest: n_vocab * n_embd elements).
absl::Status WriteSyntheticModel(const SyntheticModelSpec& spec, const std::string& path);

// Number of parameters the spec produces (including the embedding, tied output head).
// Counted for arch "llama" only (0 for the others: llama.cpp decides their tensors).
uint64_t SyntheticModelParams(const SyntheticModelSpec& spec, uint32_t n_vocab);

// The vocab-only GGUF shipped with the pinned llama.cpp source that kvtier uses by
// default (models/ggml-vocab-llama-spm.gguf), as located at build time; "" if unknown.
std::string DefaultVocabPath();

}  // namespace kvt::llamacpp

#endif  // LLAMACPP_GGUF_GENERATOR_H_

// Minimal GGUF metadata reader for `kvtier plan --gguf FILE` and `--tokenizer FILE`: reads
// only the header and the key/value metadata (never tensor data) and extracts the
// KV-cache shape, or checks that the file has a tokenizer before llama.cpp is handed it.
//
// Format source: ggml's docs/gguf.md (GGUF v2/v3): "GGUF" magic, u32 version,
// u64 tensor_count, u64 metadata_kv_count, then per pair: gguf string key (u64 length +
// bytes), u32 value type, value. Types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32,
// 7 bool, 8 string, 9 array (u32 element type, u64 count, elements), 10 u64, 11 i64,
// 12 f64. All little-endian.
//
// Keys used (llama.cpp's llama-arch.cpp names): general.architecture, general.name,
// <arch>.block_count, <arch>.attention.head_count, <arch>.attention.head_count_kv
// (scalar or per-layer array), <arch>.embedding_length, <arch>.attention.key_length,
// <arch>.attention.value_length, and for MLA models <arch>.attention.kv_lora_rank +
// <arch>.rope.dimension_count (latent = kv_lora_rank + rope dims, e.g. 512 + 64 = 576).
#ifndef KVTIER_CLI_GGUF_SHAPE_H_
#define KVTIER_CLI_GGUF_SHAPE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvt::cli {

struct GgufModelShape {
  std::string architecture;
  std::string name;  // general.name, "" when absent
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;  // max over layers when per-layer
  uint32_t head_dim = 0;      // key_length, or embedding_length / head_count; MLA: latent
  bool mla = false;
  // Human-readable caveats (per-layer KV heads that vary, K/V head dims that differ).
  std::vector<std::string> notes;
};

// InvalidArgument naming the file and what is wrong (not GGUF, unsupported version,
// truncated, missing key) — never reads past a declared length.
absl::StatusOr<GgufModelShape> ReadGgufShape(const std::string& path);

struct GgufTokenizer {
  std::string model;        // tokenizer.ggml.model: "llama", "gpt2", ...
  uint64_t vocab_size = 0;  // elements of tokenizer.ggml.tokens
};

// The tokenizer `path` declares. InvalidArgument naming the file when it is not a GGUF
// file (as ReadGgufShape), or has no usable tokenizer: tokenizer.ggml.model missing or
// "none"/"no_vocab" (llama.cpp aborts when asked to tokenize with it), or no
// tokenizer.ggml.tokens.
absl::StatusOr<GgufTokenizer> ReadGgufTokenizer(const std::string& path);

// Both readers over GGUF bytes in memory (the fuzz target): the first error of the shape,
// then of the tokenizer. `name` names the bytes in messages.
absl::Status CheckGgufBytes(std::string_view bytes, const std::string& name);

}  // namespace kvt::cli

#endif  // KVTIER_CLI_GGUF_SHAPE_H_

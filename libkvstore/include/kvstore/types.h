// Core value types shared by every part of kvtier: 128-bit chunk keys and
// namespaces, element types, engine KV layout kinds and the KV layout
// descriptor carried in every chunk record.
#ifndef KVSTORE_TYPES_H_
#define KVSTORE_TYPES_H_

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvt {

// A 128-bit hash value. Distinct ids get distinct types (ChunkKey, NamespaceId)
// so a namespace can never be passed where a key is expected.
template <typename Tag>
struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;

  friend constexpr bool operator==(const Hash128&, const Hash128&) = default;
  // Ordered as the 128-bit value `hi:lo` (hi first), the order of ToHex() strings and of
  // the disk index's big-endian keys: every listing and page token uses this one order.
  friend constexpr std::strong_ordering operator<=>(const Hash128& a, const Hash128& b) {
    if (auto c = a.hi <=> b.hi; c != 0) return c;
    return a.lo <=> b.lo;
  }
  bool is_zero() const { return lo == 0 && hi == 0; }

  // 32 lowercase hex digits, `hi` first (big-endian reading of the 128-bit value).
  std::string ToHex() const;
  // Parses the output of ToHex(). InvalidArgument unless exactly 32 hex digits.
  static absl::StatusOr<Hash128> FromHex(std::string_view hex);
};

struct ChunkKeyTag {};
struct NamespaceTag {};
// Identity of one chunk: a chained prefix hash (see chunk_key.h).
using ChunkKey = Hash128<ChunkKeyTag>;
// Identity of everything that makes KV bytes incompatible (see namespace.h).
using NamespaceId = Hash128<NamespaceTag>;

// Element type of K/V. Values are part of the on-disk chunk format: never renumber.
enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kFP8E4M3 = 3,
  kFP8E5M2 = 4,
  kI8 = 5,
  // Opaque per-row bytes (e.g. a llama.cpp quantized cache type): element size 1,
  // the row is copied as bytes and never interpreted.
  kBytes = 6,
};
// Bytes per element: 4, 2, 2, 1, 1, 1, 1. 0 for an unknown value.
size_t DTypeSize(DType dtype);
std::string_view DTypeName(DType dtype);

// How an engine lays out its paged KV cache. Values are part of the on-disk chunk
// format: never renumber. Shapes are per layer unless said; source: vLLM's attention
// backends' get_kv_cache_shape and llama.cpp's llama-kv-cache.cpp.
enum class LayoutKind : uint8_t {
  // vLLM FlashAttention NHD: [2, num_blocks, block_size, num_kv_heads, head_dim].
  kFlashAttnNHD = 0,
  // vLLM FlashAttention HND stride order: [2, num_blocks, num_kv_heads, block_size, head_dim].
  kFlashAttnHND = 1,
  // vLLM FlashInfer: [num_blocks, 2, block_size, num_kv_heads, head_dim].
  kFlashInfer = 2,
  // MLA: [num_blocks, block_size, latent_dim] (one latent vector per token, no K/V split;
  // num_kv_heads == 1, head_dim == latent_dim, e.g. 576 for DeepSeek-V2/V3).
  kMLA = 3,
  // Cross-layer: one tensor [num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim].
  kCrossLayer = 4,
  // llama.cpp per-layer K/V rows: K [num_cells, num_kv_heads*head_dim] and
  // V [num_cells, num_kv_heads*head_dim] per layer (a cell = a token slot).
  kLlamaCppRows = 5,
};
std::string_view LayoutKindName(LayoutKind kind);

// Shape of the KV of one token position across the model. Thread-compatible value type.
struct KvLayout {
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;  // for kMLA: the latent dimension (576 for DeepSeek)
  DType dtype = DType::kF16;
  LayoutKind kind = LayoutKind::kFlashAttnNHD;

  friend bool operator==(const KvLayout&, const KvLayout&) = default;

  // 1 for kMLA (one latent vector, no K/V split), else 2.
  uint32_t kv_planes() const { return kind == LayoutKind::kMLA ? 1 : 2; }
  // Bytes of K and V for one token in one layer:
  // kv_planes * num_kv_heads * head_dim * DTypeSize(dtype).
  uint64_t bytes_per_token_per_layer() const;
  // Bytes of KV per token across all layers. Llama-3-8B bf16 (32, 8, 128) = 131,072.
  uint64_t bytes_per_token() const;
  // Payload bytes of a chunk of `tokens` tokens in codec order
  // [layer][k|v][token][kv_head][head_dim].
  uint64_t payload_bytes(uint32_t tokens) const { return bytes_per_token() * tokens; }
  // OK, or InvalidArgument naming the bad field (zero sizes, unknown dtype/kind,
  // kMLA with num_kv_heads != 1).
  absl::Status Validate() const;
  std::string DebugString() const;
};

}  // namespace kvt

template <typename Tag>
struct std::hash<kvt::Hash128<Tag>> {
  size_t operator()(const kvt::Hash128<Tag>& h) const noexcept {
    return static_cast<size_t>(h.lo ^ (h.hi * 0x9E3779B97F4A7C15ull));
  }
};

#endif  // KVSTORE_TYPES_H_

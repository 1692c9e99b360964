// Namespaces and chained prefix chunk keys.
//
// A namespace is a 128-bit XXH3 hash of everything that makes KV bytes
// incompatible; chunk i of a token sequence is keyed by
//   key_i = XXH3_128(seed = 0, bytes = "kvtier.chunk.v1" | key_{i-1} | n_i | token ids of chunk i)
// with key_{-1} = the namespace. Every field is fixed-width or length-prefixed and
// little-endian, so keys are the same on every machine, process, build and thread
// count, and no two different inputs hash the same bytes.
#ifndef KVSTORE_CHUNK_KEY_H_
#define KVSTORE_CHUNK_KEY_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kvstore/types.h"

namespace kvt {

// Token id as engines use it (llama.cpp llama_token, vLLM int32 token ids).
using TokenId = int32_t;

// Version of the chunk record format (see docs/chunk-format.md). Part of every namespace.
inline constexpr uint32_t kChunkFormatVersion = 1;
// Default tokens per chunk.
inline constexpr uint32_t kDefaultChunkTokens = 256;

// Everything that makes two engines' KV bytes incompatible. Thread-compatible.
struct NamespaceParams {
  // Model identity: name plus revision or a weights fingerprint.
  std::string model_id;
  KvLayout layout;
  uint32_t tp_rank = 0;
  uint32_t tp_world_size = 1;
  uint32_t chunk_tokens = kDefaultChunkTokens;
  uint32_t format_version = kChunkFormatVersion;
  // Tenant that owns the chunks ("" = the default tenant).
  std::string tenant;
  // Engine-specific facts that also change KV bytes (e.g. llama.cpp version,
  // type_k/type_v, flash attention on/off). Free-form, hashed as given.
  std::string engine_extra;

  // InvalidArgument naming the field: empty model_id, bad layout, tp_rank >= world,
  // chunk_tokens == 0.
  absl::Status Validate() const;
};

// 128-bit hash of all fields of `params` (each length-prefixed or fixed-width).
// Changing any one field changes the result.
NamespaceId ComputeNamespace(const NamespaceParams& params);

// Key of one chunk given the key before it (or the namespace for chunk 0).
ChunkKey ChainChunkKey(const Hash128<ChunkKeyTag>& parent, std::span<const TokenId> tokens);
// The parent "key" of chunk 0: the namespace reinterpreted as a key.
inline ChunkKey RootKey(NamespaceId ns) { return ChunkKey{ns.lo, ns.hi}; }

struct ChunkKeyOptions {
  uint32_t chunk_tokens = kDefaultChunkTokens;
  // When true, a trailing partial chunk also gets a key (its token count is hashed).
  bool include_partial = false;
};

// Keys of the chunks of `tokens`: floor(n / chunk_tokens) keys for full chunks, plus
// one for the trailing partial chunk when `include_partial`. Cost: one XXH3 pass over
// the token bytes (well under 100 us for 100k tokens).
std::vector<ChunkKey> ComputeChunkKeys(NamespaceId ns, std::span<const TokenId> tokens,
                                       const ChunkKeyOptions& options = {});

}  // namespace kvt

#endif  // KVSTORE_CHUNK_KEY_H_

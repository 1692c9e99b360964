// Builds the records of one chain of chunks: every record's parent is the key of the
// record before it, RootKey(ns) for chunk 0 (docs/chunk-format.md). The one place that
// writes "parent key + encode"; the connector, the benches and the tests all use it.
#ifndef KVSTORE_CHUNK_CHAIN_H_
#define KVSTORE_CHUNK_CHAIN_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/types.h"

namespace kvt {

// The header of chunk `index` of the chain whose keys are `keys`: key = keys[index],
// parent = keys[index - 1] (RootKey(ns) for index 0), payload_bytes =
// layout.payload_bytes(token_count); the checksums are left for EncodeChunk.
// REQUIRES: index < keys.size().
ChunkHeader ChainHeader(NamespaceId ns, const KvLayout& layout, std::span<const ChunkKey> keys,
                        size_t index, uint32_t token_count);

// Encodes a chain one record at a time, remembering the parent. Thread-compatible.
class ChunkChainEncoder {
 public:
  // A chain that starts at chunk 0 of `ns` (first parent RootKey(ns)).
  ChunkChainEncoder(NamespaceId ns, const KvLayout& layout);
  // A chain that continues after the chunk whose key is `parent`.
  ChunkChainEncoder(NamespaceId ns, const KvLayout& layout, ChunkKey parent);

  // The key the next chunk gets when it holds `tokens`: ChainChunkKey(parent(), tokens).
  ChunkKey NextKey(std::span<const TokenId> tokens) const;
  // The header of the next record (see ChainHeader); does not advance.
  ChunkHeader NextHeader(ChunkKey key, uint32_t token_count) const;

  // Encodes the next record (header + payload) into `out` and makes `key` the parent of
  // the one after. REQUIRES: out.size() == kChunkHeaderBytes + payload.size().
  // InvalidArgument (from EncodeChunk) when payload.size() !=
  // layout.payload_bytes(token_count) or `out` has the wrong size; the chain does not
  // advance then.
  absl::Status EncodeNext(ChunkKey key, uint32_t token_count, std::span<const std::byte> payload,
                          std::span<std::byte> out);
  // As above, allocating the record.
  absl::StatusOr<std::vector<std::byte>> EncodeNext(ChunkKey key, uint32_t token_count,
                                                    std::span<const std::byte> payload);
  // Keys the chunk from its tokens (NextKey) and encodes it; token_count = tokens.size().
  absl::StatusOr<std::vector<std::byte>> EncodeNext(std::span<const TokenId> tokens,
                                                    std::span<const std::byte> payload);

  NamespaceId ns() const { return ns_; }
  const KvLayout& layout() const { return layout_; }
  // The parent of the next record: the last key encoded, or where the chain started.
  ChunkKey parent() const { return parent_; }

 private:
  NamespaceId ns_;
  KvLayout layout_;
  ChunkKey parent_;
};

}  // namespace kvt

#endif  // KVSTORE_CHUNK_CHAIN_H_

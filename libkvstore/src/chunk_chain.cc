#include "kvstore/chunk_chain.h"

namespace kvt {
namespace {

ChunkHeader MakeHeader(NamespaceId ns, const KvLayout& layout, ChunkKey key, ChunkKey parent,
                       uint32_t token_count) {
  ChunkHeader h;
  h.ns = ns;
  h.key = key;
  h.parent = parent;
  h.token_count = token_count;
  h.layout = layout;
  h.payload_bytes = layout.payload_bytes(token_count);
  return h;
}

}  // namespace

ChunkHeader ChainHeader(NamespaceId ns, const KvLayout& layout, std::span<const ChunkKey> keys,
                        size_t index, uint32_t token_count) {
  return MakeHeader(ns, layout, keys[index], index == 0 ? RootKey(ns) : keys[index - 1],
                    token_count);
}

ChunkChainEncoder::ChunkChainEncoder(NamespaceId ns, const KvLayout& layout)
    : ChunkChainEncoder(ns, layout, RootKey(ns)) {}

ChunkChainEncoder::ChunkChainEncoder(NamespaceId ns, const KvLayout& layout, ChunkKey parent)
    : ns_(ns), layout_(layout), parent_(parent) {}

ChunkKey ChunkChainEncoder::NextKey(std::span<const TokenId> tokens) const {
  return ChainChunkKey(parent_, tokens);
}

ChunkHeader ChunkChainEncoder::NextHeader(ChunkKey key, uint32_t token_count) const {
  return MakeHeader(ns_, layout_, key, parent_, token_count);
}

absl::Status ChunkChainEncoder::EncodeNext(ChunkKey key, uint32_t token_count,
                                           std::span<const std::byte> payload,
                                           std::span<std::byte> out) {
  absl::Status s = EncodeChunk(NextHeader(key, token_count), payload, out);
  if (s.ok()) parent_ = key;
  return s;
}

absl::StatusOr<std::vector<std::byte>> ChunkChainEncoder::EncodeNext(
    ChunkKey key, uint32_t token_count, std::span<const std::byte> payload) {
  std::vector<std::byte> record(kChunkHeaderBytes + payload.size());
  if (absl::Status s = EncodeNext(key, token_count, payload, record); !s.ok()) return s;
  return record;
}

absl::StatusOr<std::vector<std::byte>> ChunkChainEncoder::EncodeNext(
    std::span<const TokenId> tokens, std::span<const std::byte> payload) {
  return EncodeNext(NextKey(tokens), static_cast<uint32_t>(tokens.size()), payload);
}

}  // namespace kvt

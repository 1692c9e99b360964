// The block-region level of KVConnector (block_level.h): whole (layer, block) regions
// copied between an engine's blocks and chunk payloads.
#include "block_level.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"

namespace kvt {
namespace connector_internal {
namespace {

// Checks block_ids[0, n_needed) against the view: InvalidArgument naming index and value.
absl::Status CheckBlockIds(const char* what, const BlockRegionView& v, std::span<const int32_t> ids,
                           size_t n_needed) {
  if (ids.size() < n_needed) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d block ids given; expected >= %d (tokens / block_size %d)", what,
                        ids.size(), n_needed, v.block_size));
  }
  for (size_t i = 0; i < n_needed; ++i) {
    if (ids[i] < 0 || static_cast<uint64_t>(ids[i]) >= v.num_blocks) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: block_ids[%d] = %d; expected 0..%d",
                                                        what, i, ids[i],
                                                        static_cast<int64_t>(v.num_blocks) - 1));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLoadTokens(const char* what, uint64_t num_tokens, size_t n_tokens,
                             uint32_t chunk) {
  if (num_tokens % chunk != 0 || num_tokens > n_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: num_tokens = %d; expected a multiple of chunk_tokens %d and <= "
                        "n_tokens %d",
                        what, num_tokens, chunk, n_tokens));
  }
  return absl::OkStatus();
}

// Blocks of one chunk: chunk_tokens / block_size (the view was checked to divide it).
size_t BlocksPerChunk(const BlockRegionView& v, uint32_t chunk_tokens) {
  return chunk_tokens / v.block_size;
}

// Copies chunk `ci`'s regions of layer `l` from the blocks into `part` (the layer's
// per_chunk * block_bytes bytes of the chunk payload).
void GatherLayer(const BlockRegionView& v, std::span<const int32_t> ids, size_t per_chunk,
                 size_t ci, uint32_t l, std::byte* part) {
  for (size_t j = 0; j < per_chunk; ++j, part += v.block_bytes) {
    std::memcpy(part, v.layer_base[l] + uint64_t(ids[ci * per_chunk + j]) * v.block_bytes,
                v.block_bytes);
  }
}

// The reverse: `part` into chunk `ci`'s blocks of layer `l`, except blocks wholly below
// `skip_tokens`.
void ScatterChunkLayer(const BlockRegionView& v, std::span<const int32_t> ids, size_t per_chunk,
                       size_t ci, uint32_t l, const std::byte* part, uint64_t skip_tokens) {
  for (size_t j = 0; j < per_chunk; ++j, part += v.block_bytes) {
    const size_t bi = ci * per_chunk + j;
    if ((bi + 1) * v.block_size > skip_tokens) {
      std::memcpy(v.layer_base[l] + uint64_t(ids[bi]) * v.block_bytes, part, v.block_bytes);
    }
  }
}

}  // namespace

absl::Status CheckBlockViewFor(const BlockRegionView& v, const KvLayout& layout,
                               uint32_t chunk_tokens) {
  if (v.layer_base.size() != layout.num_layers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RegisterBlockView: view.num_layers = %d; the connector's layout has %d layers",
        v.layer_base.size(), layout.num_layers));
  }
  if (v.block_size == 0 || chunk_tokens % v.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RegisterBlockView: block size %d does not divide chunk size %d (chunk_tokens must be "
        "a multiple of the engine's block size)",
        v.block_size, chunk_tokens));
  }
  if (v.num_blocks == 0)
    return absl::InvalidArgumentError("RegisterBlockView: view.num_blocks = 0");
  const uint64_t expect = layout.bytes_per_token_per_layer() * v.block_size;
  if (v.block_bytes != expect) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RegisterBlockView: view.block_bytes = %d; the layout %s holds %d bytes per block of %d "
        "tokens",
        v.block_bytes, layout.DebugString(), expect, v.block_size));
  }
  for (size_t l = 0; l < v.layer_base.size(); ++l) {
    if (v.layer_base[l] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("RegisterBlockView: view.layer_base[%d] is NULL", l));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> StoreBlocks(KVConnector& payload_level, const BlockRegionView& v,
                                   std::span<const TokenId> tokens,
                                   std::span<const int32_t> block_ids) {
  const uint32_t chunk = payload_level.chunk_tokens();
  const size_t per_chunk = BlocksPerChunk(v, chunk);
  const size_t needed = (tokens.size() / chunk) * per_chunk;
  if (absl::Status s = CheckBlockIds("StoreBlocks", v, block_ids, needed); !s.ok()) return s;
  return payload_level.StorePayloads(
      tokens, [&](size_t ci, std::span<std::byte> payload) -> absl::Status {
        for (uint32_t l = 0; l < v.layer_base.size(); ++l) {
          GatherLayer(v, block_ids, per_chunk, ci, l,
                      payload.data() + uint64_t{l} * per_chunk * v.block_bytes);
        }
        return absl::OkStatus();
      });
}

absl::StatusOr<ConnectorLoadResult> LoadBlocks(KVConnector& payload_level, const BlockRegionView& v,
                                               std::span<const TokenId> tokens, uint64_t num_tokens,
                                               std::span<const int32_t> block_ids,
                                               uint64_t skip_tokens) {
  const uint32_t chunk = payload_level.chunk_tokens();
  if (absl::Status s = CheckLoadTokens("LoadBlocks", num_tokens, tokens.size(), chunk); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckBlockIds("LoadBlocks", v, block_ids, num_tokens / v.block_size);
      !s.ok()) {
    return s;
  }
  const size_t per_chunk = BlocksPerChunk(v, chunk);
  return payload_level.LoadPayloads(
      tokens, num_tokens,
      [&](size_t ci, std::span<const std::byte> payload) -> absl::Status {
        for (uint32_t l = 0; l < v.layer_base.size(); ++l) {
          ScatterChunkLayer(v, block_ids, per_chunk, ci, l,
                            payload.data() + uint64_t{l} * per_chunk * v.block_bytes, skip_tokens);
        }
        return absl::OkStatus();
      },
      skip_tokens);
}

absl::StatusOr<FetchedBlocks> FetchBlocks(KVConnector& payload_level, const BlockRegionView& v,
                                          std::span<const TokenId> tokens, uint64_t num_tokens,
                                          std::span<const int32_t> block_ids,
                                          uint64_t skip_tokens) {
  const uint32_t chunk = payload_level.chunk_tokens();
  if (absl::Status s = CheckLoadTokens("FetchBlocks", num_tokens, tokens.size(), chunk); !s.ok()) {
    return s;
  }
  const size_t needed = num_tokens / v.block_size;
  if (absl::Status s = CheckBlockIds("FetchBlocks", v, block_ids, needed); !s.ok()) return s;
  absl::StatusOr<FetchedPayloads> p = payload_level.FetchPayloads(tokens, num_tokens, skip_tokens);
  if (!p.ok()) return p.status();
  FetchedBlocks out;
  out.payloads = std::move(*p);
  out.view = v;
  out.block_ids.assign(block_ids.begin(), block_ids.begin() + needed);
  out.skip_tokens = skip_tokens;
  return out;
}

}  // namespace connector_internal

absl::Status FetchedBlocks::ScatterLayer(uint32_t layer) const {
  const FetchedPayloads& p = payloads;
  if (layer >= p.num_layers || layer >= view.layer_base.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ScatterLayer: layer = %d; expected 0..%d", layer, static_cast<int64_t>(p.num_layers) - 1));
  }
  if (view.block_bytes == 0 || p.num_layers == 0) return absl::OkStatus();
  const size_t per_chunk = p.layer_bytes() / view.block_bytes;
  for (size_t ci = p.first_chunk; ci < p.first_chunk + p.num_chunks(); ++ci) {
    connector_internal::ScatterChunkLayer(view, block_ids, per_chunk, ci, layer,
                                          p.LayerPayload(ci, layer).data(), skip_tokens);
  }
  return absl::OkStatus();
}

}  // namespace kvt

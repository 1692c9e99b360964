// Private to kvt_connector: the block-region level as a thin layer over the payload
// level. It validates block views and block ids, then calls the connector's
// StorePayloads/LoadPayloads/FetchPayloads with callbacks that copy whole (layer, block)
// regions between the engine's blocks and the chunk payload (a chunk's payload is its
// [layer][block j of the chunk] regions, in order).
#ifndef CONNECTORS_SRC_BLOCK_LEVEL_H_
#define CONNECTORS_SRC_BLOCK_LEVEL_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "connectors/kv_connector.h"

namespace kvt::connector_internal {

// RegisterBlockView's checks against the connector's layout and chunk size.
// InvalidArgument naming the field and both numbers.
absl::Status CheckBlockViewFor(const BlockRegionView& view, const KvLayout& layout,
                               uint32_t chunk_tokens);

// KVConnector::StoreBlocks / LoadBlocks / FetchBlocks over `payload_level` with the
// block view `view` (see kv_connector.h for the contracts).
absl::StatusOr<size_t> StoreBlocks(KVConnector& payload_level, const BlockRegionView& view,
                                   std::span<const TokenId> tokens,
                                   std::span<const int32_t> block_ids);
absl::StatusOr<ConnectorLoadResult> LoadBlocks(KVConnector& payload_level,
                                               const BlockRegionView& view,
                                               std::span<const TokenId> tokens, uint64_t num_tokens,
                                               std::span<const int32_t> block_ids,
                                               uint64_t skip_tokens);
absl::StatusOr<FetchedBlocks> FetchBlocks(KVConnector& payload_level, const BlockRegionView& view,
                                          std::span<const TokenId> tokens, uint64_t num_tokens,
                                          std::span<const int32_t> block_ids, uint64_t skip_tokens);

}  // namespace kvt::connector_internal

#endif  // CONNECTORS_SRC_BLOCK_LEVEL_H_
